"""Durable, atomic file writes: a reader sees all of the new bytes or none of them."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterable
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
