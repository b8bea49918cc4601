"""fences against raw writers: strict liveness, guarded deletes, canonical blob paths,
reservations that no snapshot can miss, attachment names that cleanup can remove

Revision ID: 0006
Revises: 0005

- Live is what docs/design.md says (no fence AND a placement in a conversation that is not
  purged); a placement, an event row, a cleanup step, and the admissions, derivative
  sources and attachments of purged content are never deleted out from under a purge; no
  content table is truncated (PostgreSQL).
- A run's output and a derivative's payload are refused while any event they came from is
  not live; a blob bound only by events that are not live is bound to nothing new.
- ``blobs``: a new row's path is the canonical one for its kind and id (rows written by
  earlier versions keep theirs until their bytes are deleted, when the path may change to
  the canonical one, taking the attachment name that the old layout held with it).
- ``identity_reservations``: one row per reserved conversation or bot id, written with its
  tombstone. On PostgreSQL creating an id probes its primary key, which sees committed rows
  whatever the writer's snapshot (a REPEATABLE READ writer that began before the
  reservation is refused with IdReserved).
- ``attachments.name`` becomes nullable: the bodies step NULLs the names of purged
  attachments (a name is content). SQLite rebuilds the table for it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from purgekeeper.schema import fences

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

RESERVE_EXISTING = """
INSERT INTO identity_reservations (namespace, id)
SELECT DISTINCT CASE WHEN kind = 'bot' THEN 'bot' ELSE 'conversation' END, id
  FROM tombstones WHERE kind IN ('conversation', 'channel', 'bot')
"""


def upgrade() -> None:
    op.create_table(
        "identity_reservations",
        sa.Column("namespace", sa.String(length=16), nullable=False),
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.CheckConstraint("namespace IN ('conversation', 'bot')", name=op.f("ck_identity_reservations_namespace")),
        sa.PrimaryKeyConstraint("namespace", "id", name=op.f("pk_identity_reservations")),
    )
    op.execute(RESERVE_EXISTING)
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("attachments", recreate="always") as batch:
            batch.alter_column("name", existing_type=sa.Text(), nullable=True)
    else:
        op.alter_column("attachments", "name", existing_type=sa.Text(), nullable=True)
    fences.install(op.get_bind(), "0006_raw_writer_fences.sql")


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
