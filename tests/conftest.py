"""Shared fixtures: the two backends, cloned databases, and a clean environment.

Every backend-neutral test takes ``database_url`` (or ``pk``, or ``raw``) and so runs on
SQLite and on PostgreSQL. PostgreSQL tests clone a template database that is migrated once
per session (``synchronous_commit=off``); SQLite tests copy a migrated template file.
A missing PostgreSQL fails the run on CI (``CI`` set) and skips those tests locally.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import purgekeeper
from purgekeeper.schema import migrate
from purgekeeper.schema.db import Database
from tests.helpers import imports
from tests.helpers.databases import BACKENDS, RawSQL, create_database, drop_database, postgres_url, service_missing
from tests.helpers.databases import admin_connect as _admin_connect

# the test's own Redis and real worker processes (tests/faults, tests/integration/test_logs.py)
pytest_plugins = ["tests.helpers.process_fixtures"]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No PURGEKEEPER_* variable leaks in; the default data directory is the test's own."""
    for name in list(os.environ):
        if name.startswith("PURGEKEEPER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture(scope="session", autouse=True)
def modules_load_once() -> Iterator[None]:
    """At the session's end, no module of the project was loaded under two names by any test
    (tests/helpers/imports.py says why that matters)."""
    yield
    assert (imports.doubly_imported(), imports.bare_layers()) == ({}, [])


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    try:
        with _admin_connect() as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        service_missing("PostgreSQL", exc)
    name = f"pk_template_{os.getpid()}"
    drop_database(name)
    create_database(name)
    with _admin_connect() as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    db = Database(postgres_url(name))
    migrate.upgrade(db)
    db.dispose()
    yield name
    drop_database(name)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    db = Database(f"sqlite:///{path}")
    migrate.upgrade(db)
    with db.write() as conn:  # fold the WAL into the file so a plain copy is complete
        conn.exec_driver_sql("SELECT 1")
    db.dispose()
    return path


@pytest.fixture
def postgres_clone(postgres_template: str) -> Iterator[str]:
    """A fresh PostgreSQL database cloned from the migrated template."""
    name = f"pk_t_{uuid.uuid4().hex[:16]}"
    create_database(name, template=postgres_template)
    yield postgres_url(name)
    drop_database(name)


@pytest.fixture
def sqlite_clone(sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "purgekeeper.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    marks = {m.name for m in request.node.iter_markers()}
    if request.param == "sqlite" and "postgres_only" in marks:
        pytest.skip("PostgreSQL only")
    if request.param == "postgresql" and "sqlite_only" in marks:
        pytest.skip("SQLite only")
    return str(request.param)


@pytest.fixture
def database_url(backend: str, request: pytest.FixtureRequest) -> str:
    fixture = "sqlite_clone" if backend == "sqlite" else "postgres_clone"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, Path]:
    return {
        "blob_root": tmp_path / "blobs",
        "file_root": tmp_path / "files",
        "checkpoint_dir": tmp_path / "ledger",
        "memory_root": tmp_path / "memory",
    }


@pytest.fixture
def open_pk(database_url: str, roots: dict[str, Path]) -> Iterator[Callable[..., purgekeeper.Purgekeeper]]:
    """Open handles on the test database with no in-process worker (acceptance is observed
    before any cleanup), with ``purgekeeper.open``'s other options as given; all are closed at
    teardown."""
    opened: list[purgekeeper.Purgekeeper] = []

    def open_one(**options: Any) -> purgekeeper.Purgekeeper:
        handle = purgekeeper.open(
            database_url,
            blob_root=roots["blob_root"],
            file_root=roots["file_root"],
            checkpoint_dir=roots["checkpoint_dir"],
            memory_roots=[roots["memory_root"]],
            workers="none",
            **options,
        )
        opened.append(handle)
        return handle

    try:
        yield open_one
    finally:
        for handle in opened:
            handle.close()


@pytest.fixture
def pk(open_pk: Callable[[], purgekeeper.Purgekeeper]) -> purgekeeper.Purgekeeper:
    """A handle with no in-process worker: acceptance is observed before any cleanup."""
    return open_pk()


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    yield database
    database.dispose()


@pytest.fixture(scope="session")
def postgres_shared(postgres_template: str) -> Iterator[str]:
    """One clone for the tests that roll back everything they do."""
    name = f"pk_shared_{os.getpid()}"
    drop_database(name)
    create_database(name, template=postgres_template)
    yield postgres_url(name)
    drop_database(name)


@pytest.fixture
def raw(backend: str, request: pytest.FixtureRequest) -> Iterator[RawSQL]:
    fixture = "postgres_shared" if backend == "postgresql" else "sqlite_clone"
    url = request.getfixturevalue(fixture)
    database = Database(url)
    conn = database.engine.connect()
    transaction = conn.begin()
    try:
        yield RawSQL(conn)
    finally:
        transaction.rollback()
        conn.close()
        database.dispose()
