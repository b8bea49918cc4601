"""Fixtures of a Redis of the test's own, and of real worker and scheduler processes on a fresh
PostgreSQL database, shared by the fault tests (tests/faults/conftest.py) and the log tests
(tests/integration/test_logs.py): a module imports the ones it uses, and pytest finds them.
The machine's shared servers are never stopped, restarted, flushed or reconfigured."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
import redis

import purgekeeper
from purgekeeper.workers import broker
from tests.helpers.databases import service_missing
from tests.helpers.processes import Processes, RedisServer, free_port

FAULT_SETTINGS = {
    "PURGEKEEPER_STEP_LEASE": "2",
    "PURGEKEEPER_SWEEP_INTERVAL": "0.2",
    "PURGEKEEPER_BACKOFF_BASE": "0.05",
}


# -- a throw-away Redis ------------------------------------------------------------------------


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """The test's own Redis: every fault test's processes and handles use it, so none of them
    stops, flushes or fills the machine's shared server (nor a database another run uses).
    A missing ``redis-server`` fails the run on CI and skips locally."""
    binary = shutil.which("redis-server")
    if binary is None:
        service_missing("redis-server", FileNotFoundError("no redis-server on PATH"))
    assert binary is not None
    directory = tmp_path / "redis"
    directory.mkdir()
    server = RedisServer(Path(binary), directory, free_port())
    try:
        server.start()
        yield server
    finally:
        server.kill()


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client on the test's own (empty) Redis."""
    client = redis.Redis.from_url(redis_server.url, socket_connect_timeout=1, socket_timeout=2)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def restartable_redis(redis_client: redis.Redis) -> redis.Redis:
    """For the tests that stop Redis: the client on the test's own server, which they stop and
    start through ``redis_server`` and which teardown kills."""
    return redis_client


@pytest.fixture
def redis_broker(redis_server: RedisServer) -> Iterator[dramatiq.Broker]:
    """This test process's broker for the test's Redis, dropped after the test; the process's
    other brokers (an embedded StubBroker, say) are left alone."""
    broker.forget(redis_server.url)  # an earlier test's server may have had the same port
    the_broker = broker.setup(redis_server.url)
    try:
        yield the_broker
    finally:
        broker.forget(redis_server.url)


# -- processes ---------------------------------------------------------------------------------


@pytest.fixture
def fault_env(postgres_clone: str, roots: dict[str, Path], tmp_path: Path, redis_server: RedisServer) -> dict[str, str]:
    """The environment of the worker and scheduler processes (PURGEKEEPER_* already stripped)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PURGEKEEPER_")}
    env.update(
        {
            "PURGEKEEPER_DATABASE_URL": postgres_clone,
            "PURGEKEEPER_BROKER_URL": redis_server.url,
            "PURGEKEEPER_DATA_DIR": str(tmp_path / "data"),
            "PURGEKEEPER_BLOB_ROOT": str(roots["blob_root"]),
            "PURGEKEEPER_FILE_ROOT": str(roots["file_root"]),
            "PURGEKEEPER_MEMORY_ROOTS": str(roots["memory_root"]),
            "PURGEKEEPER_CHECKPOINT_DIR": str(roots["checkpoint_dir"]),
            "PYTHONUNBUFFERED": "1",
            **FAULT_SETTINGS,
        }
    )
    return env


@pytest.fixture
def processes(fault_env: dict[str, str], tmp_path: Path, redis_client: redis.Redis) -> Iterator[Processes]:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    procs = Processes(fault_env, log_dir)
    try:
        yield procs
    finally:
        procs.close()


@pytest.fixture
def open_handle(
    postgres_clone: str, roots: dict[str, Path], redis_server: RedisServer, redis_broker: dramatiq.Broker
) -> Iterator[Callable[..., purgekeeper.Purgekeeper]]:
    """Open handles on the test database (or ``database_url``) whose confirmations enqueue to
    the test's Redis (no in-process worker); they are closed at teardown."""
    handles: list[purgekeeper.Purgekeeper] = []

    def open_one(database_url: str | None = None, **kwargs: Any) -> purgekeeper.Purgekeeper:
        handle = purgekeeper.open(
            database_url or postgres_clone,
            blob_root=roots["blob_root"],
            file_root=roots["file_root"],
            checkpoint_dir=roots["checkpoint_dir"],
            memory_roots=[roots["memory_root"]],
            broker_url=redis_server.url,
            workers="none",
            **kwargs,
        )
        handles.append(handle)
        return handle

    try:
        yield open_one
    finally:
        for handle in handles:
            handle.close()
