"""A worker process that dies holds its steps up for a sweep interval, not for a lease. The
step lease here is 300 s, and every test waits at most 60 s: a step that was only freed by its
lease running out would fail it. Tried with real Procfile workers (``python -m
purgekeeper.commands.worker``), PostgreSQL and Redis: one worker process killed (kill -9), whose
main process sees it exit and releases its steps; and the whole group killed, main process and
all, whose steps the scheduler releases once the dead process's heartbeat row has missed its
beats."""

from __future__ import annotations

import os
import signal

import purgekeeper
from purgekeeper.workers.children import living_children
from tests.helpers.processes import Proc, Processes, open_transactions, seed_conversation, wait_until

Pk = purgekeeper.Purgekeeper
LONG_LEASE = {"PURGEKEEPER_STEP_LEASE": "300"}


def _held_in_a_batch(pk: Pk, processes: Processes) -> tuple[str, Proc]:
    processes.env = {**processes.env, **LONG_LEASE}
    hung = processes.worker("bodies.batch=hang", wait_ready=False)
    seed_conversation(pk, "c1", 50)
    purge_id = pk.purge_conversation("c1", actor="op", reason="dead worker").purge_id

    def inside_its_batch() -> bool:
        [bodies] = [step for step in pk.status(purge_id).steps if step.kind == "bodies"]
        return bodies.status == "running" and open_transactions(pk) >= 1

    wait_until(inside_its_batch, "the worker's batch to hold its transaction open")
    return purge_id, hung


def _completes_with_two_attempts(pk: Pk, purge_id: str, *procs: Proc) -> None:
    status = pk.wait(purge_id, 60)
    assert status.status == "complete", (status.steps, [p.tail() for p in procs])
    [bodies] = [step for step in status.steps if step.kind == "bodies"]
    assert (bodies.attempts, bodies.last_error) == (2, None)


def test_a_killed_worker_process_has_its_steps_released_by_its_main_process(pk: Pk, processes: Processes) -> None:
    purge_id, hung = _held_in_a_batch(pk, processes)
    [child] = living_children(hung.pid)
    os.kill(child, signal.SIGKILL)
    released = f"worker process {child} exited holding 1 step(s)"
    try:
        wait_until(lambda: released in hung.output(), "its main process to release its step", timeout=15)
    except AssertionError:
        raise AssertionError(hung.tail(40)) from None
    processes.kill(hung)  # its restarted process would hang in the same batch

    worker = processes.worker()
    scheduler = processes.scheduler()
    _completes_with_two_attempts(pk, purge_id, worker, scheduler, hung)


def test_a_killed_worker_group_has_its_steps_released_by_the_scheduler(pk: Pk, processes: Processes) -> None:
    purge_id, hung = _held_in_a_batch(pk, processes)
    assert processes.kill(hung) == -9  # the main process too: nobody saw the worker process exit

    worker = processes.worker()
    scheduler = processes.scheduler()
    _completes_with_two_attempts(pk, purge_id, worker, scheduler)
    assert "missed their heartbeats are due again" in scheduler.output(), scheduler.tail()
