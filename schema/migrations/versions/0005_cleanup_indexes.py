"""cleanup indexes and triggers: blob state changes are HOT updates that call no PL/pgSQL;
event tombstones indexed by purge

Revision ID: 0005
Revises: 0004

- ``blobs``: the dedupe index no longer holds ``state`` (a CAS lookup finds the one or two
  rows of a hash and checks their state), so marking a blob ``deleting`` and then ``deleted``
  writes no index entry; on PostgreSQL the table keeps half of each page free
  (``fillfactor = 50``) so the new row versions fit on the row's own page (a HOT update).
  A blob row changes exactly twice in its life, and together with its neighbours: a
  conversation's attachments arrive together and are purged together, so a step updates
  whole pages at once; at 80% only about half of those updates were HOT (measured). The
  table is small next to the bytes its rows stand for.
  Rows already on disk are rewritten with that room only by ``VACUUM FULL``; new ones get it.
- ``tombstones``: the index by purge holds only event tombstones, the only kind ever looked
  up by purge (the attachments step and a restore merge); the provider-event tombstones of
  content purges and the identity tombstones no longer cost an entry there.
- PostgreSQL: the blob trigger's function runs only for a change it refuses (a WHEN clause
  holding its conditions), not once per blob marked.
- Both: a provider event id is fenced when the event that carries it is fenced, so the
  bodies step of a conversation purge writes event tombstones only (one row per event, not
  two; an event row is never deleted, so its provider event id stays taken).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from purgekeeper.schema import fences

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_blobs_sha256_state", table_name="blobs")
    op.create_index("ix_blobs_sha256", "blobs", ["sha256"], unique=False)
    op.drop_index("ix_tombstones_purge_id", table_name="tombstones")
    op.create_index(
        "ix_tombstones_event_purge_id",
        "tombstones",
        ["purge_id"],
        unique=False,
        postgresql_where=sa.text("kind = 'event'"),
        sqlite_where=sa.text("kind = 'event'"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE blobs SET (fillfactor = 50)")
    fences.install(op.get_bind(), "0005_cleanup_triggers.sql")


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
