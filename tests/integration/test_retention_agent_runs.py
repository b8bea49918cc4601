"""Retention and agent runs, on both backends (issue 23, item 10): a run never expires an event
that a non-terminal agent run admitted. Its cutoff is lowered to the earliest such event, so
that event, and what occurred after it, wait for a later run; the run's ledger row and its
turn's outcome say how many events waited, for which runs, and why. Once the agent runs are
settled, the next run expires them."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest

import purgekeeper
from purgekeeper.schema.content_queries import utc_from_text
from purgekeeper.schema.ledger import utc_text
from purgekeeper.storage import failpoints
from tests.helpers import body_of, opened, rows, scalar, settle

Pk = purgekeeper.Purgekeeper
DAY = dt.timedelta(days=1)
SCOPES = [pytest.param(None, id="global"), pytest.param("c1", id="conversation")]


def ago(days: float) -> dt.datetime:
    return dt.datetime.now(dt.UTC) - days * DAY


def set_policy(pk: Pk, policy_id: str, days: int, conversation_id: str | None) -> None:
    preview = pk.preview_retention(max_age=days * DAY, conversation_id=conversation_id)
    pk.set_retention(
        policy_id, max_age=days * DAY, conversation_id=conversation_id, scope_digest=preview.scope_digest,
        actor="dpo", reason="retention schedule",
    )  # fmt: skip


def turn(pk: Pk) -> purgekeeper.RetentionRunOutcome:
    """One scheduler turn of the one policy, and the cleanup of the run it accepted."""
    [outcome] = pk.run_retention()
    assert outcome.error is None
    if outcome.purge_id:
        settle(pk, outcome.purge_id)
    return outcome


def texts(pk: Pk, conversation_id: str) -> list[str | None]:
    return [e.body for e in pk.read_conversation(conversation_id)]


def selectors_of(pk: Pk, purge_id: str) -> dict[str, Any]:
    [row] = rows(pk, "SELECT selectors FROM purge_ledger WHERE purge_id = :id", id=purge_id)
    return dict(json.loads(row.selectors))


def expired_through(pk: Pk) -> dt.datetime | None:
    value = scalar(pk, "SELECT expired_through FROM retention_policies")
    return None if value is None else value if isinstance(value, dt.datetime) else utc_from_text(value)


@pytest.fixture
def short_turns(open_pk: Callable[..., Pk]) -> Pk:
    """A handle whose policy is due again a millisecond after each turn."""
    return open_pk(retention_interval=dt.timedelta(milliseconds=1))


@pytest.fixture
def agent(short_turns: Pk) -> Pk:
    """c1: ``oldest`` (50 days), ``admitted`` (40 days, admitted by the running agent run
    ``r1``), ``later`` (35 days) and ``fresh`` (1 day)."""
    pk = short_turns
    pk.create_conversation("c1")
    pk.register_bot("b1", name="Bot")
    for event_id, days in (("oldest", 50), ("admitted", 40), ("later", 35), ("fresh", 1)):
        pk.ingest_event("c1", author="ada", body=event_id, event_id=event_id, occurred_at=ago(days))
    pk.start_run("c1", bot_id="b1", run_id="r1")
    pk.admit("admitted", "r1", payload="the prompt")
    return pk


@pytest.mark.parametrize("scope", SCOPES)
def test_a_run_defers_what_a_running_agent_run_admitted(agent: Pk, scope: str | None) -> None:
    pk = agent
    admitted_at = pk.read_conversation("c1")[1].occurred_at
    set_policy(pk, "thirty", 30, scope)
    first = turn(pk)
    assert first.purge_id is not None
    # what occurred before the admitted event expired; it, and what came after it, wait
    assert texts(pk, "c1") == ["admitted", "later", "fresh"]
    assert body_of(pk, "oldest") is None and body_of(pk, "admitted") == "admitted"
    [admission] = rows(pk, "SELECT id FROM admissions WHERE run_id = 'r1'")
    assert opened(pk, "payload", admission.id) == '"the prompt"'
    assert first.cutoff == admitted_at
    assert (first.deferred_events, first.deferred_run_ids) == (1, ("r1",))
    selectors = selectors_of(pk, first.purge_id)
    assert selectors["cutoff"] == utc_text(admitted_at)
    assert selectors["deferred_events"] == 1 and selectors["deferred_run_ids"] == ["r1"]
    assert utc_from_text(selectors["planned_cutoff"]) > admitted_at + 9 * DAY  # now - 30 days
    assert expired_through(pk) == admitted_at  # the next run walks the deferred events again

    waiting = turn(pk)  # r1 still runs: nothing else to expire, no ledger row
    assert (waiting.purge_id, waiting.deferred_events, waiting.deferred_run_ids) == (None, 1, ("r1",))
    assert texts(pk, "c1") == ["admitted", "later", "fresh"] and expired_through(pk) == admitted_at

    pk.finish_run("r1", status="succeeded", output="the answer")
    after = turn(pk)
    assert after.purge_id is not None and after.deferred_events == 0
    assert texts(pk, "c1") == ["fresh"] and body_of(pk, "admitted") is None and body_of(pk, "later") is None
    assert "deferred_events" not in selectors_of(pk, after.purge_id)


@pytest.mark.parametrize("scope", SCOPES)
def test_a_turn_whose_only_expiring_event_is_admitted_writes_no_row_and_keeps_its_window(
    short_turns: Pk, scope: str | None
) -> None:
    pk = short_turns
    pk.create_conversation("c1")
    pk.register_bot("b1", name="Bot")
    pk.ingest_event("c1", author="ada", body="admitted", event_id="admitted", occurred_at=ago(40))
    pk.start_run("c1", bot_id="b1", run_id="r1")
    pk.admit("admitted", "r1", payload="the prompt")
    pk.finish_run(pk.start_run("c1", bot_id="b1", run_id="r0").id, status="failed")  # settled: no matter
    set_policy(pk, "thirty", 30, scope)
    quiet = turn(pk)
    assert texts(pk, "c1") == ["admitted"]
    assert (quiet.purge_id, quiet.deferred_events, quiet.deferred_run_ids) == (None, 1, ("r1",))
    assert int(scalar(pk, "SELECT count(*) FROM purge_ledger WHERE kind = 'retention_run'")) == 0
    through = expired_through(pk)
    assert through is None or through <= pk.read_conversation("c1")[0].occurred_at

    pk.finish_run("r1", status="cancelled")
    assert turn(pk).purge_id is not None
    assert texts(pk, "c1") == [] and body_of(pk, "admitted") is None


def test_a_planned_run_still_defers_what_was_admitted_before_its_acceptance(agent: Pk) -> None:
    """A leader planned the run (its cutoff written down), then died; an agent run admitted an
    event meanwhile. The next leader accepts the planned run, under its idempotency key, and
    still defers that event."""
    pk = agent
    pk.finish_run("r1", status="succeeded", output="done")
    set_policy(pk, "thirty", 30, "c1")
    failpoints.arm("retention.planned=EIO")
    try:
        [failed] = pk.run_retention()
    finally:
        failpoints.disarm()
    assert failed.error is not None
    planned = scalar(pk, "SELECT pending_cutoff FROM retention_policies")
    assert planned is not None
    pk.start_run("c1", bot_id="b1", run_id="r2")
    pk.admit("later", "r2", payload="a late prompt")
    run = turn(pk)
    assert texts(pk, "c1") == ["later", "fresh"]
    assert run.purge_id is not None and (run.deferred_events, run.deferred_run_ids) == (1, ("r2",))
    selectors = selectors_of(pk, run.purge_id)
    planned_at = planned if isinstance(planned, dt.datetime) else utc_from_text(planned)
    assert selectors["planned_cutoff"] == utc_text(planned_at)
    assert scalar(pk, "SELECT pending_cutoff FROM retention_policies") is None
    [again] = pk.run_retention()  # r2 still runs: the run is not accepted twice
    assert again.purge_id is None
    assert int(scalar(pk, "SELECT count(*) FROM purge_ledger WHERE kind = 'retention_run'")) == 1


@pytest.mark.postgres_only
def test_an_acceptance_waits_for_an_admission_being_written(agent: Pk) -> None:
    """An agent run admits ``later`` in a transaction still open when the run is accepted: the
    acceptance waits for it (the admissions are made final), then defers ``later`` too. Without
    the wait the run expires an event whose admission commits a moment later."""
    import threading
    import time

    from sqlalchemy import text

    pk = agent
    pk.finish_run("r1", status="succeeded", output="done")
    pk.start_run("c1", bot_id="b1", run_id="r2")
    set_policy(pk, "thirty", 30, "c1")
    outcomes: list[purgekeeper.RetentionRunOutcome] = []
    with pk.db.engine.connect() as writer:
        writer.execute(
            text("INSERT INTO admissions (id, event_id, run_id, payload) VALUES ('a2', 'later', 'r2', '\"late\"')")
        )
        taking = threading.Thread(target=lambda: outcomes.extend(pk.run_retention()))
        taking.start()
        time.sleep(0.5)
        assert taking.is_alive()  # the acceptance waits for the admission
        writer.commit()
        taking.join(timeout=30)
    [outcome] = outcomes
    assert outcome.purge_id is not None and (outcome.deferred_events, outcome.deferred_run_ids) == (1, ("r2",))
    settle(pk, outcome.purge_id)
    assert texts(pk, "c1") == ["later", "fresh"]
