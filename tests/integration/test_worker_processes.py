"""Real worker and scheduler processes (``python -m purgekeeper.commands.worker``, ``purgectl scheduler``) on
PostgreSQL and a Redis of the test's own beat as themselves: the Workers view's rows come from
them, a worker's row shows the step it is running, a killed worker is dead within its bound
and its purge needs attention at once, and a SIGTERM marks a process stopped. Heartbeats
every 0.2 s (``PURGEKEEPER_SWEEP_INTERVAL``), so the dead bound is its 2 s floor."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable

import purgekeeper
from purgekeeper.schema import heartbeats
from purgekeeper.workers import broker
from tests.helpers.processes import Proc, Processes, wait_until

Pk = purgekeeper.Purgekeeper
WHO = {"actor": "ops@example.org", "reason": "the user asked"}


def row_of(pk: Pk, role: str, pid_group: int) -> purgekeeper.WorkerProcess | None:
    """The newest row of ``role`` whose process is in the group led by ``pid_group``."""
    for worker in pk.list_workers():
        if worker.role == role and _group(worker.pid) in (pid_group, None):
            return worker
    return None


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:  # it died: its row is still the group's
        return None


def in_state(pk: Pk, role: str, proc: Proc, state: str) -> purgekeeper.WorkerProcess | None:
    found = row_of(pk, role, proc.pid)
    return found if found is not None and found.state == state else None


def test_a_worker_shows_its_step_and_is_dead_within_its_bound_once_killed(
    processes: Processes, open_handle: Callable[..., Pk]
) -> None:
    worker = processes.worker("bodies.batch=hang")
    scheduler = processes.scheduler()
    pk = open_handle()
    alive = wait_until(lambda: in_state(pk, "worker", worker, "alive"), "the worker's heartbeat")
    assert (alive.host, os.getpgid(alive.pid), alive.queues, alive.threads) == (
        socket.gethostname(),
        worker.pid,  # a process of the dramatiq group the test started
        (broker.QUEUE,),
        2,
    )
    assert alive.holding == ()  # idle, and listed all the same
    assert wait_until(lambda: in_state(pk, "scheduler", scheduler, "alive"), "the scheduler").pid == scheduler.pid

    pk.create_conversation("c-1")
    pk.ingest_event("c-1", author="ada", body="secret")
    purge_id = pk.purge_conversation("c-1", **WHO).purge_id
    busy = wait_until(lambda: (w := row_of(pk, "worker", worker.pid)) and w.holding and w, "the worker's held step")
    assert [(step.purge_id, step.kind) for step in busy.holding] == [(purge_id, "bodies")]

    processes.kill(worker)
    killed_at = pk.database_now()
    dead = wait_until(lambda: in_state(pk, "worker", worker, "dead"), "the killed worker to be dead", timeout=15)
    assert dead.alive_until <= killed_at + heartbeats.MIN_DEAD_AFTER  # dead within its bound of the kill
    assert dead.alive_until - dead.last_seen_at == heartbeats.MIN_DEAD_AFTER
    assert pk.status(purge_id).stalled and purge_id in pk.stalled_purge_ids()  # nobody is left to run it

    os.kill(scheduler.pid, signal.SIGTERM)
    assert wait_until(lambda: in_state(pk, "scheduler", scheduler, "stopped"), "the scheduler to stop").stopped_at


def test_a_worker_stopped_by_sigterm_is_marked_stopped(processes: Processes, open_handle: Callable[..., Pk]) -> None:
    worker = processes.worker()
    pk = open_handle()
    wait_until(lambda: in_state(pk, "worker", worker, "alive"), "the worker's heartbeat")
    os.kill(worker.pid, signal.SIGTERM)  # to the main process, as honcho sends it
    stopped = wait_until(lambda: in_state(pk, "worker", worker, "stopped"), "the worker to be marked stopped")
    assert (stopped.alive, stopped.holding) == (False, ())
    assert worker.popen.wait(timeout=30) == 0
