"""content sealed at rest: which key of the key store seals an event's content and a blob's bytes

Revision ID: 0019
Revises: 0018

- ``events.key_id``: the id, in the key store (``purgekeeper.storage.keystore``), of the key
  that seals the event's body, its attachments' names and its admissions' payloads
  (``purgekeeper.storage.sealing``).
- ``blobs.key_id``: the id of the key that seals the blob's bytes on disk
  (``purgekeeper.storage.sealed_files``); a blob shared by several events has its own key, so
  it is shredded only with its last live reference.
- **Rows of before 0019** keep NULL: their content is in plain text until the background
  sealing (docs/guides/encryption.md) seals it. A key's id says nothing of the content: it is
  random, and the key itself never enters the database.
- Only columns are added: no trigger reads them, and SQLite adds a column in place.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("key_id", sa.String(64), nullable=True))
    op.add_column("blobs", sa.Column("key_id", sa.String(64), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
