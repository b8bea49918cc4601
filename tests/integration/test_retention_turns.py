"""Who takes a retention policy's turn and why, and what agent runs hold a policy back (issue 34,
item 7: what an operator met on the demo), on both backends.

- An operator's turn (``run_retention_policy`` with an actor and a reason, ``purgectl
  retention run --actor --reason``) is recorded under their name and reason: in the ledger
  row of the run it accepts, and on the policy (``last_run_by``, ``last_run_reason``,
  migration 0017) also when the turn finds nothing to expire. The scheduler's turns are recorded as the scheduler's.
- A turn that a non-terminal agent run defers records since when (the first turn of the
  deferral), how many events and which runs; the next turn that defers keeps the start; the
  first that defers nothing clears it. The overview's summary and ``/metrics`` give the oldest
  deferral's age (``purgekeeper_oldest_retention_deferral_age_seconds``).
- When the scheduler accepts the run an operator's turn planned too (both found the same
  planned cutoff), the operator's turn answers that run, not an idempotency conflict.
- A policy written before 0017 reads NULL for who and why and 0 deferred events.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from sqlalchemy import bindparam, text

import purgekeeper
from purgekeeper.commands import retention_commands, status_overview
from purgekeeper.commands.records import StandingPolicy
from purgekeeper.commands.web import metrics
from purgekeeper.schema import ledger, migrate
from purgekeeper.schema.db import Database
from purgekeeper.schema.tables import UtcDateTime
from purgekeeper.storage import failpoints
from tests.helpers import rows, scalar, settle
from tests.helpers.databases import open_rooted

Pk = purgekeeper.Purgekeeper
SHORT_INTERVAL = dt.timedelta(milliseconds=1)
DAY = dt.timedelta(days=1)
OPERATOR = {"actor": "ops@example.org", "reason": "the hold on c2 was released (LEGAL-7)"}


def ago(days: float) -> dt.datetime:
    return dt.datetime.now(dt.UTC) - days * DAY


def set_policy(pk: Pk, policy_id: str = "thirty", days: int = 30, conversation_id: str | None = None) -> None:
    preview = pk.preview_retention(max_age=days * DAY, conversation_id=conversation_id)
    pk.set_retention(
        policy_id, max_age=days * DAY, conversation_id=conversation_id, scope_digest=preview.scope_digest,
        actor="dpo", reason="retention schedule",
    )  # fmt: skip


def standing(pk: Pk) -> StandingPolicy:
    [policy] = pk.retention.list_standing()
    return policy


def ledger_row(pk: Pk, purge_id: str) -> Any:
    [row] = rows(pk, "SELECT actor, reason, origin FROM purge_ledger WHERE purge_id = :id", id=purge_id)
    return row


@pytest.fixture
def short_turns(open_pk: Callable[..., Pk]) -> Pk:
    """A handle whose policy is due again a millisecond after each turn."""
    return open_pk(retention_interval=SHORT_INTERVAL)


def due_turns(pk: Pk) -> list[purgekeeper.RetentionRunOutcome]:
    """The scheduler's turns, once the policies' next run (a millisecond after the last turn,
    by the database's clock) has surely come: back to back, a turn within that millisecond
    found nothing due (CI saw it on SQLite)."""
    time.sleep(SHORT_INTERVAL.total_seconds() * 10)
    return pk.run_retention()


@pytest.fixture
def agent(short_turns: Pk) -> Pk:
    """c1: ``oldest`` (50 days), ``admitted`` (40 days, admitted by the running agent run
    ``r1``) and ``fresh`` (1 day)."""
    pk = short_turns
    pk.create_conversation("c1")
    pk.register_bot("b1", name="Bot")
    for event_id, days in (("oldest", 50), ("admitted", 40), ("fresh", 1)):
        pk.ingest_event("c1", author="ada", body=event_id, event_id=event_id, occurred_at=ago(days))
    pk.start_run("c1", bot_id="b1", run_id="r1")
    pk.admit("admitted", "r1", payload="the prompt")
    return pk


# -- who takes a turn, and why ----------------------------------------------------------------------


def test_an_operator_s_turn_is_recorded_under_their_name_and_reason(short_turns: Pk) -> None:
    pk = short_turns
    for conversation, event_id in (("c1", "old"), ("c2", "old2")):
        pk.create_conversation(conversation)
        pk.ingest_event(conversation, author="ada", body=event_id, event_id=event_id, occurred_at=ago(40))
    pk.place_hold("h2", conversation_ids=["c2"], actor="counsel", reason="litigation")
    set_policy(pk)
    ran = pk.run_retention_policy("thirty", **OPERATOR, origin="cli")
    assert ran.purge_id is not None and ran.error is None
    assert tuple(ledger_row(pk, ran.purge_id)) == (OPERATOR["actor"], OPERATOR["reason"], "cli")
    policy = standing(pk)
    assert (policy.last_run_by, policy.last_run_reason) == (OPERATOR["actor"], OPERATOR["reason"])
    assert policy.policy.last_purge_id == ran.purge_id and policy.deferral is None
    assert pk.status(ran.purge_id).actor == OPERATOR["actor"]  # where runs are listed: status and list

    quiet = pk.run_retention_policy("thirty", actor="grace@example.org", reason="checking", origin="cli")
    assert quiet.purge_id is None  # nothing new: no ledger row, but the turn is the operator's
    assert (standing(pk).last_run_by, standing(pk).last_run_reason) == ("grace@example.org", "checking")

    pk.release_hold("h2", actor="counsel", reason="settled")
    [scheduled] = due_turns(pk)
    assert scheduled.purge_id is not None
    row = ledger_row(pk, scheduled.purge_id)
    assert (row.actor, row.origin) == (retention_commands.SCHEDULER_ACTOR, retention_commands.SCHEDULER_ORIGIN)
    assert row.reason.startswith("retention policy thirty: expire what occurred before ")
    policy = standing(pk)
    assert (policy.last_run_by, policy.last_run_reason) == (
        retention_commands.SCHEDULER_ACTOR,
        retention_commands.DUE_TURN,
    )
    [quiet_scheduled] = due_turns(pk)  # a quiet turn of the batch is the scheduler's too
    assert quiet_scheduled.purge_id is None and standing(pk).last_run_by == retention_commands.SCHEDULER_ACTOR


def test_an_operator_s_turn_refuses_a_missing_actor_or_reason_and_an_unknown_policy(short_turns: Pk) -> None:
    pk = short_turns
    set_policy(pk)
    with pytest.raises(purgekeeper.ValidationError, match="actor"):
        pk.run_retention_policy("thirty", actor=" ", reason="r")
    with pytest.raises(purgekeeper.ValidationError, match="reason"):
        pk.run_retention_policy("thirty", actor="ops", reason="x" * 1001)
    with pytest.raises(purgekeeper.ValidationError, match="reason"):  # an actor alone
        pk.run_retention_policy("thirty", actor="ops")
    with pytest.raises(purgekeeper.ValidationError, match="actor"):  # a reason alone
        pk.run_retention_policy("thirty", reason="checking")
    with pytest.raises(purgekeeper.NotFound):
        pk.run_retention_policy("nobody", **OPERATOR)
    assert standing(pk).last_run_by is None


def test_an_operator_s_turn_answers_the_run_the_scheduler_accepted_from_the_same_plan(
    short_turns: Pk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both turns found the same planned cutoff (one idempotency key); the scheduler's
    acceptance committed first. The operator's turn answers that run (the ledger row keeps the
    scheduler's name), not an idempotency conflict."""
    pk = short_turns
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="old", event_id="old", occurred_at=ago(40))
    set_policy(pk)
    scheduler_turns: list[purgekeeper.RetentionRunOutcome] = []
    swept: list[bool] = []
    real_hit = failpoints.hit

    def hit(name: str) -> None:
        if name == "retention.planned" and not swept:
            swept.append(True)
            scheduler_turns.extend(pk.run_retention())  # the scheduler's sweep, between plan and accept
        real_hit(name)

    monkeypatch.setattr(failpoints, "hit", hit)
    mine = pk.run_retention_policy("thirty", **OPERATOR)
    [theirs] = scheduler_turns
    assert theirs.purge_id is not None and mine.error is None
    assert (mine.purge_id, mine.cutoff) == (theirs.purge_id, theirs.cutoff)
    assert ledger_row(pk, mine.purge_id).actor == retention_commands.SCHEDULER_ACTOR
    assert int(scalar(pk, "SELECT count(*) FROM purge_ledger WHERE kind = 'retention_run'")) == 1


