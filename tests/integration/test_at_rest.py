"""Content at rest (issue 36): sealed wherever it is written, and unreadable once its key is
destroyed.

Each sealed field (an event's body, an attachment's name and bytes, an admission's payload)
carries a marker of its own (``tests.helpers.at_rest``), searched for as bytes in every file
the content could reach: a PostgreSQL cluster's data directory (the relations under
``base/``, every WAL segment, the server's log), a SQLite database and its ``-wal``, the blob
and file roots, the checkpoint directory, and a dump of the database. The event's author is
never sealed: it is the control, found where the rows are, so a search that finds no marker
could have found one there.

A purge destroys the keys of what it removes. A backup taken before the purge still holds
the purged rows, as ciphertext, and their keys are gone from the key store, which lives in the
checkpoint directory, outside every database backup: restored into a new database, the rows
are back and cannot be opened. The key store's own files hold no destroyed key, and after a
rotation not even its wrapped form opens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

import purgekeeper
from purgekeeper.storage import keystore_files
from purgekeeper.storage.sealing import SealedInvalid
from tests.helpers import rows, settle
from tests.helpers.at_rest import (
    Markers,
    Seeded,
    dump,
    file_store,
    files_under,
    key_ids,
    marker,
    new_database_url,
    occurrences,
    open_on,
    restore_into,
    seed_marked,
    wrapped_forms,
)
from tests.helpers.factories import WHO, purge_events
from tests.helpers.processes import Cluster, throwaway_cluster

Pk = purgekeeper.Purgekeeper
Roots = dict[str, Path]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A cluster of the test's own, so its files can be read; its WAL is written as by default
    (full page images, uncompressed), so a plain value in it would be found."""
    conf = "fsync = off\nshared_buffers = 16MB\nmax_connections = 30\nfull_page_writes = on\nwal_compression = off\n"
    with throwaway_cluster("purgekeeper-at-rest-", conf) as made:
        yield made


@pytest.fixture
def new_database(backend: str, tmp_path: Path) -> Iterator[str]:
    """An empty database of the test's backend, for an old backup to be restored into."""
    yield from new_database_url(backend, tmp_path)


# -- the scenario of the on-disk searches ------------------------------------------------------------


def assert_reads_plaintext(pk: Pk, seeded: Seeded, markers: Markers) -> None:
    [event] = pk.read_conversation(seeded.conversation_id)
    assert (event.id, event.author, event.body) == (seeded.event_id, markers.author, markers.body)
    assert sorted(a.name for a in event.attachments) == sorted([markers.cas_name, markers.file_name])
    for attachment_id, data in ((seeded.cas_attachment, seeded.cas_bytes), (seeded.file_attachment, seeded.file_bytes)):
        with pk.open_attachment(attachment_id) as handle:
            assert handle.read() == data


def purge_to_done(pk: Pk, conversation_id: str) -> None:
    """The conversation's purge, previewed and confirmed, and its cleanup run to done."""
    preview = pk.preview_conversation_purge(conversation_id)
    acceptance = pk.purge_conversation(conversation_id, **WHO, expected_version=preview.version)
    assert acceptance.outcome == "accepted"
    status = settle(pk, acceptance.purge_id)
    assert {step.status for step in status.steps} == {"done"}, status.steps


def assert_control_found(markers: Markers, files: list[Path], *places: Path) -> None:
    """The author (never sealed) is in at least one file at or below each place: the search
    reads where the rows are."""
    hits = occurrences(markers.control(), files).get("author", {})
    missing = [place for place in places if not any(path.startswith(str(place)) for path in hits)]
    assert missing == [], f"the control is not found under {missing}: {sorted(hits)}"


