"""Crypto-shredding in the cleanup steps, on both backends, with the steps run in process
(``runner.run_step``): which keys each step destroys, what a key store that cannot be written
does to a step, and what a read meets once a key is gone. Content is sealed at rest
(docs/guides/encryption.md); ``opened`` reads a stored value with the handle's key store."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from typing import Any

import pytest
from sqlalchemy import insert, text

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.commands.acceptance import PLAIN_CONTENT_DISCLOSURE
from purgekeeper.schema.errors import ContentPurged, InfrastructureError, NotFound
from purgekeeper.schema.tables import events, placements
from purgekeeper.storage import failpoints
from purgekeeper.storage.keystore import KeyStoreUnusable
from tests.helpers import body_of, opened, rows, scalar
from tests.helpers.cleanup import SECRET, run, run_when_due, seed_content, set_max_attempts, step_of
from tests.helpers.factories import purge_events

Pk = purgekeeper.Purgekeeper


@pytest.fixture(autouse=True)
def _disarmed() -> Any:
    yield
    failpoints.disarm()


def key_of(pk: Pk, table: str, row_id: str) -> str:
    key_id = scalar(pk, f"SELECT key_id FROM {table} WHERE id = :id", id=row_id)
    assert key_id is not None, f"{table} {row_id} is not sealed"
    return str(key_id)


def alive(pk: Pk, key_id: str) -> bool:
    return pk.key_store.get([key_id])[key_id] is not None


def test_the_steps_destroy_the_keys_of_what_they_purge_and_of_nothing_shared(pk: Pk) -> None:
    """Tried: a content purge of an event with an admission, a run that admitted it, a
    derivative of it, an exclusive CAS blob, an exclusive file and a blob shared with a live
    event. The bodies step destroys the keys of the event (its body and names), the
    admission, the run's output and the derivative; the attachments step destroys the two
    exclusive blobs' keys and keeps the shared blob's and the live event's."""
    seed = seed_content(pk)
    doomed, kept = key_of(pk, "events", "e-doomed"), key_of(pk, "events", "e-kept")
    dependents = [key_of(pk, "runs", "r1")] + [
        str(r[0]) for r in rows(pk, "SELECT key_id FROM admissions UNION ALL SELECT key_id FROM derivatives")
    ]
    assert len({*dependents, doomed}) == 4 and all(alive(pk, k) for k in dependents)
    blob_keys = {b: key_of(pk, "blobs", b) for b in (seed.exclusive_cas, seed.exclusive_file, seed.shared)}
    admission = scalar(pk, "SELECT id FROM admissions WHERE event_id = 'e-doomed'")
    assert json.loads(opened(pk, "payload", admission) or "") == {"text": f"{SECRET} payload"}
    purge_id = purge_events(pk, "e-doomed")
    assert run(pk, step_of(pk, purge_id, "bodies").id).status == "done"
    assert not alive(pk, doomed) and alive(pk, kept)
    assert not any(alive(pk, k) for k in dependents)
    assert all(alive(pk, k) for k in blob_keys.values())  # the bytes are the attachments step's
    assert run_when_due(pk, step_of(pk, purge_id, "attachments").id).status == "done"
    assert not alive(pk, blob_keys[seed.exclusive_cas]) and not alive(pk, blob_keys[seed.exclusive_file])
    assert alive(pk, blob_keys[seed.shared]) and alive(pk, kept)
    assert pk.open_attachment(seed.kept_attachment).read() == b"kept shared bytes"
    assert body_of(pk, "e-kept") == "kept body"


@pytest.mark.parametrize("errno_name", ["ENOSPC", "EROFS"])
def test_a_key_store_that_cannot_be_written_fails_the_step_and_nulls_nothing(pk: Pk, errno_name: str) -> None:
    """Tried: the key store's writes fail (a full, then a read-only disk) while the bodies step
    runs. The batch rolls back: the body is still there and its key still opens it, the step
    is retried, then incomplete once its attempts run out, never done; a retry once the store
    can be written completes it, the key destroyed."""
    seed_content(pk)
    doomed = key_of(pk, "events", "e-doomed")
    purge_id = purge_events(pk, "e-doomed")
    set_max_attempts(pk, purge_id, 2)
    step = step_of(pk, purge_id, "bodies")
    failpoints.arm(f"keystore.write={errno_name}")
    assert run(pk, step.id).status == "retrying"
    assert body_of(pk, "e-doomed") == f"{SECRET} body" and alive(pk, doomed)
    assert "key store" in str(step_of(pk, purge_id, "bodies").last_error)
    assert run_when_due(pk, step.id).status == "incomplete"
    assert pk.status(purge_id).status == "incomplete"
    failpoints.disarm()
    pk.retry(purge_id, actor="op", reason="the key store has room again")
    assert run_when_due(pk, step.id).status == "done"
    assert body_of(pk, "e-doomed") is None and not alive(pk, doomed)


