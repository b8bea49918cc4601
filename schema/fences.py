"""The database-enforced purge fences: their SQL per dialect, and the names it defines.

The SQL lives in ``schema/sql/<dialect>/NNNN_*.sql``; a migration installs the file of its
revision, so a later change to the fences is a new file and a new migration, never an edit.
``schema/sql/<dialect>/current.sql`` is every trigger, function and view as it stands: the
names a migrated database must hold are read from it (``defined``), not listed again here.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

STATEMENT_SEPARATOR = "-- ;;"

DIALECTS = ("postgresql", "sqlite")
CURRENT = "current.sql"  # every trigger, function and view as it stands (schema/rules.py says why)
_DEFINITION = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?(TRIGGER|FUNCTION|VIEW)\s+(\w+)", re.IGNORECASE)


def defined(dialect: str) -> dict[str, frozenset[str]]:
    """{"trigger": names, "function": names, "view": names} that ``dialect``'s current.sql
    creates: what a database migrated to the newest revision holds, and nothing else."""
    found: dict[str, set[str]] = {"trigger": set(), "function": set(), "view": set()}
    for statement in statements(dialect, CURRENT):
        code = "\n".join(line for line in statement.splitlines() if not line.lstrip().startswith("--")).strip()
        match = _DEFINITION.match(code)
        if match is None:
            raise ValueError(f"current.sql ({dialect}) holds a statement that defines nothing: {statement[:200]!r}")
        found[match.group(1).lower()].add(match.group(2))
    return {kind: frozenset(names) for kind, names in found.items()}


def triggers(dialect: str) -> frozenset[str]:
    """The triggers a database of ``dialect`` migrated to the newest revision holds."""
    return defined(dialect)["trigger"]


def statements(dialect: str, revision_file: str) -> list[str]:
    """The SQL statements of one fences file, e.g. ``statements("sqlite", "0001_fences.sql")``."""
    if dialect not in DIALECTS:
        raise ValueError(f"unsupported dialect {dialect!r}")
    text = resources.files("purgekeeper.schema").joinpath("sql", dialect, revision_file).read_text("utf-8")
    parts: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip() == STATEMENT_SEPARATOR:
            parts.append([])
        else:
            parts[-1].append(line)
    statements = ("\n".join(lines).strip() for lines in parts)
    return [statement for statement in statements if _has_sql(statement)]


def install(bind: Any, revision_file: str) -> None:
    """Run one fences file on a migration's connection, through a raw cursor with no
    parameters: the trigger bodies hold % and : as written."""
    dbapi_connection = bind.connection.dbapi_connection
    assert dbapi_connection is not None
    cursor = dbapi_connection.cursor()
    try:
        for statement in statements(bind.dialect.name, revision_file):
            cursor.execute(statement)
    finally:
        cursor.close()


def _has_sql(part: str) -> bool:
    return any(line.strip() and not line.strip().startswith("--") for line in part.splitlines())
