"""the ledger head moves once per statement (PostgreSQL), so a bulk append is linear

Revision ID: 0007
Revises: 0006

Inside one transaction, every UPDATE of the one-row ``ledger_head`` left a dead version that
the next lookup walked past: appending n rows one by one cost O(n^2) (a merge of 8,000 rows
took 12.6x the time of 2,000). The chain trigger now checks each row against the row before
it, and a statement-level trigger moves the head once to the statement's last row. SQLite
updates rows in place and keeps its per-row triggers.
"""

from __future__ import annotations

from alembic import op

from purgekeeper.schema import fences

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        fences.install(op.get_bind(), "0007_ledger_head_per_statement.sql")


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
