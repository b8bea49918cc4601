"""new blobs in one level of 256 shard directories (issue 37, item 3)

Revision ID: 0021
Revises: 0020

- A new blob lives at ``ab/<sha256>-<blob id>`` (CAS) or ``ab/<blob id>`` (real file):
  one level of 256 shard directories, where 0006 had two (``ab/cd/``, 65,536). A batch of
  unlinks fsyncs each directory it changed once, so with one level a batch of 2,000 files
  fsyncs at most 256 directories, not nearly 2,000 (the trade-off: "Blobs on disk" in
  docs/design.md).
- Rows written before keep their paths: the two-level form stays canonical, for a row
  already written and for one a process of an earlier version writes while a newer one has
  migrated the database (``0021_one_level_blob_shards.sql``: ``pk_blob_path_is_canonical``).
  A deleted blob's path may change only to a canonical one, as since 0006: the cleanup
  leaves a row of either form at its own path, and gives a row of the layout before 0005
  (which holds the attachment's name) the one-level path.
- Nothing on disk moves.
"""

from __future__ import annotations

from alembic import op

from purgekeeper.schema import fences

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    fences.install(op.get_bind(), "0021_one_level_blob_shards.sql")


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
