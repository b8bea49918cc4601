"""The steps of a process that died are due again as soon as its death is known, not when
their leases run out (``heartbeats.release_dead``): its heartbeat row missed its beats, or
its main process saw it exit. A step is a process's when its lease owner carries the
process's tag (``purgekeeper.workers.identity``), never by host and pid. Tried on both backends,
with a 300 s lease, so that nothing here is released by a lease running out: a dead process's
step (released, and the next claim closes its attempt ``lease_lost``); a live process's
(kept); the scheduler's sweep, which releases and sends them; a later process with the dead
one's host and pid, started after it died or while its row still looked alive (its own step
kept, the dead one's released); and the release by tag of the main process."""

from __future__ import annotations

import datetime as dt
import secrets
import time
import uuid

import pytest

import purgekeeper
from purgekeeper.schema import heartbeats, steps
from purgekeeper.schema.heartbeats import ProcessIdentity
from purgekeeper.workers import identity, scheduler
from tests.helpers.cleanup import WHO, run, step_of
from tests.helpers.reads import rows

Pk = purgekeeper.Purgekeeper
LONG_LEASE = dt.timedelta(seconds=300)
HOST, PID = "box", 7  # every process here has the same host and pid: only the tags tell them apart


def _process(pk: Pk, dead_after: dt.timedelta) -> str:
    """A worker process's heartbeat row; its tag."""
    tag = secrets.token_hex(8)
    process = ProcessIdentity(tag + uuid.uuid4().hex[:16], "worker", HOST, PID, ("purgekeeper-cleanup",), 2)
    pk.db.transact(lambda conn: heartbeats.beat(conn, process, holding=[], dead_after=dead_after))
    return tag


def _step_held_by(pk: Pk, name: str, tag: str) -> str:
    pk.create_conversation(name)
    pk.ingest_event(name, author="ada", body="x")
    purge_id = pk.purge_conversation(name, **WHO).purge_id
    step_id = step_of(pk, purge_id, "bodies").id
    owner = f"{HOST}:{PID}:{tag}:8:{uuid.uuid4().hex[:8]}"
    assert pk.db.transact(lambda conn: steps.claim(conn, step_id, owner=owner, lease=LONG_LEASE)) is not None
    return step_id


def _lease_owner(pk: Pk, step_id: str) -> str | None:
    return rows(pk, "SELECT lease_owner FROM cleanup_steps WHERE id = :s", s=step_id)[0].lease_owner


def test_a_process_that_missed_its_beats_has_its_steps_released(pk: Pk) -> None:
    dead, alive = _process(pk, dt.timedelta(seconds=1)), _process(pk, LONG_LEASE)
    dead_step, alive_step = _step_held_by(pk, "c-dead", dead), _step_held_by(pk, "c-alive", alive)
    assert pk.db.transact(heartbeats.release_dead) == []  # both alive still
    time.sleep(1.2)

    assert pk.db.transact(heartbeats.release_dead) == [dead_step]
    assert pk.db.transact(heartbeats.release_dead) == []  # released once: it is due, not leased
    assert _lease_owner(pk, alive_step) is not None
    assert run(pk, dead_step).status == "done"  # claimed at once, with no lease run out
    attempts = rows(pk, "SELECT attempt, outcome FROM step_attempts WHERE step_id = :s ORDER BY attempt", s=dead_step)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "lease_lost"), (2, "done")]


def test_the_sweep_releases_them_and_sends_them(pk: Pk) -> None:
    dead = _process(pk, dt.timedelta(seconds=1))
    step_id = _step_held_by(pk, "c1", dead)
    time.sleep(1.2)
    sent: list[str] = []
    assert scheduler.sweep(pk.db, sent.extend) >= 1
    assert step_id in sent


def test_a_later_process_with_the_dead_ones_host_and_pid_keeps_its_own_steps(pk: Pk) -> None:
    """Restarted at once (a container: the same host name, the same small pids): the new
    process claims a step while the dead row still looks alive, and another after it died.
    The dead one's step is released, the new one's two are not."""
    dead = _process(pk, dt.timedelta(seconds=1))
    dead_step = _step_held_by(pk, "c-dead", dead)
    restarted = _process(pk, LONG_LEASE)
    early = _step_held_by(pk, "c-early", restarted)
    time.sleep(1.2)
    late = _step_held_by(pk, "c-late", restarted)

    assert pk.db.transact(heartbeats.release_dead) == [dead_step]
    assert _lease_owner(pk, early) is not None and _lease_owner(pk, late) is not None


def test_the_main_process_releases_the_steps_of_the_worker_process_it_saw_exit(pk: Pk) -> None:
    """By its tag, at once: its row still says it is alive (its beats had not run out)."""
    exited, other = _process(pk, LONG_LEASE), _process(pk, LONG_LEASE)
    mine, theirs = _step_held_by(pk, "c1", exited), _step_held_by(pk, "c2", other)
    assert pk.db.transact(lambda conn: heartbeats.release_dead(conn, tag=exited)) == [mine]
    assert _lease_owner(pk, theirs) is not None
    assert run(pk, mine).status == "done"
    with pytest.raises(ValueError, match="not a process tag"):  # a pattern, or anything but a tag, is refused
        pk.db.transact(lambda conn: heartbeats.release_dead(conn, tag="%"))


def test_a_worker_groups_tags_are_known_to_its_main_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Within a group a sibling's tag is derived from the group's secret and its pid; without
    a group, only a process's own tag is known (random, the same for each call)."""
    monkeypatch.delenv(identity.GROUP_VARIABLE, raising=False)
    assert identity.process_tag() == identity.process_tag()
    with pytest.raises(ValueError, match="worker group"):
        identity.process_tag(1)
    identity.new_group()
    assert identity.process_tag(1234) == identity.process_tag(1234) != identity.process_tag(1235)
    first = identity.process_tag(1234)
    identity.new_group()
    assert identity.process_tag(1234) != first  # another group: another tag for the same pid