# -- what agent runs hold back ----------------------------------------------------------------------


def test_a_deferral_is_recorded_from_its_first_turn_kept_while_it_lasts_and_cleared(agent: Pk) -> None:
    pk = agent
    set_policy(pk, conversation_id="c1")
    [first] = pk.run_retention()
    assert first.purge_id is not None and first.deferred_events == 1
    deferral = standing(pk).deferral
    assert deferral is not None and (deferral.events, deferral.run_ids) == (1, ("r1",))
    since = deferral.since
    assert abs(since - pk.database_now()) < dt.timedelta(minutes=1)
    settle(pk, first.purge_id)

    [waiting] = due_turns(pk)  # r1 still runs: a quiet turn that defers again
    assert waiting.purge_id is None and waiting.deferred_events == 1
    again = standing(pk).deferral
    assert again is not None and again.since == since  # the deferral's first turn, not this one

    snap = status_overview.snapshot(pk)
    assert snap.retention_summary.oldest_deferral == since
    assert snap.oldest_deferral_age == max(snap.now - since, dt.timedelta(0))

    pk.finish_run("r1", status="succeeded", output="the answer")
    [after] = due_turns(pk)
    assert after.purge_id is not None and after.deferred_events == 0
    assert standing(pk).deferral is None
    assert status_overview.snapshot(pk).oldest_deferral_age == dt.timedelta(0)


