"""SQLite's content reads on each thread's own driver connection (``Database.single``): no
pool slot held, closed with its thread, by dispose() and after a failed read, and never
reused by another thread."""

from __future__ import annotations

import dataclasses
import datetime as dt
import gc
import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from purgekeeper.commands.records import Attachment, Event, make_event
from purgekeeper.schema import migrate
from purgekeeper.schema.db import Database
from purgekeeper.schema.states import Binding


@pytest.fixture
def db(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'pk.db'}")
    migrate.upgrade(database)
    return database


def _reads_one(db: Database) -> sqlite3.Connection:
    with db.single() as conn:
        assert conn.driver_connection.execute("SELECT seq FROM ledger_head").fetchone() is not None
        assert db.engine.pool.checkedout() == 0  # it holds no slot of the pool
        return conn.driver_connection


def _is_closed(connection: sqlite3.Connection) -> bool:
    try:
        connection.execute("SELECT 1")
    except sqlite3.ProgrammingError:
        return True
    return False


def test_a_thread_keeps_its_own_connection_and_no_other_thread_gets_it(db: Database) -> None:
    mine = _reads_one(db)
    assert _reads_one(db) is mine
    seen: list[sqlite3.Connection] = []
    worker = threading.Thread(target=lambda: seen.append(_reads_one(db)))
    worker.start()
    worker.join()
    assert seen and seen[0] is not mine
    del worker
    gc.collect()
    assert _is_closed(seen[0]), "a thread's connection outlived the thread"
    assert not _is_closed(mine)


def test_dispose_closes_every_threads_connection_and_the_next_read_opens_another(db: Database) -> None:
    before = _reads_one(db)
    db.dispose()
    assert _is_closed(before)
    after = _reads_one(db)
    assert after is not before and not _is_closed(after)


def test_a_read_that_fails_rolls_back_and_keeps_a_usable_connection(db: Database) -> None:
    """Tried: a statement that fails inside the read, then a read on the same thread."""
    with pytest.raises(sqlite3.OperationalError), db.single() as conn:
        conn.driver_connection.execute("SELECT * FROM no_such_table")
    assert not _reads_one(db).in_transaction
    with db.write() as conn:  # a writer is not kept out by a read left open
        conn.execute(text("UPDATE ledger_head SET gate_reason = NULL"))


def test_make_event_is_the_same_frozen_event_as_its_constructor() -> None:
    at = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    attached = (Attachment("a1", "b1", Binding.REAL_FILE, "n", 3),)
    made = make_event("e1", "p1", "ada", at, "body", attached)
    assert made == Event("e1", "p1", "ada", at, "body", attached)
    assert [getattr(made, f.name) for f in dataclasses.fields(Event)] == ["e1", "p1", "ada", at, "body", attached]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.body = None  # type: ignore[misc]
