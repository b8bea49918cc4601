"""A list of ids as ONE bound parameter, on both backends.

``among(column, bindparam("ids", type_=IdList()))`` renders as ``column = ANY(:ids)`` on
PostgreSQL (the list is sent as a ``text[]``) and as ``column IN (SELECT value FROM
json_each(:ids))`` on SQLite (the list is sent as a JSON array). Unlike an expanding ``IN``
list, the SQL text does not change with the number of ids, so the statement is compiled once,
prepared once by the server, and a batch of 500 ids costs one parameter instead of 500.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import BindParameter, Text, bindparam
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import NullType, TypeDecorator, TypeEngine


class IdList(TypeDecorator[list[str]]):
    """A bound list of string ids: a ``text[]`` on PostgreSQL, a JSON array elsewhere."""

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.ARRAY(Text()))
        return dialect.type_descriptor(Text())

    def process_bind_param(self, value: Iterable[str] | None, dialect: Dialect) -> Any:
        ids = [str(v) for v in value or ()]
        return ids if dialect.name == "postgresql" else json.dumps(ids)


class among(FunctionElement[Any]):
    """``column`` is one of the ids in the bound ``IdList`` parameter. Deliberately not
    Boolean-typed: SQLite would compile a Boolean function in WHERE as ``... = 1``, which
    hides the IN from its planner and scans the table instead of searching the index."""

    type = NullType()
    inherit_cache = True
    name = "among"


# The conventional parameter: ``among(column, IDS)`` with ``{"ids": [...]}`` at execution.
IDS: BindParameter[list[str]] = bindparam("ids", type_=IdList())


@compiles(among, "postgresql")
def _among_postgresql(element: among, compiler: SQLCompiler, **kw: Any) -> str:
    column, ids = list(element.clauses)
    return f"{compiler.process(column, **kw)} = ANY({compiler.process(ids, **kw)})"


@compiles(among)
def _among_default(element: among, compiler: SQLCompiler, **kw: Any) -> str:
    column, ids = list(element.clauses)
    return f"{compiler.process(column, **kw)} IN (SELECT value FROM json_each({compiler.process(ids, **kw)}))"
