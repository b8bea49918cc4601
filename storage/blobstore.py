"""Where attachment bytes live on disk: CAS blobs under the blob root, real files under the
file root. Every blob row has its own path, so a re-upload of the same bytes never lands on
the path of a blob that is being deleted.

Layouts: a CAS blob at ``ab/<sha256>-<blob id>`` (docs/design.md); a real file at
``ab/<blob id>`` (sharded by its id). One level of 256 shard directories, so that a batch of
unlinks shares its directory fsyncs: a batch of 2,000 files fsyncs at most 256 directories,
where two levels (65,536) gave nearly every file a directory of its own. A real file's name
is its attachment's ``name`` column, not a file name on disk: an attachment name is content,
and a purge should not find it in the immutable ``blobs.path`` of a deleted blob; and one
file per blob, with no directory of its own, is one unlink to delete. Rows written by
earlier versions keep their own path: ``ab/cd/<sha256>-<blob id>`` and ``ab/cd/<blob id>``
(migrations 0006 to 0020), which stay canonical, and ``<id[:2]>/<blob id>/<name>`` (before
0005) until their bytes are deleted; deleting one of those also removes its emptied directory.

The store trusts no path (issue 11):

- A path is used only if it is a canonical one for its blob's kind and id (or, for a row of
  the layout before 0005, that layout's form with the blob's own id); anything else is refused
  before the file system is touched. The database's blobs trigger enforces the same.
- Below a root, nothing is resolved by the kernel's path walk: every directory is opened
  from its parent's descriptor with ``O_NOFOLLOW``, and the file is opened, unlinked or
  renamed relative to its directory's descriptor. A symlink anywhere below the root (a shard
  directory, the file itself) is never followed; removal and opening refuse it, so nothing
  outside a root is ever touched and a swapped file never serves another blob's bytes. The
  roots themselves are the operator's configuration and are resolved once.

A batch of unlinks (``discard_all``, the attachments step's batch) opens each directory
once, shares the descriptors between its threads (the files of one directory go to one
thread), and fsyncs each directory whose entries it removed once, before it returns: a blob
is marked deleted only once its unlink is on disk.

Reading files straight from the roots bypasses the purge fences; hosts read attachments
through ``open_attachment``, which checks them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import re
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

from purgekeeper.schema.states import BlobKind
from purgekeeper.storage import failpoints
from purgekeeper.storage.directories import Directories, components, open_regular_file
from purgekeeper.storage.files import atomic_write_at

_BLOB_ID = re.compile(r"[0-9A-Za-z_-]{4,64}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_OLD_LAYOUT_ID = re.compile(r"[0-9a-f]{32}")  # the uuid4 hex ids that earlier versions wrote
MAX_BATCH_DIRECTORIES = 256  # a batch holds at most about twice this many descriptors; more is done in parts
# A batch's fsyncs are issued this many at a time, whatever its unlink threads: each waits on
# the disk's cache flush (a batch's files spread over up to 256 directories, and over nearly
# as many directories as files in the two-level layout of earlier rows), and flushes issued
# together coalesce.
SYNCS_AT_A_TIME = 16
Doomed = tuple[str, str, str]  # a blob's id, kind and path
_T = TypeVar("_T")
_F = TypeVar("_F")


@dataclass(frozen=True)
class BlobStore:
    """``sync``: how a directory's descriptor is fsynced (``os.fsync``; tests count them)."""

    blob_root: Path
    file_root: Path
    sync: Callable[[int], None] = os.fsync

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
        return Path(self._resolved[BlobKind(kind)]).joinpath(*components(relative))

    def write(self, kind: BlobKind | str, relative: str, data: bytes | Iterable[bytes]) -> None:
        """Write the bytes (whole, or in pieces: an upload's spool file read in chunks) durably
        and atomically (a reader sees all of them or none), creating the shard directories,
        never through a symlink."""
        parts = components(relative)
        with Directories(self._resolved) as directories:
            atomic_write_at(directories.parent(BlobKind(kind), parts, create=True), parts[-1], data)

    def discard(
        self, blob_id: str, kind: BlobKind | str, relative: str, *, directories: Directories | None = None
    ) -> bool:
        """Unlink a blob's file; True if it was there. An already missing file is fine. A
        path that is not the blob's own canonical one raises ValueError, untouched.
        ``directories``: the descriptors a batch has open already (which remember the
        directory for the batch's fsync); alone, nothing is fsynced."""
        if directories is not None:
            return _discard(directories, blob_id, BlobKind(kind), relative)
        with Directories(self._resolved) as opened:
            return _discard(opened, blob_id, BlobKind(kind), relative)

    def discard_all(self, doomed: Sequence[Doomed], *, threads: int) -> None:
        """Unlink the files of these ``(blob id, kind, path)`` blobs as one batch, then fsync
        each directory whose entries it removed, once (``SYNCS_AT_A_TIME`` at a time), so the
        unlinks are on disk when this returns (the caller marks the blobs deleted next).
        ``threads`` at a time: the files of one directory go to one thread, and the threads
        share the batch's descriptors (each directory is walked to once). Every file is
        tried; the first failure is raised afterwards, named by its blob id and never by its
        path (a path written by an earlier version holds the attachment's name, which may be
        purged)."""
        failures = self.discard_each(doomed, threads=threads)
        if failures:
            raise next(iter(failures.values()))

    def discard_each(self, doomed: Sequence[Doomed], *, threads: int) -> dict[str, OSError]:
        """:meth:`discard_all`, which says which blobs failed instead of raising: each
        failure by blob id, in the order met. A directory whose fsync failed fails every blob
        of the batch in it, since none of their unlinks is known to be on disk (a group of
        steps gives each failure to the step whose blob it is, ``purgekeeper.workers.grouped``)."""
        failures: list[tuple[str, OSError, bool]] = []  # (blob id, error, whether its whole directory failed)
        groups = _by_directory(doomed)
        for start in range(0, len(groups), MAX_BATCH_DIRECTORIES):
            with Directories(self._resolved, limit=None) as directories:
                unlink = functools.partial(self._discard_group, directories)
                failures += _each(unlink, groups[start : start + MAX_BATCH_DIRECTORIES], threads)
                failures += _each(self._sync_directory, directories.to_sync(), max(threads, SYNCS_AT_A_TIME))
        failed: dict[str, OSError] = {}
        for blob_id, error, whole_directory in failures:
            for failed_id in _same_directory(groups, blob_id) if whole_directory else [blob_id]:
                failed.setdefault(failed_id, error)
        return failed

    def _discard_group(self, directories: Directories, group: Sequence[Doomed]) -> list[tuple[str, OSError, bool]]:
        """Unlink the files of one directory; their failures, named by blob id."""
        failures = []
        for blob_id, kind, relative in group:
            try:
                self.discard(blob_id, kind, relative, directories=directories)
            except (OSError, ValueError) as exc:  # ValueError: not the blob's own path, never touched
                failures.append((blob_id, discard_failed(blob_id, exc), False))
        return failures

    def _sync_directory(self, directory: tuple[int, str]) -> list[tuple[str, OSError, bool]]:
        """fsync a directory the batch changed. A failure is named by the first blob there: its
        unlink is not known to be on disk, so it is not deleted yet (nor the others there:
        ``discard_each``)."""
        fd, blob_id = directory
        try:
            self.sync(fd)
        except OSError as exc:
            return [(blob_id, discard_failed(blob_id, exc), True)]
        return []

    def open(self, blob_id: str, kind: BlobKind | str, relative: str) -> BinaryIO:
        """The blob's file for reading: a regular file at its own canonical path, reached
        through no symlink (a swapped file never serves another blob's bytes)."""
        check_path(blob_id, kind, relative)
        parts = components(relative)
        with Directories(self._resolved) as directories:
            fd = open_regular_file(directories.parent(BlobKind(kind), parts), parts[-1])
        return os.fdopen(fd, "rb")

    def exists(self, kind: BlobKind | str, relative: str) -> bool:
        """A regular file at the blob's path, reached through no symlink."""
        parts = components(relative)
        try:
            with Directories(self._resolved) as directories:
                directory = directories.parent(BlobKind(kind), parts)
                return stat.S_ISREG(os.stat(parts[-1], dir_fd=directory, follow_symlinks=False).st_mode)
        except OSError:
            return False


