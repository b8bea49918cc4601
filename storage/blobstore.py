"""Where attachment bytes live on disk: CAS blobs under the blob root, real files under the
file root. Every blob row has its own path, so a re-upload of the same bytes never lands on
the path of a blob that is being deleted.

Layouts: a CAS blob at ``ab/cd/<sha256>-<blob id>`` (docs/design.md); a real file at
``ab/cd/<blob id>`` (sharded by its id). A real file's name is its attachment's ``name``
column, not a file name on disk: an attachment name is content, and a purge should not find
it in the immutable ``blobs.path`` of a deleted blob; and one file per blob, with no directory
of its own, is one unlink to delete. Rows written by earlier versions keep their own path
(``<id[:2]>/<blob id>/<name>``) until their bytes are deleted; deleting one of those also
removes its emptied directory.

The store trusts no path (issue 11):

- A path is used only if it is the canonical one for its blob's kind and id (or, for a row of
  the earlier layout, that layout's form with the blob's own id); anything else is refused
  before the file system is touched. The database's blobs trigger enforces the same.
- Below a root, nothing is resolved by the kernel's path walk: every directory is opened
  from its parent's descriptor with ``O_NOFOLLOW``, and the file is opened, unlinked or
  renamed relative to its directory's descriptor. A symlink anywhere below the root (a shard
  directory, the file itself) is never followed; removal and opening refuse it, so nothing
  outside a root is ever touched and a swapped file never serves another blob's bytes. The
  roots themselves are the operator's configuration and are resolved once.

Reading files straight from the roots bypasses the purge fences; hosts read attachments
through ``open_attachment``, which checks them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import functools
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from schema.states import BlobKind
from storage import failpoints
from storage.files import atomic_write_at

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_BLOB_ID = re.compile(r"[0-9A-Za-z_-]{4,64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_OLD_LAYOUT_ID = re.compile(r"[0-9a-f]{32}")  # the uuid4 hex ids that earlier versions wrote
SYMLINK_REFUSED = "a symlink is on its path below the root (not followed, nothing touched)"


class SymlinkRefused(OSError):
    """A symlink below a root, where a directory or a blob's own file should be."""

    def __init__(self) -> None:
        super().__init__(errno.ELOOP, SYMLINK_REFUSED)


@dataclass(frozen=True)
class BlobStore:
    blob_root: Path
    file_root: Path

    def ensure_roots(self) -> None:
        for root in (self.blob_root, self.file_root):
            root.mkdir(parents=True, exist_ok=True)

    def root(self, kind: BlobKind | str) -> Path:
        return self.blob_root if BlobKind(kind) is BlobKind.CAS else self.file_root

    @functools.cached_property
    def _resolved(self) -> dict[BlobKind, str]:
        """Each root, resolved once (the roots are configuration, below them nothing is)."""
        return {kind: str(self.root(kind).resolve()) for kind in BlobKind}

    def absolute(self, kind: BlobKind | str, relative: str) -> Path:
        """Where the blob's file is, lexically, for operators and tests; the store itself
        never opens a path this way."""
        return Path(self._resolved[BlobKind(kind)]).joinpath(*_components(relative))

    def write(self, kind: BlobKind | str, relative: str, data: bytes | Iterable[bytes]) -> None:
        """Write the bytes (whole, or in pieces: an upload's spool file read in chunks) durably
        and atomically (a reader sees all of them or none), creating the shard directories,
        never through a symlink."""
        parts = _components(relative)
        with _Directories(self._resolved) as directories:
            atomic_write_at(directories.parent(BlobKind(kind), parts, create=True), parts[-1], data)

    def discard(
        self, blob_id: str, kind: BlobKind | str, relative: str, *, directories: _Directories | None = None
    ) -> bool:
        """Unlink a blob's file; True if it was there. An already missing file is fine. A
        path that is not the blob's own canonical one raises ValueError, untouched.
        ``directories``: the descriptors a batch has open already."""
        if directories is not None:
            return directories.discard(blob_id, BlobKind(kind), relative)
        with _Directories(self._resolved) as opened:
            return opened.discard(blob_id, BlobKind(kind), relative)

    def discard_all(self, doomed: Sequence[tuple[str, str, str]], *, threads: int) -> None:
        """Unlink the files of these ``(blob id, kind, path)`` blobs, ``threads`` at a time:
        unlinks of different files are independent system calls that release the GIL, so a
        few in flight keep the disk busier than one after another. Every file is tried; the
        first failure is raised afterwards, named by its blob id and never by its path (a path
        written by an earlier version holds the attachment's name, which may be purged)."""
        shares = [doomed[i::threads] for i in range(min(threads, len(doomed)))]  # one task per thread
        if len(shares) <= 1:
            failures = [self._discard_share(doomed)]
        else:
            failures = list(_pool(threads).map(self._discard_share, shares))
        for failure in failures:
            if failure is not None:
                raise failure

    def _discard_share(self, share: Sequence[tuple[str, str, str]]) -> OSError | None:
        """Unlink every file of the share; the first failure, if any, named by blob id. The
        share's directories are opened once each (a few hundred descriptors at most)."""
        first: OSError | None = None
        with _Directories(self._resolved) as directories:
            for blob_id, kind, relative in share:
                try:
                    self.discard(blob_id, kind, relative, directories=directories)
                except (OSError, ValueError) as exc:  # ValueError: not the blob's own path, never touched
                    first = first or discard_failed(blob_id, exc)
        return first

    def open(self, blob_id: str, kind: BlobKind | str, relative: str) -> BinaryIO:
        """The blob's file for reading: a regular file at its own canonical path, reached
        through no symlink (a swapped file never serves another blob's bytes)."""
        check_path(blob_id, kind, relative)
        parts = _components(relative)
        with _Directories(self._resolved) as directories:
            directory = directories.parent(BlobKind(kind), parts)
            try:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise SymlinkRefused() from None
                raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file")
        return os.fdopen(fd, "rb")

    def exists(self, kind: BlobKind | str, relative: str) -> bool:
        """A regular file at the blob's path, reached through no symlink."""
        parts = _components(relative)
        try:
            with _Directories(self._resolved) as directories:
                directory = directories.parent(BlobKind(kind), parts)
                return stat.S_ISREG(os.stat(parts[-1], dir_fd=directory, follow_symlinks=False).st_mode)
        except OSError:
            return False


