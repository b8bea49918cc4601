"""Transactions of ``schema.db.Database`` on a real server."""

from __future__ import annotations

import pytest

from schema import db as dbmod
from schema.db import Database


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
