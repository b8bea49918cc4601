"""A PostgreSQL restart, or its sessions terminated, stops nothing for good (issue 11, case 8).

The database is a throw-away cluster of the test's own (``cluster``): it is restarted with
``pg_ctl restart -m fast`` half a second after a conversation purge of a few thousand events
is accepted, or its sessions are ended with ``pg_terminate_backend``. The Procfile's
``worker`` (``dramatiq purgekeeper.commands.worker``) and ``scheduler`` (``purgectl scheduler``) run on it
with real Redis, and so do ``purgectl serve`` and an open handle in the test. Nobody restarts
any of them: the purge completes, the processes stay up, and the handle and the HTTP API
answer again.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
import redis
from sqlalchemy import text

import purgekeeper
from purgekeeper.schema import migrate
from purgekeeper.schema.db import Database
from purgekeeper.workers import broker
from tests.helpers.processes import WAIT_S, Cluster, Processes, free_port, seed_conversation, wait_until
from tests.helpers.stopping import slow_first_batch

Pk = purgekeeper.Purgekeeper
EVENTS = 3000
API_TOKEN = "restart-test-token"


@pytest.fixture
def cluster_url(cluster: Cluster) -> str:
    """A migrated database ``pk`` on the throw-away cluster."""
    import psycopg

    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE pk")
    db = Database(cluster.url("pk"))
    migrate.upgrade(db)
    db.dispose()
    return cluster.url("pk")


@pytest.fixture
def on_cluster(cluster_url: str, processes: Processes) -> Processes:
    """The test's processes, pointed at the throw-away cluster."""
    processes.env = {**processes.env, "PURGEKEEPER_DATABASE_URL": cluster_url, "PURGEKEEPER_API_TOKEN": API_TOKEN}
    return processes


@pytest.fixture
def handle(cluster_url: str, open_handle: Callable[..., Pk]) -> Pk:
    """A handle on the throw-away cluster, enqueueing to Redis."""
    return open_handle(database_url=cluster_url)