def test_metrics_export_the_age_of_the_oldest_deferral(agent: Pk) -> None:
    pk = agent
    set_policy(pk, conversation_id="c1")
    assert exported_age(pk) == 0
    pk.run_retention()
    assert 0 <= exported_age(pk) < 60
    with pk.db.write() as conn:  # the deferral began a day and two hours ago
        conn.execute(SET_DEFERRED_SINCE, {"since": pk.database_now() - dt.timedelta(days=1, hours=2)})
    assert 26 * 3600 <= exported_age(pk) < 27 * 3600


SET_DEFERRED_SINCE = text("UPDATE retention_policies SET deferred_since = :since").bindparams(
    bindparam("since", type_=UtcDateTime())
)


def exported_age(pk: Pk) -> float:
    """``purgekeeper_oldest_retention_deferral_age_seconds`` as a scrape of ``/metrics`` says it."""
    [line] = [
        line
        for line in generate_latest(metrics.registry_for(pk)).decode().splitlines()
        if line.startswith("purgekeeper_oldest_retention_deferral_age_seconds ")
    ]
    return float(line.split()[1])


# -- rows of before 0017 ----------------------------------------------------------------------------


def test_a_policy_of_before_0017_reads_no_turn_taker_and_nothing_deferred(
    empty_database_url: str, tmp_path: Path
) -> None:
    """0017 adds the columns with NULL (who and why were not recorded) and 0 deferred events;
    the policy's next turn records them."""
    _policy_at_0016(empty_database_url)
    pk = open_rooted(empty_database_url, tmp_path)
    try:
        columns = "last_run_by, last_run_reason, deferred_since, deferred_events, deferred_run_ids"
        [row] = rows(pk, f"SELECT {columns} FROM retention_policies")
        assert tuple(row) == (None, None, None, 0, None)
        policy = standing(pk)
        assert (policy.last_run_by, policy.last_run_reason, policy.deferral) == (None, None, None)
        pk.run_retention_policy("old", **OPERATOR)
        assert (standing(pk).last_run_by, standing(pk).last_run_reason) == (OPERATOR["actor"], OPERATOR["reason"])
    finally:
        pk.close()


def _policy_at_0016(url: str) -> None:
    """A database at 0016 with one retention policy, set by its ledger row."""
    from alembic import command

    db = Database(url)
    config = migrate.alembic_config()
    try:
        with db.write() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "0016")
        selectors = {"policy_id": "old", "conversation_id": None, "max_age_seconds": 30 * 86_400}
        with db.write() as conn:
            entry = ledger.append(
                conn, ledger.lock_head(conn), purge_id="p" * 32, kind="retention", selectors=selectors,
                scope_digest="0" * 64, actor="dpo", reason="set before 0017", request_id=None,
                idempotency_key=None, origin="test", salted=False,  # a row as 0016 held it: no salts (0018)
            )  # fmt: skip
            conn.execute(INSERT_POLICY, {"age": 30 * 86_400, "purge_id": entry.purge_id, "due": LONG_AGO})
    finally:
        db.dispose()


LONG_AGO = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
INSERT_POLICY = text(
    "INSERT INTO retention_policies (policy_id, conversation_id, max_age_seconds, purge_id, next_run_at) "
    "VALUES ('old', NULL, :age, :purge_id, :due)"
).bindparams(bindparam("due", type_=UtcDateTime()))
