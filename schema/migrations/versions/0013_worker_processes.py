"""worker processes and their heartbeats (issue 26, item 5)

Revision ID: 0013
Revises: 0012

- ``worker_processes``: one row per start of a worker, scheduler or embedded process, renewed
  by its heartbeat (``purgekeeper.schema.heartbeats``): host, pid, role, queues, threads, when it started
  and was last seen (the database clock), until when it counts as alive, when it stopped
  cleanly, and the lease owners of the attempts it runs now. The Workers view lists them,
  ``/metrics`` counts the live ones by role, and a due step with no live worker is stalled
  at once. A row dead for a day is deleted by the next heartbeat of any process.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "worker_processes",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", sa.Text(), nullable=False),
        sa.Column("threads", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("alive_until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("holding", sa.Text(), nullable=False),
        sa.CheckConstraint("role IN ('worker', 'scheduler', 'embedded')", name=op.f("ck_worker_processes_role")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_worker_processes")),
    )
    op.create_index("ix_worker_processes_alive_until", "worker_processes", ["alive_until"], unique=False)


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
