"""statement-level content fences on PostgreSQL, so a bodies batch pays per statement (issue 27, item 2)

Revision ID: 0014
Revises: 0013

A bodies batch NULLs a few hundred bodies and deletes as many placements, and each row of
those two statements called ``pk_holds_in_force()`` (an advisory lock and a probe of
``legal_holds``) in a row trigger: the triggers cost more than the writes. On PostgreSQL the
hold checks of an event's body and of a deleted placement now run once per statement, over
its transition tables (``pk_events_held_content``; ``pk_placements_after_delete``, which asks
the hold before the last-placement rule, as the row trigger it replaces did), and the
purge's own NULLing of a body skips ``pk_events_before_update`` in its WHEN clause. The
rules are the same, and so are the errors. SQLite has no statement-level triggers and keeps
its row triggers.
"""

from __future__ import annotations

from alembic import op

from purgekeeper.schema import fences

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        fences.install(op.get_bind(), "0014_statement_level_fences.sql")


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
