"""Purged content never comes back through a writer that bypasses the library (issue 11).

Each test purges through the library, lets cleanup run where the case needs it, and then
writes raw SQL on the same database (``pk.db.write()``: a plain transaction, the triggers and
nothing else). Every refusal is the database's own; both backends.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.schema.errors import translate_db_error
from tests.helpers import rows, scalar, settle

Pk = purgekeeper.Purgekeeper


def write(pk: Pk, sql: str, **params: Any) -> int:
    """One raw statement in its own transaction; returns the rows it changed."""
    with pk.db.write() as conn:
        return int(conn.execute(text(sql), params).rowcount or 0)


def purge_events(pk: Pk, *event_ids: str) -> str:
    scope = EventScope(event_ids=event_ids)
    preview = pk.preview_purge(scope)
    return pk.confirm_purge(scope, scope_digest=preview.scope_digest, actor="op", reason="test").purge_id


@pytest.fixture
def chat(pk: Pk) -> Pk:
    """A bot, conversations c1 and c2, e1 (in c1, with a real file) and e-keep (in c2)."""
    pk.register_bot("b1", name="Bot")
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    pk.ingest_event(
        "c1",
        author="ada",
        body="divorce papers attached",
        event_id="e1",
        provider_event_id="p1",
        attachments=[NewAttachment.file(b"PDF-BYTES", name="divorce-papers-7731.pdf")],
    )
    pk.ingest_event("c2", author="bob", body="hello", event_id="e-keep")
    return pk


# -- 1. a finished run's output ------------------------------------------------------------------


def test_a_run_that_admitted_purged_content_refuses_its_output_again(chat: Pk) -> None:
    """Tried: a run admits e1 and finishes with an output; e1 is content-purged and cleaned
    (the output NULLed); then a raw UPDATE sets the output again, with and without a status."""
    chat.start_run("c1", bot_id="b1", run_id="r")
    chat.admit("e1", "r", payload={"text": "divorce papers attached"})
    chat.finish_run("r", status="succeeded", output="summary of the divorce papers")
    assert settle(chat, purge_events(chat, "e1")).status == "complete"
    assert scalar(chat, "SELECT output FROM runs WHERE id = 'r'") is None

    with pytest.raises(purgekeeper.ContentPurged):
        write(chat, "UPDATE runs SET output = '\"it is back\"' WHERE id = 'r'")
    with pytest.raises(purgekeeper.ContentPurged):
        write(chat, "UPDATE runs SET output = '\"it is back\"', status = 'succeeded' WHERE id = 'r'")
    assert scalar(chat, "SELECT output FROM runs WHERE id = 'r'") is None
    write(chat, "UPDATE runs SET output = NULL WHERE id = 'r'")  # NULLing stays allowed


def test_a_run_that_admitted_only_live_content_still_takes_an_output(chat: Pk) -> None:
    chat.start_run("c2", bot_id="b1", run_id="r2")
    chat.admit("e-keep", "r2", payload={"text": "hello"})
    chat.finish_run("r2", status="succeeded", output="first")
    assert write(chat, "UPDATE runs SET output = '\"second\"' WHERE id = 'r2'") == 1


def test_a_non_terminal_run_that_admitted_content_purged_elsewhere_finishes_without_output(chat: Pk) -> None:
    """A run in c2 admitted e1 (placed only in c1); purging c1 does not wait for runs of
    other conversations, so the run is still running when e1 stops being live. Finishing it
    with an output is refused (it would be content of e1 again); without one it finishes."""
    chat.start_run("c2", bot_id="b1", run_id="r3")
    chat.admit("e1", "r3", payload={"text": "divorce papers attached"})
    chat.purge_conversation("c1", actor="op", reason="test")
    with pytest.raises(purgekeeper.ContentPurged):
        chat.finish_run("r3", status="succeeded", output="about the papers")
    assert chat.finish_run("r3", status="succeeded").status == "succeeded"


# -- 2. a derivative's payload -------------------------------------------------------------------


def test_a_derivative_of_purged_content_refuses_a_payload_again(chat: Pk) -> None:
    """Tried: a derivative of e1 and e-keep; e1 purged and cleaned; a raw UPDATE sets the
    payload again (one source not live is enough to refuse it)."""
    chat.place_event("e-keep", "c1")
    derived = chat.add_derivative("c1", kind="summary", payload="papers", source_event_ids=["e1", "e-keep"])
    assert settle(chat, purge_events(chat, "e1")).status == "complete"
    assert scalar(chat, "SELECT payload FROM derivatives WHERE id = :d", d=derived.id) is None
    with pytest.raises(purgekeeper.ContentPurged):
        write(chat, "UPDATE derivatives SET payload = '\"back\"' WHERE id = :d", d=derived.id)
    with pytest.raises(purgekeeper.ContentPurged):
        write(chat, "UPDATE derivatives SET payload = '\"back\"', kind = 'other' WHERE id = :d", d=derived.id)
    assert scalar(chat, "SELECT payload FROM derivatives WHERE id = :d", d=derived.id) is None


def test_the_links_to_purged_content_cannot_be_deleted_to_re_set_a_payload(chat: Pk) -> None:
    """Deleting the admission or the derivative source first would let the output or payload
    be set again without a purged source in sight: those DELETEs are refused."""
    chat.start_run("c2", bot_id="b1", run_id="r")
    chat.admit("e1", "r", payload={"text": "x"})
    chat.finish_run("r", status="succeeded", output="about e1")
    derived = chat.add_derivative("c2", kind="summary", payload="about e1", source_event_ids=["e1"])
    settle(chat, purge_events(chat, "e1"))
    with pytest.raises(purgekeeper.ContentPurged):
        write(chat, "DELETE FROM admissions WHERE event_id = 'e1'")
    with pytest.raises(purgekeeper.ContentPurged):
        write(chat, "DELETE FROM derivative_sources WHERE event_id = 'e1'")
    assert scalar(chat, "SELECT count(*) FROM admissions WHERE event_id = 'e1'") == 1
    assert scalar(chat, "SELECT count(*) FROM derivative_sources WHERE derivative_id = :d", d=derived.id) == 1


def test_links_of_live_content_can_still_be_deleted(chat: Pk) -> None:
    chat.start_run("c2", bot_id="b1", run_id="r")
    chat.admit("e-keep", "r", payload={"text": "x"})
    chat.add_derivative("c2", kind="summary", payload="s", source_event_ids=["e-keep"])
    assert write(chat, "DELETE FROM admissions WHERE event_id = 'e-keep'") == 1
    assert write(chat, "DELETE FROM derivative_sources WHERE event_id = 'e-keep'") == 1


# -- 3. a placement shuffle -----------------------------------------------------------------------


def test_a_placement_shuffle_cannot_resurrect_a_conversation_purge(chat: Pk) -> None:
    """Tried, with the purge accepted and no cleanup run (a lost queue): a raw DELETE of c1's
    placements, then a raw INSERT placing e1 in the live c2. Both are refused; nothing of e1
    is readable; cleanup then removes it and the purge reports it."""
    [attachment] = chat.read_conversation("c1")[0].attachments
    purge_id = chat.purge_conversation("c1", actor="op", reason="test").purge_id
    with pytest.raises(purgekeeper.ContentPurged):
        write(chat, "DELETE FROM placements WHERE conversation_id = 'c1'")
    with pytest.raises(purgekeeper.ContentPurged):
        write(chat, "INSERT INTO placements (event_id, conversation_id) VALUES ('e1', 'c2')")
    assert scalar(chat, "SELECT count(*) FROM placements WHERE event_id = 'e1'") == 1
    assert [e.id for e in chat.read_conversation("c2")] == ["e-keep"]
    with pytest.raises(purgekeeper.ContentPurged):
        chat.open_attachment(attachment.id)

    status = settle(chat, purge_id)
    assert status.status == "complete"
    assert sum(step.progress.removed for step in status.steps) > 0
    assert scalar(chat, "SELECT body FROM events WHERE id = 'e1'") is None
    assert scalar(chat, "SELECT state FROM blobs WHERE id = :b", b=attachment.blob_id) == "deleted"
    with pytest.raises(purgekeeper.ContentPurged):
        write(chat, "INSERT INTO placements (event_id, conversation_id) VALUES ('e1', 'c2')")


def test_an_unplaced_event_is_not_live(chat: Pk) -> None:
    """docs/design.md: live means no fence AND a placement in a conversation that is not purged.
    An event whose last live placement is gone takes no content; its last placement in a live
    conversation cannot be deleted raw, and a move (place elsewhere first) still works."""
    write(chat, "INSERT INTO events (id, author, occurred_at, body) VALUES ('e-bare', 'eve', CURRENT_TIMESTAMP, 'x')")
    with pytest.raises(purgekeeper.ContentPurged):
        write(chat, "UPDATE events SET body = 'edited' WHERE id = 'e-bare'")
    with pytest.raises(purgekeeper.ContentPurged):
        chat.admit("e-bare", chat.start_run("c2", bot_id="b1").id, payload={"text": "x"})
    write(chat, "INSERT INTO placements (event_id, conversation_id) VALUES ('e-bare', 'c2')")  # a first placement
    with pytest.raises(purgekeeper.ValidationError, match="last live placement"):
        write(chat, "DELETE FROM placements WHERE event_id = 'e-keep'")
    write(chat, "INSERT INTO placements (event_id, conversation_id) VALUES ('e-keep', 'c1')")
    assert write(chat, "DELETE FROM placements WHERE event_id = 'e-keep' AND conversation_id = 'c2'") == 1
    assert [e.id for e in chat.read_conversation("c1")] == ["e1", "e-keep"]


def test_the_placement_of_a_shared_event_in_a_purged_conversation_can_go(chat: Pk) -> None:
    chat.place_event("e-keep", "c1")
    chat.purge_conversation("c1", actor="op", reason="test")
    assert write(chat, "DELETE FROM placements WHERE event_id = 'e-keep' AND conversation_id = 'c1'") == 1
    assert [e.id for e in chat.read_conversation("c2")] == ["e-keep"]


# -- 4. an event row deleted --------------------------------------------------------------------


def test_a_purged_event_row_cannot_be_deleted_so_its_provider_id_stays_fenced(chat: Pk) -> None:
    """Tried, after the conversation purge completed: a raw DELETE of e1's attachment row (its
    bytes are gone, so that is allowed) and then of the event row itself, which is refused; a
    redelivery of its provider event id then stays refused."""
    assert settle(chat, chat.purge_conversation("c1", actor="op", reason="test").purge_id).status == "complete"
    write(chat, "DELETE FROM attachments WHERE event_id = 'e1'")
    with pytest.raises(purgekeeper.ValidationError, match="never deleted"):
        write(chat, "DELETE FROM events WHERE id = 'e1'")
    with pytest.raises(purgekeeper.ValidationError, match="never deleted"):
        write(chat, "DELETE FROM events WHERE id = 'e-keep'")
    with pytest.raises(purgekeeper.ContentPurged):
        chat.ingest_event("c2", author="ada", body="new body", provider_event_id="p1")
    assert scalar(chat, "SELECT count(*) FROM events") == 2


@pytest.mark.postgres_only
@pytest.mark.parametrize("table", ["events", "placements", "attachments", "admissions", "derivative_sources"])
def test_content_tables_refuse_truncate(chat: Pk, table: str) -> None:
    with pytest.raises(purgekeeper.ValidationError):
        write(chat, f"TRUNCATE {table} CASCADE")
    assert scalar(chat, "SELECT count(*) FROM events") == 2


def test_cleanup_steps_are_never_deleted(chat: Pk) -> None:
    """A purge whose steps were deleted would read as complete with its content still there."""
    purge_id = chat.purge_conversation("c1", actor="op", reason="test").purge_id
    with pytest.raises(purgekeeper.ValidationError):
        write(chat, "DELETE FROM cleanup_steps WHERE purge_id = :p", p=purge_id)
    assert chat.status(purge_id).status == "accepted"


# -- attachments of purged content ----------------------------------------------------------------


def test_an_attachment_of_purged_content_cannot_be_unbound_while_its_bytes_remain(chat: Pk) -> None:
    """Deleting the binding would orphan the bytes: the attachments step would never find
    them and a reuse could bind them again."""
    purge_events(chat, "e1")
    with pytest.raises(purgekeeper.ContentPurged):
        write(chat, "DELETE FROM attachments WHERE event_id = 'e1'")
    assert scalar(chat, "SELECT count(*) FROM attachments WHERE event_id = 'e1'") == 1


def test_the_bytes_of_purged_content_cannot_be_reused(chat: Pk) -> None:
    """Tried, between the acceptance and the attachments step: a reuse of e1's blob by id
    (a forward) through the library, and the same binding as raw SQL; and a CAS upload of
    bytes whose only present blob is purged gets a blob of its own."""
    [attachment] = chat.read_conversation("c1")[0].attachments
    cas = chat.ingest_event("c1", author="ada", body="cas", attachments=[NewAttachment.cas(b"CAS", name="c.bin")])
    purge_events(chat, "e1", cas.id)
    with pytest.raises(purgekeeper.ContentPurged):
        chat.ingest_event(
            "c2", author="eve", body="fwd", attachments=[NewAttachment.reuse(attachment.blob_id, name="x")]
        )
    with pytest.raises(purgekeeper.ContentPurged):
        write(
            chat,
            "INSERT INTO attachments (id, event_id, blob_id, binding, name) "
            "VALUES ('at-raw', 'e-keep', :b, 'real_file', 'x')",
            b=attachment.blob_id,
        )
    again = chat.ingest_event("c2", author="eve", body="same", attachments=[NewAttachment.cas(b"CAS", name="c.bin")])
    assert again.attachments[0].blob_id != cas.attachments[0].blob_id
    with chat.open_attachment(again.attachments[0].id) as handle:
        assert handle.read() == b"CAS"
    assert rows(chat, "SELECT count(*) FROM attachments WHERE event_id = 'e-keep'") == [(0,)]


# -- 5. a writer whose snapshot predates the reservation --------------------------------------


@pytest.mark.postgres_only
@pytest.mark.parametrize(
    "reserve, create",
    [
        pytest.param(
            lambda pk: pk.purge_conversation("ghost", actor="op", reason="reserve"),
            "INSERT INTO conversations (id) VALUES ('ghost')",
            id="conversation",
        ),
        pytest.param(
            lambda pk: write(
                pk, "INSERT INTO tombstones (kind, id, purge_id) VALUES ('channel', 'ghost', 'p-restored')"
            ),
            "INSERT INTO conversations (id, kind) VALUES ('ghost', 'channel')",
            id="channel",
        ),
        pytest.param(
            lambda pk: write(pk, "INSERT INTO tombstones (kind, id, purge_id) VALUES ('bot', 'ghost', 'p-restored')"),
            "INSERT INTO bots (id, name) VALUES ('ghost', 'Again')",
            id="bot",
        ),
    ],
)
def test_a_reserved_id_is_refused_whatever_the_writer_s_snapshot(chat: Pk, reserve: Any, create: str) -> None:
    """Tried: a REPEATABLE READ transaction takes its snapshot; the id is then reserved (a
    conversation purge of an absent id, or the tombstone a restore merge writes for an absent
    channel or bot); the old transaction then creates the id and commits."""
    with chat.db.engine.connect() as conn:
        conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            conn.execute(text("SELECT count(*) FROM conversations"))  # the snapshot is taken here
            reserve(chat)
            with pytest.raises(DBAPIError) as refused:
                conn.execute(text(create))
        assert isinstance(translate_db_error(refused.value), purgekeeper.IdReserved), refused.value
    assert scalar(chat, "SELECT count(*) FROM conversations WHERE id = 'ghost'") == 0
    assert scalar(chat, "SELECT count(*) FROM bots WHERE id = 'ghost'") == 0