def api_get(port: int, path: str) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {API_TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def complete_without_restarts(pk: Pk, purge_id: str, procs: list[Any]) -> purgekeeper.PurgeStatus:
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            status = pk.status(purge_id)
        except purgekeeper.InfrastructureError:  # the handle's first call after the restart may meet a dead session
            status = None
        if status is not None and status.status in ("complete", "incomplete"):
            break
        if time.monotonic() > deadline:
            tails = "\n\n".join(f"--- {proc.name} ---\n{proc.tail()}" for proc in procs)
            raise AssertionError(f"purge {purge_id} is {status and status.status} after {WAIT_S:g}s\n{tails}")
        time.sleep(0.1)
    for proc in procs:
        assert proc.alive(), f"{proc.name} exited:\n{proc.tail()}"
    assert status.status == "complete", status.steps
    return status


# A lease far longer than the test waits: a step whose attempt ended with the restart, its
# end unrecorded, would sit "running" until then. Nothing may wait for a lease to run out.
LONG_LEASE = {"PURGEKEEPER_STEP_LEASE": "300"}


@pytest.mark.parametrize("down_for", [0.0, 3.0], ids=["pg_ctl-restart", "three-seconds-down"])
def test_a_postgres_restart_mid_purge_heals_without_restarting_anything(
    handle: Pk, on_cluster: Processes, cluster: Cluster, redis_client: redis.Redis, down_for: float
) -> None:
    on_cluster.env = {**on_cluster.env, **LONG_LEASE}
    port = free_port()
    api = on_cluster.serve(port)
    worker = on_cluster.worker()
    scheduler = on_cluster.scheduler()
    seed_conversation(handle, "c1", EVENTS)
    wait_until(lambda: api_get(port, "/v1/conversations") == 200, "the API to answer")

    purge_id = handle.purge_conversation("c1", actor="op", reason="restart test").purge_id
    claimed = lambda: any(step.status == "running" for step in handle.status(purge_id).steps)  # noqa: E731
    wait_until(claimed, "a step to be claimed", interval=0.005)  # mid-step, then the restart
    cluster.restart(down_for=down_for)

    status = complete_without_restarts(handle, purge_id, [worker, scheduler, api])
    assert sum(step.attempts for step in status.steps) <= 2 * len(status.steps)
    assert handle.read_conversation("c1") == []
    handle.create_conversation("c-after")  # the open handle writes again
    assert handle.ingest_event("c-after", author="ada", body="after").body == "after"
    wait_until(lambda: api_get(port, "/v1/conversations") == 200, "the API to answer after the restart")
    with handle.db.read() as conn:
        assert conn.scalar(text("SELECT count(*) FROM events WHERE body IS NOT NULL AND id LIKE 'c1-%'")) == 0


def test_terminated_sessions_mid_purge_heal_without_restarting_anything(
    handle: Pk, on_cluster: Processes, cluster: Cluster
) -> None:
    on_cluster.env = {**on_cluster.env, **LONG_LEASE}
    worker = on_cluster.worker()
    scheduler = on_cluster.scheduler()
    seed_conversation(handle, "c1", EVENTS)
    purge_id = handle.purge_conversation("c1", actor="op", reason="terminate test").purge_id
    ended = 0
    for _ in range(3):  # end every session a few times while the purge runs
        time.sleep(0.4)
        ended += cluster.terminate_backends("pk")
    assert ended > 0
    complete_without_restarts(handle, purge_id, [worker, scheduler])
    assert handle.read_conversation("c1") == []


def test_health_reports_the_database_back(on_cluster: Processes, cluster: Cluster, cluster_url: str) -> None:
    """``purgectl health`` fails with exit 4 while the server is down and passes once it is
    back, with no state of its own to heal."""
    cluster.ctl("stop", "-m", "fast")
    down = on_cluster.run_cli("health", "--json")
    assert down.returncode == 4, down.stdout
    assert json.loads(down.stdout)["error"] in ("infrastructure_error", "schema_mismatch")
    cluster.ctl("start")
    up = on_cluster.run_cli("health", "--json")
    assert up.returncode == 0, (up.stdout, up.stderr)


def test_a_wake_up_consumed_while_the_database_is_down_is_sent_again_by_the_next_sweep(
    handle: Pk, on_cluster: Processes, cluster: Cluster, redis_client: redis.Redis
) -> None:
    """The worker takes a step's wake-ups while the server is down: it cannot claim the step,
    and the messages are gone. The scheduler sends none of its own while the acceptance's
    wake-up waits in the queue (at most one queued per due step), and ``resend_after`` (the
    step lease) is an hour here. Once the server is back its next sweep sends the step again
    (its wake-up is no longer queued) and the purge completes."""
    on_cluster.env = {**on_cluster.env, "PURGEKEEPER_STEP_LEASE": "3600"}
    worker = on_cluster.worker()
    scheduler = on_cluster.scheduler()
    os.killpg(worker.pid, signal.SIGSTOP)  # it takes nothing until the server is down
    handle.create_conversation("c1")
    handle.ingest_event("c1", author="ada", body="SECRET")
    purge_id = handle.purge_conversation("c1", actor="op", reason="lost wake-up").purge_id
    queue = f"dramatiq:{broker.QUEUE}.msgs"
    # the acceptance's two wake-ups (its bodies step, its parked attachments step); the
    # scheduler's sweeps find the bodies step's waiting and send no second one
    wait_until(lambda: redis_client.hlen(queue) >= 2, "the acceptance's wake-ups")
    time.sleep(1.0)  # a few of the scheduler's sweeps (0.2 s apart)
    assert redis_client.hlen(queue) == 2
    cluster.ctl("stop", "-m", "fast")
    os.killpg(worker.pid, signal.SIGCONT)
    wait_until(lambda: redis_client.hlen(queue) == 0, "the worker to take the wake-ups (and fail to claim)")
    cluster.ctl("start")
    complete_without_restarts(handle, purge_id, [worker, scheduler])


def test_a_postgres_restart_mid_group_heals_every_purge_of_the_group(
    handle: Pk, on_cluster: Processes, cluster: Cluster
) -> None:
    """Four conversation purges accepted before the worker starts: their steps run in groups
    (``purgekeeper.workers.grouped``) when the server restarts; every purge completes, and no
    process is restarted. The group's first batch sleeps 1 s first (its first UPDATE of
    events), so the group is caught mid-batch: without it, a group that finished between two
    polls was once never seen running."""
    on_cluster.env = {**on_cluster.env, **LONG_LEASE}
    names = [f"g{i}" for i in range(4)]
    for name in names:
        seed_conversation(handle, name, EVENTS)
    slow_first_batch(handle, names[0], events="g")
    purged = [handle.purge_conversation(name, actor="op", reason="restart test").purge_id for name in names]
    worker = on_cluster.worker()
    scheduler = on_cluster.scheduler()
    wait_until(lambda: _running(handle) > 1, "a group to be claimed", interval=0.005)  # mid-group, then the restart
    cluster.restart()

    for purge_id in purged:
        complete_without_restarts(handle, purge_id, [worker, scheduler])
    assert all(handle.read_conversation(name) == [] for name in names)


def _running(pk: Pk) -> int:
    with pk.db.read() as conn:
        return int(conn.scalar(text("SELECT count(*) FROM cleanup_steps WHERE status = 'running'")))
