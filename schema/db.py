"""Connections and transactions, the same on PostgreSQL and SQLite.

Every write goes through :meth:`Database.write`: on SQLite the transaction starts with
``BEGIN IMMEDIATE`` (WAL mode, a busy timeout, ``secure_delete``), on PostgreSQL it runs at
READ COMMITTED and the triggers lock what they depend on. Deadlocks, serialization failures
and a locked SQLite database are retried a few times, then raise ``InfrastructureError``.
Driver errors become domain errors here, through :func:`purgekeeper.schema.errors.translate_db_error`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import functools
import hashlib
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.pool import QueuePool
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from purgekeeper.schema.driver import DriverRead, Reader, run_on_driver
from purgekeeper.schema.errors import InfrastructureError, ValidationError, is_retryable, translate_db_error
from purgekeeper.schema.retry_policy import TRANSACTION_WAIT_MAX_S, WRITE_ATTEMPTS
from purgekeeper.schema.session_defaults import IDLE_IN_TRANSACTION_TIMEOUT
from purgekeeper.schema.unavailable import why_unavailable

log = logging.getLogger(__name__)
T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 10_000
PING_AFTER_IDLE_S = 2.0
APPLICATION_NAME = "purgekeeper"

# PostgreSQL sessions: how long a frozen or cut-off client can hold what it locked.
# - A session idle inside a transaction (its client stopped, paused or partitioned between
#   two statements) is ended by the server after IDLE_IN_TRANSACTION_TIMEOUT: its locks go
#   with it. Every purgekeeper transaction is short (no network or file work inside one).
# - TCP keepalives on both ends, and the server's user timeout, end a session whose peer is
#   gone in about TCP_KEEPALIVE_IDLE_S + TCP_KEEPALIVE_INTERVAL_S * TCP_KEEPALIVE_COUNT.
# - The server checks every CLIENT_CHECK_INTERVAL_MS that the client of a running query is
#   still there; connecting gives up after CONNECT_TIMEOUT_S.
TCP_KEEPALIVE_IDLE_S = 10
TCP_KEEPALIVE_INTERVAL_S = 5
TCP_KEEPALIVE_COUNT = 3
TCP_USER_TIMEOUT_MS = 30_000
CLIENT_CHECK_INTERVAL_MS = 5_000
CONNECT_TIMEOUT_S = 10


def normalise_url(url: str) -> str:
    """Use psycopg 3 for a plain ``postgresql://`` URL."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def redacted(url: str) -> str:
    """The URL with its password masked, for messages and logs."""
    return make_url(url).render_as_string(hide_password=True)


