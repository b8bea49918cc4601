"""Statements run on the driver's own connection, inside the transaction SQLAlchemy began.

A confirmation runs about ten statements, and SQLAlchemy's execution of each (its cache key
over the statement's tree, the parameters' construction, the result's set-up) costs more
client CPU than psycopg's or sqlite3's own execution of it: with eight threads accepting at
once in one process, that CPU is what bounds the throughput. A ``DriverStatement`` is
compiled once per dialect and then handed to the driver as SQL text and parameters; the bind
and result processors of its columns' types still apply (``convert=False`` skips the result
ones, for a caller that parses the raw values itself), and a driver error is raised as the
``sqlalchemy.exc.DBAPIError`` SQLAlchemy would have raised (a lost connection invalidated,
so the write is retried), which ``purgekeeper.schema.errors`` translates as every other.

SQLAlchemy's ``before_cursor_execute`` events do not see these statements.
"""

from __future__ import annotations

import threading
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Dialect


@dataclass(frozen=True)
class _Compiled:
    sql: str
    names: tuple[str, ...] | None  # positional parameters in order (SQLite), or None (named)
    constants: dict[str, Any]  # the values bound in the statement itself
    binders: dict[str, Callable[[Any], Any]]  # a parameter's type's bind processor
    results: tuple[tuple[int, Callable[[Any], Any]], ...]  # (column, result processor)
    row: Any  # the namedtuple type of a row, or None for plain tuples


@dataclass(frozen=True)
class DriverRead:
    """A read on a driver connection with no SQLAlchemy ``Connection`` around it
    (``Database.single`` on SQLite: SQLAlchemy's connect, begin and commit cost more than a
    small SQLite read). It holds what a ``DriverStatement`` needs."""

    dialect: Dialect
    driver_connection: Any
    pooled: Any  # the connection the pool made (detached from it), to close or invalidate

    def invalidate(self, exception: BaseException | None = None) -> None:
        self.pooled.invalidate(exception)


Reader = Connection | DriverRead


def driver_of(conn: Reader) -> Any:
    driver = conn.driver_connection if isinstance(conn, DriverRead) else conn.connection.driver_connection
    assert driver is not None
    return driver


def run_on_driver(conn: Reader, sql: str) -> None:
    """One statement without parameters or rows (BEGIN, COMMIT), errors as SQLAlchemy's."""
    driver = driver_of(conn)
    try:
        driver.execute(sql)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _as_sqlalchemy_error(conn, sql, (), exc, driver) from exc


class DriverStatement:
    """``statement`` (a SQLAlchemy Core statement) compiled once per dialect, and run by the
    driver. ``named``: rows are namedtuples of the selected columns' names (else tuples)."""

    def __init__(self, statement: Any, *, named: bool = False, convert: bool = True) -> None:
        self.statement = statement
        self.named = named
        self.convert = convert
        self._compiled: dict[str, _Compiled] = {}
        self._lock = threading.Lock()

    def _compile(self, dialect: Dialect) -> _Compiled:
        found = self._compiled.get(dialect.name)
        if found is not None:
            return found
        with self._lock:
            compiled = self.statement.compile(dialect=dialect)
            if "__[POSTCOMPILE_" in str(compiled):
                raise ValueError("a driver statement cannot hold an expanding IN (bind its ids as one IdList)")
            binders = {
                name: processor
                for name, processor in (compiled._bind_processors or {}).items()
                if processor is not None
            }
            results: list[tuple[int, Callable[[Any], Any]]] = []
            names: list[str] = []
            for index, column in enumerate(getattr(compiled, "_result_columns", None) or ()):
                names.append(column.keyname)
                processor = column.type._cached_result_processor(dialect, None)
                if processor is not None and self.convert:
                    results.append((index, processor))
            found = _Compiled(
                sql=str(compiled),
                names=tuple(compiled.positiontup) if compiled.positiontup is not None else None,
                constants={k: v for k, v in compiled.construct_params(_check=False).items() if v is not None},
                binders=binders,
                results=tuple(results),
                row=namedtuple("Row", names, rename=True) if self.named and names else None,
            )
            self._compiled[dialect.name] = found
        return found

    def _run(self, conn: Reader, params: Mapping[str, Any]) -> tuple[Any, _Compiled]:
        """The driver's cursor of the statement, executed (the connection's own ``execute``:
        sqlite3 and psycopg both make the cursor and run it in one call)."""
        compiled = self._compile(conn.dialect)
        if compiled.binders or compiled.constants:
            values: dict[str, Any] = {**compiled.constants, **params}
            for name, processor in compiled.binders.items():
                if name in values:
                    values[name] = processor(values[name])
        else:
            values = dict(params)
        bound: Any = values if compiled.names is None else tuple([values[name] for name in compiled.names])
        driver = driver_of(conn)
        try:
            return driver.execute(compiled.sql, bound), compiled
        except conn.dialect.loaded_dbapi.Error as exc:
            raise _as_sqlalchemy_error(conn, compiled.sql, bound, exc, driver) from exc

    def rows(self, conn: Reader, params: Mapping[str, Any] | None = None) -> list[Any]:
        """Every row the statement returns."""
        cursor, compiled = self._run(conn, params or {})
        try:
            found: list[Any] = cursor.fetchall()
        except conn.dialect.loaded_dbapi.Error as exc:
            raise _as_sqlalchemy_error(conn, compiled.sql, None, exc, driver_of(conn)) from exc
        finally:
            cursor.close()
        if compiled.results:
            found = [_converted(row, compiled.results) for row in found]
        if compiled.row is not None:
            make = compiled.row._make
            found = [make(row) for row in found]
        return found

    def first(self, conn: Reader, params: Mapping[str, Any] | None = None) -> Any:
        found = self.rows(conn, params)
        return found[0] if found else None

    def execute(self, conn: Reader, params: Mapping[str, Any] | None = None) -> int:
        """Run a statement whose rows are not wanted; the number of rows it changed."""
        cursor, _compiled = self._run(conn, params or {})
        try:
            return int(cursor.rowcount)
        finally:
            cursor.close()


def _converted(row: Sequence[Any], results: tuple[tuple[int, Callable[[Any], Any]], ...]) -> tuple[Any, ...]:
    values = list(row)
    for index, processor in results:
        values[index] = processor(values[index])
    return tuple(values)


def _as_sqlalchemy_error(
    conn: Reader, sql: str, params: Any, exc: Exception, driver: Any
) -> sa_exc.DBAPIError | sa_exc.StatementError:
    """What SQLAlchemy raises for the same driver error: a lost connection is invalidated
    (and so retried by ``Database.transact``), the rest keep their driver error as ``orig``."""
    lost = bool(conn.dialect.is_disconnect(exc, driver, None))  # type: ignore[arg-type]  # a DB-API error
    if lost:
        conn.invalidate(exc)
    return sa_exc.DBAPIError.instance(
        sql, params, exc, conn.dialect.loaded_dbapi.Error, connection_invalidated=lost, dialect=conn.dialect
    )
