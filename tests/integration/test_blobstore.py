"""The blob store on real files: unlinks several at a time, every file tried, failures named by
blob id, the layout of earlier versions cleaned up; and a store that trusts no path: it never
follows a symlink anywhere below a root, and touches a file only at its blob's own canonical
path (issue 11, cases 10 and 11)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from purgekeeper.storage.blobstore import BlobStore, cas_path, file_path


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
    missing = ["ffff" + "0" * 28, "eeee" + "0" * 28]
    doomed += [(missing[0], "file", file_path(missing[0])), (missing[1], "cas", cas_path("e" * 64, missing[1]))]
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


# -- symlinks and second spellings --------------------------------------------------------------


def test_a_symlinked_shard_directory_is_never_followed(store: BlobStore, tmp_path: Path) -> None:
    """Tried: the shard directory ``ab`` under the file root replaced by a symlink to a
    directory outside, holding a file at the blob's relative path. Removing the blob touches
    nothing outside (the error names the blob and the symlink, not a path); opening it and
    asking whether it exists do not follow the link either; a write below it is refused."""
    blob_id = "ab" + "7" * 30
    outside = tmp_path / "outside"
    outside.mkdir(parents=True)
    (outside / blob_id).write_bytes(b"not purgekeeper's")
    store.file_root.joinpath("ab").symlink_to(outside, target_is_directory=True)
    with pytest.raises(OSError) as info:
        store.discard_all([(blob_id, "file", file_path(blob_id))], threads=1)
    assert blob_id in str(info.value) and "symlink" in str(info.value) and str(outside) not in str(info.value)
    assert (outside / blob_id).read_bytes() == b"not purgekeeper's"
    with pytest.raises(OSError, match="symlink"):
        store.open(blob_id, "file", file_path(blob_id))
    assert not store.exists("file", file_path(blob_id))
    with pytest.raises(OSError, match="symlink"):
        store.write("file", file_path("ab" + "8" * 30), b"new bytes")
    assert sorted(p.name for p in outside.rglob("*")) == [blob_id]


def test_a_file_swapped_for_a_symlink_is_not_opened(store: BlobStore) -> None:
    """Tried: a live blob's file replaced by a symlink to another blob's file (a fenced one,
    say). Opening the live blob refuses; it never serves the other blob's bytes."""
    live, fenced = "cd" + "1" * 30, "cd" + "2" * 30
    live_path = put(store, "file", file_path(live))
    store.write("file", file_path(fenced), b"FENCED BYTES")
    live_path.unlink()
    live_path.symlink_to(store.absolute("file", file_path(fenced)))
    with pytest.raises(OSError, match="symlink"):
        store.open(live, "file", file_path(live))
    assert not store.exists("file", file_path(live))


SECOND_SPELLINGS = {
    "a dot component": lambda live: f"{live[:2]}/./{live[2:4]}/{live}",
    "a doubled slash": lambda live: f"{live[:2]}//{live[2:4]}/{live}",
    "a climb back in": lambda live: f"{live[:2]}/{live[2:4]}/../{live[2:4]}/{live}",
    "another blob's path": lambda live: file_path(live),
}


@pytest.mark.parametrize("spelling", SECOND_SPELLINGS.values(), ids=SECOND_SPELLINGS.keys())
def test_a_second_spelling_of_a_live_file_is_never_unlinked(store: BlobStore, spelling: Any) -> None:
    """A blob row (hand-written, or from a database without the 0006 trigger) whose path is
    another spelling of a live file's path: the store compares it with the blob's own
    canonical path and refuses before any unlink."""
    live, intruder = "ef" + "3" * 30, "ef" + "4" * 30
    live_path = put(store, "file", file_path(live))
    with pytest.raises(OSError) as info:
        store.discard_all([(intruder, "file", spelling(live))], threads=1)
    assert intruder in str(info.value) and "canonical" in str(info.value)
    assert live_path.read_bytes() == b"bytes"


def test_the_canonical_paths(store: BlobStore) -> None:
    blob_id, sha = "0a1b" + "c" * 28, "f" * 64
    assert file_path(blob_id) == f"0a/{blob_id}"
    assert cas_path(sha, blob_id) == f"ff/{sha}-{blob_id}"
    for kind, relative in (("file", file_path(blob_id)), ("cas", cas_path(sha, blob_id))):
        put(store, kind, relative)
        assert store.discard(blob_id, kind, relative)
    with pytest.raises(ValueError, match="canonical"):
        store.discard(blob_id, "cas", cas_path("e" * 64, "0a1b" + "d" * 28))
