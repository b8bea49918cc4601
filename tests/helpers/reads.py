"""Raw reads of the database behind a handle."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

import purgekeeper


def rows(pk: purgekeeper.Purgekeeper, sql: str, **params: Any) -> list[Any]:
    with pk.db.read() as conn:
        return list(conn.execute(text(sql), params))


def scalar(pk: purgekeeper.Purgekeeper, sql: str, **params: Any) -> Any:
    with pk.db.read() as conn:
        return conn.execute(text(sql), params).scalar()
