"""Fault tests of the step protocol with real processes: PostgreSQL, a ``redis-server`` of the
test's own (one test flushes it, another stops and restarts it), ``dramatiq`` workers
(``--processes 1 --threads 2``) and ``purgectl scheduler``, with a 2 s step lease, a 0.2 s sweep
and a 0.05 s backoff base. The step row is the source of truth; Redis only carries wake-ups, so
losing them, or the worker, or Redis itself, must only delay a purge.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import text

import purgekeeper
from purgekeeper import EventScope
from purgekeeper.schema.states import StepStatus
from purgekeeper.workers import broker
from tests.helpers import body_of, scalar
from tests.helpers.processes import WAIT_S, Processes, RedisServer, open_transactions, wait_until

Pk = purgekeeper.Purgekeeper
QUEUE_KEY = f"dramatiq:{broker.QUEUE}"
DEAD_LETTERS = f"{QUEUE_KEY}.XQ"
DELAYED = f"{QUEUE_KEY}.DQ"
LEASE_EXPIRED = "the worker stopped during its last attempt (lease expired)"


# -- helpers -----------------------------------------------------------------------------------


def purge_event(pk: Pk, *, body: str = "SECRET") -> tuple[str, str, str]:
    """Ingest one event and purge it (a content purge: one bodies step).
    Returns (purge_id, step_id, event_id)."""
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    pk.create_conversation(conversation)
    event = pk.ingest_event(conversation, author="ada", body=body)
    scope = EventScope(event_ids=(event.id,))
    preview = pk.preview_purge(scope)
    acceptance = pk.confirm_purge(scope, scope_digest=preview.scope_digest, actor="op", reason="fault test")
    assert acceptance.outcome == "accepted"
    (step,) = pk.status(acceptance.purge_id).steps
    assert step.kind == "bodies"
    return acceptance.purge_id, step.id, event.id


def step_row(pk: Pk, step_id: str) -> Any:
    with pk.db.read() as conn:
        row = conn.execute(text("SELECT * FROM cleanup_steps WHERE id = :id"), {"id": step_id}).first()
    assert row is not None
    return row


def assert_shredded_not_nulled(pk: Pk, event_id: str) -> None:
    """A batch stopped at ``bodies.batch`` (before its commit) left the body in its row, and
    had destroyed its key already: the keys go before the NULLs commit."""
    assert scalar(pk, "SELECT body FROM events WHERE id = :id", id=event_id) is not None
    assert body_of(pk, event_id) == "<shredded>"


def execute(pk: Pk, sql: str) -> None:
    with pk.db.write() as conn:
        conn.exec_driver_sql(sql)


def wait_complete(pk: Pk, purge_id: str, *logs: Any) -> purgekeeper.PurgeStatus:
    status = pk.wait(purge_id, WAIT_S)
    if status.status != "complete":
        tails = "\n\n".join(f"--- {proc.name} ---\n{proc.tail()}" for proc in logs)
        raise AssertionError(f"purge {purge_id} is {status.status} after {WAIT_S:g}s: {status.steps}\n{tails}")
    return status


def queued(client: redis.Redis) -> int:
    """Messages held by the queue (waiting or fetched and not yet acked)."""
    return int(client.hlen(f"{QUEUE_KEY}.msgs"))


# -- SIGKILL mid-step ----------------------------------------------------------------------------


def test_a_worker_killed_mid_step_is_recovered_through_the_lease(pk: Pk, processes: Processes) -> None:
    hung = processes.worker("bodies.batch=hang")
    purge_id, step_id, event_id = purge_event(pk)

    # Provably mid-step: claimed and leased, its batch transaction open and not committed.
    wait_until(lambda: step_row(pk, step_id).status == StepStatus.RUNNING.value, "the step to be claimed")
    wait_until(lambda: open_transactions(pk) >= 1, "the hung batch's open transaction")
    held = step_row(pk, step_id)
    assert (held.attempts, held.lease_owner is not None, held.lease_expires_at is not None) == (1, True, True)
    assert_shredded_not_nulled(pk, event_id)

    assert processes.kill(hung) == -9
    assert step_row(pk, step_id).status == StepStatus.RUNNING.value  # nobody released the lease

    worker = processes.worker()
    scheduler = processes.scheduler()
    status = wait_complete(pk, purge_id, worker, scheduler)

    done = step_row(pk, step_id)
    assert (done.status, done.attempts, done.lease_owner, done.last_error) == ("done", 2, None, None)
    assert done.updated_at >= held.lease_expires_at, "re-claimed before the dead worker's lease expired"
    assert status.steps[0].attempts == 2
    assert body_of(pk, event_id) is None


def test_a_sigterm_releases_the_workers_leases(pk: Pk, processes: Processes) -> None:
    hung = processes.worker("bodies.batch=hang")
    purge_id, step_id, _ = purge_event(pk)
    wait_until(lambda: step_row(pk, step_id).status == StepStatus.RUNNING.value, "the step to be claimed")
    wait_until(lambda: open_transactions(pk) >= 1, "the hung batch's open transaction")
    held = step_row(pk, step_id)

    os.kill(hung.pid, signal.SIGTERM)  # dramatiq's main process passes it on to its worker process
    # its hung batch is abandoned after the grace (tests/faults/test_clean_stops.py), and rolls back
    assert hung.popen.wait(timeout=WAIT_S) == 0, hung.tail()
    released = step_row(pk, step_id)
    assert (released.status, released.attempts, released.lease_owner, released.lease_expires_at) == (
        "pending",
        0,  # a clean stop gives its attempt back
        None,
        None,
    )
    assert released.updated_at > held.updated_at and released.next_attempt_at == released.updated_at
    assert open_transactions(pk) == 0

    worker = processes.worker()
    scheduler = processes.scheduler()
    wait_complete(pk, purge_id, worker, scheduler)
    assert (step_row(pk, step_id).status, step_row(pk, step_id).attempts) == ("done", 1)


# -- Redis loses its messages ------------------------------------------------------------------


def test_purges_in_flight_survive_a_redis_flushall(pk: Pk, processes: Processes, redis_client: redis.Redis) -> None:
    purges = [purge_event(pk, body=f"SECRET-{n}") for n in range(4)]
    assert queued(redis_client) == len(purges)  # one wake-up each, waiting for a worker

    redis_client.flushall()
    assert redis_client.dbsize() == 0

    worker = processes.worker()
    time.sleep(1.0)  # the wake-ups are really gone: without a sweep nothing moves
    assert {(step_row(pk, step_id).status, step_row(pk, step_id).attempts) for _, step_id, _ in purges} == {
        ("pending", 0)
    }

    scheduler = processes.scheduler()
    for purge_id, step_id, event_id in purges:
        wait_complete(pk, purge_id, worker, scheduler)
        row = step_row(pk, step_id)
        assert (row.status, row.attempts) == ("done", 1)
        assert body_of(pk, event_id) is None


def test_a_confirmation_while_redis_is_down_succeeds_and_completes_once_it_is_back(
    pk: Pk, processes: Processes, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    worker = processes.worker()
    scheduler = processes.scheduler()
    redis_server.stop()  # the test's own server: the worker, the scheduler and the handle use it
    with caplog.at_level(logging.WARNING, logger="purgekeeper.commands.purge_commands"):
        purge_id, step_id, event_id = purge_event(pk)
    assert any("enqueue of cleanup steps" in r.getMessage() for r in caplog.records), caplog.text
    assert pk.status(purge_id).status == "accepted"
    assert step_row(pk, step_id).attempts == 0
    redis_server.start()
    wait_complete(pk, purge_id, worker, scheduler)
    row = step_row(pk, step_id)
    assert (row.status, row.attempts) == ("done", 1)
    assert body_of(pk, event_id) is None
    assert worker.alive() and scheduler.alive()


# -- a worker that dies on every attempt ----------------------------------------------------------


def test_a_step_whose_worker_dies_every_time_ends_incomplete_and_retry_rearms_it(pk: Pk, processes: Processes) -> None:
    scheduler = processes.scheduler()
    worker = processes.worker("bodies.batch=exit")
    purge_id, step_id, event_id = purge_event(pk)

    deaths: list[int] = []

    def incomplete_yet() -> bool:
        nonlocal worker
        if step_row(pk, step_id).status == StepStatus.INCOMPLETE.value:
            return True
        if not worker.alive():  # dramatiq stops when its worker process dies: start another
            deaths.append(processes.reap(worker))
            worker = processes.worker("bodies.batch=exit", wait_ready=False)
        return False

    wait_until(incomplete_yet, "the step to end incomplete")
    processes.kill(worker)

    row = step_row(pk, step_id)
    assert (row.attempts, row.max_attempts, row.lease_owner) == (5, 5, None)
    assert row.last_error == LEASE_EXPIRED
    assert deaths[:5] == [137] * 5, deaths  # each attempt died in its batch (os._exit(137))
    status = pk.status(purge_id)
    assert status.status == "incomplete"
    assert status.steps[0].last_error == LEASE_EXPIRED
    assert_shredded_not_nulled(pk, event_id)

    worker = processes.worker()
    retried = pk.retry(purge_id, actor="op", reason="the worker is fixed")
    assert retried.status in ("accepted", "cleaning", "complete")
    wait_complete(pk, purge_id, worker, scheduler)
    row = step_row(pk, step_id)
    assert (row.status, row.attempts) == ("done", 1)
    assert body_of(pk, event_id) is None


# -- the same step delivered twice at once -------------------------------------------------------


def test_the_same_step_delivered_twice_at_once_runs_once(
    open_handle: Callable[..., Pk], processes: Processes, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    captured: list[str] = []
    pk = open_handle(enqueue=captured.extend)  # the confirmation sends nothing
    purge_id, step_id, event_id = purge_event(pk)
    assert captured == [step_id]
    # Keep the first delivery inside its batch for a while, so the second one arrives mid-step.
    execute(
        pk,
        """
        CREATE FUNCTION pk_fault_slow() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_sleep(1); RETURN NEW; END $$;
        CREATE TRIGGER pk_fault_slow BEFORE UPDATE ON events FOR EACH ROW EXECUTE FUNCTION pk_fault_slow();
        """,
    )

    broker.enqueue(redis_server.url, pk.database_key, [step_id, step_id])
    assert queued(redis_client) == 2

    worker = processes.worker()  # its two threads take both deliveries at once

    def duplicate_acked_mid_step() -> bool:
        # Read the queue first: if the step is still running afterwards, it was running then.
        return queued(redis_client) == 1 and step_row(pk, step_id).status == StepStatus.RUNNING.value

    wait_until(duplicate_acked_mid_step, "one delivery to be acknowledged while the other is mid-step")
    wait_complete(pk, purge_id, worker)
    wait_until(lambda: queued(redis_client) == 0, "both deliveries to be acknowledged")
    row = step_row(pk, step_id)
    assert (row.status, row.attempts, row.last_error) == ("done", 1, None)
    assert body_of(pk, event_id) is None
    assert "Retries exceeded" not in worker.output()


# -- dramatiq's retries are off ------------------------------------------------------------------


def test_failures_are_retried_by_the_step_row_not_by_dramatiq(
    pk: Pk, processes: Processes, redis_client: redis.Redis
) -> None:
    # Two faults, injected in the test database: the first claim raises out of the actor
    # (a delivery dramatiq would retry if its retries were on), and the bodies batch fails
    # while the step is on its first or second attempt (failed attempts the step row retries).
    execute(
        pk,
        """
        CREATE SEQUENCE pk_fault_claims;
        CREATE FUNCTION pk_fault_claim() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF nextval('pk_fault_claims') <= 1 THEN RAISE EXCEPTION 'injected claim fault'; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER pk_fault_claim BEFORE UPDATE ON cleanup_steps FOR EACH ROW
            WHEN (NEW.status = 'running' AND OLD.status <> 'running') EXECUTE FUNCTION pk_fault_claim();
        CREATE FUNCTION pk_fault_batch() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF (SELECT max(attempts) FROM cleanup_steps WHERE kind = 'bodies') < 3 THEN
                RAISE EXCEPTION 'injected batch fault';
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER pk_fault_batch BEFORE UPDATE ON events FOR EACH ROW EXECUTE FUNCTION pk_fault_batch();
        """,
    )
    worker = processes.worker()
    scheduler = processes.scheduler()
    purge_id, step_id, event_id = purge_event(pk)
    wait_complete(pk, purge_id, worker, scheduler)

    row = step_row(pk, step_id)
    # The failed claim counted no attempt; each failed attempt counted one; the third succeeded.
    assert (row.status, row.attempts) == ("done", 3)
    assert "injected batch fault" in (row.last_error or "")
    log = worker.output()
    assert "attempt 1 failed" in log and "attempt 2 failed" in log and "attempt 3 failed" not in log

    # The delivery whose actor raised was dead-lettered at once, not retried by dramatiq.
    assert redis_client.zcard(DEAD_LETTERS) == 1
    (dead,) = redis_client.hvals(f"{DEAD_LETTERS}.msgs")
    assert json.loads(dead)["args"] == [pk.database_key, step_id]
    assert redis_client.llen(DELAYED) == 0 and redis_client.hlen(f"{DELAYED}.msgs") == 0
    assert log.count("Retries exceeded for message") == 1
    assert "Retrying message" not in log
    assert body_of(pk, event_id) is None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_worker_serves_dramatiq_metrics_when_asked(pk: Pk, processes: Processes, tmp_path: Path) -> None:
    """As the Procfile runs it: PURGEKEEPER_WORKER_METRICS_PORT and dramatiq_prom_port set."""
    port = str(free_port())
    metrics_dir = tmp_path / "dramatiq-prometheus"
    worker = processes.worker(
        env={"PURGEKEEPER_WORKER_METRICS_PORT": port, "dramatiq_prom_port": port, "dramatiq_prom_db": str(metrics_dir)}
    )
    purge_id, _step_id, _event_id = purge_event(pk)
    wait_complete(pk, purge_id, worker, processes.scheduler())

    def scraped() -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
                return str(response.read().decode("utf-8"))
        except OSError:
            return ""

    wait_until(lambda: "dramatiq_messages_total" in scraped(), "the worker's metrics to count the cleanup messages")
    assert 'actor_name="run_cleanup_step"' in scraped()