class Database:
    """One database: an engine, write and read transactions, and error translation."""

    def __init__(
        self,
        url: str,
        *,
        write_attempts: int = WRITE_ATTEMPTS,
        sqlite_busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS,
        idle_in_transaction_timeout: dt.timedelta = IDLE_IN_TRANSACTION_TIMEOUT,
        application_name: str = APPLICATION_NAME,
    ) -> None:
        try:
            self.url = normalise_url(url)
        except sa_exc.ArgumentError as exc:
            raise ValidationError(f"not a database URL: {redacted_or_raw(url)}") from exc
        self.name = redacted(url)  # what error messages name: the URL as configured, password masked
        self.dialect = make_url(self.url).get_backend_name()
        if self.dialect not in ("postgresql", "sqlite"):
            raise ValidationError(f"unsupported database {self.dialect!r}: use postgresql or sqlite")
        self.write_attempts = write_attempts
        self._readers: _ThreadReaders | None = None
        if self.dialect == "sqlite":
            self.engine = _sqlite_engine(self.url, sqlite_busy_timeout_ms)
            self._readers = _ThreadReaders(self.engine)
        else:
            self.engine = _postgresql_engine(
                self.url, session_options(idle_in_transaction_timeout, application_name=application_name)
            )

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    def dispose(self) -> None:
        """Close every idle connection (before a restore puts another database in place, and at
        a handle's close). A connection in use at that moment (a background thread's) is
        closed when it comes back, not parked in the discarded pool until the garbage
        collector deletes it still open."""
        discarded = self.engine.pool
        self.engine.dispose()
        if not event.contains(discarded, "checkin", _close_on_checkin):
            event.listen(discarded, "checkin", _close_on_checkin)
        if self._readers is not None:
            self._readers.close_all()

    @contextlib.contextmanager
    def write(self, *, durable: bool = True) -> Iterator[Connection]:
        """One write transaction (no retry); domain errors come out translated.

        ``durable=False`` (PostgreSQL) commits without waiting for the WAL flush, for work
        that is idempotent and recorded by a later durable write anyway: a server crash may
        lose the last such commits, never reorder them, so the work is simply done again.
        Never for acceptances, nor for a write that must be on disk before a file is
        touched (a blob marked ``deleting`` before its unlink)."""
        with _translated(self.name), self.engine.connect() as conn:
            conn.execution_options(pk_begin="IMMEDIATE")
            with conn.begin():
                if not durable:
                    commit_without_flush(conn)
                yield conn

    @contextlib.contextmanager
    def read(self, *, snapshot: bool = False) -> Iterator[Connection]:
        """One read transaction; on SQLite a deferred one, so readers never wait on writers.
        ``snapshot``: every statement sees the same committed state (on PostgreSQL, REPEATABLE
        READ; a SQLite read transaction in WAL mode already does): walking the ledger row by
        row and then reading its head must not see an acceptance committed in between."""
        with _translated(self.name), self.engine.connect() as conn:
            conn.execution_options(pk_begin="DEFERRED")
            if snapshot and not self.is_sqlite:
                conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    @contextlib.contextmanager
    def single(self) -> Iterator[Reader]:
        """A connection for one read of ``DriverStatement``s, in one snapshot. PostgreSQL: for
        ONE statement, outside any explicit transaction (autocommit), so a read costs one
        round trip and not three (BEGIN, the statement, COMMIT). SQLite: a deferred read
        transaction on this thread's own driver connection (``_ThreadReaders``), with no
        SQLAlchemy ``Connection`` or pool checkout around it (``DriverRead``)."""
        if not self.is_sqlite:
            with _translated(self.name), self.engine.connect() as conn:
                yield conn.execution_options(isolation_level="AUTOCOMMIT")
            return
        readers = self._readers
        assert readers is not None
        with _translated(self.name):
            read = readers.get()  # not re-entrant: one read at a time per thread
            try:
                run_on_driver(read, _BEGIN["DEFERRED"])
                yield read
                run_on_driver(read, "COMMIT")
            except BaseException:
                try:
                    read.driver_connection.rollback()
                except Exception:
                    readers.discard()  # a new connection next time
                raise

    @contextlib.contextmanager
    def exclusive(self, name: str) -> Iterator[bool]:
        """Hold a lock that only one process at a time gets, for as long as the block runs,
        released by the operating system or the server if the process dies (a PostgreSQL
        session advisory lock; on SQLite an flock on a file beside the database). Yields
        False, without waiting, when someone else holds it."""
        if self.is_sqlite:
            database = make_url(self.url).database
            if not database or database == ":memory:":
                yield True
                return
            with open(f"{database}.{name}.lock", "a+b") as handle:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    yield False
                    return
                try:
                    yield True
                finally:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            return
        key = int.from_bytes(hashlib.sha256(f"purgekeeper:{name}".encode()).digest()[:8], "big", signed=True)
        with _translated(self.name), self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            held = bool(conn.exec_driver_sql("SELECT pg_try_advisory_lock(%s)", (key,)).scalar())
            try:
                yield held
            finally:
                if held:
                    conn.exec_driver_sql("SELECT pg_advisory_unlock(%s)", (key,))

    def transact(self, work: Callable[[Connection], T], *, durable: bool = True) -> T:
        """Run ``work`` in a write transaction, again on a deadlock, a busy database, or a
        connection lost before the commit (a restarted server, a terminated session: the
        transaction never committed, so running it again is safe)."""
        try:  # the common case: one attempt, no retry machinery
            return self._attempt(work, durable)
        except _Retryable:
            if self.write_attempts <= 1:
                raise InfrastructureError("the database stayed busy after 1 attempt") from None
        retrying = Retrying(
            retry=retry_if_exception(_is_retryable_here),
            stop=stop_after_attempt(self.write_attempts - 1),
            wait=wait_random_exponential(multiplier=0.01, max=TRANSACTION_WAIT_MAX_S),
            reraise=False,
        )
        try:
            for attempt in retrying:
                with attempt:
                    return self._attempt(work, durable)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            raise InfrastructureError(f"the database stayed busy after {self.write_attempts} attempts") from last
        raise AssertionError("unreachable")  # pragma: no cover

    def _attempt(self, work: Callable[[Connection], T], durable: bool) -> T:
        with self.write(durable=durable) as conn:
            try:
                return work(conn)
            except sa_exc.DBAPIError as exc:
                if exc.connection_invalidated:  # before the commit: nothing of it was written
                    raise _Retryable(f"the database connection was lost: {type(exc.orig).__name__}") from exc
                raise


