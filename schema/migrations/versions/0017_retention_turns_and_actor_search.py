"""who takes a retention policy's turn and why, what agent runs hold it back, and the ledger by actor

Revision ID: 0017
Revises: 0016

- ``retention_policies``: ``last_run_by`` and ``last_run_reason`` (who took the policy's last
  turn and why: the scheduler, or an operator's ``purgectl retention run --actor --reason``)
  and the deferral its last turn found: ``deferred_since`` (the first turn of a deferral that
  still lasts: non-terminal agent runs admitted events the policy would expire, and they
  wait), ``deferred_events`` and ``deferred_run_ids`` (the first 20, a JSON list). ``/metrics``
  exports the oldest deferral's age; an alert fires once it passes a day.
  **Rows of before 0017**: ``last_run_by`` and ``last_run_reason`` are NULL (not recorded; a
  run accepted then names ``purgekeeper-scheduler`` in its ledger row, an operator's
  ``retention run`` included), ``deferred_since`` and ``deferred_run_ids`` NULL and
  ``deferred_events`` 0 (nothing known to wait) until the policy's next turn.
- ``purge_ledger`` indexed by (actor, seq): the console's search finds the purges one actor
  confirmed, newest first, as an index range.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("retention_policies") as policies:
        policies.add_column(sa.Column("last_run_by", sa.Text(), nullable=True))
        policies.add_column(sa.Column("last_run_reason", sa.Text(), nullable=True))
        policies.add_column(sa.Column("deferred_since", sa.DateTime(timezone=True), nullable=True))
        policies.add_column(sa.Column("deferred_events", sa.BigInteger(), server_default="0", nullable=False))
        policies.add_column(sa.Column("deferred_run_ids", sa.Text(), nullable=True))
    op.create_index("ix_purge_ledger_actor_seq", "purge_ledger", ["actor", "seq"], unique=False)


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
