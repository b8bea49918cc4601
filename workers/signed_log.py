"""The signed Merkle log over the ledger: tiles and a signed checkpoint beside the copy.

Layout, for the database whose id is ``D``, in the checkpoint directory::

    D.log/
        checkpoint             the newest signed checkpoint (C2SP signed note, Ed25519)
        tile/<L>/<N>           full tiles (C2SP tlog-tiles, height 8): written once
        tile/<L>/<N>.p/<W>     the partial tile of each level at the checkpoint's size

Nothing else: no entry, no row, no name. The directory can be published as it is by a
static web server. Leaf ``i`` is ledger row seq ``i + 1``; its bytes are the row's canonical
JSON without ``prev_hash`` and ``row_hash`` (``leaf_bytes``), hashed as RFC 6962 says.

The log is written by the copy's writer (``workers.ledger_copy``), under the copy's flock,
in every group commit: the copy's segments (fsynced), then the tiles, then the signed
checkpoint, then the copy's head.json, which records ``tree_size`` and ``tree_root`` (the
link between the copy and the tree: while head.json says the tree of its seq has the
checkpoint's root at that size, the tree's leaves are the copy's rows).

**It never forks.** Before a checkpoint is signed, the consistency proof from the last
signed checkpoint to the new tree is computed from the tiles and verified against the last
signed root (O(log n)). New rows the tree holds already (a writer died between its
checkpoint and its head) must be the tree's leaves; when the link to the copy is unknown
(a copy written again after it was moved aside, repaired, or made before the log existed)
the copy's rows the tree holds are compared with its leaves once. Any difference raises
``LogRefused`` and nothing is written: signing would fork the log. A new origin starts a
new log (the old directory is kept, renamed ``D.log.retired-<time>``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from schema import ledger
from tlog import note, tree
from tlog.verify import HASH_SIZE, Checkpoint, ReceiptInvalid, leaf_hash, open_checkpoint, verify_consistency
from workers.files import atomic_write, reason_of

LOG_SUFFIX = ".log"
CHECKPOINT_FILE = "checkpoint"
KEY_FILE = "ledger-signing.key"
DEFAULT_ORIGIN_PREFIX = "purgekeeper/"
NEW_ORIGIN_HINT = (
    "keep the published log as it is, set PURGEKEEPER_LOG_ORIGIN to a new origin (a new log starts; "
    "the old one stays, renamed) and publish the new origin with the same key"
)


class LogRefused(Exception):
    """The signed log cannot be extended with these rows without forking it (or cannot be
    read): nothing was written, and no checkpoint was signed."""


class ForeignKey(LogRefused):
    """The log's checkpoint does not verify with this process's key (another data directory's
    key, or a lost one): this process writes the copy and leaves the log to the key's owner."""


def default_origin(database_id: str) -> str:
    return f"{DEFAULT_ORIGIN_PREFIX}{database_id}"


def leaf_of(entry: ledger.LedgerEntry) -> bytes:
    """The row's leaf bytes: its hashed fields as canonical JSON (``tlog.receipt.leaf_bytes``)."""
    return ledger.canonical_json(entry.hashed_fields()).encode()


def leaf_hash_of(entry: ledger.LedgerEntry) -> bytes:
    """The RFC 6962 leaf hash of a purge's row (what a completion statement can name)."""
    return leaf_hash(leaf_of(entry))


@dataclass(frozen=True)
class TreeHead:
    """The newest signed checkpoint: its tree and its signed note."""

    checkpoint: Checkpoint
    note: str

    @property
    def size(self) -> int:
        return self.checkpoint.size

    @property
    def root(self) -> bytes:
        return self.checkpoint.root


RowsBetween = Callable[[int, int], Iterable[ledger.LedgerEntry]]  # (after, upto) -> the copy's rows