def _discard(directories: Directories, blob_id: str, kind: BlobKind, relative: str) -> bool:
    """Unlink the file relative to its directory's descriptor, and remember the directory for
    the batch's fsync: also when the file is missing, since an earlier attempt's unlink of it
    may not be on disk yet. A directory of the earlier layout, emptied, is removed too."""
    check_path(blob_id, kind, relative)
    parts = components(relative)
    found = False
    with contextlib.suppress(FileNotFoundError):
        directory = directories.parent(kind, parts)
        directories.changed(kind, parts[:-1], blob_id)
        failpoints.hit("blobs.unlink")
        os.unlink(parts[-1], dir_fd=directory)  # unlinkat: a symlink here is removed, never followed
        found = True
    if parts[-2] == blob_id:  # the layout of earlier versions: a directory per blob, now empty
        _remove_blob_directory(directories, blob_id, kind, parts)
    return found


def _remove_blob_directory(directories: Directories, blob_id: str, kind: BlobKind, parts: Sequence[str]) -> None:
    """Remove the blob's own directory of the earlier layout if it is empty; its parent is
    fsynced with the batch either way (an earlier attempt may have removed it)."""
    with contextlib.suppress(OSError):
        parent = directories.parent(kind, parts[:-1])
        directories.changed(kind, parts[:-2], blob_id)
        os.rmdir(blob_id, dir_fd=parent)


