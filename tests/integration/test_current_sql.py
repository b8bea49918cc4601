"""``schema/sql/<dialect>/current.sql`` holds exactly what the migrations install.

How the two are compared, on each backend:

1. Every revision is applied to an empty database (``migrate.upgrade``): database A.
2. A copy of A (PostgreSQL: ``CREATE DATABASE ... TEMPLATE``; SQLite: the backup API) loses
   every trigger, view and project function, keeping its tables, and ``current.sql`` is run
   in it: database B.
3. The definitions are read back from both catalogues, so the database itself renders both
   sides (PostgreSQL: ``pg_get_functiondef``, ``pg_get_triggerdef``, ``pg_get_viewdef``, and a
   trigger's enabled state; SQLite: ``sqlite_master.sql``, which keeps the text as written).
   Only what the catalogues keep verbatim is normalised: comments are dropped, whitespace
   between tokens collapsed, and words outside quotes lowercased (``normalised``). Quoted
   strings, numbers and the order of tokens are compared as they are.
4. A and B must hold the same names with the same normalised definitions, and on SQLite the
   triggers of each table in the same order (SQLite fires the triggers of one event in an
   order fixed by their creation; PostgreSQL fires them by name).

Running ``current.sql`` in B, rather than parsing it, also proves that it installs as written
(its statements are valid and in an order the database takes), and any object the migrations
install that the file lacks, or the reverse, shows up as a name on one side only.
"""

from __future__ import annotations

import difflib
import re
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import psycopg
import pytest

from purgekeeper.schema import fences, migrate
from purgekeeper.schema.db import Database
from tests.conftest import _admin_connect, create_database, drop_database, postgres_url

TOKEN = re.compile(
    r"""
      (?P<comment>--[^\n]*|/\*.*?\*/)
    | (?P<string>'(?:[^']|'')*')
    | (?P<quoted>"(?:[^"]|"")*")
    | (?P<space>\s+)
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<number>[0-9]+(?:\.[0-9]+)?)
    | (?P<operator>[-<>=!|&+*/%^~@#:]+)
    | (?P<other>.)
    """,
    re.DOTALL | re.VERBOSE,
)


def normalised(sql: str) -> str:
    """``sql`` as tokens: comments dropped, one space between tokens, words outside quotes
    lowercased (SQL keywords and unquoted names are case-insensitive on both backends)."""
    tokens = []
    for match in TOKEN.finditer(sql):
        kind, value = match.lastgroup, match.group()
        if kind in ("comment", "space"):
            continue
        tokens.append(value.lower() if kind == "word" else value)
    return " ".join(tokens)


class Installed(NamedTuple):
    definitions: dict[str, str]  # "trigger pk_x" -> normalised definition
    order: dict[str, list[str]]  # SQLite: table -> its triggers in creation order


PG_DEFINITIONS = """
SELECT 'function ' || p.oid::regprocedure::text, pg_get_functiondef(p.oid)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = current_schema()
   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                      AND d.deptype = 'e')
UNION ALL
SELECT 'trigger ' || t.tgname, pg_get_triggerdef(t.oid) || ' -- enabled: ' || t.tgenabled::text
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND NOT t.tgisinternal
UNION ALL
SELECT 'view ' || c.relname, pg_get_viewdef(c.oid)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind IN ('v', 'm')
"""

PG_DROPS = """
SELECT format('DROP TRIGGER %I ON %s', t.tgname, t.tgrelid::regclass)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND NOT t.tgisinternal
UNION ALL
SELECT format('DROP VIEW %s', c.oid::regclass)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind = 'v'
UNION ALL
SELECT format('DROP FUNCTION %s', p.oid::regprocedure)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = current_schema()
   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                      AND d.deptype = 'e')
"""

SQLITE_OBJECTS = "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE type IN ('trigger', 'view') ORDER BY rowid"


def postgresql_installed(conn: psycopg.Connection) -> Installed:
    definitions: dict[str, str] = {}
    for key, definition in conn.execute(PG_DEFINITIONS).fetchall():
        assert key not in definitions, f"{key} is defined twice"
        definitions[key] = normalised(definition)
    return Installed(definitions, {})


def sqlite_installed(conn: sqlite3.Connection) -> Installed:
    definitions: dict[str, str] = {}
    order: dict[str, list[str]] = {}
    for kind, name, table, sql in conn.execute(SQLITE_OBJECTS).fetchall():
        definitions[f"{kind} {name}"] = normalised(sql)
        if kind == "trigger":
            order.setdefault(table, []).append(name)
    return Installed(definitions, order)


