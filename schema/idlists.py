"""A list of ids as ONE bound parameter, on both backends.

``among(column, bindparam("ids", type_=IdList()))`` renders as ``column IN (SELECT
unnest(CAST(:ids AS TEXT[])))`` on PostgreSQL and as ``column IN (SELECT value FROM
json_each(:ids))`` on SQLite: on both, the ids are a table joined to the column.
Unlike an expanding ``IN`` list, the SQL text does not change with the number of ids, so the
statement is compiled once, prepared once by the server, and a batch of 500 ids costs one
parameter instead of 500.

The list travels as one string: a PostgreSQL array literal, or a JSON array. psycopg's own
adaptation of a Python list quotes element by element with a regular expression, about eight
times slower than building the literal here; a cleanup batch sends its ids five times.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import BindParameter, Text, bindparam
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import NullType, TypeDecorator


class IdList(TypeDecorator[list[str]]):
    """A bound list of string ids, sent as one string: an array literal that the SQL casts to
    ``text[]`` on PostgreSQL, a JSON array elsewhere."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Iterable[str] | None, dialect: Dialect) -> Any:
        if isinstance(value, Ids):
            return value.encoded(dialect.name)
        return _encoded([str(v) for v in value or ()], dialect.name)

    def bind_expression(self, bindvalue: BindParameter[Any]) -> Any:
        return _id_array(bindvalue)


def _encoded(ids: Sequence[str], dialect_name: str) -> str:
    return array_literal(ids) if dialect_name == "postgresql" else json.dumps(ids)


class Ids(list[str]):
    """A list of ids that keeps its encoding once made: a purge's report binds the same
    thousand ids to six statements, and each would encode them again."""

    __slots__ = ("_encodings",)

    def __init__(self, ids: Iterable[str] = ()) -> None:
        super().__init__(str(i) for i in ids)
        self._encodings: dict[str, str] = {}

    def encoded(self, dialect_name: str) -> str:
        found = self._encodings.get(dialect_name)
        if found is None:
            found = self._encodings[dialect_name] = _encoded(self, dialect_name)
        return found


def array_literal(ids: Sequence[str]) -> str:
    """A PostgreSQL array literal of these strings, every element quoted (and, when one holds
    a quote or a backslash, escaped)."""
    if any('"' in i or "\\" in i for i in ids):
        return "{" + ",".join('"' + i.replace("\\", "\\\\").replace('"', '\\"') + '"' for i in ids) + "}"
    return '{"' + '","'.join(ids) + '"}' if ids else "{}"


class _id_array(FunctionElement[Any]):
    """The bound list as the SQL sees it: ``CAST(:ids AS TEXT[])`` on PostgreSQL, the JSON
    text itself elsewhere."""

    type = NullType()
    inherit_cache = True
    name = "id_array"


@compiles(_id_array, "postgresql")
def _id_array_postgresql(element: _id_array, compiler: SQLCompiler, **kw: Any) -> str:
    (value,) = list(element.clauses)
    return f"CAST({compiler.process(value, **kw)} AS TEXT[])"


@compiles(_id_array)
def _id_array_default(element: _id_array, compiler: SQLCompiler, **kw: Any) -> str:
    (value,) = list(element.clauses)
    return str(compiler.process(value, **kw))


class among(FunctionElement[Any]):
    """``column`` is one of the ids in the bound ``IdList`` parameter: the ids as a table of
    their own, joined to the column (a semi-join the planner sizes by the list).

    Never ``column = ANY(:ids)`` on PostgreSQL. As a filter on a table the planner chose to
    scan (a small table by its statistics, or one full of dead rows that autovacuum has not
    reached yet: a cleaned conversation's placements), ``= ANY`` compares every row with
    every id, rows x ids comparisons; the soak (``bench/soak.py``) found 850 s of cleanup time
    in three minutes in one such statement, placements x 500 ids a batch. Joined, a scan
    costs rows + ids.

    Deliberately not Boolean-typed: SQLite would compile a Boolean function in WHERE as
    ``... = 1``, which hides the IN from its planner and scans the table instead of searching
    the index."""

    type = NullType()
    inherit_cache = True
    name = "among"


# The conventional parameter: ``among(column, IDS)`` with ``{"ids": [...]}`` at execution.
IDS: BindParameter[list[str]] = bindparam("ids", type_=IdList())


@compiles(among, "postgresql")
def _among_postgresql(element: among, compiler: SQLCompiler, **kw: Any) -> str:
    column, ids = list(element.clauses)
    return f"{compiler.process(column, **kw)} IN (SELECT unnest({compiler.process(ids, **kw)}))"


@compiles(among)
def _among_default(element: among, compiler: SQLCompiler, **kw: Any) -> str:
    column, ids = list(element.clauses)
    return f"{compiler.process(column, **kw)} IN (SELECT value FROM json_each({compiler.process(ids, **kw)}))"
