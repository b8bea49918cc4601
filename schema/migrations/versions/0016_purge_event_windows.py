"""a purge's event tombstones in id order: the attachments step walks them a window at a time

Revision ID: 0016
Revises: 0015

- ``tombstones``: the index of the event tombstones by purge holds the event id after the
  purge id, so the next ``limit`` events of a purge after a given one are an index range
  read. The attachments step walks a purge's fenced events that way, a window at a time,
  and finds the blobs of each window: each batch's cost follows the batch. It found each
  batch's blobs among every blob of the purge's fenced events, again for every batch, a cost
  that grew with the purge's size times its batches (``bench/cleanup.py --statements``: 31 ms
  per batch with 10,000 events, 4.4 ms with 1,000).
  Lookups by purge alone (a restore merge, ``purgekeeper.schema.purge_touched``) use the same index by
  its first column.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_tombstones_event_purge_id", table_name="tombstones")
    op.create_index(
        "ix_tombstones_event_purge_id",
        "tombstones",
        ["purge_id", "id"],
        unique=False,
        postgresql_where=sa.text("kind = 'event'"),
        sqlite_where=sa.text("kind = 'event'"),
    )


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