def _by_directory(doomed: Sequence[Doomed]) -> list[list[Doomed]]:
    """The files grouped by the directory they are in, in the order first met."""
    groups: dict[tuple[str, str], list[Doomed]] = {}
    for blob_id, kind, relative in doomed:
        groups.setdefault((kind, relative.rpartition("/")[0]), []).append((blob_id, kind, relative))
    return list(groups.values())


def _same_directory(groups: Sequence[Sequence[Doomed]], blob_id: str) -> list[str]:
    """The blobs of the batch in the same directory as ``blob_id`` (itself alone if it is not one of them)."""
    for group in groups:
        if any(doomed_id == blob_id for doomed_id, _kind, _path in group):
            return [doomed_id for doomed_id, _kind, _path in group]
    return [blob_id]


def _each(work: Callable[[_T], list[_F]], items: Sequence[_T], threads: int) -> list[_F]:
    """``work`` on every item, ``threads`` at a time (a share of the items per thread); the
    failures, in order of the shares."""
    shares = [items[i::threads] for i in range(min(threads, len(items)))]
    if len(shares) <= 1:
        return _each_of(work, items)
    futures = [_pool(threads).submit(_each_of, work, share) for share in shares]
    concurrent.futures.wait(futures)  # all of them, even after a failure: none may outlive the descriptors
    return [failure for future in futures for failure in future.result()]


def _each_of(work: Callable[[_T], list[_F]], items: Sequence[_T]) -> list[_F]:
    return [failure for item in items for failure in work(item)]


def cas_path(sha256: str, blob_id: str) -> str:
    """``ab/<sha256>-<blob id>``: sharded by hash into 256 directories, unique by blob."""
    return f"{sha256[:2]}/{sha256}-{blob_id}"


def file_path(blob_id: str) -> str:
    """``ab/<blob id>``: sharded by id into 256 directories; the attachment's name is not on disk."""
    return f"{blob_id[:2]}/{blob_id}"


def canonical_paths(blob_id: str, kind: BlobKind | str, sha256: str) -> tuple[str, str]:
    """The blob's canonical path (:func:`cas_path` or :func:`file_path`), then the one of the
    layout before migration 0021 (``ab/cd/``), which the rows written then keep: either is
    the blob's own, and neither holds an attachment name."""
    if BlobKind(kind) is BlobKind.CAS:
        return cas_path(sha256, blob_id), f"{sha256[:2]}/{sha256[2:4]}/{sha256}-{blob_id}"
    return file_path(blob_id), f"{blob_id[:2]}/{blob_id[2:4]}/{blob_id}"


def check_path(blob_id: str, kind: BlobKind | str, relative: str) -> None:
    """The path must be one of the blob's own canonical ones (:func:`canonical_paths`; the
    database's blobs trigger says the same), or for a real file written before migration
    0005, ``<id[:2]>/<id>/<name>``. Anything else (another spelling of some path, another
    blob's path) raises ValueError."""
    if not _BLOB_ID.fullmatch(blob_id):
        raise ValueError("the blob id cannot name a canonical path")
    if BlobKind(kind) is BlobKind.FILE:
        if relative not in canonical_paths(blob_id, kind, "") and not _old_layout(blob_id, relative):
            raise ValueError("the path is not the blob's canonical one")
        return
    sha256 = relative.rsplit("/", 1)[-1].removesuffix(f"-{blob_id}")
    if not _SHA256.fullmatch(sha256) or relative not in canonical_paths(blob_id, kind, sha256):
        raise ValueError("the path is not the blob's canonical one")


def _old_layout(blob_id: str, relative: str) -> bool:
    """``<id[:2]>/<id>/<name>``: a real file of a version before migration 0005."""
    parts = relative.split("/")
    return (
        len(parts) == 3
        and _OLD_LAYOUT_ID.fullmatch(blob_id) is not None
        and parts[:2] == [blob_id[:2], blob_id]
        and parts[2] not in ("", ".", "..")
        and "\x00" not in parts[2]
    )


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
