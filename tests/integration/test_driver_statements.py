"""Statements run on the driver's own connection (``purgekeeper.schema.driver``), on both backends: the
types' bind and result processors still apply, and a driver error comes out as SQLAlchemy's
would, so the domain errors and the retries stay the same."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from sqlalchemy import Connection, bindparam, insert, select

from purgekeeper.schema import ledger
from purgekeeper.schema.db import Database
from purgekeeper.schema.driver import DriverStatement
from purgekeeper.schema.idlists import IdList, among
from purgekeeper.schema.tables import events, tombstones

WHEN = dt.datetime(2026, 12, 1, 12, 30, 15, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
_INSERT_EVENT = DriverStatement(
    insert(events).values(
        id=bindparam("id", type_=events.c.id.type),
        author=bindparam("author", type_=events.c.author.type),
        occurred_at=bindparam("occurred_at", type_=events.c.occurred_at.type),
        body=bindparam("body", type_=events.c.body.type),
    )
)
_EVENTS_AMONG = DriverStatement(
    select(events.c.id, events.c.occurred_at)
    .where(among(events.c.id, bindparam("ids", type_=IdList())))
    .order_by(events.c.id),
    named=True,
)


def test_bind_and_result_processors_apply(db: Database) -> None:
    with db.write() as conn:
        for n in range(3):
            _INSERT_EVENT.execute(conn, {"id": f"d-{n}", "author": "ada", "occurred_at": WHEN, "body": "b"})
    with db.read() as conn:
        rows = _EVENTS_AMONG.rows(conn, {"ids": ["d-2", "d-0", "absent"]})  # a list bound as one IdList
        through_sqlalchemy = conn.execute(select(events.c.occurred_at).where(events.c.id == "d-0")).scalar_one()
    assert [row.id for row in rows] == ["d-0", "d-2"]
    assert rows[0].occurred_at == WHEN and rows[0].occurred_at.tzinfo == dt.UTC  # UtcDateTime's own reading
    assert rows[0].occurred_at == through_sqlalchemy


def _raised_by(db: Database, work: Callable[[Connection], object]) -> BaseException:
    with pytest.raises(Exception) as raised, db.write() as conn:
        work(conn)
    return raised.value


ROW = {"author": "ada", "occurred_at": WHEN, "body": "b"}


@pytest.mark.parametrize(
    "case",
    [
        "the same event id twice (a unique violation)",
        "an event id a purge fenced (the events trigger)",
    ],
)
def test_a_driver_error_comes_out_as_the_same_error_as_through_sqlalchemy(db: Database, case: str) -> None:
    """Each case tried twice, once through SQLAlchemy's execution and once on the driver:
    the same translated error (class and message), and neither wrote anything."""
    with db.write() as conn:
        conn.execute(insert(tombstones).values(kind="event", id="fenced", purge_id="p"))
        _INSERT_EVENT.execute(conn, {"id": "dup", **ROW})
    the_id = "dup" if "twice" in case else "fenced"
    through_sqlalchemy = _raised_by(db, lambda conn: conn.execute(insert(events).values(id=the_id, **ROW)))
    on_the_driver = _raised_by(db, lambda conn: _INSERT_EVENT.execute(conn, {"id": the_id, **ROW}))
    assert type(on_the_driver) is type(through_sqlalchemy)
    assert str(on_the_driver).split("\n")[0] == str(through_sqlalchemy).split("\n")[0]
    with db.read() as conn:
        assert [row.id for row in _EVENTS_AMONG.rows(conn, {"ids": ["dup", "fenced"]})] == ["dup"]


def test_an_expanding_in_is_refused_when_first_compiled(db: Database) -> None:
    statement = DriverStatement(select(events.c.id).where(events.c.id.in_(["a", "b"])))
    with pytest.raises(ValueError, match="expanding IN"), db.read() as conn:
        statement.rows(conn)


def test_the_head_read_on_the_driver_is_the_head(db: Database) -> None:
    with db.read() as conn:
        head = ledger.read_head(conn)
        row = conn.exec_driver_sql("SELECT seq, head_hash FROM ledger_head WHERE id = 1").one()
    assert (head.seq, head.head_hash) == (row[0], row[1]) and head.now.tzinfo == dt.UTC
