"""the ledger's salts: a row commits who, why and the request's metadata in its leaf

Revision ID: 0018
Revises: 0017

- ``purge_ledger.salts``: base64 of one random 16-byte salt per committed field (actor,
  reason, request_id, idempotency_key, origin), part of the row's hashed fields
  (``purgekeeper.schema.ledger``). The signed log's leaf of such a row holds salted
  commitments of those fields instead of their values (leaf version 2, documented in
  ``purgekeeper.tlog.verify``), so a receipt can be handed to the data subject without
  the operator's name or the ticket's text.
  **Rows of before 0018** keep NULL: their hash and their leaf stay byte for byte what they
  were (version 1, every field in clear), so the signed log is not forked.
- Only a column is added: the ledger's triggers check the chain (``prev_hash`` and the head),
  never the hash's recipe, and SQLite adds a column in place, keeping them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("purge_ledger", sa.Column("salts", sa.Text(), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
