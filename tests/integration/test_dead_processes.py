"""The steps of a process that died are due again as soon as its death is known, not when
their leases run out (``heartbeats.release_dead``): its heartbeat row missed its beats, or its
supervisor saw it exit. Tried on both backends, with a 300 s lease, so that nothing here is
released by a lease running out: a dead process's step (released, and the next claim closes
its attempt ``lease_lost``); a live process's (kept); a later process that got the dead
one's pid (its own step kept); the scheduler's sweep, which releases and sends them; and
the supervisor's release by host and pid."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import purgekeeper
from purgekeeper.schema import heartbeats, steps
from purgekeeper.schema.heartbeats import ProcessIdentity
from purgekeeper.workers import scheduler
from tests.helpers.cleanup import WHO, run, step_of
from tests.helpers.reads import rows

Pk = purgekeeper.Purgekeeper
LONG_LEASE = dt.timedelta(seconds=300)
HOST = "dead-host"


def _process(pid: int) -> ProcessIdentity:
    return ProcessIdentity(uuid.uuid4().hex, "worker", HOST, pid, ("purgekeeper-cleanup",), 2)


def _beat(pk: Pk, process: ProcessIdentity, dead_after: dt.timedelta) -> None:
    pk.db.transact(lambda conn: heartbeats.beat(conn, process, holding=[], dead_after=dead_after))


def _step_held_by(pk: Pk, name: str, pid: int) -> str:
    pk.create_conversation(name)
    pk.ingest_event(name, author="ada", body="x")
    purge_id = pk.purge_conversation(name, **WHO).purge_id
    step_id = step_of(pk, purge_id, "bodies").id
    owner = f"{HOST}:{pid}:{pid + 1}:{uuid.uuid4().hex[:8]}"
    assert pk.db.transact(lambda conn: steps.claim(conn, step_id, owner=owner, lease=LONG_LEASE)) is not None
    return step_id


def _lease_owner(pk: Pk, step_id: str) -> str | None:
    return rows(pk, "SELECT lease_owner FROM cleanup_steps WHERE id = :s", s=step_id)[0].lease_owner


def test_a_process_that_missed_its_beats_has_its_steps_released(pk: Pk) -> None:
    dead, alive = _process(4242), _process(4343)
    _beat(pk, dead, dt.timedelta(seconds=1))
    _beat(pk, alive, dt.timedelta(seconds=300))
    dead_step, alive_step = _step_held_by(pk, "c-dead", 4242), _step_held_by(pk, "c-alive", 4343)
    assert pk.db.transact(heartbeats.release_dead) == []  # both alive still
    time.sleep(1.2)

    assert pk.db.transact(heartbeats.release_dead) == [dead_step]
    assert pk.db.transact(heartbeats.release_dead) == []  # released once: it is due, not leased
    assert _lease_owner(pk, alive_step) is not None
    assert run(pk, dead_step).status == "done"  # claimed at once, with no lease run out
    attempts = rows(pk, "SELECT attempt, outcome FROM step_attempts WHERE step_id = :s ORDER BY attempt", s=dead_step)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "lease_lost"), (2, "done")]


def test_the_sweep_releases_them_and_sends_them(pk: Pk) -> None:
    dead = _process(4444)
    _beat(pk, dead, dt.timedelta(seconds=1))
    step_id = _step_held_by(pk, "c1", 4444)
    time.sleep(1.2)
    sent: list[str] = []
    assert scheduler.sweep(pk.db, sent.extend) >= 1
    assert step_id in sent


def test_a_later_process_with_the_dead_ones_pid_keeps_its_own_steps(pk: Pk) -> None:
    """The dead row and a new, alive one share host and pid: the step the new one claimed
    began after the dead one was last alive, and is not released."""
    _beat(pk, _process(4545), dt.timedelta(seconds=1))
    time.sleep(1.2)
    _beat(pk, _process(4545), dt.timedelta(seconds=300))
    step_id = _step_held_by(pk, "c1", 4545)
    assert pk.db.transact(heartbeats.release_dead) == []
    assert _lease_owner(pk, step_id) is not None


def test_the_supervisor_releases_the_steps_of_the_child_it_saw_exit(pk: Pk) -> None:
    """By host and pid, at once: its row still says it is alive (its beats had not run out)."""
    _beat(pk, _process(4646), dt.timedelta(seconds=300))
    _beat(pk, _process(4747), dt.timedelta(seconds=300))
    exited, other = _step_held_by(pk, "c1", 4646), _step_held_by(pk, "c2", 4747)
    assert pk.db.transact(lambda conn: heartbeats.release_dead(conn, host=HOST, pid=4646)) == [exited]
    assert _lease_owner(pk, other) is not None
    assert run(pk, exited).status == "done"
