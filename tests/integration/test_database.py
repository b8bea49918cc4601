"""Transactions of ``purgekeeper.schema.db.Database`` on a real server."""

from __future__ import annotations

import pytest

from purgekeeper.schema import db as dbmod
from purgekeeper.schema.db import Database


@pytest.mark.postgres_only
def test_a_snapshot_read_on_a_pooled_connection_that_was_pinged(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The idle ping leaves the connection outside a transaction, so the snapshot read can set
    its isolation level (it failed with "can't change 'autocommit' now" before)."""
    monkeypatch.setattr(dbmod, "PING_AFTER_IDLE_S", 0.0)  # every checkout pings
    database = Database(database_url)
    try:
        with database.read() as conn:
            conn.exec_driver_sql("SELECT 1")
        with database.read(snapshot=True) as conn:
            assert conn.exec_driver_sql("SHOW transaction_isolation").scalar() == "repeatable read"
        with database.read() as conn:
            assert conn.exec_driver_sql("SHOW transaction_isolation").scalar() == "read committed"
    finally:
        database.dispose()


AWKWARD_IDS = ["plain", "a,b", 'quote"d', "back\\slash", "NULL", " spaced ", "{braced}", "ünï", "", "x" * 300]


@pytest.mark.parametrize("ids", [AWKWARD_IDS, [], ["only"]], ids=["awkward", "empty", "one"])
def test_an_id_list_travels_as_one_parameter_and_arrives_intact(db: Database, ids: list[str]) -> None:
    """``among(column, IDS)`` matches exactly the listed ids, on both backends: PostgreSQL gets
    one array literal (quotes, backslashes, commas, braces and the word NULL escaped or quoted),
    SQLite one JSON array. Tried: the awkward ids against a table holding each of them and a
    decoy, an empty list (matches nothing) and a single id."""
    from sqlalchemy import Column, MetaData, Table, Text, insert, select

    from purgekeeper.schema.idlists import IDS, among

    table = Table("idlist_probe", MetaData(), Column("id", Text, primary_key=True))
    with db.write() as conn:
        table.create(conn)
        conn.execute(insert(table), [{"id": i} for i in [*AWKWARD_IDS, "only", "decoy", "NULL2", "a"]])
    try:
        with db.read() as conn:
            found = set(conn.scalars(select(table.c.id).where(among(table.c.id, IDS)), {"ids": ids}))
        assert found == set(ids)
    finally:
        with db.write() as conn:
            table.drop(conn)


def test_a_connection_in_use_while_the_pool_is_emptied_is_closed_when_it_comes_back(db: Database) -> None:
    """``dispose()`` (before a restore, or a handle's close) empties the pool while a background
    thread (the gate's audit, a sweep) may hold a connection. When that one comes back it is
    closed, not parked in the discarded pool until the garbage collector deletes it still open
    (psycopg then warns, against whichever test runs at that moment: CI saw it)."""
    conn = db.engine.connect()
    conn.exec_driver_sql("SELECT 1")
    driver = conn.connection.dbapi_connection
    db.dispose()
    conn.close()
    with pytest.raises(Exception, match=r"(?i)closed"):
        driver.cursor().execute("SELECT 1")
