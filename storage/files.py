"""Durable, atomic file writes: a reader sees all of the new bytes or none of them."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

TEMPORARY_PREFIX = ".incoming-"


def atomic_write(path: Path, data: bytes | Iterable[bytes], *, prefix: str = TEMPORARY_PREFIX) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory (created if
    missing): see :func:`atomic_write_at`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        atomic_write_at(directory, path.name, data, prefix=prefix)
    finally:
        os.close(directory)


def atomic_write_at(
    directory: int,
    name: str,
    data: bytes | Iterable[bytes],
    *,
    prefix: str = TEMPORARY_PREFIX,
    sync_directory: bool = True,
    sync_file: bool = True,
) -> None:
    """Write ``data`` as ``name`` in the directory open at ``directory``: a new temporary file
    there (never through a symlink), fsynced, renamed into place, and the directory fsynced so
    the rename survives a crash. ``data`` may come in pieces, so a large file is never held
    in memory whole. ``sync_directory=False`` leaves the directory's fsync to the caller (who
    writes several files into it and fsyncs it once, before anything relies on them);
    ``sync_file=False`` skips both fsyncs, for a file its reader can rebuild when a crash
    leaves it missing, empty or wrong (readers still never see it half-written)."""
    temporary = f"{prefix}{secrets.token_hex(8)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600, dir_fd=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.writelines([data] if isinstance(data, bytes) else data)
            handle.flush()
            if sync_file:
                os.fsync(handle.fileno())
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=directory)
        raise
    if sync_directory and sync_file:
        os.fsync(directory)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def reason_of(exc: BaseException) -> str:
    """The system's reason for a file error, never its path (a path can hold a name)."""
    return (exc.strerror or str(exc)) if isinstance(exc, OSError) and exc.errno is not None else str(exc)


class PrivateFileUnusable(Exception):
    """A private file (a key, a key's mark) that is not a regular file its owner alone can
    read; ``reason`` says which, never what it holds."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def read_private(path: Path, limit: int, *, follow: bool = True) -> bytes:
    """Up to ``limit`` bytes of ``path``, once it is a regular file that nobody but its owner
    can read (mode & 0o077 clear); ``follow=False`` refuses a symlink. FileNotFoundError when
    nothing is there; PrivateFileUnusable otherwise. ``O_NONBLOCK``: a FIFO planted there
    never blocks the open."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise PrivateFileUnusable(f"cannot be read ({reason_of(exc)})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise PrivateFileUnusable("is not a regular file")
        if mode & 0o077:
            raise PrivateFileUnusable(f"is open to others (mode {stat.S_IMODE(mode):04o}): chmod 600 it")
        return os.pread(fd, limit, 0)
    except OSError as exc:
        raise PrivateFileUnusable(f"cannot be read ({reason_of(exc)})") from None
    finally:
        os.close(fd)


def create_private(path: Path, data: bytes) -> None:
    """``data`` as the new file ``path`` (0600), never over anything there: FileExistsError
    when ``path`` exists (a dangling symlink too). It is written aside, fsynced and linked into
    place, and the directory fsynced, so a reader never finds it empty or half-written."""
    aside = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(aside, path)
    finally:
        os.unlink(aside)
    fsync_directory(path.parent)


@contextlib.contextmanager
def flocked(lock: str | Path, *, dir_fd: int | None = None) -> Iterator[None]:
    """An exclusive flock of the file ``lock`` (relative to ``dir_fd`` when given; made 0600
    when missing, never through a symlink) while the block runs: every process that takes
    the same file waits. Closing the file releases it."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
