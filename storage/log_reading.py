"""The reading half of the signed log (``purgekeeper.storage.signed_log.SignedLog`` extends it): the
newest checkpoint, verified with the log's key; the tiles and stored hashes of signed
trees, with what stays in memory of them (``purgekeeper.storage.signed_log``'s docstring, "What stays in
memory"); inclusion and consistency proofs.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from purgekeeper.storage.directories import SYMLINK_REFUSED, Directories, SymlinkRefused, components, open_regular_file
from purgekeeper.storage.files import reason_of
from purgekeeper.storage.log_format import (
    _DIRECTORY,
    CHECKPOINT_FILE,
    HASHES_KEPT,
    NEW_ORIGIN_HINT,
    TILES_KEPT,
    ForeignKey,
    LogRefused,
    TreeHead,
)
from purgekeeper.tlog import note, tree
from purgekeeper.tlog.verify import HASH_SIZE, ReceiptInvalid, open_checkpoint

_ROOT = "log"  # the root's name in the walk of ``Directories``: the log's own directory


class SignedLogReader:
    """A log's checkpoint, tiles and stored hashes as readers find them. Thread-safe."""

    def __init__(self, directory: Path, *, origin: str, signer: note.Signer) -> None:
        self.directory = Path(directory)
        self.origin = origin
        self.signer = signer
        self._memory = threading.Lock()  # guards what follows (see the module's docstring)
        self._identity: tuple[int, int] | None = None  # the directory's (device, inode)
        self._known: tuple[str, TreeHead] | None = None  # a checkpoint's text, as verified or signed
        self._edge: str | None = None  # the checkpoint whose right edge is known to be on disk
        self._tiles: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._hashes: OrderedDict[tree.Position, bytes] = OrderedDict()

    # -- reading -----------------------------------------------------------------------------

    def head(self) -> TreeHead | None:
        """The newest checkpoint, verified with this log's key; None before the first one."""
        text, identity = self._checkpoint_text()
        if text is None:
            return None
        with self._memory:
            if identity != self._identity:
                self._forget(identity)
            known = self._known
        if known is not None and known[0] == text:
            return known[1]
        try:
            found = TreeHead(open_checkpoint(text, self.signer.verifier), text)
        except ReceiptInvalid as exc:
            raise ForeignKey(
                f"{self.directory.name}/{CHECKPOINT_FILE} does not verify with this key ({exc.reason}): "
                "the signing key changed? restore the key, or " + NEW_ORIGIN_HINT
            ) from None
        with self._memory:
            if identity == self._identity:
                self._known = (text, found)
        return found

    def checkpoint_time(self) -> float | None:
        """When the newest checkpoint was written (its file's mtime, POSIX seconds): one
        ``stat``; None when there is none, or it cannot be stat-ed."""
        try:
            return os.stat(self.directory / CHECKPOINT_FILE).st_mtime
        except OSError:
            return None

    def _checkpoint_text(self) -> tuple[str | None, tuple[int, int] | None]:
        """The checkpoint file's text and the identity of the directory it is in (None, None
        when there is none)."""
        try:
            directory = os.open(self.directory, _DIRECTORY)
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            raise LogRefused(f"{self.directory.name} cannot be read ({reason_of(exc)})") from None
        try:
            info = os.fstat(directory)
            fd = os.open(CHECKPOINT_FILE, os.O_RDONLY | os.O_CLOEXEC, dir_fd=directory)
            try:
                chunks = []
                while chunk := os.read(fd, 1 << 16):
                    chunks.append(chunk)
            finally:
                os.close(fd)
            return b"".join(chunks).decode("utf-8"), (info.st_dev, info.st_ino)
        except FileNotFoundError:
            return None, None
        except (OSError, UnicodeDecodeError) as exc:
            raise LogRefused(f"{self.directory.name}/{CHECKPOINT_FILE} cannot be read ({reason_of(exc)})") from None
        finally:
            os.close(directory)

    def _forget(self, identity: tuple[int, int] | None) -> None:
        """Another directory (retired, moved, made again): nothing known of it yet. Under
        ``_memory``."""
        self._identity = identity
        self._known = None
        self._edge = None
        self._tiles.clear()
        self._hashes.clear()

    def forget(self) -> None:
        """Drop everything held in memory: the next read starts from the files."""
        with self._memory:
            self._forget(None)

    def fetch(self, wanted: tree.Tile) -> bytes:
        """A tile's bytes: from memory, else its own file, else the first hashes of the full
        tile or of a wider partial one (a partial tile is removed once a wider one is signed).
        Only tiles of signed trees are asked for; a full tile read is kept (it was fsynced
        before its checkpoint), a partial one is not: after a crash it may be wrong until a
        writer rebuilds it, and nothing read from it may outlive that (this process's own
        writes are kept by the writer, which computed them)."""
        key, size = (wanted.level, wanted.index), wanted.width * HASH_SIZE
        with self._memory:
            kept = self._tiles.get(key)
            if kept is not None and len(kept) >= size:
                self._tiles.move_to_end(key)
                return kept[:size]
        data = self._fetch_file(wanted)
        if len(data) == size and wanted.width == tree.TILE_WIDTH:
            self._keep_tiles({wanted: data})
        return data

    def _fetch_file(self, wanted: tree.Tile) -> bytes:
        """The tile's bytes from the first of its own file, the full tile and each wider partial
        one that is there. Each is reached from the log directory's descriptor with
        ``O_NOFOLLOW`` at every component (``purgekeeper.storage.directories``): a symlink
        planted in ``tile/`` is never followed (HashMissing). A file of another length than its
        path says (a full tile is always 8,192 bytes) is TileInvalid, never a short tile."""
        size = wanted.width * HASH_SIZE
        with Directories({_ROOT: str(self.directory)}) as directories:
            for path, width in self._sources(directories, wanted):
                data = self._read_tile_file(directories, path)
                if data is None:
                    continue
                if len(data) != width * HASH_SIZE:
                    name = f"{self.directory.name}/{path}"
                    raise tree.TileInvalid(f"{name} is {len(data)} bytes, not {width * HASH_SIZE}")
                return data[:size]
        raise tree.HashMissing(f"{self.directory.name} has no {wanted.path}")

    def _sources(self, directories: Directories, wanted: tree.Tile) -> Iterator[tuple[str, int]]:
        """The files that hold the tile's hashes, each with its width: its own, the full tile
        and the wider partial ones (a partial tile is removed once a wider one is signed)."""
        yield wanted.path, wanted.width
        full = tree.Tile(wanted.level, wanted.index)
        if wanted == full:
            return
        yield full.path, tree.TILE_WIDTH
        try:
            partials = directories.parent(_ROOT, components(f"{full.path}.p/{wanted.width}"))
            names = os.listdir(partials)
        except (FileNotFoundError, NotADirectoryError):
            return
        except SymlinkRefused:
            raise tree.HashMissing(f"{self.directory.name}/{full.path}.p: {SYMLINK_REFUSED}") from None
        for width in sorted(int(n) for n in names if n.isdigit() and wanted.width < int(n) < tree.TILE_WIDTH):
            yield f"{full.path}.p/{width}", width

    def _read_tile_file(self, directories: Directories, path: str) -> bytes | None:
        """The file's bytes; None when it is not there. HashMissing for a symlink or anything
        but a regular file."""
        parts = components(path)
        try:
            fd = open_regular_file(directories.parent(_ROOT, parts), parts[-1])
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if isinstance(exc, SymlinkRefused) or exc.errno == errno.EINVAL:
                raise tree.HashMissing(f"{self.directory.name}/{path}: {exc.strerror}") from None
            raise
        with os.fdopen(fd, "rb") as file:
            return file.read()

    def _keep_tiles(self, tiles: Mapping[tree.Tile, bytes]) -> None:
        with self._memory:
            for tile, data in tiles.items():
                key = (tile.level, tile.index)
                kept = self._tiles.get(key)
                if kept is None or len(kept) < len(data):
                    self._tiles[key] = data
                self._tiles.move_to_end(key)
            while len(self._tiles) > TILES_KEPT:
                self._tiles.popitem(last=False)

    def _keep_hashes(self, hashes: Mapping[tree.Position, bytes]) -> None:
        with self._memory:
            self._hashes.update(hashes)
            for position in hashes:
                self._hashes.move_to_end(position)
            while len(self._hashes) > HASHES_KEPT:
                self._hashes.popitem(last=False)

    def reader(self, size: int) -> tree.HashReader:
        """The stored hashes of the signed tree of ``size``: from memory, else its tiles."""

        def read(positions: Sequence[tree.Position]) -> list[bytes]:
            found: dict[tree.Position, bytes] = {}
            with self._memory:
                for position in positions:
                    known = self._hashes.get(position)
                    if known is not None:
                        self._hashes.move_to_end(position)
                        found[position] = known
            missing = [position for position in dict.fromkeys(positions) if position not in found]
            if missing:
                read_now = dict(zip(missing, tree.TileHashReader(size, self.fetch)(missing), strict=True))
                # kept, even from a partial tile a crash may have left wrong: every proof handed
                # out is checked against the signed root first, and one that fails makes the
                # reader forget all it holds before the repair (``purgekeeper.commands.receipts``)
                self._keep_hashes(read_now)
                found.update(read_now)
            return [found[position] for position in positions]

        return read

    def leaf_hash_at(self, index: int, size: int) -> bytes:
        return self.reader(size)([(0, index)])[0]

    def inclusion(self, index: int, head: TreeHead) -> list[bytes]:
        return tree.prove_inclusion(head.size, index, self.reader(head.size))

    def consistency(self, old_size: int, head: TreeHead) -> list[bytes]:
        return tree.prove_consistency(old_size, head.size, self.reader(head.size))

    def sign_note(self, text: str) -> str:
        """A note signed with the log's key (for statements that name the log's checkpoints)."""
        return note.sign_note(text, [self.signer])