def test_a_read_never_returns_what_a_destroyed_key_sealed(pk: Pk) -> None:
    """Tried: keys destroyed behind the database's back (as a restore of an old database
    backup finds them: its rows unfenced, their keys gone). The conversation's read leaves the
    event out, its attachment does not open, and a duplicate delivery of it is refused."""
    seed = seed_content(pk)
    pk.key_store.destroy([key_of(pk, "events", "e-doomed"), key_of(pk, "blobs", seed.shared)])
    assert pk.read_conversation("c1") == []
    with pytest.raises(ContentPurged):
        pk.open_attachment(seed.kept_attachment)
    with pytest.raises(ContentPurged):
        pk.ingest_event("c1", author="ada", body="again", provider_event_id="p-doomed")
    assert [e.body for e in pk.read_conversation("c2")] == ["kept body"]


def test_a_damaged_blob_file_is_refused_before_a_byte_is_served(pk: Pk, roots: dict[str, Any]) -> None:
    """Tried: one byte of a sealed file changed on disk. Opening the attachment fails at once
    (InfrastructureError), not in the middle of a response."""
    seed = seed_content(pk)
    path = scalar(pk, "SELECT path FROM blobs WHERE id = :id", id=seed.shared)
    file = roots["blob_root"] / path
    data = bytearray(file.read_bytes())
    data[-1] ^= 1
    file.write_bytes(bytes(data))
    with pytest.raises(InfrastructureError, match="does not open"):
        pk.open_attachment(seed.kept_attachment)


def test_a_handle_refuses_a_key_store_that_is_not_there(pk: Pk, open_pk: Any) -> None:
    """Tried: the key store's directory moved away from a database that holds sealed content
    (a wrong checkpoint directory, a store not restored). Opening refuses, and creates no
    empty store in its place."""
    seed_content(pk)
    directory = pk.key_store.directory
    pk.close()
    directory.rename(directory.with_name("moved.keys"))
    with pytest.raises(KeyStoreUnusable, match="no key store"):
        open_pk()
    assert not directory.exists()


def test_a_preview_shows_the_names_it_purges_which_the_database_holds_sealed(pk: Pk) -> None:
    """Tried: a preview of an event with attachments. The person who confirms sees the names
    in plain text; the database holds them sealed, under the event's key."""
    seed_content(pk)
    preview = pk.preview_purge(EventScope(event_ids=("e-doomed",)))
    names = sorted(a.name for a in (*preview.exclusive_attachments, *preview.shared_attachments))
    assert names == ["a.txt", "b.txt", "s.txt"]
    stored = rows(pk, "SELECT id, name FROM attachments WHERE event_id = 'e-doomed' ORDER BY position")
    assert all(name.startswith("pk1:") for _id, name in stored)
    assert [opened(pk, "name", attachment_id) for attachment_id, _name in stored] == ["a.txt", "b.txt", "s.txt"]


def test_a_conversation_purge_shreds_the_runs_and_derivatives_it_deletes(pk: Pk) -> None:
    """Tried: a conversation purge of c1, whose run admitted an event that stays live in c2.
    The run, its admission and the conversation's derivative are deleted, their keys with
    them; the shared event keeps its key and its body."""
    pk.register_bot("b", name="Bot")
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    shared = pk.ingest_event("c2", author="ada", body="shared words")
    pk.place_event(shared.id, "c1")
    pk.start_run("c1", bot_id="b", run_id="r1")
    pk.admit(shared.id, "r1", payload={"text": "shared words, admitted"})
    pk.finish_run("r1", status="succeeded", output={"text": "an answer"})
    pk.add_derivative("c1", kind="summary", payload={"text": "a summary"}, source_event_ids=[shared.id])
    owned = [
        str(r[0])
        for r in rows(
            pk,
            "SELECT key_id FROM runs UNION ALL SELECT key_id FROM admissions UNION ALL SELECT key_id FROM derivatives",
        )
    ]
    assert len(owned) == 3 and all(alive(pk, k) for k in owned)
    purge_id = pk.purge_conversation("c1", actor="op", reason="shredding test").purge_id
    assert run(pk, step_of(pk, purge_id, "bodies").id).status == "done"
    assert not any(alive(pk, k) for k in owned)
    assert alive(pk, key_of(pk, "events", shared.id))
    assert [e.body for e in pk.read_conversation("c2")] == ["shared words"]


