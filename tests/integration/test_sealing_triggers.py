"""What the triggers let a raw writer do to a row's key (0020), on both backends.

A row's ``key_id`` is set once: at insert, at a run's finish, or by the **sealing** of content
written before 0019 (one UPDATE: ``key_id`` from NULL to a value, the content from a plain
value to a ``pk1:`` one, nothing else changed; an attachment's key is its event's). A sealing
bumps no conversation version, and needs live content that no hold covers. Each statement
here is a raw writer's (``pk.db.write()``: a plain transaction, the triggers and nothing
else), over rows inserted as a version before 0019 wrote them. Last, migration 0020's
backfill of ``attachments.key_id`` on a database written by 0019.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import insert, text

import purgekeeper
from purgekeeper import NewAttachment
from purgekeeper.schema import migrate
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import ContentPurged, Fenced, LegalHold, PurgekeeperError, ValidationError
from purgekeeper.schema.tables import admissions, attachments, derivative_sources, derivatives, events, placements, runs
from tests.helpers import raw, scalar
from tests.helpers.factories import WHO, purge_events

Pk = purgekeeper.Purgekeeper

# A sealing of each kind of row, as a raw writer writes it (at-late's key is e-new's: {key})
SEALINGS = {
    "event": "UPDATE events SET body = 'pk1:c2VhbGVk', key_id = 'k-e' WHERE id = 'e-old'",
    "event without a body": "UPDATE events SET key_id = 'k-b' WHERE id = 'e-bare'",
    "attachment name": "UPDATE attachments SET name = 'pk1:bmFtZQ', key_id = '{key}' WHERE id = 'at-late'",
    "admission": "UPDATE admissions SET payload = 'pk1:cGF5bG9hZA', key_id = 'k-a' WHERE id = 'ad-old'",
    "run output": "UPDATE runs SET output = 'pk1:b3V0cHV0', key_id = 'k-r' WHERE id = 'r-old'",
    "derivative": "UPDATE derivatives SET payload = 'pk1:ZGVyaXZlZA', key_id = 'k-d' WHERE id = 'd-old'",
}
# ... and writes that touch a key otherwise: each refused with ValidationError (invalid_change)
NOT_SEALINGS = {
    "event, its author too": "UPDATE events SET body = 'pk1:x', key_id = 'k', author = 'eve' WHERE id = 'e-old'",
    "event, not pk1:": "UPDATE events SET body = 'other words', key_id = 'k' WHERE id = 'e-old'",
    "event, key alone": "UPDATE events SET key_id = 'k' WHERE id = 'e-old'",
    "event, body NULLed": "UPDATE events SET body = NULL, key_id = 'k' WHERE id = 'e-old'",
    "event, key changed": "UPDATE events SET key_id = 'k-other' WHERE id = '{new}'",
    "event, key removed": "UPDATE events SET key_id = NULL WHERE id = '{new}'",
    "attachment, its position too": "UPDATE attachments SET name = 'pk1:x', key_id = '{key}', position = 5 "
    "WHERE id = 'at-late'",
    "attachment, not pk1:": "UPDATE attachments SET name = 'other.txt', key_id = '{key}' WHERE id = 'at-late'",
    "attachment, key alone": "UPDATE attachments SET key_id = '{key}' WHERE id = 'at-late'",
    "attachment, not its event's key": "UPDATE attachments SET name = 'pk1:x', key_id = 'k-wrong' WHERE id = 'at-late'",
    "attachment of a plain event": "UPDATE attachments SET name = 'pk1:x', key_id = 'k' WHERE id = 'at-old'",
    "admission, its time too": "UPDATE admissions SET payload = 'pk1:x', key_id = 'k', created_at = :t "
    "WHERE id = 'ad-old'",
    "admission, not pk1:": "UPDATE admissions SET payload = '\"x\"', key_id = 'k' WHERE id = 'ad-old'",
    "admission, key alone": "UPDATE admissions SET key_id = 'k' WHERE id = 'ad-old'",
    "admission, payload NULLed": "UPDATE admissions SET payload = NULL, key_id = 'k' WHERE id = 'ad-old'",
    "run, its finish time too": "UPDATE runs SET output = 'pk1:x', key_id = 'k', finished_at = :t WHERE id = 'r-old'",
    "run, not pk1:": "UPDATE runs SET output = '\"x\"', key_id = 'k' WHERE id = 'r-old'",
    "run, key alone": "UPDATE runs SET key_id = 'k' WHERE id = 'r-old'",
    "run still under way": "UPDATE runs SET output = 'pk1:x', key_id = 'k' WHERE id = 'r-running'",
    "derivative, its kind too": "UPDATE derivatives SET payload = 'pk1:x', key_id = 'k', kind = 'other' "
    "WHERE id = 'd-old'",
    "derivative, not pk1:": "UPDATE derivatives SET payload = '\"x\"', key_id = 'k' WHERE id = 'd-old'",
    "derivative, key alone": "UPDATE derivatives SET key_id = 'k' WHERE id = 'd-old'",
}


def write(pk: Pk, sql: str, **params: Any) -> int:
    """One raw statement in its own transaction; returns the rows it changed."""
    with pk.db.write() as conn:
        return int(conn.execute(text(sql), params).rowcount or 0)


def refused(pk: Pk, sql: str, expected: type[PurgekeeperError], **params: Any) -> None:
    with pytest.raises(expected):
        write(pk, sql, **params)


@pytest.fixture
def older(pk: Pk) -> dict[str, Any]:
    """c1 holds ada's sealed e-new and, as a version before 0019 wrote them: at-late (a plain
    name on e-new), bob's e-old (at-old) and e-bare (no body), the finished run r-old that
    admitted e-old (ad-old), the run r-running with an output, and d-old, derived from e-old."""
    pk.register_bot("b1", name="Bot")
    pk.create_conversation("c1")
    new = pk.ingest_event("c1", author="ada", body="new words", attachments=[NewAttachment.cas(b"bytes", name="n.txt")])
    blob, at = new.attachments[0].blob_id, new.occurred_at
    with pk.db.write() as conn:
        conn.execute(insert(events).values(id="e-old", author="bob", occurred_at=at, body="old words"))
        conn.execute(insert(events).values(id="e-bare", author="bob", occurred_at=at, body=None))
        conn.execute(insert(placements), [{"event_id": e, "conversation_id": "c1"} for e in ("e-old", "e-bare")])
        for attachment_id, event_id in (("at-late", new.id), ("at-old", "e-old"), ("at-bare", "e-bare")):
            values = {"id": attachment_id, "event_id": event_id, "blob_id": blob, "binding": "legacy_cas"}
            conn.execute(insert(attachments).values(name=f"{attachment_id}.txt", **values))
        conn.execute(insert(runs).values(id="r-old", conversation_id="c1", bot_id="b1", status="running"))
        conn.execute(insert(runs).values(id="r-running", conversation_id="c1", bot_id="b1", status="running"))
        conn.execute(insert(admissions).values(id="ad-old", event_id="e-old", run_id="r-old", payload='"old"'))
        conn.execute(text("UPDATE runs SET output = '\"old\"' WHERE id IN ('r-old', 'r-running')"))
        conn.execute(text("UPDATE runs SET status = 'succeeded' WHERE id = 'r-old'"))
        conn.execute(insert(derivatives).values(id="d-old", conversation_id="c1", kind="summary", payload='"old"'))
        conn.execute(insert(derivative_sources).values(derivative_id="d-old", event_id="e-old"))
    key = scalar(pk, "SELECT key_id FROM events WHERE id = :id", id=new.id)
    return {"pk": pk, "new": new.id, "key": key}


def version(pk: Pk) -> int:
    return int(scalar(pk, "SELECT version FROM conversations WHERE id = 'c1'"))


def test_a_raw_writer_s_sealing_of_each_kind_of_row_is_taken_and_bumps_no_version(older: dict[str, Any]) -> None:
    """Tried: each sealing in SEALINGS, in turn. Each changes its row (content and key), and
    the conversation's version stays; an ordinary edit of content after them still bumps it."""
    pk, before = older["pk"], version(older["pk"])
    for sql in SEALINGS.values():
        assert write(pk, sql.format(**older)) == 1
    assert version(pk) == before
    keys = "SELECT key_id FROM {} WHERE id = '{}'"
    found = [scalar(pk, keys.format(t, i)) for t, i in (("events", "e-old"), ("events", "e-bare"), ("runs", "r-old"))]
    assert found == ["k-e", "k-b", "k-r"] and scalar(pk, keys.format("attachments", "at-late")) == older["key"]
    assert write(pk, "UPDATE events SET body = 'edited' WHERE id = :new", new=older["new"]) == 1
    assert version(pk) == before + 1


