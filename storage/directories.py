"""Directory descriptors below a root, each opened from its parent's with ``O_NOFOLLOW``: the
walk the blob store makes instead of letting the kernel resolve a path (issue 11). A symlink
where a directory should be is refused, never followed.

A ``Directories`` is kept for a block: one write or read, or a whole batch of unlinks, whose
threads share it (each directory is walked to once per batch, and the batch fsyncs each
directory whose entries it changed, once, through the descriptor it holds). A descriptor
held stays the directory the batch walked to: swapping the path for a symlink afterwards
changes nothing the batch does.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Mapping, Sequence
from typing import Any

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
SYMLINK_REFUSED = "a symlink is on its path below the root (not followed, nothing touched)"

Key = tuple[str, tuple[str, ...]]  # a root's name (the blob kind) and the path below it


class SymlinkRefused(OSError):
    """A symlink below a root, where a directory or a blob's own file should be."""

    def __init__(self) -> None:
        super().__init__(errno.ELOOP, SYMLINK_REFUSED)


class Directories:
    """Descriptors of directories below the roots, kept until the block ends. ``limit``: a
    walk that finds that many open closes them all first (for a block of one thread; a
    batch passes None and bounds itself). Safe to share between threads: two that open the
    same directory at once keep one descriptor and close the other."""

    MAX_OPEN = 256

    def __init__(self, roots: Mapping[Any, str], *, limit: int | None = MAX_OPEN) -> None:
        self._roots = roots
        self._limit = limit
        self._open: dict[Key, int] = {}
        self._changed: dict[Key, str] = {}  # a directory whose entries changed -> the first blob there

    def __enter__(self) -> Directories:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close_all()

    def _close_all(self) -> None:
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()

    def parent(self, root: str, parts: Sequence[str], *, create: bool = False) -> int:
        """The descriptor of the directory that holds ``parts[-1]``."""
        if self._limit is not None and len(self._open) >= self._limit:
            self._close_all()
        return self._directory(root, tuple(parts[:-1]), create=create)

    def _directory(self, root: str, path: tuple[str, ...], *, create: bool) -> int:
        known = self._open.get((root, path))
        if known is not None:
            return known
        if path:
            fd = _open_directory(self._directory(root, path[:-1], create=create), path[-1], create=create)
        else:
            fd = os.open(self._roots[root], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        kept = self._open.setdefault((root, path), fd)  # one step under the GIL: the first one wins
        if kept != fd:
            os.close(fd)
        return kept

    def changed(self, root: str, path: Sequence[str], blob_id: str) -> None:
        """Remember that an entry of this (open) directory was removed, for blob ``blob_id``."""
        self._changed.setdefault((root, tuple(path)), blob_id)

    def to_sync(self) -> list[tuple[int, str]]:
        """Each changed directory's descriptor, with the first blob whose entry it held."""
        return [(self._open[key], blob_id) for key, blob_id in self._changed.items()]


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
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and is_symlink(parent, name):
            raise SymlinkRefused() from None
        raise


def open_regular_file(parent: int, name: str) -> int:
    """The descriptor of the regular file ``name`` in the directory ``parent``, opened for
    reading without following a symlink (SymlinkRefused) and without waiting on a FIFO
    planted there (``O_NONBLOCK``, which changes nothing for a regular file); anything but a
    regular file is OSError ``EINVAL``."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SymlinkRefused() from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return fd


def is_symlink(parent: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def components(relative: str) -> list[str]:
    """The path's components; refused (ValueError) unless each is a plain name."""
    parts = relative.split("/")
    if len(parts) < 2 or any(part in ("", ".", "..") or "\x00" in part or "\\" in part for part in parts):
        raise ValueError("the blob path is not a plain relative path")
    return parts