class SignedLog:
    """One database's log in one checkpoint directory, signed with one key for one origin."""

    def __init__(self, directory: Path, *, origin: str, signer: note.Signer) -> None:
        self.directory = Path(directory)
        self.origin = origin
        self.signer = signer

    @classmethod
    def beside(cls, checkpoint_dir: Path, database_id: str, *, origin: str, signer: note.Signer) -> SignedLog:
        return cls(Path(checkpoint_dir) / f"{database_id}{LOG_SUFFIX}", origin=origin, signer=signer)

    # -- reading -----------------------------------------------------------------------------

    def head(self) -> TreeHead | None:
        """The newest checkpoint, verified with this log's key; None before the first one."""
        try:
            text = (self.directory / CHECKPOINT_FILE).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise LogRefused(f"{self.directory.name}/{CHECKPOINT_FILE} cannot be read ({reason_of(exc)})") from None
        try:
            return TreeHead(open_checkpoint(text, self.signer.verifier), text)
        except ReceiptInvalid as exc:
            raise ForeignKey(
                f"{self.directory.name}/{CHECKPOINT_FILE} does not verify with this key ({exc.reason}): "
                "the signing key changed? restore the key, or " + NEW_ORIGIN_HINT
            ) from None

    def fetch(self, wanted: tree.Tile) -> bytes:
        """A tile's bytes: its own file, else the first hashes of the full tile or of a wider
        partial one (a partial tile is removed once a wider one is signed)."""
        path = self.directory / wanted.path
        with contextlib.suppress(FileNotFoundError):
            return path.read_bytes()
        full = tree.Tile(wanted.level, wanted.index)
        size = wanted.width * HASH_SIZE
        with contextlib.suppress(FileNotFoundError):
            return (self.directory / full.path).read_bytes()[:size]
        partials = self.directory / f"{full.path}.p"
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            widths = sorted(int(n) for n in os.listdir(partials) if n.isdigit() and int(n) >= wanted.width)
            for width in widths:
                with contextlib.suppress(FileNotFoundError):
                    return (partials / str(width)).read_bytes()[:size]
        raise tree.HashMissing(f"{self.directory.name} has no {wanted.path}")

    def reader(self, size: int) -> tree.TileHashReader:
        return tree.TileHashReader(size, self.fetch)

    def leaf_hash_at(self, index: int, size: int) -> bytes:
        return self.reader(size)([(0, index)])[0]

    def inclusion(self, index: int, head: TreeHead) -> list[bytes]:
        return tree.prove_inclusion(head.size, index, self.reader(head.size))

    def consistency(self, old_size: int, head: TreeHead) -> list[bytes]:
        return tree.prove_consistency(old_size, head.size, self.reader(head.size))

    def sign_note(self, text: str) -> str:
        """A note signed with the log's key (for statements that name the log's checkpoints)."""
        return note.sign_note(text, [self.signer])

    # -- writing (under the copy's flock) ----------------------------------------------------

    def extend(
        self,
        *,
        copy_seq: int,
        link: tuple[int, bytes] | None,
        rows: Sequence[ledger.LedgerEntry],
        rows_between: RowsBetween,
    ) -> TreeHead:
        """Grow the tree to the copy's new head (``rows`` follow the copy's ``copy_seq``) and
        sign its checkpoint. ``link``: the tree size and root the copy's head recorded.
        Raises LogRefused (nothing written) rather than fork."""
        current = self._current()
        size = current.size if current else 0
        new_size = rows[-1].seq if rows else copy_seq
        if not self._linked(link, copy_seq, size) and min(size, copy_seq) > 0:
            self._check_leaves(rows_between(0, min(size, copy_seq)), size)
        if size > copy_seq:
            self._check_leaves([row for row in rows if row.seq <= size], size)
        if new_size <= size:
            assert current is not None
            return current
        earlier = list(rows_between(size, copy_seq)) if size < copy_seq else []
        added = [*earlier, *(row for row in rows if row.seq > size)]
        return self._grow(current, [leaf_hash_of(row) for row in added])

    def _linked(self, link: tuple[int, bytes] | None, copy_seq: int, size: int) -> bool:
        """The copy's head says the tree's first ``copy_seq`` leaves are its rows (O(log n))."""
        if link is None or link[0] != copy_seq or copy_seq > size:
            return False
        return tree.tree_hash(copy_seq, self.reader(size)) == link[1]

    def check_ledger(self, rows: Iterable[ledger.LedgerEntry], ledger_seq: int) -> None:
        """Refuse (LogRefused) a ledger that does not hold the signed tree's leaves as its
        first rows (``rows``: the ledger's, from seq 1 to the tree's size at least)."""
        current = self.head()
        if current is None or current.checkpoint.origin != self.origin:
            return
        if ledger_seq < current.size:
            raise LogRefused(
                f"the signed log {self.origin} holds {current.size} rows and the ledger {ledger_seq}: "
                f"writing the copy again would fork it; {NEW_ORIGIN_HINT}"
            )
        self._check_leaves(rows, current.size)

    def _current(self) -> TreeHead | None:
        """The checkpoint this log continues: one of another origin retires the directory."""
        current = self.head()
        if current is not None and current.checkpoint.origin != self.origin:
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
            os.rename(self.directory, self.directory.with_name(f"{self.directory.name}.retired-{stamp}"))
            return None
        return current

    def _check_leaves(self, rows: Iterable[ledger.LedgerEntry], size: int) -> None:
        read = self.reader(size)
        batch = list(itertools.takewhile(lambda row: row.seq <= size, rows))
        for start in range(0, len(batch), tree.TILE_WIDTH):  # one read of each tile
            part = batch[start : start + tree.TILE_WIDTH]
            found = read([(0, row.seq - 1) for row in part])
            self._same_leaves(part, found, size)

    def _same_leaves(self, rows: Sequence[ledger.LedgerEntry], found: Sequence[bytes], size: int) -> None:
        for row, leaf in zip(rows, found, strict=True):
            if leaf != leaf_hash_of(row):
                raise LogRefused(
                    f"the signed log {self.origin} (tree size {size}) holds another row at seq {row.seq} than "
                    f"the ledger: signing a checkpoint now would fork it; {NEW_ORIGIN_HINT}"
                )

    def _grow(self, current: TreeHead | None, leaves: Sequence[bytes]) -> TreeHead:
        size = current.size if current else 0
        grown = tree.append_to_tiles(size, leaves, self.fetch)

        def fetch(wanted: tree.Tile) -> bytes:
            return grown.tiles[wanted] if wanted in grown.tiles else self.fetch(wanted)

        if current is not None and size > 0:
            proof = tree.prove_consistency(size, grown.size, tree.TileHashReader(grown.size, fetch))
            try:
                verify_consistency(size, grown.size, proof, current.root, grown.root)
            except ReceiptInvalid as exc:
                raise LogRefused(
                    f"the tiles of {self.directory.name} do not extend its signed checkpoint (size {size}): "
                    f"{exc.reason}; {NEW_ORIGIN_HINT}"
                ) from None
        for tile, data in sorted(grown.tiles.items()):
            atomic_write(self.directory / tile.path, data)
        signed = note.sign_checkpoint(self.origin, grown.size, grown.root, self.signer)
        atomic_write(self.directory / CHECKPOINT_FILE, signed.encode())
        self._drop_narrower(grown.tiles)
        return TreeHead(Checkpoint(self.origin, grown.size, grown.root), signed)

    def _drop_narrower(self, written: Iterable[tree.Tile]) -> None:
        """Partial tiles a wider one replaced (``fetch`` serves their bytes from it)."""
        for tile in written:
            partials = self.directory / f"{tree.Tile(tile.level, tile.index).path}.p"
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                for name in os.listdir(partials):
                    if not name.isdigit() or int(name) < tile.width:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(partials / name)


def load_or_create_key(path: Path, *, name: str) -> note.Signer:
    """The signing key in ``path`` (Go's skey form), created there first when missing: 0600,
    with O_EXCL, so two processes starting at once end up with the same key."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return read_key(path)
    signer = note.Signer.generate(name)
    try:
        os.write(fd, (signer.skey + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return signer


def read_key(path: Path) -> note.Signer:
    for _attempt in range(50):  # another process created it and is writing it now
        text = path.read_text(encoding="ascii").strip()
        if text:
            return note.Signer.from_skey(text)
        time.sleep(0.01)
    return note.Signer.from_skey(path.read_text(encoding="ascii").strip())