class _Directories:
    """Directory descriptors below the roots, each opened from its parent's with
    ``O_NOFOLLOW`` and kept until the block ends, so the files of a batch that share a shard
    directory walk to it once. At most about ``MAX_OPEN`` are open at a time: a walk that
    finds that many closes them all first."""

    MAX_OPEN = 256

    def __init__(self, roots: dict[BlobKind, str]) -> None:
        self._roots = roots
        self._open: dict[tuple[BlobKind, tuple[str, ...]], int] = {}

    def __enter__(self) -> _Directories:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close_all()

    def _close_all(self) -> None:
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()

    def parent(self, kind: BlobKind, parts: Sequence[str], *, create: bool = False) -> int:
        """The descriptor of the directory that holds ``parts[-1]``."""
        if len(self._open) >= self.MAX_OPEN:
            self._close_all()
        return self._directory(kind, tuple(parts[:-1]), create=create)

    def _directory(self, kind: BlobKind, path: tuple[str, ...], *, create: bool) -> int:
        known = self._open.get((kind, path))
        if known is not None:
            return known
        if path:
            fd = _open_directory(self._directory(kind, path[:-1], create=create), path[-1], create=create)
        else:
            fd = os.open(self._roots[kind], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._open[(kind, path)] = fd
        return fd

    def discard(self, blob_id: str, kind: BlobKind, relative: str) -> bool:
        check_path(blob_id, kind, relative)
        parts = _components(relative)
        try:
            directory = self.parent(kind, parts)
            failpoints.hit("blobs.unlink")
            os.unlink(parts[-1], dir_fd=directory)  # unlinkat: a symlink here is removed, never followed
        except FileNotFoundError:
            return False
        if parts[-2] == blob_id:  # the layout of earlier versions: a directory per blob, now empty
            with contextlib.suppress(OSError):
                os.rmdir(blob_id, dir_fd=self.parent(kind, parts[:-1]))
        return True


def _open_directory(parent: int, name: str, *, create: bool) -> int:
    try:
        return os.open(name, _DIRECTORY, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, dir_fd=parent)
        return _open_directory(parent, name, create=False)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_symlink(parent, name):
            raise SymlinkRefused() from None
        raise


def _is_symlink(parent: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _components(relative: str) -> list[str]:
    """The path's components; refused (ValueError) unless each is a plain name."""
    parts = relative.split("/")
    if len(parts) < 2 or any(part in ("", ".", "..") or "\x00" in part or "\\" in part for part in parts):
        raise ValueError("the blob path is not a plain relative path")
    return parts


def cas_path(sha256: str, blob_id: str) -> str:
    """``ab/cd/<sha256>-<blob id>``: sharded by hash, unique by blob."""
    return f"{sha256[:2]}/{sha256[2:4]}/{sha256}-{blob_id}"


def file_path(blob_id: str) -> str:
    """``ab/cd/<blob id>``: sharded by id; the attachment's name is not on disk."""
    return f"{blob_id[:2]}/{blob_id[2:4]}/{blob_id}"


def check_path(blob_id: str, kind: BlobKind | str, relative: str) -> None:
    """The path must be the blob's own canonical one (the database's blobs trigger says the
    same), or for a real file written by an earlier version, ``<id[:2]>/<id>/<name>``.
    Anything else (another spelling of some path, another blob's path) raises ValueError."""
    if not _BLOB_ID.fullmatch(blob_id):
        raise ValueError("the blob id cannot name a canonical path")
    if BlobKind(kind) is BlobKind.FILE:
        parts = relative.split("/")
        old_layout = (
            len(parts) == 3
            and _OLD_LAYOUT_ID.fullmatch(blob_id) is not None
            and parts[:2] == [blob_id[:2], blob_id]
            and parts[2] not in ("", ".", "..")
            and "\x00" not in parts[2]
        )
        if relative != file_path(blob_id) and not old_layout:
            raise ValueError("the path is not the blob's canonical one")
        return
    sha256 = relative.rsplit("/", 1)[-1].removesuffix(f"-{blob_id}")
    if not _SHA256.fullmatch(sha256) or relative != cas_path(sha256, blob_id):
        raise ValueError("the path is not the blob's canonical one")


def discard_failed(blob_id: str, exc: OSError | ValueError) -> OSError:
    """The unlink's error without its path: by blob id, with the system's reason (OSError
    picks the subclass of the errno, e.g. IsADirectoryError)."""
    if isinstance(exc, ValueError):
        return OSError(
            f"could not unlink the file of blob {blob_id}: its path is not its canonical one (left untouched)"
        )
    reason = exc.strerror if exc.errno is not None else str(exc)
    message = f"could not unlink the file of blob {blob_id}: {reason}"
    return OSError(exc.errno, message) if exc.errno is not None else OSError(message)


@functools.cache
def _pool(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    """One pool per size, per process, shared by every step that unlinks (its threads idle
    between steps, and end with the process)."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="purgekeeper-unlink")