def differences(migrated: Installed, current: Installed) -> list[str]:
    found = []
    for key in sorted(migrated.definitions.keys() - current.definitions.keys()):
        found.append(f"{key}: installed by the migrations, missing from current.sql")
    for key in sorted(current.definitions.keys() - migrated.definitions.keys()):
        found.append(f"{key}: in current.sql, not installed by the migrations")
    for key in sorted(migrated.definitions.keys() & current.definitions.keys()):
        theirs, ours = migrated.definitions[key], current.definitions[key]
        if theirs != ours:
            diff = difflib.unified_diff(
                theirs.split(" "), ours.split(" "), "migrations", "current.sql", n=4, lineterm=""
            )
            found.append(f"{key} differs (one token a line):\n" + "\n".join(diff))
    for table in sorted(migrated.order.keys() | current.order.keys()):
        if migrated.order.get(table) != current.order.get(table):
            found.append(
                f"triggers on {table}: created in the order {migrated.order.get(table)} by the migrations, "
                f"{current.order.get(table)} by current.sql"
            )
    return found


@pytest.fixture
def postgresql_pair() -> Iterator[tuple[str, str]]:
    """Two scratch database names (A, B), dropped afterwards."""
    names = (f"pk_t_{uuid.uuid4().hex[:16]}", f"pk_t_{uuid.uuid4().hex[:16]}")
    try:
        yield names
    finally:
        for name in names:
            drop_database(name)


def compare_postgresql(names: tuple[str, str]) -> list[str]:
    migrated_name, current_name = names
    create_database(migrated_name)
    db = Database(postgres_url(migrated_name))
    try:
        assert migrate.upgrade(db).changed
    finally:
        db.dispose()
    create_database(current_name, template=migrated_name)
    with _admin_connect(current_name) as conn:
        for (drop,) in conn.execute(PG_DROPS).fetchall():
            conn.execute(drop)
        assert postgresql_installed(conn).definitions == {}
        with conn.transaction():
            for statement in fences.statements("postgresql", "current.sql"):
                conn.execute(statement)  # no parameters: % and : stay as written
        current = postgresql_installed(conn)
    with _admin_connect(migrated_name) as conn:
        migrated = postgresql_installed(conn)
    assert migrated.definitions, "the migrations installed nothing"
    return differences(migrated, current)


def compare_sqlite(tmp_path: Path) -> list[str]:
    migrated_path, current_path = tmp_path / "migrated.db", tmp_path / "current.db"
    db = Database(f"sqlite:///{migrated_path}")
    try:
        assert migrate.upgrade(db).changed
    finally:
        db.dispose()
    with sqlite3.connect(migrated_path) as source, sqlite3.connect(current_path) as target:
        source.backup(target)
    migrated_conn = sqlite3.connect(migrated_path)
    current_conn = sqlite3.connect(current_path, isolation_level=None)
    try:
        for kind, name, _table, _sql in current_conn.execute(SQLITE_OBJECTS).fetchall():
            current_conn.execute(f'DROP {kind.upper()} "{name}"')
        assert sqlite_installed(current_conn).definitions == {}
        current_conn.execute("BEGIN")
        for statement in fences.statements("sqlite", "current.sql"):
            current_conn.execute(statement)
        current_conn.execute("COMMIT")
        migrated, current = sqlite_installed(migrated_conn), sqlite_installed(current_conn)
    finally:
        migrated_conn.close()
        current_conn.close()
    assert migrated.definitions, "the migrations installed nothing"
    return differences(migrated, current)


def test_current_sql_is_what_the_migrations_install(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if backend == "postgresql":
        found = compare_postgresql(request.getfixturevalue("postgresql_pair"))
    else:
        found = compare_sqlite(tmp_path)
    assert found == [], "\n\n".join(found)


def test_the_normalisation_keeps_what_matters() -> None:
    """Comments, line breaks and the case of keywords and names do not count; a string's
    text, a number and the order of tokens do."""
    written = "CREATE TRIGGER t BEFORE DELETE ON x -- why\nBEGIN\n    SELECT RAISE(ABORT, 'No');  /* c */\nEND"
    assert normalised(written) == normalised("create trigger T before delete on X begin select raise(abort, 'No'); end")
    assert normalised(written) != normalised(written.replace("'No'", "'no'"))
    assert normalised("WHERE seq + 1 = 12") != normalised("WHERE seq + 1 = 1 2")
    assert normalised("a <> b") != normalised("a < b")
    assert normalised("BEFORE INSERT OR UPDATE") != normalised("BEFORE UPDATE OR INSERT")
