"""The migrations build exactly the schema the table definitions describe, on both backends,
and ``purgectl init`` is idempotent and refuses a database newer than the code."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

import commands
from schema import fences, migrate
from schema.db import Database
from schema.errors import SchemaMismatch
from schema.tables import metadata


def installed_triggers(db: Database) -> set[str]:
    query = (
        "SELECT name FROM sqlite_master WHERE type = 'trigger'"
        if db.is_sqlite
        else "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
    )
    with db.read() as conn:
        return set(conn.scalars(text(query)))


def test_migrations_match_the_table_definitions(db: Database) -> None:
    with db.read() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
    assert diff == []


def test_migrations_install_every_named_trigger(db: Database) -> None:
    assert installed_triggers(db) == fences.TRIGGERS[db.dialect]


def test_tables_carry_the_contract_names(db: Database) -> None:
    with db.read() as conn:
        tables = set(inspect(conn).get_table_names())
    assert {
        "conversations",
        "events",
        "placements",
        "runs",
        "admissions",
        "derivatives",
        "derivative_sources",
        "blobs",
        "attachments",
        "bots",
        "purge_ledger",
        "ledger_head",
        "tombstones",
        "cleanup_steps",
    } <= tables


def test_init_on_an_up_to_date_database_does_nothing(db: Database) -> None:
    with db.read() as conn:
        head_before = conn.execute(text("SELECT database_id, seq, head_hash FROM ledger_head")).one()
    result = migrate.upgrade(db)
    assert (result.before, result.after, result.changed) == (migrate.head_revision(), migrate.head_revision(), False)
    with db.read() as conn:
        assert conn.execute(text("SELECT database_id, seq, head_hash FROM ledger_head")).one() == head_before


def test_a_new_database_gets_a_random_id_and_a_genesis_head(tmp_path: Path) -> None:
    ids = set()
    for name in ("a.db", "b.db"):
        db = Database(f"sqlite:///{tmp_path / name}")
        assert migrate.upgrade(db).changed
        with db.read() as conn:
            database_id, seq, head = conn.execute(text("SELECT database_id, seq, head_hash FROM ledger_head")).one()
        db.dispose()
        assert (seq, head) == (0, "0" * 64)
        ids.add(database_id)
    assert len(ids) == 2


def test_a_database_newer_than_the_code_is_refused(db: Database, database_url: str, tmp_path: Path) -> None:
    with db.write() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    with pytest.raises(SchemaMismatch, match="newer than this code"):
        migrate.upgrade(db)
    with pytest.raises(SchemaMismatch):
        commands.open(database_url, blob_root=tmp_path / "b", file_root=tmp_path / "f", checkpoint_dir=tmp_path / "l")
    with db.read() as conn:
        assert conn.scalar(text("SELECT version_num FROM alembic_version")) == "9999_from_the_future"


def run_purgectl(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "commands.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_purgectl_init_creates_migrates_and_refuses_newer(tmp_path: Path) -> None:
    env = {"PURGEKEEPER_DATA_DIR": str(tmp_path / "data")}
    first = run_purgectl("init", "--json", env=env)
    assert first.returncode == 0, first.stderr
    created = json.loads(first.stdout)
    assert created["migrated"] is True and created["revision"] == migrate.head_revision()
    assert (tmp_path / "data" / "purgekeeper.db").is_file()

    again = json.loads(run_purgectl("init", "--json", env=env).stdout)
    assert again["migrated"] is False

    with sqlite3.connect(tmp_path / "data" / "purgekeeper.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'zzzz'")
    refused = run_purgectl("init", "--json", env=env)
    assert refused.returncode == 4
    error = json.loads(refused.stdout)
    assert error["error"] == "schema_mismatch" and "newer than this code" in error["detail"]


@pytest.mark.sqlite_only
def test_sqlite_runs_in_wal_with_secure_delete_and_a_busy_timeout(db: Database) -> None:
    with db.read() as conn:
        pragmas = {
            name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
            for name in ("journal_mode", "busy_timeout", "secure_delete", "foreign_keys")
        }
    assert pragmas["journal_mode"] == "wal"
    assert pragmas["busy_timeout"] > 0
    assert pragmas["secure_delete"] == 1
    assert pragmas["foreign_keys"] == 1


@pytest.mark.sqlite_only
def test_sqlite_write_transactions_begin_immediate(db: Database, database_url: str) -> None:
    path = database_url.removeprefix("sqlite:///")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with db.write():
            # The write lock is taken at BEGIN, before any write: nobody else can start one.
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        with db.read():
            other.execute("BEGIN IMMEDIATE")  # a read transaction does not hold the write lock
            other.execute("ROLLBACK")
    finally:
        other.close()
