"""No stale writer: a transaction that began before a purge's acceptance and commits after
it leaves no row or body behind in the purged conversation or on the fenced event.

Each test opens a writer transaction first, then accepts a purge the way confirmation does
(lock the rows FOR UPDATE in id order, write the tombstone, commit) on a second connection
in another thread, and only then lets the writer write. Real connections, real threads.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import OperationalError

from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import ContentPurged, ConversationPurged, InfrastructureError, PurgekeeperError

SETUP = [
    "INSERT INTO bots (id, name) VALUES ('b1', 'Bot')",
    "INSERT INTO conversations (id) VALUES ('c1')",
    "INSERT INTO conversations (id) VALUES ('c2')",
    "INSERT INTO events (id, author, occurred_at, body) VALUES ('e1', 'ada', CURRENT_TIMESTAMP, 'secret')",
    "INSERT INTO placements (event_id, conversation_id) VALUES ('e1', 'c1')",
    f"INSERT INTO blobs (id, kind, sha256, size, path) VALUES ('bl01', 'file', '{'ab' * 32}', 1, 'bl/01/bl01')",
]


def setup(db: Database) -> None:
    with db.write() as conn:
        for sql in SETUP:
            conn.execute(text(sql))


TOMBSTONE = "INSERT INTO tombstones (kind, id, purge_id) VALUES (:kind, :id, 'p1')"
LOCK_EVENT_CONVERSATIONS = (
    "SELECT id FROM conversations WHERE id IN (SELECT conversation_id FROM placements WHERE event_id = :id) "
    "ORDER BY id FOR UPDATE"
)
LATE_EVENT = "INSERT INTO events (id, author, occurred_at, body) VALUES ('e-late', 'eve', CURRENT_TIMESTAMP, 'late')"


def accept_purge(conn: Connection, *, conversation: str | None = None, event: str | None = None) -> None:
    """What confirmation does to fence: lock exclusively in id order, then tombstone.
    (SQLite has no row locks: its BEGIN IMMEDIATE already excludes every other writer.)"""
    locks = conn.dialect.name == "postgresql"
    if conversation:
        if locks:
            conn.execute(text("SELECT id FROM conversations WHERE id = :id FOR UPDATE"), {"id": conversation})
        conn.execute(text(TOMBSTONE), {"kind": "conversation", "id": conversation})
    if event:
        if locks:
            conn.execute(text(LOCK_EVENT_CONVERSATIONS), {"id": event})
            conn.execute(text("SELECT id FROM events WHERE id = :id FOR UPDATE"), {"id": event})
        conn.execute(text(TOMBSTONE), {"kind": "event", "id": event})


STALE_WRITES: dict[str, tuple[str, dict[str, str], type[PurgekeeperError]]] = {
    "new event placed in the purged conversation": (
        "INSERT INTO placements (event_id, conversation_id) VALUES ('e-late', 'c1')",
        {"conversation": "c1"},
        ConversationPurged,
    ),
    "new run in the purged conversation": (
        "INSERT INTO runs (id, conversation_id, bot_id) VALUES ('r-late', 'c1', 'b1')",
        {"conversation": "c1"},
        ConversationPurged,
    ),
    "body rewritten on the fenced event": (
        "UPDATE events SET body = 'rewritten' WHERE id = 'e1'",
        {"event": "e1"},
        ContentPurged,
    ),
    "fenced event placed elsewhere": (
        "INSERT INTO placements (event_id, conversation_id) VALUES ('e1', 'c2')",
        {"event": "e1"},
        ContentPurged,
    ),
    "attachment bound to the fenced event": (
        "INSERT INTO attachments (id, event_id, blob_id, binding, name) "
        "VALUES ('a-late', 'e1', 'bl01', 'real_file', 'f')",
        {"event": "e1"},
        ContentPurged,
    ),
}


LATE_EVENT = "INSERT INTO events (id, author, occurred_at, body) VALUES ('e-late', 'eve', CURRENT_TIMESTAMP, 'late')"


def race(db: Database, write: str, fence: dict[str, str]) -> BaseException | None:
    """Begin the writer, accept the purge while the writer is open, then let it write."""
    errors: list[BaseException] = []
    writer_began = threading.Event()
    purge_locked = threading.Event()

    def writer() -> None:
        try:
            with db.write() as conn:
                conn.execute(text("SELECT 1"))
                conn.execute(text(LATE_EVENT))
                writer_began.set()
                purge_locked.wait(10)
                conn.execute(text(write))  # blocks on the purge's locks, then sees its fence
        except BaseException as exc:
            errors.append(exc)
        finally:
            writer_began.set()

    thread = threading.Thread(target=writer)
    thread.start()
    assert writer_began.wait(10)
    with db.engine.connect() as conn, conn.begin():
        accept_purge(conn, **fence)
        purge_locked.set()
        time.sleep(0.3)  # the writer is now waiting on our locks
    thread.join(20)
    assert not thread.is_alive()
    return errors[0] if errors else None


@pytest.mark.postgres_only
@pytest.mark.parametrize("write, fence, expected", STALE_WRITES.values(), ids=STALE_WRITES.keys())
def test_stale_writer_is_stopped_on_postgres(
    db: Database, write: str, fence: dict[str, str], expected: type[PurgekeeperError]
) -> None:
    setup(db)
    error = race(db, write, fence)
    assert isinstance(error, expected), repr(error)
    with db.read() as conn:
        assert conn.scalar(text("SELECT count(*) FROM events WHERE id = 'e-late'")) == 0
        assert conn.scalar(text("SELECT body FROM events WHERE id = 'e1'")) == "secret"
        assert conn.scalar(text("SELECT count(*) FROM runs")) == 0
        assert conn.scalar(text("SELECT count(*) FROM attachments")) == 0
        assert conn.scalar(text("SELECT count(*) FROM placements WHERE conversation_id = 'c2'")) == 0


@pytest.mark.sqlite_only
def test_sqlite_library_writers_are_serialised_before_the_purge(db: Database, database_url: str) -> None:
    """BEGIN IMMEDIATE: while a library writer is open, a purge cannot even begin."""
    setup(db)
    other = sqlite3.connect(database_url.removeprefix("sqlite:///"), timeout=0, isolation_level=None)
    try:
        with db.write() as conn:
            conn.execute(text("SELECT 1"))
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
    finally:
        other.close()


@pytest.mark.sqlite_only
def test_sqlite_stale_bypassing_writer_cannot_commit_after_the_purge(db: Database, database_url: str) -> None:
    """A raw client with a deferred transaction read before the purge; its write is refused."""
    setup(db)
    stale = sqlite3.connect(database_url.removeprefix("sqlite:///"), timeout=0, isolation_level=None)
    try:
        stale.execute("BEGIN")
        assert stale.execute("SELECT state FROM conversations WHERE id = 'c1'").fetchone() == ("active",)
        with db.write() as conn:
            accept_purge(conn, conversation="c1")
        with pytest.raises(sqlite3.OperationalError):
            stale.execute("INSERT INTO runs (id, conversation_id, bot_id) VALUES ('r-late', 'c1', 'b1')")
        stale.execute("ROLLBACK")
    finally:
        stale.close()
    with db.read() as conn:
        assert conn.scalar(text("SELECT count(*) FROM runs")) == 0


@pytest.mark.postgres_only
def test_deadlocks_are_retried_then_succeed(db: Database) -> None:
    setup(db)
    barrier = threading.Barrier(2, timeout=10)
    attempts: list[str] = []

    def lock_both(first: str, second: str) -> Callable[[Connection], None]:
        def work(conn: Connection) -> None:
            attempts.append(first)
            conn.execute(text("SELECT id FROM conversations WHERE id = :c FOR UPDATE"), {"c": first})
            if len(attempts) <= 2:
                barrier.wait()
            conn.execute(text("SELECT id FROM conversations WHERE id = :c FOR UPDATE"), {"c": second})

        return work

    committed: list[str] = []

    def run(first: str, second: str) -> None:
        db.transact(lock_both(first, second))
        committed.append(first)

    threads = [threading.Thread(target=run, args=("c1", "c2")), threading.Thread(target=run, args=("c2", "c1"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    # Both ran once; PostgreSQL broke the deadlock and the loser ran again. On a busy machine
    # the loser's retry can take its first row again before the winner gets it, and deadlock
    # once more: how many retries is timing, that both end committed is the contract.
    assert sorted(committed) == ["c1", "c2"]
    assert len(attempts) >= 3


def test_transient_failures_end_in_infrastructure_error(db: Database, database_url: str) -> None:
    calls = []
    retrying = Database(database_url, write_attempts=3, sqlite_busy_timeout_ms=10)

    if db.is_sqlite:
        holder = sqlite3.connect(database_url.removeprefix("sqlite:///"), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")

        def work(conn: Connection) -> None:
            calls.append(1)
            conn.execute(text("INSERT INTO conversations (id) VALUES ('never')"))
    else:
        holder = None

        def work(conn: Connection) -> None:
            calls.append(1)
            conn.execute(text("DO $$ BEGIN RAISE EXCEPTION 'simulated deadlock' USING ERRCODE = '40P01'; END $$"))

    try:
        with pytest.raises(InfrastructureError, match="busy after 3 attempts"):
            retrying.transact(work)
    finally:
        if holder is not None:
            holder.close()
        retrying.dispose()
    # SQLite's BEGIN IMMEDIATE fails before the work runs; PostgreSQL's work ran each time.
    assert len(calls) == (0 if db.is_sqlite else 3)


@pytest.mark.postgres_only
def test_binding_locks_the_blob_row_shared(db: Database) -> None:
    """While a binding is uncommitted, the attachments step cannot lock the blob to delete it."""
    setup(db)
    with db.engine.connect() as binder, binder.begin():
        binder.execute(
            text(
                "INSERT INTO attachments (id, event_id, blob_id, binding, name) "
                "VALUES ('a1', 'e1', 'bl01', 'real_file', 'f')"
            )
        )
        with db.engine.connect() as deleter, deleter.begin():
            with pytest.raises(OperationalError, match="could not obtain lock"):
                deleter.execute(text("SELECT id FROM blobs WHERE id = 'bl01' FOR UPDATE NOWAIT"))
            deleter.rollback()
        with db.engine.connect() as reader, reader.begin():  # other bindings share the lock
            reader.execute(text("SELECT id FROM blobs WHERE id = 'bl01' FOR SHARE NOWAIT"))
