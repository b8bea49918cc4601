"""purge_conversation, delete_channel, and the derived purge status. Both backends."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import event, text

import purgekeeper
from purgekeeper import EventScope
from purgekeeper.schema.content_queries import is_event_live

Pk = purgekeeper.Purgekeeper


def count(pk: Pk, sql: str) -> int:
    with pk.db.read() as conn:
        return int(conn.scalar(text(sql)))


def ledger_rows(pk: Pk) -> int:
    return count(pk, "SELECT count(*) FROM purge_ledger")


@pytest.fixture
def convo(pk: Pk) -> Pk:
    pk.register_bot("b1", name="Bot")
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    pk.ingest_event("c1", author="ada", body="only here", event_id="e-only")
    pk.ingest_event("c1", author="ada", body="in both", event_id="e-both")
    pk.place_event("e-both", "c2")
    return pk


def test_purge_hides_everything_at_once_and_a_repeat_is_already_purged(convo: Pk) -> None:
    version = convo.get_conversation("c1").version  # type: ignore[union-attr]
    acceptance = convo.purge_conversation("c1", actor="op", reason="user asked", expected_version=version)
    assert acceptance.outcome == "accepted"
    assert convo.get_conversation("c1") is None
    assert convo.read_conversation("c1") == []
    assert "c1" not in {c.id for c in convo.list_conversations()}
    with pytest.raises(purgekeeper.ConversationPurged):
        convo.ingest_event("c1", author="ada", body="late")
    with pytest.raises(purgekeeper.IdReserved):
        convo.create_conversation("c1")
    again = convo.purge_conversation("c1", actor="op", reason="lost response", expected_version=version)
    assert (again.outcome, again.purge_id, again.ledger_seq) == ("already_purged", acceptance.purge_id, 1)
    assert ledger_rows(convo) == 1
    steps = convo.status(acceptance.purge_id).steps
    assert sorted(s.kind for s in steps) == ["attachments", "bodies"]


def test_shared_events_stay_readable_in_their_live_conversation(convo: Pk) -> None:
    convo.purge_conversation("c1", actor="op", reason="r")
    assert [(e.id, e.body) for e in convo.read_conversation("c2")] == [("e-both", "in both")]
    with convo.db.read() as conn:
        assert is_event_live(conn, "e-both")
        assert not is_event_live(conn, "e-only")
    with pytest.raises(purgekeeper.ContentPurged):
        convo.place_event("e-only", "c2")


def test_version_conflict_and_active_runs_write_nothing(convo: Pk) -> None:
    current = convo.get_conversation("c1").version  # type: ignore[union-attr]
    with pytest.raises(purgekeeper.VersionConflict, match=f"version {current}"):
        convo.purge_conversation("c1", actor="op", reason="r", expected_version=current - 1)
    convo.start_run("c1", bot_id="b1", run_id="r-live")
    with pytest.raises(purgekeeper.ActiveRuns) as info:
        convo.purge_conversation("c1", actor="op", reason="r")
    assert info.value.run_ids == ("r-live",)
    assert ledger_rows(convo) == 0 and count(convo, "SELECT count(*) FROM tombstones") == 0
    convo.finish_run("r-live", status="cancelled")
    assert convo.purge_conversation("c1", actor="op", reason="r").outcome == "accepted"


def test_an_absent_id_is_reserved(convo: Pk) -> None:
    acceptance = convo.purge_conversation("not-yet", actor="op", reason="reserve", expected_version=7)
    assert acceptance.outcome == "accepted"
    assert convo.status(acceptance.purge_id).status == "complete"  # nothing to clean
    with pytest.raises(purgekeeper.IdReserved):
        convo.create_conversation("not-yet")


def test_two_purges_of_conversations_sharing_an_event_leave_it_live_nowhere(convo: Pk) -> None:
    """Purged at once, neither keeps the shared event as "shared" for the other."""
    results: list[Any] = []
    barrier = threading.Barrier(2)

    def purge(conversation_id: str) -> None:
        barrier.wait()
        try:
            results.append(convo.purge_conversation(conversation_id, actor="op", reason="both"))
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=purge, args=(c,)) for c in ("c1", "c2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(r.outcome for r in results) == ["accepted", "accepted"], results
    with convo.db.read() as conn:
        assert not is_event_live(conn, "e-both")
    assert convo.read_conversation("c2") == []
    assert convo.verify_ledger().ok


def statements_to_purge(pk: Pk, conversation_id: str) -> int:
    executed: list[str] = []
    caller = threading.get_ident()

    def record(*args: Any) -> None:
        if threading.get_ident() == caller:  # not the gate's background audit, on the same engine
            executed.append(args[2])

    event.listen(pk.db.engine, "before_cursor_execute", record)
    try:
        pk.purge_conversation(conversation_id, actor="op", reason="r")
    finally:
        event.remove(pk.db.engine, "before_cursor_execute", record)
    return len(executed)


NEW_EVENT = "INSERT INTO events (id, author, occurred_at, body) VALUES (:id, 'a', CURRENT_TIMESTAMP, 'b')"


def test_acceptance_work_does_not_grow_with_the_conversation(pk: Pk) -> None:
    """The same statements run for 3 events and for 300 (the cost is the statements, and each
    is bounded by one id): cleanup, not acceptance, walks the content."""
    for name, size in (("small", 3), ("large", 300)):
        pk.create_conversation(name)
        with pk.db.write() as conn:
            for i in range(size):
                conn.execute(
                    text(
                        "INSERT INTO events (id, author, occurred_at, body) VALUES (:id, 'a', CURRENT_TIMESTAMP, 'b')"
                    ),
                    {"id": f"{name}-{i}"},
                )
                conn.execute(
                    text("INSERT INTO placements (event_id, conversation_id) VALUES (:id, :c)"),
                    {"id": f"{name}-{i}", "c": name},
                )
    assert statements_to_purge(pk, "small") == statements_to_purge(pk, "large")


# -- channels ---------------------------------------------------------------------------------


def test_delete_channel_keeps_history_and_closes_ingress(pk: Pk) -> None:
    pk.create_conversation("ch", kind="channel")
    pk.ingest_event("ch", author="ada", body="history", event_id="h1")
    acceptance = pk.delete_channel("ch", actor="op", reason="closing")
    assert acceptance.outcome == "accepted"
    assert pk.status(acceptance.purge_id).status == "complete"
    assert [e.body for e in pk.read_conversation("ch")] == ["history"]
    assert pk.get_conversation("ch").state == "deleted"  # type: ignore[union-attr]
    with pytest.raises(purgekeeper.ConversationDeleted):
        pk.ingest_event("ch", author="ada", body="late")
    with pytest.raises(purgekeeper.IdReserved):
        pk.create_conversation("ch", kind="channel")
    assert pk.delete_channel("ch", actor="op", reason="again").outcome == "already_purged"
    purge = pk.purge_conversation("ch", actor="op", reason="and its content")
    assert purge.outcome == "accepted"
    assert pk.read_conversation("ch") == []
    assert ledger_rows(pk) == 2


def test_delete_channel_refuses_conversations_and_unknown_ids(pk: Pk) -> None:
    pk.create_conversation("c1")
    with pytest.raises(purgekeeper.ValidationError):
        pk.delete_channel("c1", actor="op", reason="r")
    with pytest.raises(purgekeeper.NotFound):
        pk.delete_channel("nope", actor="op", reason="r")
    assert ledger_rows(pk) == 0


# -- status and list --------------------------------------------------------------------------


def set_steps(pk: Pk, purge_id: str, sql_set: str) -> None:
    with pk.db.write() as conn:
        conn.execute(text(f"UPDATE cleanup_steps SET {sql_set} WHERE purge_id = :p"), {"p": purge_id})


def test_status_is_derived_from_the_steps(convo: Pk) -> None:
    purge_id = convo.purge_conversation("c1", actor="op", reason="r").purge_id
    assert convo.status(purge_id).status == "accepted"
    set_steps(convo, purge_id, "attempts = 1, status = 'running'")
    assert convo.status(purge_id).status == "cleaning"
    set_steps(convo, purge_id, "status = 'incomplete', last_error = 'disk on fire'")
    status = convo.status(purge_id)
    assert status.status == "incomplete" and {s.last_error for s in status.steps} == {"disk on fire"}
    set_steps(convo, purge_id, "status = 'done'")
    assert convo.status(purge_id).status == "complete"
    with pytest.raises(purgekeeper.NotFound):
        convo.status("no-such-purge")


def test_a_step_due_for_too_long_is_stalled(convo: Pk) -> None:
    purge_id = convo.purge_conversation("c1", actor="op", reason="r").purge_id
    assert not convo.status(purge_id).stalled
    old = "'2000-01-01 00:00:00'"
    set_steps(convo, purge_id, f"next_attempt_at = {old}")
    assert convo.status(purge_id).stalled
    set_steps(convo, purge_id, f"status = 'running', lease_expires_at = {old}")
    assert convo.status(purge_id).stalled
    set_steps(convo, purge_id, "status = 'done'")
    assert not convo.status(purge_id).stalled


def test_list_purges_pages_newest_first_and_filters(pk: Pk) -> None:
    purge_ids = [pk.purge_conversation(f"gone-{i}", actor="op", reason="r").purge_id for i in range(5)]
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="a", body="b", event_id="e1")
    scope = EventScope(event_ids=["e1"])
    content = pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, actor="op", reason="r")
    set_steps(pk, content.purge_id, "status = 'incomplete', attempts = 5")
    seen, after = [], None
    while True:
        page = pk.list_purges(limit=2, after=after)
        seen.extend(p.purge_id for p in page.purges)
        assert len(page.purges) <= 2
        if page.next_after is None:
            break
        after = page.next_after
    assert seen == [content.purge_id, *reversed(purge_ids)]
    assert [p.purge_id for p in pk.list_purges("incomplete").purges] == [content.purge_id]
    assert {p.purge_id for p in pk.list_purges("complete").purges} == set(purge_ids)
    assert pk.list_purges("cleaning").purges == ()


@pytest.mark.parametrize(
    "kwargs",
    [{"status": "done"}, {"limit": 0}, {"limit": 100_000}, {"after": 0}, {"after": "x"}, {"limit": True}],
    ids=["unknown status", "zero limit", "huge limit", "zero cursor", "text cursor", "bool limit"],
)
def test_list_purges_refuses_bad_arguments(pk: Pk, kwargs: dict[str, Any]) -> None:
    with pytest.raises(purgekeeper.ValidationError):
        pk.list_purges(**kwargs)


@pytest.mark.postgres_only
def test_two_calls_with_one_idempotency_key_at_once_return_the_same_acceptance(convo: Pk) -> None:
    """What was tried: both calls pass the first key lookup while a third session holds the
    conversation's row lock; the lock goes, and they run one after the other."""
    results: list[purgekeeper.Acceptance] = []

    def purge() -> None:
        results.append(convo.purge_conversation("c1", actor="op", reason="r", idempotency_key="twin"))

    waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
    with convo.db.engine.connect() as blocker:
        blocker.begin()
        blocker.execute(text("SELECT id FROM conversations WHERE id = 'c1' FOR UPDATE"))
        threads = [threading.Thread(target=purge) for _ in range(2)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while count(convo, waiting) < 2:
            assert time.monotonic() < deadline, "the two calls never both waited on the lock"
            time.sleep(0.01)
        blocker.rollback()
    for thread in threads:
        thread.join(30)
    assert len(results) == 2
    assert results[0] == results[1] and results[0].outcome == "accepted"
    assert ledger_rows(convo) == 1
