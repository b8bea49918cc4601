"""content written before 0019 is sealed in place; an attachment names the key of its name

Revision ID: 0020
Revises: 0019

- ``attachments.key_id``: the key that seals the attachment's name, its event's key (an
  ingest writes it with the name). The attachments written under a sealed event since 0019
  take their event's key here; the others (``key_id`` NULL) hold their names in plain text,
  and ``ix_attachments_plain`` finds them, as ``ix_<table>_plain`` finds the rest (0019).
- The triggers (``0020_sealing_older_content.sql``) let the background sealing
  (``purgekeeper.commands.sealing_backfill``) seal a row in place, and nothing else touch a
  key: a row's ``key_id`` is set once, and besides an insert and a run's finish only by a
  **sealing**, one UPDATE in which ``key_id`` goes from NULL to a value and the content
  column from a plain value to a ``pk1:`` one (an attachment's name under its event's key),
  nothing else changed. A sealing needs live content (what a purge fenced is never written
  again), in a conversation not purged (a deleted channel's history may be sealed: it reads
  the same), and bumps no conversation version (a reader gets the same content, so previews
  being confirmed stay valid).
- **Held content is not sealed.** The trigger cannot open what it is given: sealing held
  content would let a raw writer replace it once, with any ``pk1:`` value, while a hold
  preserves it. So a sealing of what a hold in force covers is refused (``legal_hold``), the
  backfill skips those rows and reports them, and they are sealed once the hold is released.
- Still possible, and said: a raw writer holding the database's credentials can replace live
  plain content that no hold covers, once per row, with a sealing-shaped UPDATE, and no
  version moves (the same writer could change it before, with a bump).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from purgekeeper.schema import fences

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

PLAIN_NAMES = "key_id IS NULL AND name IS NOT NULL"  # as at 0020 (schema.content_tables.PLAIN_CONTENT)


def upgrade() -> None:
    op.add_column("attachments", sa.Column("key_id", sa.String(64), nullable=True))
    fences.install(op.get_bind(), "0020_sealing_older_content.sql")
    op.create_index(
        "ix_attachments_plain",
        "attachments",
        ["id"],
        postgresql_where=sa.text(PLAIN_NAMES),
        sqlite_where=sa.text(PLAIN_NAMES),
    )


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
