"""Raw SQL writers: one statement in its own transaction, its datetime parameters bound as the
schema stores them, and the refusal a trigger raises."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import bindparam, text

from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import PurgekeeperError
from purgekeeper.schema.tables import UtcDateTime


def statement(sql: str, params: dict[str, Any]) -> Any:
    """``sql`` with its datetime parameters bound as the schema stores them."""
    times = [bindparam(name, type_=UtcDateTime()) for name, value in params.items() if isinstance(value, dt.datetime)]
    return text(sql).bindparams(*times)


def write(db: Database, sql: str, **params: Any) -> int:
    """One raw statement in its own transaction; returns the rows it changed."""
    with db.write() as conn:
        return int(conn.execute(statement(sql, params), params).rowcount or 0)


def refused(db: Database, sql: str, expected: type[PurgekeeperError], **params: Any) -> None:
    with pytest.raises(expected):
        write(db, sql, **params)


def value(db: Database, sql: str, **params: Any) -> Any:
    with db.read() as conn:
        return conn.execute(statement(sql, params), params).scalar()