@pytest.mark.parametrize("what", NOT_SEALINGS)
def test_every_other_write_of_a_key_is_refused(older: dict[str, Any], what: str) -> None:
    """Tried: the write NOT_SEALINGS names (a sealing that changes another column too, writes
    a value that is not pk1:, sets a key alone, NULLs the content, changes or removes a key
    once set, gives a name a key that is not its event's, seals a run still under way)."""
    pk = older["pk"]
    sql = NOT_SEALINGS[what].format(**older)
    times = {"t": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)} if ":t" in sql else {}
    raw.refused(pk.db, sql, ValidationError, **times)
    assert scalar(pk, "SELECT count(*) FROM events WHERE key_id = 'k'") == 0


@pytest.mark.parametrize(
    "held_by", [{"authors": ["ada", "bob"]}, {"conversation_ids": ["c1"]}], ids=["author", "conversation"]
)
def test_a_sealing_of_held_content_is_refused_while_the_hold_stands(
    older: dict[str, Any], held_by: dict[str, Any]
) -> None:
    """Tried: every sealing in SEALINGS under a hold on the authors (the runs and the
    derivative come from bob's e-old), or on the conversation. Each is refused with
    LegalHold: a raw writer cannot replace held content through a sealing. After the release
    each is taken."""
    pk = older["pk"]
    pk.place_hold("h1", **held_by, **WHO)
    for sql in SEALINGS.values():
        refused(pk, sql.format(**older), LegalHold)
    pk.release_hold("h1", **WHO)
    for sql in SEALINGS.values():
        assert write(pk, sql.format(**older)) == 1


