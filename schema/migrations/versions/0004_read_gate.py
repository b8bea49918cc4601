"""the read gate: a durable flag that closes content reads and writes during a restore merge

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN on both backends (no table rebuild: the ledger triggers stay)
    op.add_column("ledger_head", sa.Column("gate_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
