"""The signed Merkle log over the ledger: tiles and a signed checkpoint beside the copy.

Layout, for the database whose id is ``D``, in the checkpoint directory::

    D.log/
        checkpoint             the newest signed checkpoint (C2SP signed note, Ed25519)
        tile/<L>/<N>           full tiles (C2SP tlog-tiles, height 8): written once
        tile/<L>/<N>.p/<W>     the partial tile of each level at the checkpoint's size

Nothing else: no entry, no row, no name. The directory can be published as it is by a
static web server. Leaf ``i`` is ledger row seq ``i + 1``; its bytes are the row's canonical
JSON without ``prev_hash`` and ``row_hash`` (``leaf_bytes``), hashed as RFC 6962 says.

The log is written by the copy's writer (``purgekeeper.storage.ledger_copy``), under the copy's flock,
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
new log (the old directory is kept, renamed ``D.log.retired-<time>``). What the log's own
files cannot show (a directory restored from an old backup, or lost; an origin a deploy
dropped) the key's mark does: each signature, and each retirement, asks it first
(``purgekeeper.storage.log_marking``, ``purgekeeper.storage.signing_mark``).

**What stays in memory.** A log's tree never changes below a signed checkpoint, so each
``SignedLog`` keeps, for the directory it last found (its device and inode: a retired or
recreated directory starts afresh), the checkpoint it last verified or signed (its exact
text: a checkpoint read again that is the same text is not verified again), the bytes of the
tiles it read or wrote (up to the width a signed checkpoint covers, never a dead writer's
wider bytes; the last tile of each level stays, as every append touches it) and the stored
hashes it read or computed (a level that is not a multiple of 8 is otherwise hashed again
from up to 128 tile entries at every read). Both are bounded LRUs. An append in the same
process as the last one therefore reads nothing but the checkpoint's text, and computes
the new tiles, the root and the consistency proof from memory: O(log n) hashes. A receipt
or a consistency proof asked again reads no tile. Another writer (another process) changes
the checkpoint's text: the next append verifies it and reads the tiles it needs, as before.

**Durability order, and why each fsync is there.** A group commit writes, in this order:
(1) the copy's segment, fsynced (and the copy's directory when the segment is new), so the
tree's leaves are on disk before anything says they are; (2) each tile as a temporary file
renamed to its name: a *full* tile fsynced before its rename, and its directory fsynced
once after all of them; a *partial* tile with no fsync at all; (3) the checkpoint as a
temporary file, fsynced, renamed, and the log's directory fsynced; (4) the copy's head.json
the same way. A rename is metadata and may reach the disk before the renamed file's data,
so a full tile renamed before its own fsync could survive a crash with its name and no
bytes: hence its fsync before the rename, and its directory's before the checkpoint's
rename (a signed checkpoint is never durable over a full tile that is not). The log's
directory is fsynced before head.json is renamed, so a head that links the copy to a tree
never survives a crash without that tree's checkpoint.

A partial tile is different: it is the tree's right edge, replaced by a wider one at the
next commit, and everything it holds can be computed again from what is durable, the
copy's last rows (level 0) and the full tiles of the level below (each higher level). So it
takes no fsync (2 fsyncs per group commit in the log instead of 6), and a crash may leave
the newest partial tiles missing, empty or wrong under a durable checkpoint. The next
writer, and any catch-up of the copy, checks the right edge of a checkpoint it did not
write itself (``tree_hash`` over the edge equals the signed root: O(log n) reads) and, when
it does not hold, computes the edge again (at most 255 rows and 255 tiles per level),
checks that it gives the signed root, and writes it with fsyncs (``_rebuild_edge``). An
edge that still does not give the root means a full tile or the copy is damaged: that is
refused (``LogRefused``), not guessed. Removing the partial tiles a wider one replaced
takes no fsync either: a crash that brings one back leaves a correct tile of an older tree.

**A rebuild verifies before it signs.** Rows read from the copy to build leaves the tree
does not hold yet (a checkpoint lost, or a copy written unsigned) or its right edge again
are checked first (``verified``): each row's ``row_hash`` recomputed from its ``prev_hash``
and canonical JSON, its link to the row before it, its seq. A row that fails is
``RowUnverified``, naming its seq, and nothing is signed: a copy edited with its hashes kept
never becomes a signed leaf. ``rebuild_tiles`` (``purgectl ledger repair``) computes every
tile of the signed tree again from the copy's verified rows, checks that they give the
signed root, and only then writes the tiles missing or damaged on disk.

Here: the writing (under the copy's flock). What the log is made of (its errors, its tree
head, the leaf of a row, the signing key) is in ``log_format``; its reading, and what stays
in memory, in ``log_reading``. Every name is importable from here.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from purgekeeper.schema import ledger
from purgekeeper.storage.files import atomic_write_at, fsync_directory
from purgekeeper.storage.log_format import (
    _DIRECTORY,
    CHECKPOINT_FILE,
    DEFAULT_ORIGIN_PREFIX,
    HASHES_KEPT,
    KEY_FILE,
    LOG_SUFFIX,
    NEW_ORIGIN_HINT,
    TILES_KEPT,
    ForeignKey,
    KeyUnusable,
    LogRefused,
    RowsBetween,
    TreeHead,
    create_key,
    default_origin,
    has_signed,
    key_used,
    leaf_hash_of,
    leaf_of,
    load_or_create_key,
    read_key,
)
from purgekeeper.storage.log_marking import MarkedLog
from purgekeeper.storage.log_reading import SignedLogReader
from purgekeeper.storage.log_rebuild import RowUnverified, TileBuilder, verified, verified_between
from purgekeeper.storage.signing_mark import MarkFile
from purgekeeper.tlog import note, tree
from purgekeeper.tlog.verify import Checkpoint, ReceiptInvalid, verify_consistency

log = logging.getLogger(__name__)


class SignedLog(MarkedLog):
    """One database's log in one checkpoint directory, signed with one key for one origin.
    Thread-safe for readers; its writer is the copy's (under the copy's locks)."""

    @classmethod
    def beside(
        cls, checkpoint_dir: Path, database_id: str, *, origin: str, signer: note.Signer, mark: MarkFile | None = None
    ) -> SignedLog:
        return cls(Path(checkpoint_dir) / f"{database_id}{LOG_SUFFIX}", origin=origin, signer=signer, mark=mark)

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
        Raises LogRefused (nothing written) rather than fork, KeyUnusable when the key cannot
        be used."""
        with key_used():
            current = self._current()
        size = current.size if current else 0
        new_size = rows[-1].seq if rows else copy_seq

        def rows_of(after: int, upto: int) -> list[ledger.LedgerEntry]:
            found = list(rows_between(after, min(upto, copy_seq)))
            return found + [row for row in rows if max(after, copy_seq) < row.seq <= upto]

        if current is not None:
            self._ensure_edge(current, rows_of)
        if not self._linked(link, copy_seq, current) and min(size, copy_seq) > 0:
            self._check_leaves(rows_between(0, min(size, copy_seq)), size)
        if size > copy_seq:
            self._check_leaves([row for row in rows if row.seq <= size], size)
        if new_size <= size:
            assert current is not None
            return current
        if size < copy_seq:  # leaves built from the copy's rows: a rebuild verifies them first
            added = verified_between(rows_of, size, new_size)
        else:
            added = [row for row in rows if row.seq > size]
        return self._grow(current, [leaf_hash_of(row) for row in added])

    def _linked(self, link: tuple[int, bytes] | None, copy_seq: int, current: TreeHead | None) -> bool:
        """The copy's head says the tree's first ``copy_seq`` leaves are its rows (O(log n);
        nothing to read when the head names the checkpoint's own tree)."""
        size = current.size if current else 0
        if link is None or link[0] != copy_seq or copy_seq > size:
            return False
        assert current is not None
        if copy_seq == size:
            return link[1] == current.root
        return tree.tree_hash(copy_seq, self.reader(size)) == link[1]

    def repair_edge(self, rows_between: RowsBetween) -> None:
        """The newest checkpoint's right edge on disk again when a crash lost it (``rows_between``:
        the copy's rows); LogRefused when what is durable does not give its root, KeyUnusable
        when the key cannot be used."""
        with key_used():
            current = self.head()
        if current is not None and current.checkpoint.origin == self.origin:
            self._ensure_edge(current, lambda after, upto: list(rows_between(after, upto)))

    def rebuild_tiles(self, rows: Iterable[ledger.LedgerEntry]) -> list[str]:
        """Every tile of the newest signed checkpoint's tree computed again from ``rows`` (the
        copy's, from seq 1: each verified), checked to give the signed root, then each tile
        missing or damaged on disk written (fsynced). Returns their paths. RowUnverified for a
        row that does not verify; LogRefused when the rows do not give the signed root. Either
        way nothing is written. It reads every tile: an operator's repair, never a request's."""
        current = self.head()
        if current is None or current.checkpoint.origin != self.origin:
            return []
        size = current.size
        leaves = (leaf_hash_of(row) for row in verified(rows, after=0, prev_hash=ledger.GENESIS_HASH))
        tiles = TileBuilder()
        built = tiles.build(itertools.islice(leaves, size))
        damaged = {tile: data for tile, data in built if self._differs(tile, data)}
        edge = dict(tiles.edge())
        refused = f"the copy's rows do not give the signed checkpoint's root of {self.directory.name} (size {size})"
        if tiles.count != size:
            raise LogRefused(f"{refused}: the copy holds {tiles.count} of its rows; {NEW_ORIGIN_HINT}")

        def fetch(wanted: tree.Tile) -> bytes:
            return damaged.get(wanted) or edge.get(wanted) or self._fetch_file(wanted)

        if tree.tree_hash(size, tree.TileHashReader(size, fetch)) != current.root:
            raise LogRefused(f"{refused}; {NEW_ORIGIN_HINT}")
        damaged.update((tile, data) for tile, data in edge.items() if self._differs(tile, data))
        if damaged:
            self._write_durably(damaged)
            log.warning("%s: %d tiles rebuilt from the ledger's copy", self.directory.name, len(damaged))
        return [tile.path for tile in sorted(damaged)]

    def _differs(self, tile: tree.Tile, data: bytes) -> bool:
        """The tile's file is not ``data`` (missing, of another length, or other bytes)."""
        try:
            return self._fetch_file(tile) != data
        except (tree.HashMissing, tree.TileInvalid):
            return True

    def _write_durably(self, tiles: Mapping[tree.Tile, bytes]) -> None:
        with self._memory:
            self._forget(self._identity)  # nothing read from a damaged tile stays
        base = self._open_directory()
        try:
            self._write_tiles(base, tiles, durable=True)
        finally:
            os.close(base)

    def _ensure_edge(self, current: TreeHead, rows_of: Callable[[int, int], list[ledger.LedgerEntry]]) -> None:
        """The right edge of ``current``'s tree gives its root (checked once per checkpoint
        this process did not write), else it is computed again (module docstring)."""
        with self._memory:
            if self._edge == current.note:
                return
        try:
            sound = tree.tree_hash(current.size, self.reader(current.size)) == current.root
        except (tree.HashMissing, tree.TileInvalid):
            sound = False
        if not sound:
            self._rebuild_edge(current, rows_of)
        with self._memory:
            self._edge = current.note

    def _rebuild_edge(self, current: TreeHead, rows_of: Callable[[int, int], list[ledger.LedgerEntry]]) -> None:
        size = current.size
        first = size - size % tree.TILE_WIDTH
        rows = verified_between(rows_of, first, size)
        refused = (
            f"the tiles of {self.directory.name} and the copy's rows do not give its signed checkpoint's root "
            f"(size {size})"
        )
        if [row.seq for row in rows] != list(range(first + 1, size + 1)):
            raise LogRefused(f"{refused}: the copy lacks rows {first + 1} to {size}; {NEW_ORIGIN_HINT}")
        with self._memory:
            self._forget(self._identity)  # nothing read from the damaged edge stays
        try:
            tiles = tree.edge_tiles(size, [leaf_hash_of(row) for row in rows], self._fetch_file)

            def fetch(wanted: tree.Tile) -> bytes:
                return tiles[wanted] if wanted in tiles else self._fetch_file(wanted)

            root = tree.tree_hash(size, tree.TileHashReader(size, fetch))
        except (tree.HashMissing, tree.TileInvalid) as exc:
            raise LogRefused(f"{refused}: {exc}; {NEW_ORIGIN_HINT}") from None
        if root != current.root:
            raise LogRefused(f"{refused}: a full tile or the copy is damaged; {NEW_ORIGIN_HINT}")
        base = self._open_directory()
        try:
            self._write_tiles(base, tiles, durable=True)
        finally:
            os.close(base)
        log.warning("%s: the newest partial tiles (lost in a crash) were written again", self.directory.name)

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
            self._retire_in_mark(current)
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
            os.rename(self.directory, self.directory.with_name(f"{self.directory.name}.retired-{stamp}"))
            with self._memory:
                self._forget(None)
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
        old = self.reader(size)
        grown = tree.append_to_tiles(size, leaves, self.fetch, old)

        def read(positions: Sequence[tree.Position]) -> list[bytes]:
            # a complete subtree of the new tree is either new (the append computed it) or
            # a complete subtree of the old one
            missing = [p for p in positions if p not in grown.hashes]
            known = dict(zip(missing, old(missing), strict=True)) if missing else {}
            return [grown.hashes.get(p) or known[p] for p in positions]

        if current is not None and size > 0:
            proof = tree.prove_consistency(size, grown.size, read)
            try:
                verify_consistency(size, grown.size, proof, current.root, grown.root)
            except ReceiptInvalid as exc:
                raise LogRefused(
                    f"the tiles of {self.directory.name} do not extend its signed checkpoint (size {size}): "
                    f"{exc.reason}; {NEW_ORIGIN_HINT}"
                ) from None
        with key_used():
            # signed in memory first (a brand-new installation's first signature makes its key),
            # then nothing leaves memory unless the key's mark allows it
            signed = note.sign_checkpoint(self.origin, grown.size, grown.root, self.signer)
            # checked and moved under the mark's lock: never behind a checkpoint anyone could read
            self._advance_mark(current, grown.size, grown.root, read)
        identity = self._publish(grown.tiles, signed.encode(), replacing=size)
        head = TreeHead(Checkpoint(self.origin, grown.size, grown.root), signed)
        with self._memory:
            if identity != self._identity:
                self._forget(identity)
            self._known = (signed, head)
            self._edge = signed
        self._keep_tiles(grown.tiles)
        self._keep_hashes(grown.hashes)
        return head

    def _publish(self, tiles: Mapping[tree.Tile, bytes], checkpoint: bytes, *, replacing: int) -> tuple[int, int]:
        """The tiles (growing the tree of size ``replacing``), then the checkpoint, in the
        order the module's docstring gives. Returns the log directory's identity."""
        base = self._open_directory()
        try:
            self._write_tiles(base, tiles, durable=False, replacing=replacing)
            atomic_write_at(base, CHECKPOINT_FILE, checkpoint)
            info = os.fstat(base)
            return (info.st_dev, info.st_ino)
        finally:
            os.close(base)

    def _write_tiles(
        self, base: int, tiles: Mapping[tree.Tile, bytes], *, durable: bool, replacing: int | None = None
    ) -> None:
        """Each tile renamed into place; the full ones (all of them when ``durable``) fsynced
        first, and each of their directories fsynced once after them. Each partial tile of the
        tree of size ``replacing`` that a written one widens is unlinked after it (``fetch``
        serves its bytes from the wider one; a crash that brings it back leaves a correct
        tile of an older tree): one unlink a level, no listing."""
        opened: dict[str, int] = {}
        synced: set[str] = set()
        try:
            for tile, data in sorted(tiles.items()):
                parent, name = tile.path.rsplit("/", 1)
                if parent not in opened:
                    opened[parent] = self._open_subdirectory(base, parent)
                sync = durable or tile.width == tree.TILE_WIDTH
                atomic_write_at(opened[parent], name, data, sync_directory=False, sync_file=sync)
                if sync:
                    synced.add(parent)
                old = tree.tile_width(tile.level, tile.index, replacing) if replacing is not None else 0
                if 0 < old < tile.width:
                    narrower = tree.Tile(tile.level, tile.index, old).path
                    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                        if narrower.rsplit("/", 1)[0] == parent:
                            os.unlink(str(old), dir_fd=opened[parent])
                        else:
                            os.unlink(narrower, dir_fd=base)
            for parent in sorted(synced):
                os.fsync(opened[parent])
        finally:
            for directory in opened.values():
                os.close(directory)

    def _open_directory(self) -> int:
        """The log's directory, made (and its making fsynced in its parent) when missing."""
        try:
            return os.open(self.directory, _DIRECTORY)
        except FileNotFoundError:
            pass
        self.directory.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.directory, 0o700)
            fsync_directory(self.directory.parent)
        return os.open(self.directory, _DIRECTORY)

    @staticmethod
    def _open_subdirectory(base: int, relative: str) -> int:
        """``relative`` under the log's directory open at ``base``; each part made when
        missing, and its parent fsynced (the new name survives a crash before the checkpoint
        that relies on it is renamed)."""
        try:
            return os.open(relative, _DIRECTORY | os.O_NOFOLLOW, dir_fd=base)
        except FileNotFoundError:
            pass
        parts = relative.split("/")
        for depth in range(1, len(parts) + 1):
            path = "/".join(parts[:depth])
            try:
                os.mkdir(path, 0o700, dir_fd=base)
            except FileExistsError:
                continue
            parent = os.open("/".join(parts[: depth - 1]) or ".", _DIRECTORY, dir_fd=base)
            try:
                os.fsync(parent)
            finally:
                os.close(parent)
        return os.open(relative, _DIRECTORY | os.O_NOFOLLOW, dir_fd=base)


__all__ = [
    "CHECKPOINT_FILE",
    "DEFAULT_ORIGIN_PREFIX",
    "HASHES_KEPT",
    "KEY_FILE",
    "LOG_SUFFIX",
    "NEW_ORIGIN_HINT",
    "TILES_KEPT",
    "ForeignKey",
    "KeyUnusable",
    "LogRefused",
    "MarkFile",
    "RowUnverified",
    "RowsBetween",
    "SignedLog",
    "SignedLogReader",
    "TreeHead",
    "create_key",
    "default_origin",
    "has_signed",
    "key_used",
    "leaf_hash_of",
    "leaf_of",
    "load_or_create_key",
    "read_key",
    "verified",
    "verified_between",
]
