"""tombstone triggers only for identity tombstones

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

from purgekeeper.schema import fences

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    fences.install(op.get_bind(), "0003_identity_tombstone_triggers.sql")


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
