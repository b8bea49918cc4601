"""retention policies and legal holds

Revision ID: 0009
Revises: 0008

- ``retention_policies``: the standing policies and their schedule; ``retention_fences`` and
  ``retention_exemptions``: the runs whose cleanup has not finished, and what each leaves
  alone; ``legal_holds`` and ``legal_hold_subjects``: the holds and what they cover. The
  ledger's rows are the record of all of them (a merge writes these again from it).
- ``events``: indexed by (occurred_at, id), for a global run's window.
- ``cleanup_steps.held``: what a legal hold kept out of a retention run, counted by its
  bodies step.
- ``purge_ledger.kind`` takes ``retention``, ``retention_end``, ``retention_run``, ``hold``
  and ``hold_release``. SQLite cannot alter a CHECK: the table is rebuilt, rows copied as
  they are, and its triggers created again (as 0008 did).
- The fences (0009_retention_and_holds.sql): a placement a run expires keeps nothing live;
  an event is never placed where a run expires it, nor (unless held) past the cutoff of the
  policy that governs the conversation; an event's author and time never change while
  retention is in force; the new tables are guarded.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from purgekeeper.schema import fences
from purgekeeper.schema.migrations.ledger_triggers import create_sqlite_ledger_triggers
from purgekeeper.schema.migrations.purge_kinds import widen_purge_kinds

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

PURGE_KINDS = (
    "kind IN ('content', 'conversation', 'channel', 'bot', 'author', "
    "'retention', 'retention_end', 'retention_run', 'hold', 'hold_release')"
)


def upgrade() -> None:
    _create_retention_tables()
    _create_legal_holds()
    _extend_events_and_cleanup_steps()
    _widen_the_ledger()
    fences.install(op.get_bind(), "0009_retention_and_holds.sql")


def _create_retention_tables() -> None:
    op.create_table(
        "retention_policies",
        sa.Column("policy_id", sa.String(length=200), nullable=False),
        sa.Column("conversation_id", sa.String(length=200), nullable=True),
        sa.Column("max_age_seconds", sa.BigInteger(), nullable=False),
        sa.Column("purge_id", sa.String(length=64), nullable=False),
        sa.Column("ended_by", sa.String(length=64), nullable=True),
        sa.Column("next_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("pending_cutoff", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expired_through", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_cutoff", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_purge_id", sa.String(length=64), nullable=True),
        sa.CheckConstraint("max_age_seconds > 0", name=op.f("ck_retention_policies_max_age_positive")),
        sa.PrimaryKeyConstraint("policy_id", name=op.f("pk_retention_policies")),
    )
    op.create_index("ix_retention_policies_next_run_at", "retention_policies", ["next_run_at"], unique=False)
    op.create_index("ix_retention_policies_conversation_id", "retention_policies", ["conversation_id"], unique=False)
    op.create_table(
        "retention_fences",
        sa.Column("purge_id", sa.String(length=64), nullable=False),
        sa.Column("policy_id", sa.String(length=200), nullable=False),
        sa.Column("conversation_id", sa.String(length=200), nullable=True),
        sa.Column("cutoff", sa.DateTime(timezone=True), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=True),
        sa.Column("placed_before", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.text("(CURRENT_TIMESTAMP)"), nullable=False
        ),
        sa.PrimaryKeyConstraint("purge_id", name=op.f("pk_retention_fences")),
    )
    op.create_table(
        "retention_exemptions",
        sa.Column("purge_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("subject_id", sa.Text(), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=False),
        sa.CheckConstraint("kind IN ('conversation', 'author')", name=op.f("ck_retention_exemptions_kind")),
        sa.CheckConstraint("reason IN ('hold', 'own_policy')", name=op.f("ck_retention_exemptions_reason")),
        sa.PrimaryKeyConstraint("purge_id", "kind", "subject_id", name=op.f("pk_retention_exemptions")),
    )


def _create_legal_holds() -> None:
    op.create_table(
        "legal_holds",
        sa.Column("hold_id", sa.String(length=200), nullable=False),
        sa.Column("purge_id", sa.String(length=64), nullable=False),
        sa.Column("released_by", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("hold_id", name=op.f("pk_legal_holds")),
    )
    op.create_table(
        "legal_hold_subjects",
        sa.Column("hold_id", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("subject_id", sa.Text(), nullable=False),
        sa.CheckConstraint("kind IN ('conversation', 'author')", name=op.f("ck_legal_hold_subjects_kind")),
        sa.PrimaryKeyConstraint("hold_id", "kind", "subject_id", name=op.f("pk_legal_hold_subjects")),
    )
    op.create_index("ix_legal_hold_subjects_subject", "legal_hold_subjects", ["kind", "subject_id"], unique=False)


def _extend_events_and_cleanup_steps() -> None:
    op.create_index("ix_events_occurred_at", "events", ["occurred_at", "id"], unique=False)
    with op.batch_alter_table("cleanup_steps") as batch:
        batch.add_column(sa.Column("held", sa.BigInteger(), server_default="0", nullable=False))


def _widen_the_ledger() -> None:
    widen_purge_kinds(PURGE_KINDS)  # SQLite: drops the ledger's triggers, created again below
    runs = sa.text("kind = 'retention_run'")
    op.create_index(
        "ix_purge_ledger_retention_runs",
        "purge_ledger",
        ["purge_id"],
        unique=False,
        postgresql_where=runs,
        sqlite_where=runs,
    )
    create_sqlite_ledger_triggers()


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
