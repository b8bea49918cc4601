"""A SIGTERM of ``purgectl scheduler`` gives up its leader lease (issue 12): the next
scheduler leads at once instead of waiting for the lease (15 s) to run out, so the sweeps,
and the copy of the ledger they complete, do not stop for that long."""

from __future__ import annotations

import signal

from sqlalchemy import text

import commands
from tests.faults.conftest import Processes, wait_until
from workers import scheduler as scheduling

Pk = commands.Purgekeeper
LEASE = text("SELECT owner, expires_at > now() AS held FROM leader_leases WHERE name = :name")


def lease(pk: Pk) -> tuple[str | None, bool]:
    with pk.db.read() as conn:
        row = conn.execute(LEASE, {"name": scheduling.LEADER_NAME}).first()
    return (row.owner, bool(row.held)) if row is not None else (None, False)


def test_a_sigterm_of_the_scheduler_gives_up_its_lease(pk: Pk, processes: Processes) -> None:
    running = processes.scheduler()
    owner, held = wait_until(lambda: lease(pk) if lease(pk)[1] else None, "the scheduler to lead")
    assert held and owner

    running.popen.send_signal(signal.SIGTERM)
    assert running.popen.wait(timeout=30) == 0, running.tail()
    after = lease(pk)
    assert after == (owner, False), f"the lease is still held after a SIGTERM: {after}\n{running.tail()}"

    successor = scheduling.Scheduler(pk.db, lambda step_ids: None)
    assert successor.lead(), "the next scheduler waits for a lease that was given up"
    assert lease(pk) == (successor.owner, True)
    successor.release()