def session_options(idle_in_transaction_timeout: dt.timedelta, *, application_name: str) -> dict[str, Any]:
    """libpq connection parameters of every purgekeeper session on PostgreSQL (see the
    constants above), named in ``pg_stat_activity`` by ``application_name``."""
    server = {
        "idle_in_transaction_session_timeout": max(int(idle_in_transaction_timeout.total_seconds() * 1000), 1),
        "tcp_keepalives_idle": TCP_KEEPALIVE_IDLE_S,
        "tcp_keepalives_interval": TCP_KEEPALIVE_INTERVAL_S,
        "tcp_keepalives_count": TCP_KEEPALIVE_COUNT,
        "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
        "client_connection_check_interval": CLIENT_CHECK_INTERVAL_MS,
        # Every statement here is short: compiling one with JIT (PostgreSQL's default, once
        # its estimated cost is high) took tens of milliseconds of a cleanup statement whose
        # cost the planner overestimated, and never paid back.
        "jit": "off",
    }
    return {
        "application_name": application_name[:63],
        "connect_timeout": CONNECT_TIMEOUT_S,
        "keepalives": 1,
        "keepalives_idle": TCP_KEEPALIVE_IDLE_S,
        "keepalives_interval": TCP_KEEPALIVE_INTERVAL_S,
        "keepalives_count": TCP_KEEPALIVE_COUNT,
        "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
        "options": " ".join(f"-c {name}={value}" for name, value in server.items()),
    }


def bound_lock_waits(conn: Connection, timeout: dt.timedelta) -> None:
    """In this transaction, waiting for a row lock ends after ``timeout`` with LockTimeout
    (PostgreSQL; SQLite's writers wait on its busy timeout instead)."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{max(int(timeout.total_seconds() * 1000), 1)}ms'")


def commit_without_flush(conn: Connection) -> None:
    """This transaction's commit will not wait for the WAL flush (PostgreSQL; see
    ``Database.write``). It may be said at any point before the commit, once the work knows
    it is only an idempotent, re-doable step. SQLite: no change."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")


class _Retryable(InfrastructureError):
    """A deadlock, a serialization failure or a locked database; the transaction reruns."""

    @property
    def code(self) -> str:
        """Reported as what it is to a client (``read()`` and ``write()`` raise it as it is)."""
        return "infrastructure_error"


def _is_retryable_here(exc: BaseException) -> bool:
    return isinstance(exc, _Retryable)


@contextlib.contextmanager
def _translated(database: str) -> Iterator[None]:
    try:
        yield
    except sa_exc.DBAPIError as exc:
        if is_retryable(exc):
            raise _Retryable(str(exc.orig).splitlines()[0]) from exc
        domain = translate_db_error(exc)
        if domain is None:
            raise
        if type(domain) is InfrastructureError and isinstance(exc, sa_exc.OperationalError):
            domain = InfrastructureError(f"the database {database} is unavailable: {why_unavailable(database, exc)}")
        raise domain from exc


def redacted_or_raw(url: str) -> str:
    try:
        return redacted(url)
    except sa_exc.ArgumentError:
        return "<unparseable>"


