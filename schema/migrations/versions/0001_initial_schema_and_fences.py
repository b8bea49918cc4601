"""initial schema and fences

Revision ID: 0001
Revises:
Create Date: 2026-11-30 06:25:30.367237
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

from purgekeeper.schema import fences
from purgekeeper.schema.migrations.ledger_triggers import create_sqlite_ledger_triggers

ACTIVE_RUNS = "status IN ('queued', 'running', 'waiting')"

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    _create_blobs()
    _create_bots()
    _create_cleanup_steps()
    _create_events()
    _create_ledger_head()
    _create_purge_ledger()
    _create_tombstones()
    _create_attachments()
    _create_conversations()
    _create_derivatives()
    _create_placements()
    _create_runs()
    _create_admissions()
    _create_derivative_sources()
    _create_purge_previews()
    install_fences()
    seed_ledger_head()


def _create_blobs() -> None:
    op.create_table(
        "blobs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), server_default="present", nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.CheckConstraint("kind IN ('cas', 'file')", name=op.f("ck_blobs_kind")),
        sa.CheckConstraint("state IN ('present', 'deleting', 'deleted')", name=op.f("ck_blobs_state")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_blobs")),
        sa.UniqueConstraint("path", name=op.f("uq_blobs_path")),
    )
    op.create_index("ix_blobs_sha256_state", "blobs", ["sha256", "state"], unique=False)


def _create_bots() -> None:
    op.create_table(
        "bots",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), server_default="active", nullable=False),
        sa.Column("memory_path", sa.Text(), nullable=True),
        sa.Column("marker_id", sa.String(length=64), nullable=True),
        sa.Column("erase_memory", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("state IN ('active', 'deleted')", name=op.f("ck_bots_state")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bots")),
    )


def _create_cleanup_steps() -> None:
    op.create_table(
        "cleanup_steps",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("purge_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column(
            "next_attempt_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.Column("lease_owner", sa.String(length=128), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("removed", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("retained_shared", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("retained_reasons", sa.Text(), nullable=True),
        sa.Column("remaining", sa.BigInteger(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.CheckConstraint("kind IN ('bodies', 'attachments', 'memory')", name=op.f("ck_cleanup_steps_kind")),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'retrying', 'done', 'incomplete')",
            name=op.f("ck_cleanup_steps_status"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cleanup_steps")),
        sa.UniqueConstraint("purge_id", "kind", name=op.f("uq_cleanup_steps_purge_id_kind")),
    )
    op.create_index("ix_cleanup_steps_due", "cleanup_steps", ["status", "next_attempt_at"], unique=False)


def _create_events() -> None:
    op.create_table(
        "events",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("provider_event_id", sa.String(length=200), nullable=True),
        sa.Column("author", sa.Text(), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("body", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
        sa.UniqueConstraint("provider_event_id", name=op.f("uq_events_provider_event_id")),
    )


def _create_ledger_head() -> None:
    op.create_table(
        "ledger_head",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("head_hash", sa.String(length=64), nullable=False),
        sa.Column("database_id", sa.String(length=64), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_ledger_head_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_head")),
    )


def _create_purge_ledger() -> None:
    op.create_table(
        "purge_ledger",
        sa.Column("seq", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("purge_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("selectors", sa.Text(), nullable=False),
        sa.Column("scope_digest", sa.String(length=64), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("request_id", sa.String(length=200), nullable=True),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("origin", sa.Text(), nullable=True),
        sa.Column("accepted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("row_hash", sa.String(length=64), nullable=False),
        sa.CheckConstraint(
            "kind IN ('content', 'conversation', 'channel', 'bot')",
            name=op.f("ck_purge_ledger_kind"),
        ),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_purge_ledger")),
        sa.UniqueConstraint("purge_id", name=op.f("uq_purge_ledger_purge_id")),
    )
    op.create_index("ix_purge_ledger_idempotency_key", "purge_ledger", ["idempotency_key"], unique=False)


def _create_tombstones() -> None:
    op.create_table(
        "tombstones",
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("purge_id", sa.String(length=64), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "kind IN ('conversation', 'channel', 'bot', 'event', 'provider_event')",
            name=op.f("ck_tombstones_kind"),
        ),
        sa.PrimaryKeyConstraint("kind", "id", name=op.f("pk_tombstones")),
    )


def _create_attachments() -> None:
    op.create_table(
        "attachments",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("event_id", sa.String(length=200), nullable=False),
        sa.Column("blob_id", sa.String(length=64), nullable=False),
        sa.Column("binding", sa.String(length=16), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.CheckConstraint("binding IN ('legacy_cas', 'real_file')", name=op.f("ck_attachments_binding")),
        sa.ForeignKeyConstraint(["blob_id"], ["blobs.id"], name=op.f("fk_attachments_blob_id_blobs")),
        sa.ForeignKeyConstraint(["event_id"], ["events.id"], name=op.f("fk_attachments_event_id_events")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attachments")),
    )
    op.create_index("ix_attachments_blob_id", "attachments", ["blob_id"], unique=False)
    op.create_index("ix_attachments_event_id", "attachments", ["event_id"], unique=False)


def _create_conversations() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=16), server_default="conversation", nullable=False),
        sa.Column("bot_id", sa.String(length=200), nullable=True),
        sa.Column("state", sa.String(length=16), server_default="active", nullable=False),
        sa.Column("version", sa.BigInteger(), server_default="1", nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.CheckConstraint("kind IN ('conversation', 'channel')", name=op.f("ck_conversations_kind")),
        sa.CheckConstraint("state IN ('active', 'deleted', 'purged')", name=op.f("ck_conversations_state")),
        sa.ForeignKeyConstraint(["bot_id"], ["bots.id"], name=op.f("fk_conversations_bot_id_bots")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
    )


def _create_derivatives() -> None:
    op.create_table(
        "derivatives",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("conversation_id", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_derivatives_conversation_id_conversations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_derivatives")),
    )
    op.create_index("ix_derivatives_conversation_id", "derivatives", ["conversation_id"], unique=False)


def _create_placements() -> None:
    op.create_table(
        "placements",
        sa.Column("event_id", sa.String(length=200), nullable=False),
        sa.Column("conversation_id", sa.String(length=200), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_placements_conversation_id_conversations"),
        ),
        sa.ForeignKeyConstraint(["event_id"], ["events.id"], name=op.f("fk_placements_event_id_events")),
        sa.PrimaryKeyConstraint("event_id", "conversation_id", name=op.f("pk_placements")),
    )
    op.create_index("ix_placements_conversation_id", "placements", ["conversation_id", "event_id"], unique=False)


def _create_runs() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("conversation_id", sa.String(length=200), nullable=False),
        sa.Column("bot_id", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=16), server_default="running", nullable=False),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'waiting', 'succeeded', 'failed', 'cancelled', 'abandoned')",
            name=op.f("ck_runs_status"),
        ),
        sa.ForeignKeyConstraint(["bot_id"], ["bots.id"], name=op.f("fk_runs_bot_id_bots")),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_runs_conversation_id_conversations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    op.create_index("ix_runs_bot_id", "runs", ["bot_id"], unique=False)
    op.create_index(
        "ix_runs_active_conversation",
        "runs",
        ["conversation_id"],
        unique=False,
        postgresql_where=sa.text(ACTIVE_RUNS),
        sqlite_where=sa.text(ACTIVE_RUNS),
    )
    op.create_index(
        "ix_runs_active_bot",
        "runs",
        ["bot_id"],
        unique=False,
        postgresql_where=sa.text(ACTIVE_RUNS),
        sqlite_where=sa.text(ACTIVE_RUNS),
    )
    op.create_index("ix_runs_conversation_id", "runs", ["conversation_id"], unique=False)


def _create_admissions() -> None:
    op.create_table(
        "admissions",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("event_id", sa.String(length=200), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=False),
        sa.Column("payload", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(["event_id"], ["events.id"], name=op.f("fk_admissions_event_id_events")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_admissions_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_admissions")),
    )
    op.create_index("ix_admissions_event_id", "admissions", ["event_id"], unique=False)
    op.create_index("ix_admissions_run_id", "admissions", ["run_id"], unique=False)


def _create_derivative_sources() -> None:
    op.create_table(
        "derivative_sources",
        sa.Column("derivative_id", sa.String(length=200), nullable=False),
        sa.Column("event_id", sa.String(length=200), nullable=False),
        sa.ForeignKeyConstraint(
            ["derivative_id"],
            ["derivatives.id"],
            name=op.f("fk_derivative_sources_derivative_id_derivatives"),
        ),
        sa.ForeignKeyConstraint(["event_id"], ["events.id"], name=op.f("fk_derivative_sources_event_id_events")),
        sa.PrimaryKeyConstraint("derivative_id", "event_id", name=op.f("pk_derivative_sources")),
    )
    op.create_index("ix_derivative_sources_event_id", "derivative_sources", ["event_id"], unique=False)


def _create_purge_previews() -> None:
    op.create_table(
        "purge_previews",
        sa.Column("scope_digest", sa.String(length=64), nullable=False),
        sa.Column("report", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("scope_digest", name=op.f("pk_purge_previews")),
    )
    op.create_index("ix_purge_previews_created_at", "purge_previews", ["created_at"], unique=False)


def install_fences() -> None:
    fences.install(op.get_bind(), "0001_fences.sql")
    create_sqlite_ledger_triggers()


def seed_ledger_head() -> None:
    # The random database id names this database's checkpoints; a restored dump keeps it.
    op.execute(
        sa.text(
            "INSERT INTO ledger_head (id, seq, head_hash, database_id) VALUES (1, 0, :genesis, :database_id)"
        ).bindparams(genesis="0" * 64, database_id=uuid.uuid4().hex)
    )


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
