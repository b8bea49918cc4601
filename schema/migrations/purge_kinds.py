"""A migration step that two revisions share: widening ``purge_ledger.kind``'s CHECK when a
revision adds purge kinds (0008: ``author``; 0009: retention and holds)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


def widen_purge_kinds(check: str) -> None:
    """Replace the CHECK on ``purge_ledger.kind`` with ``check``. SQLite cannot alter a CHECK:
    the table is rebuilt (every row copied as it is), which drops its triggers; the caller
    creates them again (``ledger_triggers.create_sqlite_ledger_triggers``)."""
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("purge_ledger", recreate="always") as batch:
            batch.drop_constraint(op.f("ck_purge_ledger_kind"), type_="check")
            batch.create_check_constraint(op.f("ck_purge_ledger_kind"), sa.text(check))
    else:
        op.drop_constraint(op.f("ck_purge_ledger_kind"), "purge_ledger", type_="check")
        op.create_check_constraint(op.f("ck_purge_ledger_kind"), "purge_ledger", sa.text(check))
