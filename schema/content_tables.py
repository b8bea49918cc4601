"""The content tables (bots .. attachments): the host's store, which purges fence and clean
(``purgekeeper.schema.tables`` names every table).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
)

from purgekeeper.schema.table_base import (
    ACTIVE_RUNS_PREDICATE,
    BINDINGS,
    BLOB_KINDS,
    BLOB_STATES,
    BOT_STATES,
    CONVERSATION_KINDS,
    CONVERSATION_STATES,
    ID_LENGTH,
    RUN_STATUSES,
    UtcDateTime,
    created_at_column,
    enum_check,
    metadata,
)

bots = Table(
    "bots",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("name", Text, nullable=False),
    Column("state", String(16), nullable=False, server_default="active"),
    Column("memory_path", Text),
    Column("marker_id", String(64)),
    Column("erase_memory", Boolean, nullable=False, server_default=false()),
    created_at_column(),
    Column("deleted_at", UtcDateTime()),
    enum_check("state", BOT_STATES, "state"),
)

conversations = Table(
    "conversations",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("kind", String(16), nullable=False, server_default="conversation"),
    Column("bot_id", String(ID_LENGTH), ForeignKey("bots.id")),
    Column("state", String(16), nullable=False, server_default="active"),
    Column("version", BigInteger, nullable=False, server_default="1"),
    created_at_column(),
    enum_check("kind", CONVERSATION_KINDS, "kind"),
    enum_check("state", CONVERSATION_STATES, "state"),
)

events = Table(
    "events",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("provider_event_id", String(ID_LENGTH)),
    Column("author", Text, nullable=False),
    Column("occurred_at", UtcDateTime(), nullable=False),
    Column("body", Text),  # sealed (storage.sealing) under the key key_id names; plain where key_id is NULL
    created_at_column(),
    Column("key_id", String(64)),  # the key store's id of the key that seals the event's content (0019)
    UniqueConstraint("provider_event_id"),
    # An author erasure finds its author's events, and their latest time, by these (0008).
    Index("ix_events_author_occurred_at", "author", "occurred_at", "id"),
    Index("ix_events_author_created_at", "author", "created_at", "id"),
    # A global retention run walks the events of its window in time order (0009).
    Index("ix_events_occurred_at", "occurred_at", "id"),
)

placements = Table(
    "placements",
    metadata,
    Column("event_id", String(ID_LENGTH), ForeignKey("events.id"), nullable=False),
    Column("conversation_id", String(ID_LENGTH), ForeignKey("conversations.id"), nullable=False),
    created_at_column(),
    PrimaryKeyConstraint("event_id", "conversation_id"),
    Index("ix_placements_conversation_id", "conversation_id", "event_id"),
)

runs = Table(
    "runs",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("conversation_id", String(ID_LENGTH), ForeignKey("conversations.id"), nullable=False),
    Column("bot_id", String(ID_LENGTH), ForeignKey("bots.id"), nullable=False),
    Column("status", String(16), nullable=False, server_default="running"),
    Column("output", Text),
    created_at_column(),
    Column("finished_at", UtcDateTime()),
    Column("key_id", String(64)),  # the key that seals the output (0019)
    enum_check("status", RUN_STATUSES, "status"),
    Index("ix_runs_conversation_id", "conversation_id"),
    Index("ix_runs_bot_id", "bot_id"),
    # and two partial indexes of the non-terminal runs: dialect_indexes() below
)

admissions = Table(
    "admissions",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("event_id", String(ID_LENGTH), ForeignKey("events.id"), nullable=False),
    Column("run_id", String(ID_LENGTH), ForeignKey("runs.id"), nullable=False),
    Column("payload", Text),
    created_at_column(),
    Column("key_id", String(64)),  # the key that seals the payload (0019)
    Index("ix_admissions_event_id", "event_id"),
    Index("ix_admissions_run_id", "run_id"),
)

derivatives = Table(
    "derivatives",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("conversation_id", String(ID_LENGTH), ForeignKey("conversations.id"), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("payload", Text),
    created_at_column(),
    Column("key_id", String(64)),  # the key that seals the payload (0019)
    Index("ix_derivatives_conversation_id", "conversation_id"),
)

derivative_sources = Table(
    "derivative_sources",
    metadata,
    Column("derivative_id", String(ID_LENGTH), ForeignKey("derivatives.id"), nullable=False),
    Column("event_id", String(ID_LENGTH), ForeignKey("events.id"), nullable=False),
    PrimaryKeyConstraint("derivative_id", "event_id"),
    Index("ix_derivative_sources_event_id", "event_id"),
)

blobs = Table(
    "blobs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("kind", String(8), nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("path", Text, nullable=False),
    Column("state", String(16), nullable=False, server_default="present"),
    created_at_column(),
    Column("key_id", String(64)),  # the key store's id of the key that seals the bytes on disk (0019)
    UniqueConstraint("path"),
    Index("ix_blobs_sha256", "sha256"),  # no state: a state change is a HOT update (0005)
    enum_check("kind", BLOB_KINDS, "kind"),
    enum_check("state", BLOB_STATES, "state"),
)

attachments = Table(
    "attachments",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("event_id", String(ID_LENGTH), ForeignKey("events.id"), nullable=False),
    Column("blob_id", String(64), ForeignKey("blobs.id"), nullable=False),
    Column("binding", String(16), nullable=False),
    Column("name", Text),  # NULLed by the bodies step of a purge: a name is content (0006)
    Column("position", Integer, nullable=False, server_default="0"),
    created_at_column(),
    Column("key_id", String(64)),  # the key that seals the name: its event's (0020)
    Index("ix_attachments_event_id", "event_id"),
    Index("ix_attachments_blob_id", "blob_id"),
    enum_check("binding", BINDINGS, "binding"),
)


CONTENT_TABLES = (
    bots,
    conversations,
    events,
    placements,
    runs,
    admissions,
    derivatives,
    derivative_sources,
    blobs,
    attachments,
)


def dialect_indexes() -> None:
    """Acceptance checks for non-terminal runs; these indexes keep that cost off the run
    history. Attached by ``tables.with_dialect_indexes()``, not at import (see there)."""
    for name, column in (
        ("ix_runs_active_conversation", runs.c.conversation_id),
        ("ix_runs_active_bot", runs.c.bot_id),
    ):
        Index(name, column, postgresql_where=text(ACTIVE_RUNS_PREDICATE), sqlite_where=text(ACTIVE_RUNS_PREDICATE))
    # The content written before sealing (0019), which a disclosure names while any is left:
    # an index of nothing once it is all sealed or purged, and new rows never enter it.
    for table, predicate in PLAIN_CONTENT.items():
        Index(f"ix_{table.name}_plain", table.c.id, postgresql_where=text(predicate), sqlite_where=text(predicate))


PLAIN_CONTENT = {
    events: "key_id IS NULL AND body IS NOT NULL",
    admissions: "key_id IS NULL AND payload IS NOT NULL",
    runs: "key_id IS NULL AND output IS NOT NULL",
    derivatives: "key_id IS NULL AND payload IS NOT NULL",
    blobs: "key_id IS NULL AND state <> 'deleted'",
    attachments: "key_id IS NULL AND name IS NOT NULL",  # (0020)
}