def test_a_sealing_of_fenced_content_is_refused(older: dict[str, Any]) -> None:
    """Tried: a purge of e-old and e-bare accepted (their cleanup not yet run), then the
    sealings of their rows: each is refused with ContentPurged (the event, the admission's
    and the derivative's event, the run's admitted event). Then c1's purge accepted: the
    sealing of the name on e-new is refused too. No row has a key but e-new."""
    pk = older["pk"]
    write(pk, "UPDATE runs SET status = 'cancelled' WHERE id = 'r-running'")  # a purge waits for runs under way
    purge_events(pk, "e-old", "e-bare")
    for what, sql in SEALINGS.items():
        if what != "attachment name":
            refused(pk, sql, ContentPurged)
    pk.purge_conversation("c1", **WHO)
    refused(pk, SEALINGS["attachment name"].format(**older), Fenced)
    assert scalar(pk, "SELECT count(*) FROM events WHERE key_id IS NOT NULL") == 1  # e-new's own
    assert scalar(pk, "SELECT count(*) FROM attachments WHERE key_id IS NOT NULL") == 1  # n.txt, ingested


def test_a_deleted_channel_s_history_may_be_sealed_but_not_edited(pk: Pk) -> None:
    """Tried: a plain event in a channel, the channel deleted. Its sealing is taken (what it
    reads stays the same); an edit of its body is refused as before (ConversationDeleted)."""
    pk.create_conversation("ch1", kind="channel")
    sealed = pk.ingest_event("ch1", author="ada", body="sealed")
    with pk.db.write() as conn:
        conn.execute(insert(events).values(id="e-ch", author="ada", occurred_at=sealed.occurred_at, body="old"))
        conn.execute(insert(placements).values(event_id="e-ch", conversation_id="ch1"))
    pk.delete_channel("ch1", **WHO)
    refused(pk, "UPDATE events SET body = 'edited' WHERE id = 'e-ch'", purgekeeper.ConversationDeleted)
    assert write(pk, "UPDATE events SET body = 'pk1:c2VhbGVk', key_id = 'k-ch' WHERE id = 'e-ch'") == 1


