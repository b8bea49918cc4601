"""held content, closed authors under any snapshot, canonical times (issue 23)

Revision ID: 0012
Revises: 0011

- A hold preserves what it covers: while one is in force, a write that removes or overwrites
  held content that is still live is refused (``legal_hold``), whoever writes it (an event's
  body, its attachments' names and rows, admissions, run outputs, derivatives and their
  sources, and the rows that carry them). What a purge accepted before the hold fenced is
  not live: its cleanup still removes it.
- ``author_erasure_marks``: one row per erased author, whose count every ``author_erasures``
  row raises (a trigger: the acceptance, a restore's merge and a raw writer alike; filled
  here from the erasures already written). On PostgreSQL a check of an author's erasures in
  a transaction whose snapshot is its own (REPEATABLE READ, SERIALIZABLE) probes the mark's
  primary key, which sees committed rows whatever the snapshot (INSERT ... ON CONFLICT DO
  NOTHING: a read once the author has a row, one write of 0 for an author never erased): a
  writer that began before an erasure gets a serialization failure, and its retry is
  refused with AuthorErased. A READ COMMITTED writer (the library's ingest) probes nothing:
  the author's lock is enough (0008).
- SQLite compares times as text: every time a trigger or the library compares (events'
  ``occurred_at`` and ``created_at``, placements' ``created_at``, an erasure's
  ``window_end``, a retention fence's ``cutoff``, ``window_start`` and ``placed_before``, a
  policy's ``pending_cutoff`` and ``expired_through``) is refused (``invalid_change``) unless
  it is written as the library writes it, ``YYYY-MM-DD HH:MM:SS.ffffff`` in UTC, or as the
  column defaults do (``CURRENT_TIMESTAMP``, whole seconds). PostgreSQL's ``timestamptz``
  stores the instant whatever the text: nothing to add there.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from purgekeeper.schema import fences

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

MARK_EXISTING = """
INSERT INTO author_erasure_marks (author, erasures)
SELECT author, count(*) FROM author_erasures GROUP BY author
"""


def upgrade() -> None:
    op.create_table(
        "author_erasure_marks",
        sa.Column("author", sa.Text(), nullable=False),
        sa.Column("erasures", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("author", name=op.f("pk_author_erasure_marks")),
    )
    op.execute(MARK_EXISTING)
    fences.install(op.get_bind(), "0012_content_fences.sql")


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
