"""step attempts, and the conversations of each purge

Revision ID: 0010
Revises: 0009

- ``step_attempts``: one row per attempt of a cleanup step (owner, start, end, outcome,
  error), for the operator's console.
- ``metric_counters``: the counters and histograms of ``/metrics`` (attempts started and
  failed, attempt durations, acceptance to complete), kept by the transactions that change
  them, so that a scrape reads a bounded number of rows.
- ``purge_completions``: the purges whose completion ``/metrics`` counted, so that a purge a
  merge cleans again (a restored file) is counted complete once.
- ``purge_conversations``: the conversations each purge concerns, for listing purges by
  conversation; filled here from the rows the ledger already holds (conversation and channel
  purges, content purges: their scope's conversation and where their events are placed,
  retention runs and policies of a conversation, holds), then by every acceptance and merge.
- ``purge_ledger`` indexed by (kind, seq), for listing purges of one kind, newest first.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

BACKFILL = {
    "postgresql": """
        INSERT INTO purge_conversations (conversation_id, purge_id)
        SELECT DISTINCT conversation_id, purge_id FROM (
            SELECT purge_id, selectors::jsonb ->> 'conversation_id' AS conversation_id FROM purge_ledger
             WHERE kind IN ('conversation', 'retention', 'retention_end', 'retention_run')
            UNION ALL
            SELECT purge_id, selectors::jsonb ->> 'channel_id' FROM purge_ledger WHERE kind = 'channel'
            UNION ALL
            SELECT purge_id, selectors::jsonb -> 'request' -> 'scope' ->> 'conversation_id' FROM purge_ledger
             WHERE kind = 'content'
            UNION ALL
            SELECT purge_ledger.purge_id, placements.conversation_id
              FROM purge_ledger
              CROSS JOIN LATERAL jsonb_array_elements_text(purge_ledger.selectors::jsonb -> 'event_ids') AS purged(id)
              JOIN placements ON placements.event_id = purged.id
             WHERE purge_ledger.kind = 'content'
            UNION ALL
            SELECT purge_id, jsonb_array_elements_text(selectors::jsonb -> 'conversation_ids') FROM purge_ledger
             WHERE kind = 'hold' AND jsonb_typeof(selectors::jsonb -> 'conversation_ids') = 'array'
        ) AS named
        WHERE conversation_id IS NOT NULL
    """,
    "sqlite": """
        INSERT OR IGNORE INTO purge_conversations (conversation_id, purge_id)
        SELECT conversation_id, purge_id FROM (
            SELECT purge_id, json_extract(selectors, '$.conversation_id') AS conversation_id FROM purge_ledger
             WHERE kind IN ('conversation', 'retention', 'retention_end', 'retention_run')
            UNION ALL
            SELECT purge_id, json_extract(selectors, '$.channel_id') FROM purge_ledger WHERE kind = 'channel'
            UNION ALL
            SELECT purge_id, json_extract(selectors, '$.request.scope.conversation_id') FROM purge_ledger
             WHERE kind = 'content'
            UNION ALL
            SELECT purge_ledger.purge_id, placements.conversation_id
              FROM purge_ledger, json_each(purge_ledger.selectors, '$.event_ids') AS purged
              JOIN placements ON placements.event_id = purged.value
             WHERE purge_ledger.kind = 'content'
            UNION ALL
            SELECT purge_ledger.purge_id, held.value
              FROM purge_ledger, json_each(purge_ledger.selectors, '$.conversation_ids') AS held
             WHERE purge_ledger.kind = 'hold'
        ) AS named
        WHERE conversation_id IS NOT NULL
    """,
}


def upgrade() -> None:
    op.create_table(
        "step_attempts",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("step_id", sa.String(length=64), nullable=False),
        sa.Column("purge_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_step_attempts")),
    )
    op.create_index("ix_step_attempts_purge_id", "step_attempts", ["purge_id", "started_at"], unique=False)
    op.create_index("ix_step_attempts_step_id", "step_attempts", ["step_id", "finished_at"], unique=False)
    op.create_table(
        "metric_counters",
        sa.Column("metric", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("bucket", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("metric", "kind", "bucket", name=op.f("pk_metric_counters")),
    )
    op.create_table(
        "purge_completions",
        sa.Column("purge_id", sa.String(length=64), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("purge_id", name=op.f("pk_purge_completions")),
    )
    op.create_table(
        "purge_conversations",
        sa.Column("conversation_id", sa.String(length=200), nullable=False),
        sa.Column("purge_id", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("conversation_id", "purge_id", name=op.f("pk_purge_conversations")),
    )
    op.create_index("ix_purge_ledger_kind_seq", "purge_ledger", ["kind", "seq"], unique=False)
    op.execute(sa.text(BACKFILL[op.get_bind().dialect.name]))


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
