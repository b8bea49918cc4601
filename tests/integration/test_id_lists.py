"""A bound id list (``purgekeeper.schema.idlists.among``) is joined to its column as a table,
never tested row by row against every id.

The soak (``bench/soak.py``) found the cleanup's busiest statement, the batch's events placed
in another conversation too, spending 850 s of database time in three minutes: PostgreSQL
scanned a placements table full of dead rows (its statistics said it was small) and
compared each row with the batch's 500 ids, ``event_id = ANY(...)`` as the scan's filter.
Here the planner is made to choose that scan (index scans off, as its statistics made it),
and the plan must not filter by the list: the list is hashed once and probed per row."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from purgekeeper.schema import cleanup_queries
from purgekeeper.schema.db import Database

pytestmark = pytest.mark.postgres_only


class _Explain(Executable, ClauseElement):
    """``EXPLAIN (FORMAT JSON)`` of a statement, its parameters bound as the statement's own."""

    inherit_cache = False

    def __init__(self, statement: Any) -> None:
        self.statement = statement


@compiles(_Explain)
def _explain(element: _Explain, compiler: SQLCompiler, **kw: Any) -> str:
    return "EXPLAIN (FORMAT JSON) " + compiler.process(element.statement, **kw)


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", ()) for node in _nodes(child))]


def test_the_batch_placed_elsewhere_is_not_filtered_row_by_row_against_the_list(db: Database) -> None:
    ids = [f"e-{n}" for n in range(500)]
    statement = cleanup_queries._PLACED_ELSEWHERE
    with db.write() as conn:
        conn.execute(text("INSERT INTO conversations (id, kind, state) VALUES ('c1', 'conversation', 'active')"))
        for table, columns, values in (
            ("events", "id, author, occurred_at", "'e-' || g, 'a', now()"),
            ("placements", "event_id, conversation_id", "'e-' || g, 'c1'"),
        ):
            conn.execute(text(f"INSERT INTO {table} ({columns}) SELECT {values} FROM generate_series(0, 1999) g"))
        conn.execute(text("SET LOCAL enable_indexscan = off"))
        conn.execute(text("SET LOCAL enable_bitmapscan = off"))
        found = conn.execute(_Explain(statement), {"ids": ids, "conversation_id": "c2"}).scalar_one()
        placed_elsewhere = conn.execute(statement, {"ids": ids, "conversation_id": "c2"}).scalars().all()
    assert sorted(placed_elsewhere) == sorted(ids)  # every one is placed in c1, which is not c2
    plan = (found if isinstance(found, list) else json.loads(found))[0]["Plan"]
    scans = [n for n in _nodes(plan) if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "placements"]
    assert scans, plan  # the scan the planner was made to choose
    assert all("ANY" not in node.get("Filter", "") for node in scans), plan


def test_the_dependents_probe_is_not_filtered_row_by_row_against_the_list(db: Database) -> None:
    """The bodies step's probe for admissions, derivations and named attachments (its
    costliest statement at 10,000 events a conversation, while it filtered by ``= ANY``)."""
    ids = [f"e-{n}" for n in range(500)]
    with db.write() as conn:
        conn.execute(text("SET LOCAL enable_indexscan = off"))
        conn.execute(text("SET LOCAL enable_bitmapscan = off"))
        found = conn.execute(_Explain(cleanup_queries._DEPENDENTS), {"ids": ids}).scalar_one()
        assert tuple(conn.execute(cleanup_queries._DEPENDENTS, {"ids": ids}).one()) == (False, False, False)
    plan = (found if isinstance(found, list) else json.loads(found))[0]["Plan"]
    scanned = {n.get("Relation Name") for n in _nodes(plan) if n["Node Type"] == "Seq Scan"}
    assert {"admissions", "derivative_sources", "attachments"} <= scanned, plan
    assert all("ANY" not in node.get("Filter", "") for node in _nodes(plan)), plan
