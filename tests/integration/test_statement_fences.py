"""The hold checks of a statement's rows, however many rows it writes (issue 27, item 2).

On PostgreSQL the hold checks of an event's body and of a deleted placement run once per
statement over its transition tables (migration 0014), not per row. These hold the rules to
what the row triggers did, for a statement of several rows: one held row among many refuses
the whole statement, a held placement is refused as held even when it is also the event's
last live placement, and the rows no hold covers are still written. Raw SQL through
``pk.db.write()``; both backends.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

import purgekeeper
from tests.helpers import body_of, scalar

Pk = purgekeeper.Purgekeeper


def write(pk: Pk, sql: str, **params: Any) -> int:
    with pk.db.write() as conn:
        return int(conn.execute(text(sql), params).rowcount or 0)


@pytest.fixture
def chat(pk: Pk) -> Pk:
    """c1 holds ada's a1, a2 and bob's b1; every event is placed in c2 too. c1 is held."""
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    for event, author in (("a1", "ada"), ("a2", "ada"), ("b1", "bob")):
        pk.ingest_event("c2", author=author, body=f"{event}'s words", event_id=event)
        with pk.db.write() as conn:
            conn.execute(text("INSERT INTO placements (event_id, conversation_id) VALUES (:e, 'c1')"), {"e": event})
    return pk


def hold(pk: Pk, **covers: Any) -> None:
    pk.place_hold("case-1", actor="counsel@example.com", reason="litigation hold", **covers)


def test_one_held_body_among_many_refuses_the_statement(chat: Pk) -> None:
    hold(chat, authors=["bob"])
    with pytest.raises(purgekeeper.LegalHold):
        write(chat, "UPDATE events SET body = NULL WHERE id IN ('a1', 'a2', 'b1')")
    assert scalar(chat, "SELECT count(*) FROM events WHERE body IS NOT NULL") == 3
    assert write(chat, "UPDATE events SET body = NULL WHERE id IN ('a1', 'a2')") == 2


def test_one_held_placement_among_many_refuses_the_statement(chat: Pk) -> None:
    hold(chat, conversation_ids=["c1"])
    with pytest.raises(purgekeeper.LegalHold):
        write(chat, "DELETE FROM placements WHERE event_id IN ('a1', 'a2', 'b1')")
    assert scalar(chat, "SELECT count(*) FROM placements") == 6
    assert write(chat, "DELETE FROM placements WHERE conversation_id = 'c2'") == 3


def test_a_held_last_placement_is_refused_as_held(chat: Pk) -> None:
    """The hold is asked before the last-placement rule, as when it was a row trigger that
    fired before the delete."""
    write(chat, "DELETE FROM placements WHERE conversation_id = 'c2'")
    hold(chat, conversation_ids=["c1"])
    with pytest.raises(purgekeeper.LegalHold):
        write(chat, "DELETE FROM placements WHERE event_id = 'a1'")
    assert scalar(chat, "SELECT count(*) FROM placements WHERE event_id = 'a1'") == 1


def test_without_a_hold_the_last_placement_rule_still_stands(chat: Pk) -> None:
    write(chat, "DELETE FROM placements WHERE conversation_id = 'c2'")
    with pytest.raises(purgekeeper.ValidationError, match="keeps its last live placement"):
        write(chat, "DELETE FROM placements WHERE event_id IN ('a1', 'a2')")
    assert scalar(chat, "SELECT count(*) FROM placements") == 3


def test_a_purged_event_gets_no_body_back_in_a_statement_of_many(chat: Pk) -> None:
    """The purge's own shape (a body set to NULL) skips the update check; any other write of a
    fenced event's content is still refused, whatever else the statement writes."""
    scope = purgekeeper.EventScope(event_ids=("a1",))
    preview = chat.preview_purge(scope)
    chat.confirm_purge(scope, scope_digest=preview.scope_digest, actor="op", reason="test")
    assert write(chat, "UPDATE events SET body = NULL WHERE id IN ('a1', 'a2')") == 2
    with pytest.raises(purgekeeper.ContentPurged):
        write(chat, "UPDATE events SET body = 'back' WHERE id IN ('a1', 'b1')")
    assert body_of(chat, "b1") == "b1's words"