def test_a_run_under_way_before_0019_is_sealed_by_its_finish(older: dict[str, Any]) -> None:
    """Tried: the library's finish of r-running (plain output, no key): its output and key are
    written together (a finish, not a sealing) and the conversation's version moves."""
    pk = older["pk"]
    before = version(pk)
    pk.finish_run("r-running", status="succeeded", output={"text": "done"})
    assert scalar(pk, "SELECT output FROM runs WHERE id = 'r-running'").startswith("pk1:")
    assert scalar(pk, "SELECT key_id FROM runs WHERE id = 'r-running'") is not None and version(pk) > before


def test_0020_gives_the_attachments_of_sealed_events_their_event_s_key(empty_database_url: str) -> None:
    """Tried: a database at 0019 with an event sealed by its key (a sealed name, a purged
    name NULL, and a plain name a raw writer added) and a plain event (a plain name), then
    the upgrade. The sealed and the NULLed names take their event's key; the plain ones keep
    none, and the partial index of plain names finds exactly them."""
    from alembic import command

    db = Database(empty_database_url)
    config = migrate.alembic_config()
    with db.write() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0019")
    sha = "c" * 64
    with db.write() as conn:
        for sql in (
            "INSERT INTO conversations (id) VALUES ('c1')",
            "INSERT INTO events (id, author, occurred_at, body, key_id) "
            "VALUES ('e1', 'ada', CURRENT_TIMESTAMP, 'pk1:Ym9keQ', 'k1')",
            "INSERT INTO events (id, author, occurred_at, body) VALUES ('e2', 'ada', CURRENT_TIMESTAMP, 'plain')",
            "INSERT INTO placements (event_id, conversation_id) VALUES ('e1', 'c1'), ('e2', 'c1')",
            f"INSERT INTO blobs (id, kind, sha256, size, path, key_id) VALUES ('bl01', 'cas', '{sha}', 1, "
            f"'cc/cc/{sha}-bl01', 'kb')",
            "INSERT INTO attachments (id, event_id, blob_id, binding, name) VALUES "
            "('a-sealed', 'e1', 'bl01', 'legacy_cas', 'pk1:bmFtZQ'), ('a-nulled', 'e1', 'bl01', 'legacy_cas', NULL), "
            "('a-raw', 'e1', 'bl01', 'legacy_cas', 'raw.txt'), ('a-plain', 'e2', 'bl01', 'legacy_cas', 'plain.txt')",
        ):
            conn.execute(text(sql))
    assert migrate.upgrade(db).changed
    try:
        with db.read() as conn:
            found = dict(conn.execute(text("SELECT id, key_id FROM attachments")).all())
            plain = sorted(conn.scalars(text("SELECT id FROM attachments WHERE key_id IS NULL AND name IS NOT NULL")))
        assert found == {"a-sealed": "k1", "a-nulled": "k1", "a-raw": None, "a-plain": None}
        assert plain == ["a-plain", "a-raw"]
    finally:
        db.dispose()


def test_an_ingest_names_its_attachments_key(pk: Pk) -> None:
    """Tried: an event ingested with two attachments. Each attachment row names the event's
    key (``attachments.key_id``): nothing of it is in the partial index of plain names."""
    pk.create_conversation("c1")
    event = pk.ingest_event(
        "c1",
        author="ada",
        body="b",
        attachments=[NewAttachment.cas(b"x", name="x"), NewAttachment.file(b"y", name="y")],
    )
    key = scalar(pk, "SELECT key_id FROM events WHERE id = :id", id=event.id)
    assert (
        key
        and scalar(pk, "SELECT count(*) FROM attachments WHERE event_id = :e AND key_id = :k", e=event.id, k=key) == 2
    )
