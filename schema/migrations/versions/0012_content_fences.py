"""held content, closed authors under any snapshot, canonical times

Revision ID: 0012
Revises: 0011

(Being written.)
"""

from __future__ import annotations

from alembic import op

from schema import fences

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    fences.install(op.get_bind(), "0012_content_fences.sql")


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
