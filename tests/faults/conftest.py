"""Fault-test fixtures: a Redis of the test's own, real ``python -m purgekeeper.commands.worker`` processes
and a real ``purgectl scheduler`` process, on a fresh PostgreSQL database.

Every process starts in its own session (``start_new_session=True``), so its pid is its process
group: a test can SIGKILL a whole worker (the dramatiq main process and its worker process) at
once, and teardown kills every group it started. Every wait is bounded (``WAIT_S``).

The machine's shared servers are never stopped, restarted, flushed or reconfigured. Each test
gets its own ``redis-server`` on a free port (``redis_server``), which it may stop, restart or
flush; a test that restarts or stops PostgreSQL does it to a cluster of its own (``cluster``).
A missing ``redis-server`` or ``initdb`` fails the run on CI (``CI`` set) and skips locally.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import purgekeeper
from tests.helpers.databases import REDIS_URL, postgres_url
from tests.helpers.processes import Cluster, throwaway_cluster


@pytest.fixture
def pk(open_handle: Callable[..., purgekeeper.Purgekeeper]) -> purgekeeper.Purgekeeper:
    """Overrides the top-level ``pk``: PostgreSQL only, confirmations enqueue to Redis."""
    return open_handle()


# -- a throw-away PostgreSQL cluster -------------------------------------------------------------


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    conf = "fsync = off\nfull_page_writes = off\nshared_buffers = 32MB\nmax_connections = 60\n"
    with throwaway_cluster("purgekeeper-cluster-", conf) as made:
        yield made


# -- the machine's shared servers ----------------------------------------------------------------


def shared_redis_run_id() -> str | None:
    """The ``run_id`` of the machine's Redis (new at every start), or None if it does not answer."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1, socket_timeout=2, retry=Retry(NoBackoff(), 0))
    try:
        return str(client.info("server")["run_id"])
    except redis.RedisError:
        return None
    finally:
        client.close()


def shared_postgres_starts() -> tuple[Any, ...] | None:
    """When the machine's PostgreSQL started and last loaded its configuration (a restart or a
    reload after ``ALTER SYSTEM`` moves them), or None if it does not answer."""
    import psycopg

    try:
        with psycopg.connect(postgres_url("postgres").replace("+psycopg", ""), connect_timeout=2) as conn:
            return tuple(conn.execute("SELECT pg_postmaster_start_time(), pg_conf_load_time()").fetchone() or ())
    except psycopg.Error:
        return None


@pytest.fixture(scope="session", autouse=True)
def shared_servers_untouched() -> Iterator[None]:
    """The fault tests leave the machine's Redis and PostgreSQL as they found them: the same
    Redis process, and a PostgreSQL neither restarted nor reloaded (checked at the end)."""
    before = (shared_redis_run_id(), shared_postgres_starts())
    yield
    after = (shared_redis_run_id(), shared_postgres_starts())
    assert after == before, (
        f"the shared Redis or PostgreSQL was restarted or reloaded during the fault tests: {before} -> {after}"
    )
