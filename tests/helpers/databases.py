"""The test PostgreSQL server and Redis: where they are, admin connections, creating and
dropping databases, and ``RawSQL``, a client that bypasses the library. The root conftest's
fixtures are built on these; a test that needs a database of its own uses them directly."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from sqlalchemy import Connection, CursorResult, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from purgekeeper.schema.errors import PurgekeeperError, translate_db_error

POSTGRES_ADMIN_URL = os.environ.get("PK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _redis_url() -> str:
    """The shared Redis database the tests may flush: db 15 (or ``PK_TEST_REDIS_URL``'s), and
    under pytest-xdist one database per worker (gw0 15, gw1 14, ...; below 0 it wraps to 15, as
    Redis has 16), so that one worker's ``flushdb`` never empties a queue another worker is
    looking at. A URL without a database number means db 0."""
    base = urlsplit(os.environ.get("PK_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return base.geturl()
    database = (int(base.path.strip("/") or 0) - int(worker[2:])) % 16
    return base._replace(path=f"/{database}").geturl()


REDIS_URL = _redis_url()
BACKENDS = ("sqlite", "postgresql")
ON_CI = bool(os.environ.get("CI"))


def service_missing(what: str, error: Exception) -> None:
    message = f"{what} is not reachable: {error}"
    if ON_CI:
        pytest.fail(message)
    pytest.skip(message)


def admin_connect(dbname: str = "postgres") -> psycopg.Connection:
    url = make_url(POSTGRES_ADMIN_URL).set(database=dbname)
    return psycopg.connect(url.render_as_string(hide_password=False).replace("+psycopg", ""), autocommit=True)


def postgres_url(dbname: str) -> str:
    return make_url(POSTGRES_ADMIN_URL).set(database=dbname).render_as_string(hide_password=False)


def create_database(name: str, *, template: str | None = None) -> None:
    with admin_connect() as conn:
        clause = f" TEMPLATE {template}" if template else ""
        conn.execute(f'CREATE DATABASE "{name}"{clause}')


def terminate_sessions(name: str) -> None:
    """End every other session of database ``name`` (a test's own, never the shared ones')."""
    with admin_connect() as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )


def copy_database(name: str, *, template: str) -> None:
    """``name`` as a template copy of ``template`` (a test's own database). A copy needs the
    template to have no other session, and a handle's background thread (the gate's audit,
    a sweep) may hold or open one at any moment, the server waiting 5 s for it at each try:
    after one such try, the template's other sessions are ended (a handle reconnects, as a
    running process does after a restore)."""
    for _ in range(4):
        try:
            create_database(name, template=template)
            return
        except psycopg.errors.ObjectInUse:
            terminate_sessions(template)
            time.sleep(0.1)
    create_database(name, template=template)


def drop_database(name: str) -> None:
    with admin_connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class RawSQL:
    """A client that bypasses the library: one connection, one transaction that the test
    rolls back, and each statement in its own savepoint so a refusal leaves the rest usable."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.dialect = conn.dialect.name

    def run(self, sql: str, **params: object) -> CursorResult[Any]:
        with self.conn.begin_nested():
            return self.conn.execute(text(sql), params)

    def scalar(self, sql: str, **params: object) -> Any:
        return self.conn.execute(text(sql), params).scalar()

    def refused(self, sql: str, expected: type[PurgekeeperError], **params: object) -> PurgekeeperError:
        with pytest.raises(sa_exc.DBAPIError) as info, self.conn.begin_nested():
            self.conn.execute(text(sql), params)
        domain = translate_db_error(info.value)
        assert isinstance(domain, expected), f"{sql!r} raised {info.value.orig!r}, which maps to {domain!r}"
        return domain


def open_rooted(database_url: str, root: Path) -> Any:
    """``purgekeeper.open`` on ``database_url`` (migrating it) with every directory under
    ``root`` and no in-process worker: a test that builds its own database first."""
    import purgekeeper

    return purgekeeper.open(
        database_url,
        blob_root=root / "blobs",
        file_root=root / "files",
        memory_roots=[root / "memory"],
        checkpoint_dir=root / "ledger",
        workers="none",
    )
