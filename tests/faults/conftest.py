"""Fault-test fixtures: a Redis of the test's own, real ``python -m commands.worker`` processes
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

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import commands
from tests.helpers.databases import REDIS_URL, postgres_url, service_missing
from tests.helpers.processes import Cluster, Processes, RedisServer, free_port
from workers import broker

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
) -> Iterator[Callable[..., commands.Purgekeeper]]:
    """Open handles on the test database (or ``database_url``) whose confirmations enqueue to
    the test's Redis (no in-process worker); they are closed at teardown."""
    handles: list[commands.Purgekeeper] = []

    def open_one(database_url: str | None = None, **kwargs: Any) -> commands.Purgekeeper:
        handle = commands.open(
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


@pytest.fixture
def pk(open_handle: Callable[..., commands.Purgekeeper]) -> commands.Purgekeeper:
    """Overrides the top-level ``pk``: PostgreSQL only, confirmations enqueue to Redis."""
    return open_handle()


# -- a throw-away PostgreSQL cluster -------------------------------------------------------------


def _postgres_bin() -> Path | None:
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists():
            return candidate
    found = shutil.which("initdb")
    return Path(found).parent if found else None


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    binaries = _postgres_bin()
    if binaries is None:
        service_missing("initdb", FileNotFoundError("no PostgreSQL server binaries"))
    assert binaries is not None
    # not under pytest's tmp_path: its parents are private to root, and the server runs as postgres
    directory = Path(tempfile.mkdtemp(prefix="purgekeeper-cluster-"))
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    made = Cluster(binaries, directory, free_port())
    data = directory / "data"
    try:
        made._as_postgres(str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        service_missing("a throw-away PostgreSQL cluster", exc)
    with (data / "postgresql.conf").open("a") as conf:
        conf.write(
            f"port = {made.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{directory}'\n"
            "fsync = off\nfull_page_writes = off\nshared_buffers = 32MB\nmax_connections = 60\n"
        )
    made.ctl("start")
    try:
        yield made
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            made.ctl("stop", "-m", "immediate")
        shutil.rmtree(directory, ignore_errors=True)


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