def test_content_written_before_sealing_is_read_plain_and_disclosed_until_purged(pk: Pk) -> None:
    """Tried: an event written as before this version (a raw insert: its body in plain text,
    no key), beside a sealed one. Reads return both; every preview and acceptance discloses
    that content is left in plain text, until that event is purged; then none does."""
    pk.create_conversation("c-old")
    sealed = pk.ingest_event("c-old", author="ada", body="sealed words")
    with pk.db.write() as conn:  # as an older version wrote it: no key_id
        conn.execute(insert(events).values(id="e-old", author="bob", occurred_at=sealed.occurred_at, body="old words"))
        conn.execute(insert(placements).values(event_id="e-old", conversation_id="c-old"))
    assert sorted(e.body or "" for e in pk.read_conversation("c-old")) == ["old words", "sealed words"]
    scope = EventScope(event_ids=("e-old",))
    preview = pk.preview_purge(scope)
    assert PLAIN_CONTENT_DISCLOSURE in preview.disclosures
    accepted = pk.confirm_purge(scope, scope_digest=preview.scope_digest, actor="op", reason="old content")
    assert PLAIN_CONTENT_DISCLOSURE in accepted.disclosures
    assert run(pk, step_of(pk, accepted.purge_id, "bodies").id).status == "done"
    later = pk.preview_purge(EventScope(event_ids=(sealed.id,)))
    assert PLAIN_CONTENT_DISCLOSURE not in later.disclosures


def test_keys_taken_for_writes_that_do_not_keep_them_are_destroyed(pk: Pk) -> None:
    """Tried: a duplicate delivery (its event's key and its attachment's blob key unused), a
    CAS twin (the staged blob's key unused) and an ingest that fails in its transaction (a
    reuse of a blob that does not exist). Every key taken for them is destroyed, so nothing
    they sealed into the WAL or a staged file can be opened; the keys rows name stay."""
    pk.create_conversation("c1")
    first = pk.ingest_event(
        "c1", author="ada", body="once", provider_event_id="p-1", attachments=[NewAttachment.cas(b"same", name="a")]
    )
    again = pk.ingest_event(
        "c1", author="ada", body="twice", provider_event_id="p-1", attachments=[NewAttachment.cas(b"x", name="b")]
    )
    assert again.id == first.id and again.body == "once"
    twin = pk.ingest_event("c1", author="ada", body="twin", attachments=[NewAttachment.cas(b"same", name="c")])
    assert twin.attachments[0].blob_id == first.attachments[0].blob_id
    with pytest.raises(NotFound):
        pk.ingest_event("c1", author="ada", body="fails", attachments=[NewAttachment.reuse("nope", name="d")])
    # the duplicate's event and blob keys, the twin's blob key, the failure's event key
    assert len(_store_rows(pk, "SELECT id FROM destroyed")) == 4
    named = {str(r[0]) for r in rows(pk, "SELECT key_id FROM events UNION SELECT key_id FROM blobs")}
    assert named.isdisjoint(_store_rows(pk, "SELECT id FROM destroyed")) and all(alive(pk, k) for k in named)


def _store_rows(pk: Pk, sql: str) -> set[str]:
    """Ids the key store's own tables hold, read directly (a test's view, as an attacker with
    its files would read them)."""
    with contextlib.closing(sqlite3.connect(pk.key_store.directory / "keys.db")) as db:
        return {r[0] for r in db.execute(sql)}


def test_one_damaged_or_lost_row_leaves_the_rest_of_a_read(
    pk: Pk, open_pk: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Tried: in a conversation of three, one body damaged in place, and one event whose key
    and blob key the store lost without destroying them (deleted from its table with no
    tombstone: a key store restored from a backup older than the content). The read returns
    the third and logs the other two at ERROR by id (never content); the lost attachment is
    an InfrastructureError, not ContentPurged."""
    pk.create_conversation("c1")
    damaged = pk.ingest_event("c1", author="ada", body="to be damaged")
    lost = pk.ingest_event("c1", author="ada", body="key lost", attachments=[NewAttachment.file(b"bytes", name="f")])
    kept = pk.ingest_event("c1", author="ada", body="kept")
    with pk.db.write() as conn:
        conn.execute(text("UPDATE events SET body = 'pk1:AAAA' || substr(body, 9) WHERE id = :id"), {"id": damaged.id})
    gone = [key_of(pk, "events", lost.id), key_of(pk, "blobs", lost.attachments[0].blob_id)]
    pk.close()  # the store as a restore leaves it: these two keys never made, as far as it knows
    with contextlib.closing(sqlite3.connect(pk.key_store.directory / "keys.db")) as db, db:
        db.execute("DELETE FROM keys WHERE id IN (?, ?)", gone)
    pk = open_pk()
    with caplog.at_level("ERROR"):
        assert [e.id for e in pk.read_conversation("c1")] == [kept.id]
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert f"event:{damaged.id}:body" in messages and "1 item(s) of content cannot be opened" in messages
    assert "to be damaged" not in messages
    with pytest.raises(InfrastructureError, match="never destroyed"):
        pk.open_attachment(lost.attachments[0].id)
