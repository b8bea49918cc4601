"""retention and hold bookkeeping bound to the ledger

Revision ID: 0011
Revises: 0010

- A retention policy's definition (scope, max age), its end and a legal hold's release are
  written only together with the ledger row that records them, checked by the triggers
  against ``purge_ledger`` in the writer's transaction (0011_ledger_bound_bookkeeping.sql).
"""

from __future__ import annotations

from alembic import op

from purgekeeper.schema import fences

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    fences.install(op.get_bind(), "0011_ledger_bound_bookkeeping.sql")


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