def checkpointed(url: str) -> tuple[Path, Path]:
    """A CHECKPOINT (every dirty page written to its relation's file), then the data directory
    and the current WAL segment."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        data = Path(str(conn.execute("SHOW data_directory").fetchone()[0]))  # type: ignore[index]
        segment = str(conn.execute("SELECT pg_walfile_name(pg_current_wal_lsn())").fetchone()[0])  # type: ignore[index]
    return data, data / "pg_wal" / segment


def searched_postgresql(cluster: Cluster, url: str, tmp_path: Path, label: str) -> tuple[list[Path], Path, Path]:
    """Every file of the cluster (its data directory and log) and of the test's directory (the
    roots, the checkpoint directory, a new uncompressed dump): the files, the data directory and
    the dump."""
    data, segment = checkpointed(url)
    assert data.is_relative_to(cluster.directory) and segment.is_file(), (data, segment)
    dumped = dump(url, tmp_path / "dumps" / f"{label}.dump")
    files = files_under(cluster.directory, tmp_path)
    assert {segment, dumped} <= set(files)
    return files, data, dumped


# -- 1, 2: the markers are never on disk -----------------------------------------------------------


def test_no_marker_is_ever_on_disk_in_postgresql(cluster: Cluster, roots: Roots, tmp_path: Path) -> None:
    """On a cluster of its own: a marked event (body, a CAS and a real-file attachment's names
    and ~200 KiB bytes, an admission's payload) is ingested and read back in plain text; after
    a CHECKPOINT no marker is in any file of the cluster (base/, every pg_wal segment, the
    log), the roots, the checkpoint directory or a pg_dump, while the author is in base/,
    pg_wal/ and the dump. The conversation is purged, its cleanup done: still none."""
    with psycopg.connect(cluster.url(), autocommit=True) as admin:
        admin.execute("CREATE DATABASE at_rest")
    url = cluster.url("at_rest")
    markers = Markers.new()
    with open_on(url, roots) as pk:
        seeded = seed_marked(pk, markers)
        assert_reads_plaintext(pk, seeded, markers)
        files, data, dumped = searched_postgresql(cluster, url, tmp_path, "before")
        assert_control_found(markers, files, data / "base", data / "pg_wal", dumped)
        assert occurrences(markers.sealed(), files) == {}

        purge_to_done(pk, seeded.conversation_id)
        files, _data, _dumped = searched_postgresql(cluster, url, tmp_path, "after")
        assert occurrences(markers.sealed(), files) == {}


@pytest.mark.sqlite_only
def test_no_marker_is_ever_on_disk_in_sqlite(pk: Pk, database_url: str, tmp_path: Path) -> None:
    """The same on SQLite: no marker in the database file, its -wal and -shm, the roots or the
    checkpoint directory (every file of the test's directory), while the author is in the
    database or its WAL; again after the conversation's purge and cleanup."""
    database = Path(str(make_url(database_url).database))
    markers = Markers.new()
    seeded = seed_marked(pk, markers)
    assert_reads_plaintext(pk, seeded, markers)
    files = files_under(tmp_path)
    assert database in files and Path(f"{database}-wal") in files
    assert_control_found(markers, files, database)
    assert occurrences(markers.sealed(), files) == {}

    purge_to_done(pk, seeded.conversation_id)
    assert occurrences(markers.sealed(), files_under(tmp_path)) == {}


# -- 3: an old backup after the purge --------------------------------------------------------------


def test_an_old_backup_restored_after_a_purge_cannot_open_the_purged_events(
    open_pk: Callable[[], Pk], database_url: str, new_database: str, roots: Roots, tmp_path: Path
) -> None:
    """Three marked events; a dump (pg_dump, VACUUM INTO), which holds no marker; two of the
    events purged and cleaned up. The dump restored into a new database and opened with the
    same checkpoint directory (the live key store): the purged rows are back, as ciphertext
    whose keys the store no longer has (read raw: the gate refuses every read until the
    ledger merge); after the merge, the conversation reads the kept event's plain body, and
    the purged ones are absent. (A read that meets a destroyed key without any fence: the
    next test.)"""
    pk = open_pk()
    bodies = {"e-purged-1": marker(), "e-purged-2": marker(), "e-kept": marker()}
    pk.create_conversation("c-old")
    for event_id, body in bodies.items():
        pk.ingest_event("c-old", author="ada", body=body, event_id=event_id)
    keys = key_ids(pk, "events", bodies)
    assert len(set(keys.values())) == 3, keys
    purged, kept = ["e-purged-1", "e-purged-2"], keys["e-kept"]
    backup = dump(database_url, tmp_path / "old" / "backup")
    assert occurrences({e: b.encode() for e, b in bodies.items()}, [backup]) == {}

    assert {step.status for step in settle(pk, purge_events(pk, *purged)).steps} == {"done"}
    assert pk.key_store.destroyed(keys.values()) == {keys[e] for e in purged}
    store = file_store(pk).directory
    pk.close()

    restore_into(backup, new_database)
    with open_on(new_database, roots) as restored:
        assert file_store(restored).directory == store
        back = {row.id: row for row in rows(restored, "SELECT id, key_id, body FROM events")}
        for event_id in purged:
            assert back[event_id].key_id == keys[event_id] and back[event_id].body is not None
            assert bodies[event_id] not in back[event_id].body  # ciphertext ...
            assert restored.key_store.get([keys[event_id]]) == {keys[event_id]: None}  # ... whose key is gone
        assert restored.key_store.get([kept])[kept] is not None
        with pytest.raises(purgekeeper.MessagingUnavailable):  # the gate: closed until the merge
            restored.read_conversation("c-old")

        assert restored.merge_ledger(roots["checkpoint_dir"]).gate.open
        assert [(e.id, e.body) for e in restored.read_conversation("c-old")] == [("e-kept", bodies["e-kept"])]


def test_an_event_whose_key_was_destroyed_reads_as_purged(pk: Pk) -> None:
    """No purge and no fence: only the key of one of two events is destroyed in the key store
    (as an old backup's rows find it). The conversation reads the other event alone."""
    bodies = {"e-lost": marker(), "e-kept": marker()}
    pk.create_conversation("c1")
    for event_id, body in bodies.items():
        pk.ingest_event("c1", author="ada", body=body, event_id=event_id)
    lost = key_ids(pk, "events", ["e-lost"])["e-lost"]
    assert pk.key_store.destroy([lost]) == 1
    assert [(e.id, e.body) for e in pk.read_conversation("c1")] == [("e-kept", bodies["e-kept"])]


# -- 4: the key store's files after a shred and a rotation -----------------------------------------


@pytest.mark.sqlite_only
def test_a_purge_shreds_the_keys_and_a_rotation_retires_their_wrapped_form(
    pk: Pk, roots: Roots, tmp_path: Path
) -> None:
    """The keys of a marked event and of its two blobs are read (the test-only use of get),
    and their wrapped rows in the store's keys.db. After the conversation's purge and cleanup
    the store has destroyed all three, and no file of the test's directory (the store's
    among them) holds a raw key. After a rotation the old KEK file is gone, no file holds
    the wrapped forms either, and no KEK left opens them."""
    seeded = seed_marked(pk, Markers.new())
    store = file_store(pk).directory
    assert store == roots["checkpoint_dir"] / f"{pk.copy.database_id}.keys"
    [event] = pk.read_conversation(seeded.conversation_id)
    ids = [
        key_ids(pk, "events", [event.id])[event.id],
        *key_ids(pk, "blobs", [a.blob_id for a in event.attachments]).values(),
    ]
    assert len(set(ids)) == 3, ids
    raw = {key_id: key for key_id, key in pk.key_store.get(ids).items() if key is not None}
    assert sorted(map(len, raw.values())) == [32, 32, 32]
    wrapped = wrapped_forms(store, raw)
    assert set(wrapped) == set(raw)

    purge_to_done(pk, seeded.conversation_id)
    assert pk.key_store.destroyed(ids) == set(ids)
    assert pk.key_store.get(ids) == dict.fromkeys(ids)
    assert {"keys.db", "lock"} <= {path.name for path in files_under(store)}
    assert occurrences(raw, files_under(tmp_path)) == {}

    old_versions = {version for version, _form in wrapped.values()}
    new_version = file_store(pk).rotate()
    assert not any(keystore_files.kek_path(store, version).exists() for version in old_versions)
    assert keystore_files.kek_path(store, new_version).is_file()
    forms = {f"wrapped {key_id}": form for key_id, (_version, form) in wrapped.items()}
    assert occurrences({**raw, **forms}, files_under(tmp_path)) == {}
    for kek in store.glob("kek.*"):
        for key_id, (_version, form) in wrapped.items():
            for version in old_versions | {new_version}:
                with pytest.raises(SealedInvalid):
                    keystore_files.unwrap(kek.read_bytes(), version, key_id, form)
