"""The blob store's unlinks on real files: several at a time, every file tried, failures named
by blob id, the layout of earlier versions cleaned up."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.blobstore import BlobStore, cas_path, file_path


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    blobs = BlobStore(blob_root=tmp_path / "blobs", file_root=tmp_path / "files")
    blobs.ensure_roots()
    return blobs


def put(store: BlobStore, kind: str, relative: str) -> Path:
    store.write(kind, relative, b"bytes")
    return store.absolute(kind, relative)


@pytest.mark.parametrize("threads", [1, 4])
def test_discard_all_unlinks_every_file_and_tolerates_missing_ones(store: BlobStore, threads: int) -> None:
    """Tried: 9 files of both kinds plus 2 whose files are already gone, one at a time and 4 at
    a time; every file is gone afterwards, and the missing ones raise nothing."""
    doomed = []
    for n in range(9):
        blob_id = f"{n:02d}ab{n}" + "0" * 26
        kind, relative = ("cas", cas_path(f"{n}" * 64, blob_id)) if n % 2 else ("file", file_path(blob_id))
        put(store, kind, relative)
        doomed.append((blob_id, kind, relative))
    doomed += [("ffff" + "0" * 28, "file", file_path("ffff" + "0" * 28)), ("eeee", "cas", "ee/ee/missing-eeee")]
    store.discard_all(doomed, threads=threads)
    assert [store.exists(kind, relative) for _, kind, relative in doomed] == [False] * len(doomed)


@pytest.mark.parametrize("threads", [1, 4])
def test_a_failed_unlink_is_raised_by_blob_id_after_every_other_file_was_tried(store: BlobStore, threads: int) -> None:
    """Tried: a directory planted where a blob's file should be (unlink fails with EISDIR)
    among 6 regular files. Every regular file is unlinked anyway, and the error names the blob
    id, never the path (a path of an earlier version holds the attachment's name)."""
    doomed = []
    for n in range(6):
        blob_id = f"{n:02d}cd" + "1" * 28
        put(store, "file", file_path(blob_id))
        doomed.append((blob_id, "file", file_path(blob_id)))
    stuck = "99zz" + "2" * 28
    store.absolute("file", file_path(stuck)).mkdir(parents=True)
    doomed.insert(3, (stuck, "file", file_path(stuck)))
    with pytest.raises(IsADirectoryError) as info:
        store.discard_all(doomed, threads=threads)
    assert stuck in str(info.value) and str(store.file_root) not in str(info.value)
    assert info.value.filename is None
    assert [store.exists("file", r) for b, _, r in doomed if b != stuck] == [False] * 6


def test_a_file_of_the_earlier_layout_leaves_no_empty_directory(store: BlobStore) -> None:
    """Rows written before migration 0005 keep ``<id[:2]>/<blob id>/<name>``: deleting one
    removes its emptied per-blob directory; the new layout's shared shard directories stay.
    Tried: one blob of each layout; then a directory named like the blob that still holds
    another file (kept)."""
    old_id, new_id = "ab" + "3" * 30, "ab" + "4" * 30
    old = put(store, "file", f"{old_id[:2]}/{old_id}/report.pdf")
    new = put(store, "file", file_path(new_id))
    store.discard_all(
        [(old_id, "file", f"{old_id[:2]}/{old_id}/report.pdf"), (new_id, "file", file_path(new_id))], threads=1
    )
    assert not old.parent.exists() and not old.exists()
    assert new.parent.is_dir() and not new.exists()
    busy_id = "ab" + "5" * 30
    busy = put(store, "file", f"{busy_id[:2]}/{busy_id}/a.txt")
    put(store, "file", f"{busy_id[:2]}/{busy_id}/b.txt")
    assert store.discard(busy_id, "file", f"{busy_id[:2]}/{busy_id}/a.txt")
    assert busy.parent.is_dir() and not busy.exists()


def test_a_path_that_escapes_its_root_is_never_touched_and_reported_by_blob_id(
    store: BlobStore, tmp_path: Path
) -> None:
    """A blob row whose path leads out of its root (a hand-edited row): the file there stays,
    the other files of the batch go, and the error names the blob, not the path. Tried with
    ``../outside.txt`` next to a regular blob."""
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not a blob")
    regular = "cd" + "6" * 30
    put(store, "file", file_path(regular))
    with pytest.raises(OSError) as info:
        store.discard_all([("escaper", "file", "../outside.txt"), (regular, "file", file_path(regular))], threads=4)
    assert "escaper" in str(info.value) and "outside" not in str(info.value)
    assert outside.read_bytes() == b"not a blob" and not store.exists("file", file_path(regular))
