"""The fault tests of the step protocol, against steps worked in groups
(``purgekeeper.workers.grouped``): several conversation purges are accepted before any worker
runs, so the first delivery claims their steps together. A real Procfile worker is killed
(kill -9) or frozen (SIGSTOP) inside the group's batch; each step of the group is taken over
through its own lease, costs its own attempt, and every purge completes."""

from __future__ import annotations

import os
import signal

from sqlalchemy import text

import purgekeeper
from tests.helpers.processes import Processes, open_transactions, process_states, seed_conversation, wait_until

Pk = purgekeeper.Purgekeeper
CONVERSATIONS = 4
EVENTS = 300


def _purged_together(pk: Pk) -> dict[str, str]:
    purged = {}
    for i in range(CONVERSATIONS):
        seed_conversation(pk, f"g{i}", EVENTS)
        purged[f"g{i}"] = pk.purge_conversation(f"g{i}", actor="op", reason="grouped fault").purge_id
    return purged


def _bodies(pk: Pk, purge_id: str) -> purgekeeper.StepState:
    return next(step for step in pk.status(purge_id).steps if step.kind == "bodies")


def _leases(pk: Pk, purged: dict[str, str]) -> set[str | None]:
    with pk.db.read() as conn:
        sql = text("SELECT lease_owner FROM cleanup_steps WHERE kind = 'bodies' AND purge_id = ANY(:ids)")
        return set(conn.scalars(sql, {"ids": list(purged.values())}))


def _in_groups_batches(pk: Pk, purged: dict[str, str]) -> bool:
    """Every bodies step claimed, in groups (fewer lease owners than steps: the worker's two
    threads may each take a delivery at once, and claim a group each), each group's batch
    transaction open."""
    running = all(_bodies(pk, p).status == "running" for p in purged.values())
    owners = _leases(pk, purged)
    return running and len(owners) <= 2 and open_transactions(pk) >= len(owners)


def _all_complete_with_two_attempts(pk: Pk, purged: dict[str, str], *procs: object) -> None:
    for name, purge_id in purged.items():
        status = pk.wait(purge_id, 60)
        assert status.status == "complete", (name, status.steps, [p.tail() for p in procs])  # type: ignore[attr-defined]
        assert (_bodies(pk, purge_id).attempts, _bodies(pk, purge_id).last_error) == (2, None)
    with pk.db.read() as conn:
        left = conn.scalar(text("SELECT count(*) FROM events WHERE body IS NOT NULL AND id LIKE 'g%'"))
    assert left == 0


def test_a_worker_killed_inside_a_groups_batch_costs_each_step_one_attempt(pk: Pk, processes: Processes) -> None:
    purged = _purged_together(pk)
    hung = processes.worker("bodies.batch=hang", wait_ready=False)
    wait_until(lambda: _in_groups_batches(pk, purged), "the groups' batches to hold their transactions open")
    assert processes.kill(hung) == -9

    worker = processes.worker()
    scheduler = processes.scheduler()
    _all_complete_with_two_attempts(pk, purged, worker, scheduler)


def test_a_worker_frozen_inside_a_groups_batch_holds_nothing_up_for_long(pk: Pk, processes: Processes) -> None:
    processes.env = {**processes.env, "PURGEKEEPER_IDLE_IN_TRANSACTION_TIMEOUT": "1"}
    purged = _purged_together(pk)
    frozen = processes.worker("bodies.batch=hang", wait_ready=False)
    wait_until(lambda: _in_groups_batches(pk, purged), "the groups' batches to hold their transactions open")
    os.killpg(frozen.pid, signal.SIGSTOP)
    wait_until(lambda: set(process_states(frozen).values()) == {"T"}, "the worker to be stopped")

    healthy = processes.worker()
    scheduler = processes.scheduler()
    _all_complete_with_two_attempts(pk, purged, healthy, scheduler)
    assert "T" in process_states(frozen).values(), "the frozen worker was never resumed"
    assert open_transactions(pk) == 0, "the server did not end the frozen session"
