"""A worker that is stopped, not killed, holds nothing up for long (issue 11, case 7).

A real Procfile worker (``dramatiq purgekeeper.commands.worker``) is frozen with SIGSTOP (its whole
process group) while it is inside a conversation purge's batch (held there by the failpoint
``bodies.batch=hang``), its batch transaction open and holding row locks, as a paused VM or a
stuck network mount would leave it. A second
worker and the scheduler then start. The server ends the frozen session once it has been idle
in its transaction for ``PURGEKEEPER_IDLE_IN_TRANSACTION_TIMEOUT``, which releases its locks;
the second worker takes the step over when the frozen one's lease (2 s here) runs out, waits
for the locks without spending attempts (it renews its lease between lock timeouts), and the
purge completes with two attempts of five: the frozen one's, and its own.

Both orders are tried: the session ended before the lease runs out (as with the defaults,
10 s against 30 s), and after it (the second worker then waits on the locks). The second
order gives the session 12 s: on a loaded machine the second worker and the scheduler took
more than 6 s to start, and the session had ended before they met its locks.
"""

from __future__ import annotations

import os
import signal

import pytest
from sqlalchemy import text

import purgekeeper
from tests.helpers.processes import Processes, open_transactions, process_states, seed_conversation, wait_until

Pk = purgekeeper.Purgekeeper
EVENTS = 1500  # three batches of 500


@pytest.mark.parametrize("idle_timeout", ["1", "12"], ids=["ended-before-the-lease-expires", "ended-after"])
def test_a_frozen_worker_releases_its_locks_and_costs_one_attempt(
    pk: Pk, processes: Processes, idle_timeout: str
) -> None:
    env = {"PURGEKEEPER_IDLE_IN_TRANSACTION_TIMEOUT": idle_timeout}
    processes.env = {**processes.env, **env}
    frozen = processes.worker("bodies.batch=hang")
    seed_conversation(pk, "c1", EVENTS)
    purge_id = pk.purge_conversation("c1", actor="op", reason="frozen worker").purge_id

    def inside_its_batch() -> bool:  # the claim committed, the batch's transaction held open
        [bodies] = [step for step in pk.status(purge_id).steps if step.kind == "bodies"]
        return (bodies.status, bodies.attempts) == ("running", 1) and open_transactions(pk) >= 1

    wait_until(inside_its_batch, "the worker's batch to hold its transaction open")
    os.killpg(frozen.pid, signal.SIGSTOP)
    wait_until(lambda: set(process_states(frozen).values()) == {"T"}, "the worker to be stopped")

    healthy = processes.worker()
    scheduler = processes.scheduler()
    status = pk.wait(purge_id, 60)
    assert status.status == "complete", (status.steps, healthy.tail(), scheduler.tail())
    [bodies] = [step for step in status.steps if step.kind == "bodies"]
    assert (bodies.attempts, bodies.last_error) == (2, None), bodies
    assert "T" in process_states(frozen).values(), "the frozen worker was never resumed"
    assert open_transactions(pk) == 0, "the server did not end the frozen session"
    with pk.db.read() as conn:
        left = conn.scalar(text("SELECT count(*) FROM events WHERE body IS NOT NULL AND id LIKE 'c1-%'"))
    assert left == 0
    if idle_timeout == "12":  # the healthy worker met the locks, and waited without an attempt
        assert "waiting for a row lock" in healthy.output(), healthy.tail()
