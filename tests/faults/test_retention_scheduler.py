"""A retention run interrupted by a killed process is resumed exactly once (issue 14), with
real processes: PostgreSQL, Redis, ``purgectl scheduler`` (its retention turns every 0.2 s
sweep, a policy due again 0.2 s after its turn) and ``dramatiq`` workers.

- the scheduler killed between planning a run and accepting it: the next scheduler accepts
  that run, with the cutoff planned, once;
- the scheduler killed right after the acceptance committed: the next one writes no second
  row, and the run's cleanup completes;
- a worker killed in the middle of the run's bodies step: the step's lease runs out and
  another worker finishes it.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from sqlalchemy import text

import purgekeeper
from tests.helpers import bodies
from tests.helpers.processes import Processes, wait_until
from tests.helpers.retention import ago, set_policy

Pk = purgekeeper.Purgekeeper
RETENTION_INTERVAL_S = "0.2"
KILLED = 137  # failpoints exit as if killed


def runs(pk: Pk) -> list[Any]:
    with pk.db.read() as conn:
        return list(conn.execute(text("SELECT purge_id, selectors FROM purge_ledger WHERE kind = 'retention_run'")))


def pending_cutoff(pk: Pk) -> Any:
    with pk.db.read() as conn:
        return conn.execute(text("SELECT pending_cutoff FROM retention_policies WHERE policy_id = 'all'")).scalar()


@pytest.fixture
def processes(processes: Processes) -> Processes:
    processes.env["PURGEKEEPER_RETENTION_INTERVAL"] = RETENTION_INTERVAL_S
    return processes


@pytest.fixture
def policy(pk: Pk) -> Pk:
    """200 events 40 days old in c1, one fresh; a global 30-day policy, due at once."""
    pk.create_conversation("c1")
    for index in range(200):
        pk.ingest_event("c1", author="ada", body=f"old {index}", event_id=f"old-{index}", occurred_at=ago(40))
    pk.ingest_event("c1", author="ada", body="fresh", event_id="fresh", occurred_at=ago(1))
    set_policy(pk, "all", 30)
    return pk


def completed(pk: Pk, purge_id: str) -> bool:
    return pk.status(purge_id).status == "complete"


def test_a_scheduler_killed_between_plan_and_acceptance_is_resumed_exactly_once(
    policy: Pk, processes: Processes
) -> None:
    first = processes.scheduler(failpoints="retention.planned=exit")
    assert first.popen.wait(timeout=60) == KILLED, first.tail()
    planned = pending_cutoff(policy)
    assert planned is not None and runs(policy) == []

    processes.worker()
    processes.scheduler()
    [run] = wait_until(lambda: runs(policy), "the planned run to be accepted")
    wait_until(lambda: completed(policy, run.purge_id), "the run's cleanup to complete")
    assert f'"cutoff":"{planned.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}"' in run.selectors
    time.sleep(1.0)  # several more turns: nothing new expires, nothing is written
    assert len(runs(policy)) == 1
    left = bodies(policy)
    assert left["fresh"] == "fresh" and all(left[f"old-{i}"] is None for i in range(200))
    assert [e.id for e in policy.read_conversation("c1")] == ["fresh"]


def test_a_scheduler_killed_after_the_acceptance_writes_no_second_row(policy: Pk, processes: Processes) -> None:
    first = processes.scheduler(failpoints="retention.accepted=exit")
    assert first.popen.wait(timeout=60) == KILLED, first.tail()
    [run] = runs(policy)
    assert pending_cutoff(policy) is None
    assert [e.id for e in policy.read_conversation("c1")] == ["fresh"]  # fenced at the acceptance

    processes.worker()
    processes.scheduler()
    wait_until(lambda: completed(policy, run.purge_id), "the run's cleanup to complete")
    time.sleep(1.0)
    assert [r.purge_id for r in runs(policy)] == [run.purge_id]


def test_a_worker_killed_in_the_runs_bodies_step_is_replaced_and_the_run_finishes(
    policy: Pk, processes: Processes
) -> None:
    doomed = processes.worker(failpoints="bodies.batch=exit")
    processes.scheduler()
    [run] = wait_until(lambda: runs(policy), "the run to be accepted")
    assert doomed.popen.wait(timeout=60) == KILLED, doomed.tail()
    processes.worker()
    wait_until(lambda: completed(policy, run.purge_id), "another worker to finish the run")
    status = policy.status(run.purge_id)
    bodies_step = {s.kind: s for s in status.steps}["bodies"]
    assert bodies_step.attempts >= 2 and bodies_step.progress.removed >= 1
    assert [r.purge_id for r in runs(policy)] == [run.purge_id]
    assert all(body is None for event_id, body in bodies(policy).items() if event_id.startswith("old-"))
