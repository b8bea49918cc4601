"""A SIGTERM of ``purgectl scheduler`` gives up its leader lease (issue 12): the next
scheduler leads at once instead of waiting for the lease (15 s) to run out, so the sweeps,
and the copy of the ledger they complete, do not stop for that long."""

from __future__ import annotations

import signal

from sqlalchemy import text

import purgekeeper
from purgekeeper.schema import leadership
from purgekeeper.workers import scheduler as scheduling
from tests.helpers.processes import Processes, wait_until

Pk = purgekeeper.Purgekeeper
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


def test_two_transactions_of_the_same_owner_racing_for_a_new_lease_both_lead(pk: Pk) -> None:
    """Tried: the first lease of a database taken by one owner from two transactions at once
    (an embedded handle's scheduler thread and a ``lead()`` call of the same scheduler). The
    second one's insert waits for the first's and then finds the row: it is the same owner's,
    so it leads too; a different owner still does not."""
    import datetime as dt
    import threading

    lease_for = dt.timedelta(seconds=30)
    first_inside = threading.Event()
    results: dict[str, bool] = {}

    def first(conn: object) -> bool:
        took = leadership.take_leadership(conn, "race", owner="me", lease=lease_for)  # type: ignore[arg-type]
        first_inside.set()
        threading.Event().wait(0.5)  # keep the insert uncommitted while the second one runs
        return took

    racer = threading.Thread(target=lambda: results.__setitem__("first", pk.db.transact(first)))
    racer.start()
    assert first_inside.wait(10)
    results["second"] = pk.db.transact(
        lambda conn: leadership.take_leadership(conn, "race", owner="me", lease=lease_for)
    )
    racer.join()
    assert results == {"first": True, "second": True}
    assert not pk.db.transact(lambda conn: leadership.take_leadership(conn, "race", owner="other", lease=lease_for))