class _ThreadReaders:
    """SQLite: one driver connection per thread for ``Database.single``, out of the pool.

    A content read of 50 events on SQLite takes a few hundred microseconds, and a checkout
    from SQLAlchemy's pool and its return cost a tenth of that; a thread that reads keeps its
    own connection instead (made as the pool makes them, pragmas included, then detached from
    it, so it holds no pool slot). It is closed when its thread ends, when a read on it fails
    (a new one next time), and by ``close_all`` (``Database.dispose``: before another file is
    put in place, see docs/guides/backups.md). A child process never uses its parent's."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._local = threading.local()
        self._lock = threading.Lock()
        self._generation = 0  # close_all moves it on: every thread's connection is then stale
        self._open: weakref.WeakSet[_Held] = weakref.WeakSet()

    def get(self) -> DriverRead:
        held: _Held | None = getattr(self._local, "held", None)
        if held is not None and held.generation == self._generation and held.pid == os.getpid():
            return held.read
        pooled = self.engine.raw_connection()
        driver = pooled.driver_connection
        pooled.detach()  # ours now: closed, never returned to the pool
        held = _Held(DriverRead(self.engine.dialect, driver, pooled), self._generation)
        weakref.finalize(held, _close_quietly, pooled)  # when the thread (and so its local) ends
        with self._lock:
            self._open.add(held)
        self._local.held = held
        return held.read

    def discard(self) -> None:
        held = getattr(self._local, "held", None)
        self._local.held = None
        if held is not None and held.pid == os.getpid():
            _close_quietly(held.read.pooled)

    def close_all(self) -> None:
        with self._lock:
            self._generation += 1
            open_now = list(self._open)
        for held in open_now:
            if held.pid == os.getpid():
                _close_quietly(held.read.pooled)


@dataclass(eq=False)
class _Held:
    read: DriverRead
    generation: int
    pid: int = field(default_factory=os.getpid)


def _close_quietly(pooled: Any) -> None:
    with contextlib.suppress(Exception):
        pooled.close()


def _sqlite_engine(url: str, busy_timeout_ms: int) -> Engine:
    # A small pool: opening a connection and setting its pragmas costs several times a small
    # read, on every content call. ``dispose()`` closes the idle ones (before a restore puts
    # another file in place: see docs/guides/backups.md).
    engine = create_engine(
        url, poolclass=QueuePool, pool_size=5, max_overflow=15, connect_args={"check_same_thread": False}
    )
    event.listen(engine, "connect", functools.partial(_sqlite_on_connect, busy_timeout_ms=busy_timeout_ms))
    event.listen(engine, "begin", _on_begin)
    return engine


def _postgresql_engine(url: str, connect_args: dict[str, Any]) -> Engine:
    """A pool whose connections survive a server restart: one idle for a while is pinged
    at checkout, and a connection found dead invalidates every older one (SQLAlchemy)."""
    engine = create_engine(url, pool_size=10, max_overflow=20, connect_args=connect_args)
    event.listen(engine, "checkout", _ping_if_idle)
    event.listen(engine, "checkin", _note_checkin)
    return engine


def _sqlite_on_connect(dbapi_conn: Any, _record: Any, *, busy_timeout_ms: int) -> None:
    # Let the driver issue no BEGIN of its own: _on_begin issues the right one.
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    for pragma in (
        f"PRAGMA busy_timeout = {int(busy_timeout_ms)}",
        "PRAGMA journal_mode = WAL",
        "PRAGMA foreign_keys = ON",
        "PRAGMA secure_delete = ON",
        "PRAGMA synchronous = FULL",
    ):
        cursor.execute(pragma)
    cursor.close()


def _close_on_checkin(_dbapi_conn: Any, record: Any) -> None:
    record.invalidate()  # closes the driver's connection; the record is never used again


def _note_checkin(_dbapi_conn: Any, record: Any) -> None:
    record.info["checked_in_at"] = time.monotonic()


def _ping_if_idle(dbapi_conn: Any, record: Any, proxy: Any) -> None:
    """Ping a pooled connection that sat idle, so a restarted server costs no failed request;
    a connection in steady use is not pinged (a ping is one more round trip per transaction)."""
    idle_since = record.info.get("checked_in_at")
    if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_S:
        return
    try:
        cursor = dbapi_conn.cursor()
        cursor.execute("SELECT 1")
        cursor.close()
        dbapi_conn.rollback()  # leave it idle: a snapshot read sets its isolation level next
    except Exception as exc:
        raise sa_exc.DisconnectionError("the pooled connection is gone") from exc


def _on_begin(conn: Connection) -> None:
    if conn.dialect.name != "sqlite":
        return
    mode = conn.get_execution_options().get("pk_begin", "IMMEDIATE")
    # on the driver's connection, as SQLAlchemy's own begin would be: a statement through
    # SQLAlchemy costs more than a small SQLite read (errors still come out translated)
    driver = conn.connection.driver_connection
    if driver is None:  # pragma: no cover - not a live connection
        conn.exec_driver_sql(_BEGIN[mode])
        return
    try:
        driver.execute(_BEGIN[mode])
    except sqlite3.Error as exc:  # wrapped as SQLAlchemy wraps it: a busy database is retried
        raise sa_exc.DBAPIError.instance(_BEGIN[mode], (), exc, sqlite3.Error) from exc


_BEGIN = {mode: f"BEGIN {mode}" for mode in ("DEFERRED", "IMMEDIATE", "EXCLUSIVE")}
