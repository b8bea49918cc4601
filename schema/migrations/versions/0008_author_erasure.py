"""author erasure: one row erases everything an author wrote before a time

Revision ID: 0008
Revises: 0007

- ``author_erasures``: (author, purge_id) → window_end, close_author. Every event by the
  author with ``occurred_at < window_end`` is erased from the row's commit on: not live, like
  an event with an ``event`` tombstone, for every reader and every trigger. Acceptance
  writes this one row; cleanup tombstones the events and NULLs their content in batches.
  The rows are never changed, deleted or truncated.
- ``events``: indexed by (author, occurred_at, id), for the cleanup's keyset and the
  window's end, and by (author, created_at), for the newest ingest of an author.
- ``purge_ledger.kind`` takes ``author``. SQLite cannot alter a CHECK: the table is rebuilt
  (rows copied as they are) and its triggers are created again (``purge_ledger_triggers.sql``).
- The fences (0008_author_erasure.sql): an erased event is not live (``content_purged``);
  an event by an author whose erasure covers its time, or who is closed, is refused
  (``author_erased``), and an erased event's author and time never change. On PostgreSQL
  every such check first takes the author's advisory lock shared; an erasure's acceptance
  takes it exclusively (``purgekeeper.schema.authors.lock_author``), so a writer that began before the
  erasure and checks after its commit sees it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from purgekeeper.schema import fences
from purgekeeper.schema.migrations.ledger_triggers import create_sqlite_ledger_triggers
from purgekeeper.schema.migrations.purge_kinds import widen_purge_kinds

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

PURGE_KINDS = "kind IN ('content', 'conversation', 'channel', 'bot', 'author')"


def upgrade() -> None:
    op.create_table(
        "author_erasures",
        sa.Column("author", sa.Text(), nullable=False),
        sa.Column("purge_id", sa.String(length=64), nullable=False),
        sa.Column("window_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("close_author", sa.Boolean(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.text("(CURRENT_TIMESTAMP)"), nullable=False
        ),
        sa.PrimaryKeyConstraint("author", "purge_id", name=op.f("pk_author_erasures")),
    )
    op.create_index("ix_author_erasures_author", "author_erasures", ["author"], unique=False, postgresql_using="hash")
    op.create_index("ix_events_author_occurred_at", "events", ["author", "occurred_at", "id"], unique=False)
    op.create_index("ix_events_author_created_at", "events", ["author", "created_at", "id"], unique=False)
    widen_purge_kinds(PURGE_KINDS)
    create_sqlite_ledger_triggers()  # the rebuild dropped them (SQLite)
    fences.install(op.get_bind(), "0008_author_erasure.sql")


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
