"""Where attachment bytes live on disk: CAS blobs under the blob root, real files under the
file root. Every blob row has its own path, so a re-upload of the same bytes never lands on
the path of a blob that is being deleted.

Reading files straight from the roots bypasses the purge fences; hosts read attachments
through ``open_attachment``, which checks them.
"""

from __future__ import annotations

import contextlib
import functools
import os
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
    def _resolved(self) -> dict[BlobKind, Path]:
        return {BlobKind.CAS: self.blob_root.resolve(), BlobKind.FILE: self.file_root.resolve()}

    def absolute(self, kind: BlobKind | str, relative: str) -> Path:
        """The blob's own path, lexically: a symlink planted at it is the link, never its
        target (unlinking it must not destroy another blob's bytes)."""
        root = self._resolved[BlobKind(kind)]
        path = Path(os.path.normpath(root / relative))
        if root not in path.parents:
            raise ValueError(f"blob path {relative!r} escapes its root")
        return path

    def write(self, kind: BlobKind | str, relative: str, data: bytes) -> None:
        """Write the bytes durably and atomically: a reader sees all of them or none."""
        atomic_write(self.absolute(kind, relative), data)

    def discard(self, kind: BlobKind | str, relative: str) -> bool:
        """Unlink a blob's file; True if it was there. An already missing file is fine."""
        path = self.absolute(kind, relative)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        if BlobKind(kind) is BlobKind.FILE:
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # the per-blob directory, when empty
        return True

    def open(self, kind: BlobKind | str, relative: str) -> BinaryIO:
        return self.absolute(kind, relative).open("rb")

    def exists(self, kind: BlobKind | str, relative: str) -> bool:
        return self.absolute(kind, relative).is_file()


def cas_path(sha256: str, blob_id: str) -> str:
    """``ab/cd/<sha256>-<blob id>``: sharded by hash, unique by blob."""
    return f"{sha256[:2]}/{sha256[2:4]}/{sha256}-{blob_id}"


def file_path(blob_id: str, name: str) -> str:
    """``<id[:2]>/<blob id>/<name>``: a real file keeps its name, in its own directory."""
    return f"{blob_id[:2]}/{blob_id}/{name}"
