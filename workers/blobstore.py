"""Where attachment bytes live on disk: CAS blobs under the blob root, real files under the
file root. Every blob row has its own path, so a re-upload of the same bytes never lands on
the path of a blob that is being deleted.

Layouts: a CAS blob at ``ab/cd/<sha256>-<blob id>`` (DESIGN.md); a real file at
``ab/cd/<blob id>`` (sharded by its id). A real file's name is its attachment's ``name``
column, not a file name on disk: an attachment name is content, and a purge should not find
it in the immutable ``blobs.path`` of a deleted blob; and one file per blob, with no directory
of its own, is one unlink to delete. Rows written by earlier versions keep their own path
(``<id[:2]>/<blob id>/<name>``); deleting one of those also removes its emptied directory.

Reading files straight from the roots bypasses the purge fences; hosts read attachments
through ``open_attachment``, which checks them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from schema.states import BlobKind
from workers.files import atomic_write


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
        """Each root, resolved, as a string ending with a separator."""
        return {kind: os.path.join(self.root(kind).resolve(), "") for kind in BlobKind}

    def absolute(self, kind: BlobKind | str, relative: str) -> Path:
        """The blob's own path, lexically: a symlink planted at it is the link, never its
        target (unlinking it must not destroy another blob's bytes)."""
        return Path(self._absolute(kind, relative))

    def _absolute(self, kind: BlobKind | str, relative: str) -> str:
        root = self._resolved[BlobKind(kind)]
        path = os.path.normpath(os.path.join(root, relative))
        if not path.startswith(root):  # the roots end with a separator
            raise ValueError(f"blob path {relative!r} escapes its root")
        return path

    def write(self, kind: BlobKind | str, relative: str, data: bytes) -> None:
        """Write the bytes durably and atomically: a reader sees all of them or none."""
        atomic_write(self.absolute(kind, relative), data)

    def discard(self, blob_id: str, kind: BlobKind | str, relative: str) -> bool:
        """Unlink a blob's file; True if it was there. An already missing file is fine."""
        path = self._absolute(kind, relative)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        parent = os.path.dirname(path)
        if os.path.basename(parent) == blob_id:  # the layout of earlier versions: a directory per blob
            with contextlib.suppress(OSError):
                os.rmdir(parent)
        return True

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
        """Unlink every file of the share; the first failure, if any, named by blob id."""
        first: OSError | None = None
        for blob_id, kind, relative in share:
            try:
                self.discard(blob_id, kind, relative)
            except (OSError, ValueError) as exc:  # ValueError: a path that escapes its root, never touched
                first = first or discard_failed(blob_id, exc)
        return first

    def open(self, kind: BlobKind | str, relative: str) -> BinaryIO:
        return self.absolute(kind, relative).open("rb")

    def exists(self, kind: BlobKind | str, relative: str) -> bool:
        return self.absolute(kind, relative).is_file()


def cas_path(sha256: str, blob_id: str) -> str:
    """``ab/cd/<sha256>-<blob id>``: sharded by hash, unique by blob."""
    return f"{sha256[:2]}/{sha256[2:4]}/{sha256}-{blob_id}"


def file_path(blob_id: str) -> str:
    """``ab/cd/<blob id>``: sharded by id; the attachment's name is not on disk."""
    return f"{blob_id[:2]}/{blob_id[2:4]}/{blob_id}"


def discard_failed(blob_id: str, exc: OSError | ValueError) -> OSError:
    """The unlink's error without its path: by blob id, with the system's reason (OSError
    picks the subclass of the errno, e.g. IsADirectoryError)."""
    if isinstance(exc, ValueError):
        return OSError(f"could not unlink the file of blob {blob_id}: its path escapes its root (left untouched)")
    reason = exc.strerror if exc.errno is not None else str(exc)
    message = f"could not unlink the file of blob {blob_id}: {reason}"
    return OSError(exc.errno, message) if exc.errno is not None else OSError(message)


@functools.cache
def _pool(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    """One pool per size, per process, shared by every step that unlinks (its threads idle
    between steps, and end with the process)."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="purgekeeper-unlink")
