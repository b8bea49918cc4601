"""cleanup workers: lease index, the operator's audit, the scheduler's leader lease

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_cleanup_steps_lease", "cleanup_steps", ["status", "lease_expires_at"], unique=False)
    op.create_index("ix_tombstones_purge_id", "tombstones", ["purge_id", "kind"], unique=False)
    op.create_table(
        "purge_audit",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("purge_id", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("step_ids", sa.Text(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.text("(CURRENT_TIMESTAMP)"), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_purge_audit")),
    )
    op.create_index("ix_purge_audit_purge_id", "purge_audit", ["purge_id"], unique=False)
    op.create_table(
        "leader_leases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leader_leases")),
    )


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
