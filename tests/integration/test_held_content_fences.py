"""A legal hold preserves what it covers against every writer (issue 23, item 9).

While a hold is in force, a write that removes or overwrites held content that is still live
is refused with ``LegalHold`` by the triggers: an event's body, its attachments' names and
rows, the payloads of its admissions, the outputs of the runs and the payloads of the
derivatives that come from it, and the rows that carry them. Held content is what an author
held wrote, or what is placed in a held conversation (a run, a derivative of that
conversation too). The cleanup of a purge accepted before the hold still removes what that
purge fenced: it is not live. Each test places the hold through the library and writes raw
SQL (``pk.db.write()``: a plain transaction, the triggers and nothing else); both backends.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from tests.helpers import body_of, opened, rows, scalar, settle

Pk = purgekeeper.Purgekeeper


def write(pk: Pk, sql: str, **params: Any) -> int:
    """One raw statement in its own transaction; returns the rows it changed."""
    with pk.db.write() as conn:
        return int(conn.execute(text(sql), params).rowcount or 0)


def hold(pk: Pk, hold_id: str = "case-1", **covers: Any) -> None:
    pk.place_hold(hold_id, actor="counsel@example.com", reason="litigation hold", **covers)


def purge_events(pk: Pk, *event_ids: str) -> str:
    scope = EventScope(event_ids=event_ids)
    preview = pk.preview_purge(scope)
    return pk.confirm_purge(scope, scope_digest=preview.scope_digest, actor="op", reason="test").purge_id


@pytest.fixture
def chat(pk: Pk) -> dict[str, Any]:
    """c1 (ada's e1 with a file, a run r1 that admitted it, a derivative of it) and c2 (bob's
    e2 with a file, a run r2 that admitted it, a derivative of it; cy's e3, held by nothing)."""
    pk.register_bot("b1", name="Bot")
    ids: dict[str, Any] = {}
    for conversation, author, event in (("c1", "ada", "e1"), ("c2", "bob", "e2")):
        pk.create_conversation(conversation)
        pk.ingest_event(
            conversation,
            author=author,
            body=f"{event}'s secret",
            event_id=event,
            attachments=[NewAttachment.file(f"{event} bytes".encode(), name=f"{event}.pdf")],
        )
        run = f"r{event[1]}"
        pk.start_run(conversation, bot_id="b1", run_id=run)
        pk.admit(event, run, payload={"text": f"{event}'s secret"})
        pk.finish_run(run, status="succeeded", output=f"about {event}")
        ids[f"d{event[1]}"] = pk.add_derivative(
            conversation, kind="summary", payload=f"about {event}", source_event_ids=[event]
        ).id
    pk.ingest_event("c2", author="cy", body="cy's note", event_id="e3")
    ids["pk"] = pk
    return ids


def removals(event: str, run: str, derivative: str) -> dict[str, str]:
    return {
        "body NULLed": f"UPDATE events SET body = NULL WHERE id = '{event}'",
        "body overwritten": f"UPDATE events SET body = 'nothing to see' WHERE id = '{event}'",
        "attachment name NULLed": f"UPDATE attachments SET name = NULL WHERE event_id = '{event}'",
        "attachment row deleted": f"DELETE FROM attachments WHERE event_id = '{event}'",
        "admission payload NULLed": f"UPDATE admissions SET payload = NULL WHERE event_id = '{event}'",
        "admission row deleted": f"DELETE FROM admissions WHERE event_id = '{event}'",
        "run output NULLed": f"UPDATE runs SET output = NULL WHERE id = '{run}'",
        "run output overwritten": f"UPDATE runs SET output = '\"nothing\"' WHERE id = '{run}'",
        "derivative payload NULLed": f"UPDATE derivatives SET payload = NULL WHERE id = '{derivative}'",
        "derivative payload overwritten": f"UPDATE derivatives SET payload = '\"x\"' WHERE id = '{derivative}'",
        "derivative source deleted": f"DELETE FROM derivative_sources WHERE derivative_id = '{derivative}'",
    }


CASES = removals("e1", "r1", "{d1}")
HELD_BY = {"conversation": {"conversation_ids": ["c1"]}, "author": {"authors": ["ada"]}}


@pytest.mark.parametrize("held_by", HELD_BY.values(), ids=HELD_BY.keys())
@pytest.mark.parametrize("sql", CASES.values(), ids=CASES.keys())
def test_a_raw_writer_cannot_remove_held_content(chat: dict[str, Any], sql: str, held_by: dict[str, Any]) -> None:
    pk: Pk = chat["pk"]
    hold(pk, **held_by)
    with pytest.raises(purgekeeper.LegalHold):
        write(pk, sql.format(**chat))
    [event] = pk.read_conversation("c1")
    assert event.body == "e1's secret" and event.attachments[0].name == "e1.pdf"
    assert opened(pk, "output", "r1") == '"about e1"'
    assert opened(pk, "derivative", chat["d1"]) == '"about e1"'
    assert scalar(pk, "SELECT count(*) FROM admissions WHERE event_id = 'e1' AND payload IS NOT NULL") == 1
    assert scalar(pk, "SELECT count(*) FROM derivative_sources WHERE event_id = 'e1'") == 1


def test_a_run_or_derivative_of_a_held_conversation_is_held_whatever_it_came_from(chat: dict[str, Any]) -> None:
    """A run and a derivative of the held c1 that came from nothing, or from bob's e2 (not
    held) placed there too, keep their content."""
    pk: Pk = chat["pk"]
    pk.start_run("c1", bot_id="b1", run_id="r-own")
    pk.finish_run("r-own", status="succeeded", output="the bot's own words")
    derived = pk.add_derivative("c1", kind="note", payload="from nothing").id
    hold(pk, conversation_ids=["c1"])
    with pytest.raises(purgekeeper.LegalHold):
        write(pk, "UPDATE runs SET output = NULL WHERE id = 'r-own'")
    with pytest.raises(purgekeeper.LegalHold):
        write(pk, "UPDATE derivatives SET payload = NULL WHERE id = :d", d=derived)


@pytest.mark.parametrize("sql", removals("e2", "r2", "{d2}").values(), ids=removals("e2", "r2", "{d2}").keys())
def test_content_no_hold_covers_can_still_be_removed(chat: dict[str, Any], sql: str) -> None:
    pk: Pk = chat["pk"]
    hold(pk, conversation_ids=["c1"], authors=["ada"])
    assert write(pk, sql.format(**chat)) == 1


def test_a_released_hold_preserves_nothing_more(chat: dict[str, Any]) -> None:
    pk: Pk = chat["pk"]
    hold(pk, conversation_ids=["c1"])
    with pytest.raises(purgekeeper.LegalHold):
        write(pk, "UPDATE events SET body = NULL WHERE id = 'e1'")
    pk.release_hold("case-1", actor="counsel@example.com", reason="settled")
    assert write(pk, "UPDATE events SET body = NULL WHERE id = 'e1'") == 1


def test_an_event_placed_in_a_held_conversation_is_held_wherever_it_is_read(chat: dict[str, Any]) -> None:
    """cy's e3 (c2) placed in the held c1 too: its body stays, in c2 as well."""
    pk: Pk = chat["pk"]
    pk.place_event("e3", "c1")
    hold(pk, conversation_ids=["c1"])
    with pytest.raises(purgekeeper.LegalHold):
        write(pk, "UPDATE events SET body = NULL WHERE id = 'e3'")
    assert [e.body for e in pk.read_conversation("c2") if e.id == "e3"] == ["cy's note"]


def test_the_cleanup_of_a_purge_accepted_before_the_hold_still_removes_what_it_fenced(chat: dict[str, Any]) -> None:
    """A content purge of e1 and an erasure of bob, both accepted, then a hold on c1, c2,
    ada and bob: their cleanup completes, NULLing content the hold came too late for."""
    pk: Pk = chat["pk"]
    content_purge = purge_events(pk, "e1")
    preview = pk.preview_author_erasure("bob")
    erasure = pk.erase_author("bob", scope_digest=preview.scope_digest, actor="dpo", reason="GDPR").purge_id
    hold(pk, conversation_ids=["c1", "c2"], authors=["ada", "bob"])
    assert settle(pk, content_purge).status == "complete"
    assert settle(pk, erasure).status == "complete"
    for event, run in (("e1", "r1"), ("e2", "r2")):
        assert scalar(pk, "SELECT body FROM events WHERE id = :e", e=event) is None
        assert scalar(pk, "SELECT output FROM runs WHERE id = :r", r=run) is None
        assert scalar(pk, "SELECT payload FROM admissions WHERE event_id = :e", e=event) is None
        assert scalar(pk, "SELECT name FROM attachments WHERE event_id = :e", e=event) is None
    assert (
        scalar(
            pk,
            "SELECT count(*) FROM derivatives WHERE payload IS NOT NULL AND id IN (:a, :b)",
            a=chat["d1"],
            b=chat["d2"],
        )
        == 0
    )
    assert [e.body for e in pk.read_conversation("c2")] == ["cy's note"]  # held and live: kept
    with pytest.raises(purgekeeper.LegalHold):
        write(pk, "UPDATE events SET body = NULL WHERE id = 'e3'")


def test_a_conversation_purged_before_the_hold_is_cleaned_though_an_event_lives_on_held(
    chat: dict[str, Any],
) -> None:
    """cy's e3 is placed in c2 and c1; c2 is purged (its runs and derivatives go), then c1 is
    held: the purge's cleanup completes, and e3, live and held in c1, keeps its body."""
    pk: Pk = chat["pk"]
    pk.place_event("e3", "c1")
    pk.start_run("c2", bot_id="b1", run_id="r3")
    pk.admit("e3", "r3", payload={"text": "cy's note"})
    pk.finish_run("r3", status="succeeded", output="about e3")
    purge_id = pk.purge_conversation("c2", actor="op", reason="test").purge_id
    hold(pk, conversation_ids=["c1"])
    assert settle(pk, purge_id).status == "complete"
    assert scalar(pk, "SELECT count(*) FROM runs WHERE conversation_id = 'c2'") == 0
    assert [e.body for e in pk.read_conversation("c1") if e.id == "e3"] == ["cy's note"]


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(["UPDATE events SET author = 'zed' WHERE id = 'e1'"], id="the author changed"),
        pytest.param(
            [
                "INSERT INTO placements (event_id, conversation_id) VALUES ('e1', 'c3')",
                "DELETE FROM placements WHERE event_id = 'e1' AND conversation_id = 'c1'",
            ],
            id="moved out of the held conversation",
        ),
    ],
)
def test_what_makes_content_held_does_not_change_under_a_hold(chat: dict[str, Any], steps: list[str]) -> None:
    """Tried (a review's finding): two plain statements took an event out of its hold, and a
    third then NULLed its body. What makes content held (its author, its placement in a held
    conversation) does not change while the hold is in force."""
    pk = chat["pk"]
    pk.create_conversation("c3")
    hold(pk, conversation_ids=["c1"], authors=["ada"])
    *setup, last = steps
    for sql in setup:
        write(pk, sql)
    with pytest.raises(purgekeeper.LegalHold):
        write(pk, last)
    with pytest.raises(purgekeeper.LegalHold):
        write(pk, "UPDATE events SET body = NULL WHERE id = 'e1'")
    assert body_of(pk, "e1") == "e1's secret"


@pytest.mark.sqlite_only
def test_sqlite_replace_does_not_rewrite_a_held_event(chat: dict[str, Any]) -> None:
    """SQLite's REPLACE deletes the row it conflicts with without its DELETE or UPDATE
    triggers: a held event written over with its body gone was taken. The same event again,
    unchanged (a duplicate delivery), is still taken."""
    pk = chat["pk"]
    hold(pk, authors=["ada"])
    occurred_at = scalar(pk, "SELECT occurred_at FROM events WHERE id = 'e1'")
    replace = "INSERT OR REPLACE INTO events (id, author, occurred_at, body) VALUES ('e1', 'ada', :at, :body)"
    with pytest.raises(purgekeeper.LegalHold):
        write(pk, replace, at=occurred_at, body=None)
    assert body_of(pk, "e1") == "e1's secret"
    body, key_id = rows(pk, "SELECT body, key_id FROM events WHERE id = 'e1'")[0]  # as stored: sealed
    again = "INSERT OR IGNORE INTO events (id, author, occurred_at, body, key_id) VALUES ('e1', 'ada', :at, :body, :k)"
    write(pk, again, at=occurred_at, body=body, k=key_id)
