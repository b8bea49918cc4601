"""The blob layout of migration 0021: new blobs in one level of 256 shard directories
(``ab/<blob id>``, ``ab/<sha256>-<blob id>``), so that a batch of unlinks shares its directory
fsyncs; rows of the two-level layout before it (``ab/cd/``) keep their paths and stay
readable and deletable, side by side with the new ones, in the store and in the database."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from purgekeeper import NewAttachment
from purgekeeper.commands import attachments, touched
from purgekeeper.schema import cleanup_queries
from purgekeeper.schema.errors import ValidationError
from purgekeeper.storage.blobstore import BlobStore, canonical_paths, cas_path, check_path, file_path
from tests.helpers import blob_bytes
from tests.helpers.cleanup import Pk, blob, blob_file, clean
from tests.helpers.databases import RawSQL
from tests.helpers.factories import purge_events

SHA = "ab" * 32


def two_levels(blob_id: str, kind: str = "file", sha256: str = SHA) -> str:
    return canonical_paths(blob_id, kind, sha256)[1]


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    blobs = BlobStore(blob_root=tmp_path / "blobs", file_root=tmp_path / "files")
    blobs.ensure_roots()
    return blobs


def test_new_blobs_take_one_level_of_shards_and_earlier_rows_keep_two() -> None:
    blob_id = "0a1b" + "c" * 28
    assert (file_path(blob_id), cas_path(SHA, blob_id)) == (f"0a/{blob_id}", f"ab/{SHA}-{blob_id}")
    assert canonical_paths(blob_id, "file", SHA) == (f"0a/{blob_id}", f"0a/1b/{blob_id}")
    assert canonical_paths(blob_id, "cas", SHA) == (f"ab/{SHA}-{blob_id}", f"ab/ab/{SHA}-{blob_id}")


Spelling = tuple[str, Callable[[str], str]]  # a blob kind, and a path for a blob id
NOT_CANONICAL: dict[str, Spelling] = {
    "three levels": ("file", lambda b: f"{b[:2]}/{b[2:4]}/{b[4:6]}/{b}"),
    "the wrong shard": ("file", lambda b: f"{b[2:4]}/{b}"),
    "another blob's one-level path": ("file", lambda b: file_path("ff" + b[2:])),
    "a cas path of the wrong shard": ("cas", lambda b: f"cd/{SHA}-{b}"),
    "a cas path of the file layout": ("cas", lambda b: file_path(b)),
    "a file path of the cas layout": ("file", lambda b: cas_path(SHA, b)),
}


def test_both_layouts_are_the_blob_s_own_paths() -> None:
    blob_id = "ab" + "1" * 30
    for kind in ("file", "cas"):
        for relative in canonical_paths(blob_id, kind, SHA):
            check_path(blob_id, kind, relative)
    check_path(blob_id, "file", f"ab/{blob_id}/report.pdf")  # before 0005


@pytest.mark.parametrize("case", NOT_CANONICAL.values(), ids=NOT_CANONICAL.keys())
def test_no_other_path_is_the_blob_s(case: Spelling) -> None:
    kind, spell = case
    blob_id = "ab" + "1" * 30
    with pytest.raises(ValueError, match="canonical"):
        check_path(blob_id, kind, spell(blob_id))


def test_a_batch_fsyncs_each_shard_directory_once(tmp_path: Path) -> None:
    """Tried: 20 files whose ids share their first two characters, in a batch with 20 more of
    the two-level layout. The new ones share one directory, so one fsync; the earlier ones
    have a directory each (20)."""
    synced: list[int] = []
    store = BlobStore(tmp_path / "blobs", tmp_path / "files", sync=synced.append)
    store.ensure_roots()
    new = [f"ab{n:02x}" + "0" * 28 for n in range(20)]
    old = [f"cd{n:02x}" + "0" * 28 for n in range(20)]
    doomed = [(b, "file", file_path(b)) for b in new] + [(b, "file", two_levels(b)) for b in old]
    for _blob_id, kind, relative in doomed:
        store.write(kind, relative, b"bytes")
    store.discard_all(doomed, threads=4)
    assert len(synced) == 1 + 20
    assert not any(store.exists(kind, relative) for _b, kind, relative in doomed)


def test_files_of_both_layouts_are_read_and_unlinked_side_by_side(store: BlobStore) -> None:
    doomed = []
    for n, kind in enumerate(["file", "cas"] * 2):
        blob_id = f"ab{n}" + "2" * 29
        relative = canonical_paths(blob_id, kind, SHA)[n // 2]
        store.write(kind, relative, f"bytes {n}".encode())
        doomed.append((blob_id, kind, relative))
    for n, (blob_id, kind, relative) in enumerate(doomed):
        with store.open(blob_id, kind, relative) as f:
            assert f.read() == f"bytes {n}".encode()
    store.discard_all(doomed, threads=2)
    assert not any(store.exists(kind, relative) for _b, kind, relative in doomed)
    assert (store.file_root / "ab").is_dir()  # shard directories stay, empty or not


# -- the database ---------------------------------------------------------------------------------

INSERT = "INSERT INTO blobs (id, kind, sha256, size, path) VALUES (:id, :kind, :sha, 1, :path)"


def test_the_blobs_trigger_takes_a_new_row_of_either_layout(raw: RawSQL) -> None:
    """Either layout: a process of the version before 0021 still writes two levels while a
    newer one has migrated the database."""
    for n, kind in enumerate(["file", "cas", "file", "cas"]):
        blob_id = f"bl{n}" + "3" * 29
        raw.run(INSERT, id=blob_id, kind=kind, sha=SHA, path=canonical_paths(blob_id, kind, SHA)[n // 2])
    assert raw.scalar("SELECT count(*) FROM blobs WHERE id LIKE 'bl%'") == 4


@pytest.mark.parametrize("case", NOT_CANONICAL.values(), ids=NOT_CANONICAL.keys())
def test_the_blobs_trigger_refuses_any_other_path(raw: RawSQL, case: Spelling) -> None:
    kind, spell = case
    blob_id = "ab" + "4" * 30
    raw.refused(INSERT, ValidationError, id=blob_id, kind=kind, sha=SHA, path=spell(blob_id))


def test_a_deleted_blob_keeps_the_path_of_its_own_layout(raw: RawSQL) -> None:
    """mark_deleted gives a deleted row its canonical path: a row of either layout keeps its
    own (the trigger takes no other change of path), so nothing moves."""
    written = {}
    for n, kind in enumerate(["file", "cas", "file", "cas"]):
        blob_id = f"de{n}" + "5" * 29
        written[blob_id] = canonical_paths(blob_id, kind, SHA)[n // 2]
        raw.run(INSERT, id=blob_id, kind=kind, sha=SHA, path=written[blob_id])
    ids = sorted(written)
    assert cleanup_queries.mark_deleting(raw.conn, ids) == 4
    assert cleanup_queries.mark_deleted(raw.conn, ids) == 4
    found = {blob_id: raw.scalar("SELECT path FROM blobs WHERE id = :id", id=blob_id) for blob_id in ids}
    assert found == written


def test_a_deleted_blob_moves_only_to_a_canonical_path(raw: RawSQL) -> None:
    blob_id = "mv" + "6" * 30
    raw.run(INSERT, id=blob_id, kind="file", sha=SHA, path=two_levels(blob_id))
    raw.run("UPDATE blobs SET state = 'deleting' WHERE id = :id", id=blob_id)
    raw.refused(
        "UPDATE blobs SET state = 'deleted', path = :p WHERE id = :id", ValidationError, id=blob_id, p=f"mv/{blob_id}/x"
    )
    raw.run("UPDATE blobs SET state = 'deleted', path = :p WHERE id = :id", id=blob_id, p=file_path(blob_id))


# -- the library, end to end ----------------------------------------------------------------------


def test_a_purge_removes_blobs_of_both_layouts(pk: Pk, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tried: a real file and a CAS blob uploaded as the version before 0021 wrote them (two
    levels), and two as this one does, in one conversation. All four are read back, then
    the purge's steps unlink every file and each row keeps its own path."""
    pk.create_conversation("c1")
    earlier = {"file_path": lambda b: two_levels(b), "cas_path": lambda sha, b: two_levels(b, "cas", sha)}
    events = []
    for layout in ("earlier", "new"):
        with monkeypatch.context() as patched:
            if layout == "earlier":
                for name, spell in earlier.items():
                    patched.setattr(attachments, name, spell)
            uploads = [
                NewAttachment.file(f"file {layout}".encode(), name="f"),
                NewAttachment.cas(layout.encode(), name="c"),
            ]
            events.append(pk.ingest_event("c1", author="ada", body=layout, attachments=uploads))
    blobs = {a.blob_id: blob(pk, a.blob_id) for event in events for a in event.attachments}
    levels = sorted(len(row.path.split("/")) for row in blobs.values())
    assert levels == [2, 2, 3, 3]
    for event in events:
        for a in event.attachments:
            expected = hashlib.sha256(blob_bytes(pk, a.blob_id)).hexdigest()
            assert blobs[a.blob_id].sha256 == expected
    files = {blob_id: blob_file(pk, blob_id) for blob_id in blobs}
    assert all(path.is_file() for path in files.values())
    clean(pk, purge_events(pk, *(event.id for event in events)))
    assert not any(path.exists() for path in files.values())
    after = {blob_id: blob(pk, blob_id) for blob_id in blobs}
    assert {(row.state, row.path) for row in after.values()} == {("deleted", row.path) for row in blobs.values()}


def test_a_failure_is_placed_at_the_path_of_either_layout(tmp_path: Path) -> None:
    """The console's place of a failed unlink: a row of either layout is shown whole (its
    path holds no attachment name)."""
    places = touched.FailurePlaces(tmp_path / "blobs", tmp_path / "files")
    blob_id = "057b" + "8" * 28
    for kind in ("file", "cas"):
        for relative in canonical_paths(blob_id, kind, SHA):
            place = places.place(SimpleNamespace(id=blob_id, kind=kind, sha256=SHA, path=relative))
            assert (place.shown, place.complete) == (f"{kind.replace('cas', 'blob')}s/{relative}", True)
