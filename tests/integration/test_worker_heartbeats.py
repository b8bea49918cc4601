"""The heartbeats of worker, scheduler and embedded processes (``purgekeeper.workers.heartbeat``,
``purgekeeper.schema.heartbeats``) on SQLite and PostgreSQL, read back through ``pk.list_workers()``:
what a row says, the dead bound, a clean stop, the steps a process holds, the pruning of old
rows, and "nobody to do the work": due steps are stalled at once once workers have beaten and
none is alive. Real worker and scheduler processes: ``test_worker_processes.py``."""

from __future__ import annotations

import datetime as dt
import os
import socket
from pathlib import Path

import pytest

import purgekeeper
from purgekeeper.commands import status_overview
from purgekeeper.schema import heartbeats
from purgekeeper.schema.states import WorkerRole
from purgekeeper.workers import broker
from purgekeeper.workers.scheduler import Scheduler
from tests.helpers.console import claim, purge_new_event
from tests.helpers.heartbeats import SLOW, heartbeat, seen_ago

Pk = purgekeeper.Purgekeeper


def only(pk: Pk) -> purgekeeper.WorkerProcess:
    [worker] = pk.list_workers()
    return worker


def test_a_process_is_listed_alive_as_it_said_and_a_clean_stop_marks_it_stopped(pk: Pk) -> None:
    beats = heartbeat(pk)
    before = pk.database_now()
    beats.start()
    worker = only(pk)
    assert (worker.process_id, worker.role, worker.host, worker.pid) == (
        beats.process.id,
        "worker",
        socket.gethostname(),
        os.getpid(),
    )
    assert (worker.queues, worker.threads, worker.holding) == ((broker.QUEUE,), 4, ())
    assert (worker.alive, worker.state, worker.stopped_at) == (True, "alive", None)
    assert before <= worker.started_at == worker.last_seen_at <= pk.database_now()
    assert worker.alive_until - worker.last_seen_at == 3 * SLOW  # dead after 3 missed beats

    assert beats.beat()
    again = only(pk)
    assert (again.started_at, again.last_seen_at > worker.last_seen_at) == (worker.started_at, True)

    beats.stop()
    stopped = only(pk)
    assert (stopped.alive, stopped.state) == (False, "stopped")
    assert stopped.stopped_at is not None and stopped.stopped_at >= again.last_seen_at
    beats.beat()  # a late beat never brings a stopped process back
    assert only(pk).state == "stopped"


def test_a_process_is_dead_once_three_of_its_intervals_pass_without_a_beat(pk: Pk) -> None:
    beats = heartbeat(pk)
    assert beats.beat()
    seen_ago(pk, beats.process.id, 3 * SLOW - dt.timedelta(seconds=2))
    assert only(pk).state == "alive"
    seen_ago(pk, beats.process.id, dt.timedelta(seconds=3))  # 3 intervals and a second
    dead = only(pk)
    assert (dead.alive, dead.state, dead.stopped_at) == (False, "dead", None)
    assert heartbeats.dead_after(dt.timedelta(milliseconds=200)) == heartbeats.MIN_DEAD_AFTER


def test_a_process_lists_the_steps_its_attempts_hold(pk: Pk) -> None:
    purge_id = purge_new_event(pk, "c-held", attachment=True)
    steps = {step.kind: step.id for step in pk.status(purge_id).steps}
    claim(pk, steps["bodies"], "host:1:aa")
    claim(pk, steps["attachments"], "host:2:bb")
    assert heartbeat(pk, holding=["host:1:aa", "gone:3:cc"]).beat()
    [held] = only(pk).holding
    assert (held.step_id, held.purge_id, held.kind, held.attempt) == (steps["bodies"], purge_id, "bodies", 1)


def test_rows_dead_for_a_day_are_deleted_by_the_next_beat(pk: Pk) -> None:
    old, recent = heartbeat(pk), heartbeat(pk, WorkerRole.SCHEDULER)
    old.start()
    old.stop()
    seen_ago(pk, old.process.id, heartbeats.PRUNE_AFTER + dt.timedelta(minutes=1))
    assert len(pk.list_workers()) == 1
    assert recent.beat()
    assert [w.process_id for w in pk.list_workers()] == [recent.process.id]


def stalled_everywhere(pk: Pk, purge_id: str) -> tuple[bool, bool, list[str], int]:
    """Where "needs attention" is read: a purge's status, the list, the ids, the overview."""
    listed = pk.list_purges().purges[0]
    assert listed.purge_id == purge_id
    snapshot = status_overview.snapshot(pk)
    return pk.status(purge_id).stalled, listed.stalled, pk.stalled_purge_ids(), snapshot.stalled_purges


def test_due_steps_are_stalled_at_once_when_workers_have_beaten_and_none_is_alive(pk: Pk) -> None:
    purge_id = purge_new_event(pk, "c-due")
    calm = (False, False, [], 0)
    assert stalled_everywhere(pk, purge_id) == calm  # no worker ever beat here: the 10-minute rule
    worker = heartbeat(pk)
    worker.start()
    assert stalled_everywhere(pk, purge_id) == calm  # someone is there to do it
    scheduler = Scheduler(pk.db, lambda step_ids: None, interval=SLOW)
    scheduler.start()
    worker.stop()  # only a scheduler is left: nobody runs steps
    assert stalled_everywhere(pk, purge_id) == (True, True, [purge_id], 1)
    assert status_overview.snapshot(pk).workers_alive == {"worker": 0, "scheduler": 1, "embedded": 0}
    scheduler.stop()
    again = heartbeat(pk)
    assert again.beat()
    assert stalled_everywhere(pk, purge_id) == calm


def test_an_embedded_handle_beats_as_one_embedded_process_until_it_closes(
    pk: Pk, database_url: str, roots: dict[str, Path]
) -> None:
    paths = {name: roots[name] for name in ("blob_root", "file_root", "checkpoint_dir")}
    embedded = purgekeeper.open(
        database_url, **paths, memory_roots=[roots["memory_root"]], sweep_interval=dt.timedelta(milliseconds=200)
    )
    try:
        worker = only(pk)
        assert (worker.role, worker.queues, worker.threads, worker.pid) == (
            "embedded",
            (broker.QUEUE,),
            broker.EMBEDDED_WORKER_THREADS,
            os.getpid(),
        )
        assert worker.alive_until - worker.last_seen_at == heartbeats.MIN_DEAD_AFTER
    finally:
        embedded.close()
    assert only(pk).state == "stopped"


@pytest.mark.parametrize("limit", [0, 1001, True])
def test_the_listing_limit_is_checked(pk: Pk, limit: int) -> None:
    with pytest.raises(purgekeeper.ValidationError, match="limit must be an integer from 1 to 1000"):
        pk.list_workers(limit=limit)
