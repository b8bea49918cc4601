"""content sealed at rest: which key of the key store seals an event's content and a blob's bytes

Revision ID: 0019
Revises: 0018

- ``events.key_id``: the id, in the key store (``purgekeeper.storage.keystore``), of the key
  that seals the event's body and its attachments' names
  (``purgekeeper.storage.sealing``).
- ``blobs.key_id``: the id of the key that seals the blob's bytes on disk
  (``purgekeeper.storage.sealed_files``); a blob shared by several events has its own key, so
  it is shredded only with its last live reference.
- ``admissions.key_id``, ``runs.key_id``, ``derivatives.key_id``: the keys that seal an
  admission's payload, a run's output and a derivative's payload, each its own: a purge that
  deletes a run of an event that stays live elsewhere shreds the run's copy, not the event.
- **Rows of before 0019** keep NULL: their content is in plain text until the background
  sealing (docs/guides/encryption.md) seals it. A key's id says nothing of the content: it is
  random, and the key itself never enters the database.
- Only columns are added (no trigger reads them, and SQLite adds a column in place), and a
  partial index per table of the content still in plain text (``ix_<table>_plain``), which
  the disclosure about it probes (``content_queries.holds_plain_content``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# as at 0019 (schema.content_tables.PLAIN_CONTENT may change later)
PLAIN = {
    "events": "key_id IS NULL AND body IS NOT NULL",
    "admissions": "key_id IS NULL AND payload IS NOT NULL",
    "runs": "key_id IS NULL AND output IS NOT NULL",
    "derivatives": "key_id IS NULL AND payload IS NOT NULL",
    "blobs": "key_id IS NULL AND state <> 'deleted'",
}
revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("key_id", sa.String(64), nullable=True))
    for table in ("blobs", "admissions", "runs", "derivatives"):
        op.add_column(table, sa.Column("key_id", sa.String(64), nullable=True))
    for table, predicate in PLAIN.items():
        op.create_index(
            f"ix_{table}_plain", table, ["id"], postgresql_where=sa.text(predicate), sqlite_where=sa.text(predicate)
        )


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
