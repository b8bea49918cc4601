"""A batch of blob files unlinked together, on real files (issue 27): each directory the batch
touched is fsynced once before the batch returns (a missing file's too: an earlier attempt's
unlink may not be on disk yet), a failed fsync is named by blob id like a failed unlink, and
the descriptors a batch keeps open never let a symlink swapped in mid-batch be followed."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from purgekeeper.schema.states import BlobKind
from purgekeeper.storage.blobstore import BlobStore, cas_path, file_path


@dataclass(frozen=True)
class HookedStore(BlobStore):
    """The real blob store; ``afterwards`` runs just after each unlink."""

    afterwards: Callable[[str], None] = lambda _blob_id: None

    def discard(self, blob_id: str, kind: BlobKind | str, relative: str, **options: Any) -> bool:
        found = super().discard(blob_id, kind, relative, **options)
        self.afterwards(blob_id)
        return found


class Syncs:
    """Counts the fsyncs, by the inode of the directory synced."""

    def __init__(self) -> None:
        self.inodes: list[int] = []

    def __call__(self, fd: int) -> None:
        self.inodes.append(os.fstat(fd).st_ino)
        os.fsync(fd)


def store_at(tmp_path: Path, **fields: Any) -> BlobStore:
    store = BlobStore(blob_root=tmp_path / "blobs", file_root=tmp_path / "files", **fields)
    store.ensure_roots()
    return store


def put(store: BlobStore, blob_id: str, kind: str = "file", sha256: str = "") -> tuple[str, str, str]:
    relative = file_path(blob_id) if kind == "file" else cas_path(sha256, blob_id)
    store.write(kind, relative, b"bytes")
    return blob_id, kind, relative


def inode_of(path: Path) -> int:
    return path.stat().st_ino


@pytest.mark.parametrize("threads", [1, 4])
def test_each_directory_of_a_batch_is_fsynced_once_after_its_unlinks(tmp_path: Path, threads: int) -> None:
    """Tried: 9 files in 4 directories of both roots (3 of them in one shard directory, 2 in
    another), one whose file is already gone. 4 fsyncs, one per directory, missing file's
    included; none of a root, whose entries did not change."""
    syncs = Syncs()
    store = store_at(tmp_path, sync=syncs)
    doomed = [put(store, f"aabb{n}" + "0" * 27) for n in range(3)]
    doomed += [put(store, f"bbcc{n}" + "0" * 27) for n in range(2)]
    doomed += [put(store, f"ddee{n}" + "0" * 27) for n in range(2)]
    doomed += [put(store, f"cas{n}" + "0" * 28, "cas", "ff" * 32) for n in range(2)]
    os.unlink(store.absolute("file", doomed[5][2]))  # gone already (an earlier attempt)
    store.discard_all(doomed, threads=threads)
    parents = {inode_of(store.absolute(kind, relative).parent) for _, kind, relative in doomed}
    assert sorted(syncs.inodes) == sorted(parents) and len(parents) == 4
    assert not any(os.path.lexists(store.absolute(kind, relative)) for _, kind, relative in doomed)


def test_a_failed_fsync_is_raised_by_blob_id_after_every_file_was_tried(tmp_path: Path) -> None:
    """Tried: the fsync of one directory fails with EIO. Every file is unlinked anyway, and the
    batch fails naming a blob of that directory, never a path; a second try succeeds (the
    step's retry), counting the missing files as gone."""
    failing: list[int] = []

    def sync(fd: int) -> None:
        if os.fstat(fd).st_ino in failing:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        os.fsync(fd)

    store = store_at(tmp_path, sync=sync)
    doomed = [put(store, f"{n}{n}ab" + "1" * 28) for n in range(4)]
    failing.append(inode_of(store.absolute("file", doomed[2][2]).parent))
    with pytest.raises(OSError) as info:
        store.discard_all(doomed, threads=2)
    assert info.value.errno == errno.EIO and doomed[2][0] in str(info.value)
    assert str(store.file_root) not in str(info.value) and info.value.filename is None
    assert not any(os.path.lexists(store.absolute("file", relative)) for _, _, relative in doomed)
    failing.clear()
    store.discard_all(doomed, threads=2)


def test_a_symlink_swapped_in_mid_batch_is_never_followed(tmp_path: Path) -> None:
    """Tried, after the batch's first unlink: the shard directory it is in (whose descriptor the
    batch holds) moved aside and replaced by a symlink to a decoy directory outside the root;
    and a shard directory not yet reached replaced the same way. The held descriptor is the
    directory the batch walked to: its next file goes from there, and the decoy behind the
    new symlink is untouched. The directory not yet reached is refused (named by blob id and
    the symlink), and the batch still tries its last file."""
    outside = tmp_path / "outside"
    swapped: list[str] = []

    def swap(blob_id: str) -> None:
        if swapped:
            return
        swapped.append(blob_id)
        for shard in ("aa", "bb"):
            decoy = outside / shard
            shutil.move(store.file_root / shard, tmp_path / f"aside-{shard}")
            decoy.mkdir(parents=True)
            for name in (n for n in names if n.startswith(shard)):
                (decoy / name).write_bytes(b"not purgekeeper's")
            (store.file_root / shard).symlink_to(decoy, target_is_directory=True)

    store = HookedStore(blob_root=tmp_path / "blobs", file_root=tmp_path / "files", afterwards=swap)
    store.ensure_roots()
    names = ["aa11" + "2" * 28, "aa11" + "3" * 28, "bb22" + "4" * 28, "cc33" + "5" * 28]
    doomed = [put(store, name) for name in names]
    with pytest.raises(OSError) as info:
        store.discard_all(doomed, threads=1)
    assert names[2] in str(info.value) and "symlink" in str(info.value) and str(outside) not in str(info.value)
    decoys = sorted(p.name for p in outside.rglob("*") if p.is_file())
    assert decoys == sorted(names[:3])  # every decoy is still there
    assert not any((tmp_path / "aside-aa").iterdir())  # both files of the held directory went
    assert (tmp_path / "aside-bb" / names[2]).exists()  # the refused one was never reached
    assert not store.absolute("file", file_path(names[3])).exists()
