"""A migration step that three revisions share: creating the SQLite purge ledger's triggers
(0001 first; 0008 and 0009 again, after ``widen_purge_kinds`` rebuilt the table, which drops
its triggers). The SQL is one file, ``schema/sql/sqlite/purge_ledger_triggers.sql``, that
drops each trigger if it exists and creates it. PostgreSQL alters the CHECK in place and
keeps its triggers: nothing to do there."""

from __future__ import annotations

from alembic import op

from purgekeeper.schema import fences

LEDGER_TRIGGERS = "purge_ledger_triggers.sql"


def create_sqlite_ledger_triggers() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        fences.install(bind, LEDGER_TRIGGERS)
