"""The whole purgekeeper schema as SQLAlchemy Core tables.

The content tables (conversations .. attachments) are the host's store; the purge tables
(purge_ledger .. cleanup_steps) are the machinery that fences and cleans it. The triggers
that enforce the purge invariants live in ``schema/sql/<dialect>/``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    literal_column,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from schema import states
from schema.states import values

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

ID_LENGTH = 200
# Server-side "now" in UTC with microseconds, on each dialect (SQLite's %f has milliseconds).
SQLITE_NOW = "(strftime('%Y-%m-%d %H:%M:%f000', 'now'))"


class UtcDateTime(TypeDecorator[dt.datetime]):
    """Timezone-aware UTC datetimes on both dialects (SQLite stores naive UTC text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: purgekeeper stores timezone-aware UTC only")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = dt.datetime.fromisoformat(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


def now_default() -> Any:
    """A server default of the database clock's current UTC time."""
    return text("CURRENT_TIMESTAMP")


def _created_at() -> Column[Any]:
    return Column("created_at", UtcDateTime(), nullable=False, server_default=now_default())


def _enum_check(column: str, values: tuple[str, ...], name: str) -> CheckConstraint:
    listed = ", ".join(f"'{v}'" for v in values)
    return CheckConstraint(f"{column} IN ({listed})", name=name)


CONVERSATION_KINDS = values(states.ConversationKind)
CONVERSATION_STATES = values(states.ConversationState)
RUN_STATUSES = values(states.RunStatus)
BLOB_KINDS = values(states.BlobKind)
BLOB_STATES = values(states.BlobState)
BINDINGS = values(states.Binding)
BOT_STATES = values(states.BotState)
PURGE_KINDS = values(states.PurgeKind)
TOMBSTONE_KINDS = values(states.TombstoneKind)
STEP_KINDS = values(states.StepKind)
HOLD_SUBJECTS = values(states.HoldSubject)
EXEMPTIONS = values(states.Exemption)
STEP_STATUSES = values(states.StepStatus)

ACTIVE_RUNS_PREDICATE = "status IN ({})".format(", ".join(f"'{s}'" for s in states.ACTIVE_RUN_STATUSES))

bots = Table(
    "bots",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("name", Text, nullable=False),
    Column("state", String(16), nullable=False, server_default="active"),
    Column("memory_path", Text),
    Column("marker_id", String(64)),
    Column("erase_memory", Boolean, nullable=False, server_default=false()),
    _created_at(),
    Column("deleted_at", UtcDateTime()),
    _enum_check("state", BOT_STATES, "state"),
)

conversations = Table(
    "conversations",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("kind", String(16), nullable=False, server_default="conversation"),
    Column("bot_id", String(ID_LENGTH), ForeignKey("bots.id")),
    Column("state", String(16), nullable=False, server_default="active"),
    Column("version", BigInteger, nullable=False, server_default="1"),
    _created_at(),
    _enum_check("kind", CONVERSATION_KINDS, "kind"),
    _enum_check("state", CONVERSATION_STATES, "state"),
)

events = Table(
    "events",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("provider_event_id", String(ID_LENGTH)),
    Column("author", Text, nullable=False),
    Column("occurred_at", UtcDateTime(), nullable=False),
    Column("body", Text),
    _created_at(),
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
    _created_at(),
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
    _created_at(),
    Column("finished_at", UtcDateTime()),
    _enum_check("status", RUN_STATUSES, "status"),
    Index("ix_runs_conversation_id", "conversation_id"),
    Index("ix_runs_bot_id", "bot_id"),
    # Acceptance checks for non-terminal runs; this index keeps that cost off the run history.
    Index(
        "ix_runs_active_conversation",
        "conversation_id",
        postgresql_where=text(ACTIVE_RUNS_PREDICATE),
        sqlite_where=text(ACTIVE_RUNS_PREDICATE),
    ),
    Index(
        "ix_runs_active_bot",
        "bot_id",
        postgresql_where=text(ACTIVE_RUNS_PREDICATE),
        sqlite_where=text(ACTIVE_RUNS_PREDICATE),
    ),
)

admissions = Table(
    "admissions",
    metadata,
    Column("id", String(ID_LENGTH), primary_key=True),
    Column("event_id", String(ID_LENGTH), ForeignKey("events.id"), nullable=False),
    Column("run_id", String(ID_LENGTH), ForeignKey("runs.id"), nullable=False),
    Column("payload", Text),
    _created_at(),
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
    _created_at(),
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
    _created_at(),
    UniqueConstraint("path"),
    Index("ix_blobs_sha256", "sha256"),  # no state: a state change is a HOT update (0005)
    _enum_check("kind", BLOB_KINDS, "kind"),
    _enum_check("state", BLOB_STATES, "state"),
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
    _created_at(),
    Index("ix_attachments_event_id", "event_id"),
    Index("ix_attachments_blob_id", "blob_id"),
    _enum_check("binding", BINDINGS, "binding"),
)

purge_ledger = Table(
    "purge_ledger",
    metadata,
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("purge_id", String(64), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("selectors", Text, nullable=False),
    Column("scope_digest", String(64), nullable=False),
    Column("actor", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("request_id", String(ID_LENGTH)),
    Column("idempotency_key", String(ID_LENGTH)),
    Column("origin", Text),
    Column("accepted_at", UtcDateTime(), nullable=False),
    Column("prev_hash", String(64), nullable=False),
    Column("row_hash", String(64), nullable=False),
    UniqueConstraint("purge_id"),
    Index("ix_purge_ledger_idempotency_key", "idempotency_key"),
    Index("ix_purge_ledger_kind_seq", "kind", "seq"),  # list_purges(kind=...), newest first (0010)
    # The retention runs, for /metrics and /status (0009): a scan of them, not of the ledger.
    Index(
        "ix_purge_ledger_retention_runs",
        "purge_id",
        postgresql_where=text("kind = 'retention_run'"),
        sqlite_where=text("kind = 'retention_run'"),
    ),
    _enum_check("kind", PURGE_KINDS, "kind"),
)

ledger_head = Table(
    "ledger_head",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("seq", BigInteger, nullable=False, server_default="0"),
    Column("head_hash", String(64), nullable=False),
    Column("database_id", String(64), nullable=False),
    # Set while a restore merge runs (and left set by one that crashed): content reads and
    # writes refuse with MessagingUnavailable until a merge completes and clears it.
    Column("gate_reason", Text),
    CheckConstraint("id = 1", name="single_row"),
)

tombstones = Table(
    "tombstones",
    metadata,
    Column("kind", String(16), nullable=False),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("purge_id", String(64), nullable=False),
    _created_at(),
    PrimaryKeyConstraint("kind", "id"),
    # only event tombstones are looked up by purge (0005)
    Index(
        "ix_tombstones_event_purge_id",
        "purge_id",
        postgresql_where=text("kind = 'event'"),
        sqlite_where=text("kind = 'event'"),
    ),
    _enum_check("kind", TOMBSTONE_KINDS, "kind"),
)

# The predicate of ix_tombstones_event_purge_id, written into the SQL text of every lookup by
# purge: a bound value would hide it from SQLite's planner and from a generic PostgreSQL plan,
# and neither could then use the partial index.
IS_EVENT_TOMBSTONE = tombstones.c.kind == literal_column("'event'")

# One row per author erasure (0008): every event by ``author`` with ``occurred_at < window_end``
# is erased, not live, from the row's commit on; with ``close_author`` the author takes no new
# event at all. Acceptance writes this one row; cleanup tombstones the events in batches.
# Readers and the triggers probe the primary key's prefix (author) once per event.
author_erasures = Table(
    "author_erasures",
    metadata,
    Column("author", Text, nullable=False),
    Column("purge_id", String(64), nullable=False),
    Column("window_end", UtcDateTime(), nullable=False),
    Column("close_author", Boolean, nullable=False),
    _created_at(),
    PrimaryKeyConstraint("author", "purge_id"),
    # Every read probes it once per event: on PostgreSQL a hash index is one bucket page where
    # the primary key's b-tree is a descent (bench/erasure.py: 1.04x against 1.08-1.10x at
    # 1,000 events with 10,000 erasures). SQLite has no hash index and gets a plain one.
    Index("ix_author_erasures_author", "author", postgresql_using="hash"),
)

# One row per erased author (0012), its count raised by every author_erasures row (a trigger).
# A PostgreSQL writer whose snapshot is its transaction's probes its key before it trusts
# what it sees of the author's erasures (inserting 0 for an author never erased): a mark
# committed after that snapshot is a serialization failure, where a row it cannot see would
# have been missed.
author_erasure_marks = Table(
    "author_erasure_marks",
    metadata,
    Column("author", Text, primary_key=True),
    Column("erasures", BigInteger, nullable=False, server_default="0"),
)

# Retention (0009). ``retention_policies`` is the state the ledger's ``retention`` and
# ``retention_end`` rows leave (a merge writes it again from them), plus the scheduler's
# bookkeeping: when the policy is next due, a run planned and not yet accepted
# (``pending_cutoff``), and ``expired_through``: everything in its scope that occurred before
# it has expired or is exempt, so a run only walks what occurred since (a hold's release, or
# the end of a conversation's own policy, sets it back to NULL: walk everything).
retention_policies = Table(
    "retention_policies",
    metadata,
    Column("policy_id", String(ID_LENGTH), primary_key=True),
    Column("conversation_id", String(ID_LENGTH)),  # NULL: every conversation and channel
    Column("max_age_seconds", BigInteger, nullable=False),
    Column("purge_id", String(64), nullable=False),  # the ledger row that set this version
    Column("ended_by", String(64)),  # the retention_end row; NULL while the policy stands
    Column("next_run_at", UtcDateTime()),  # NULL once ended
    Column("pending_cutoff", UtcDateTime()),
    Column("expired_through", UtcDateTime()),
    Column("last_run_at", UtcDateTime()),
    Column("last_cutoff", UtcDateTime()),
    Column("last_purge_id", String(64)),
    CheckConstraint("max_age_seconds > 0", name="max_age_positive"),
    Index("ix_retention_policies_next_run_at", "next_run_at"),
    Index("ix_retention_policies_conversation_id", "conversation_id"),
)

# One row per retention run whose cleanup has not finished: the placements it expires (in
# its scope, ``occurred_at < cutoff``, placed before its acceptance, not exempt) are
# unreadable and unwritable from the run's commit on (and again after a merge: a placement
# made after the run is never its), like an event tombstone; its bodies step deletes them (and fences the
# events no longer live anywhere), then deletes this row, which the triggers allow only once
# nothing it expires is left. Every read probes it; it is empty between runs.
retention_fences = Table(
    "retention_fences",
    metadata,
    Column("purge_id", String(64), primary_key=True),
    Column("policy_id", String(ID_LENGTH), nullable=False),
    Column("conversation_id", String(ID_LENGTH)),  # NULL: a global run
    Column("cutoff", UtcDateTime(), nullable=False),
    Column("window_start", UtcDateTime()),  # NULL: from the beginning
    Column("placed_before", UtcDateTime(), nullable=False),  # the run's acceptance: later placements are not its
    _created_at(),
)

# What a run leaves alone, as it stood at the run's acceptance: held conversations and
# authors, and (a global run) the conversations with a policy of their own. Written before
# the run's fence row, never changed, and removed only after it.
retention_exemptions = Table(
    "retention_exemptions",
    metadata,
    Column("purge_id", String(64), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("subject_id", Text, nullable=False),
    Column("reason", String(16), nullable=False),
    PrimaryKeyConstraint("purge_id", "kind", "subject_id"),
    _enum_check("kind", HOLD_SUBJECTS, "kind"),
    _enum_check("reason", EXEMPTIONS, "reason"),
)

# Legal holds (0009): the state the ledger's ``hold`` and ``hold_release`` rows leave. A hold
# is in force while ``released_by`` is NULL; a hold id is never reused.
legal_holds = Table(
    "legal_holds",
    metadata,
    Column("hold_id", String(ID_LENGTH), primary_key=True),
    Column("purge_id", String(64), nullable=False),
    Column("released_by", String(64)),
)

legal_hold_subjects = Table(
    "legal_hold_subjects",
    metadata,
    Column("hold_id", String(ID_LENGTH), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("subject_id", Text, nullable=False),
    PrimaryKeyConstraint("hold_id", "kind", "subject_id"),
    Index("ix_legal_hold_subjects_subject", "kind", "subject_id"),
    _enum_check("kind", HOLD_SUBJECTS, "kind"),
)

# One row per reserved (tombstoned) conversation or bot id, written with its tombstone
# (0006): creating an id on PostgreSQL probes this primary key, which sees every committed
# row whatever the writer's snapshot.
identity_reservations = Table(
    "identity_reservations",
    metadata,
    Column("namespace", String(16), nullable=False),
    Column("id", String(ID_LENGTH), nullable=False),
    PrimaryKeyConstraint("namespace", "id"),
    _enum_check("namespace", ("conversation", "bot"), "namespace"),
)

cleanup_steps = Table(
    "cleanup_steps",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("purge_id", String(64), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("status", String(16), nullable=False, server_default="pending"),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("max_attempts", Integer, nullable=False),
    Column("next_attempt_at", UtcDateTime(), nullable=False, server_default=now_default()),
    Column("lease_owner", String(128)),
    Column("lease_expires_at", UtcDateTime()),
    Column("last_error", Text),
    Column("removed", BigInteger, nullable=False, server_default="0"),
    Column("retained_shared", BigInteger, nullable=False, server_default="0"),
    Column("retained_reasons", Text),
    Column("remaining", BigInteger),
    Column("held", BigInteger, nullable=False, server_default="0"),  # what a legal hold kept (retention, 0009)
    _created_at(),
    Column("updated_at", UtcDateTime(), nullable=False, server_default=now_default()),
    UniqueConstraint("purge_id", "kind"),
    Index("ix_cleanup_steps_due", "status", "next_attempt_at"),
    Index("ix_cleanup_steps_lease", "status", "lease_expires_at"),
    _enum_check("kind", STEP_KINDS, "kind"),
    _enum_check("status", STEP_STATUSES, "status"),
)

# Who re-armed what, and why: the operator's actions on purges (the ledger holds acceptances).
purge_audit = Table(
    "purge_audit",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("purge_id", String(64), nullable=False),
    Column("action", String(32), nullable=False),
    Column("actor", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("step_ids", Text, nullable=False),
    _created_at(),
    Index("ix_purge_audit_purge_id", "purge_id"),
)

# One row per attempt of a cleanup step (0010): who ran it, from when to when, how it ended
# (done, retrying, incomplete, lease_lost: its lease ran out and another attempt took over or
# the step ended incomplete) and its error. An attempt still running has no finished_at.
step_attempts = Table(
    "step_attempts",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("step_id", String(64), nullable=False),
    Column("purge_id", String(64), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("owner", String(128), nullable=False),
    Column("started_at", UtcDateTime(), nullable=False),
    Column("finished_at", UtcDateTime()),
    Column("outcome", String(16)),
    Column("error", Text),
    Index("ix_step_attempts_purge_id", "purge_id", "started_at"),
    Index("ix_step_attempts_step_id", "step_id", "finished_at"),
)

# The counters of /metrics (0010), kept by the transactions that change what they count, so that
# a scrape reads a few dozen rows whatever the history: per step kind, the attempts started and
# failed, and the attempt durations; per purge kind, the time from acceptance to complete. A
# plain counter has bucket ''; a histogram has one row per bucket (its upper bound, '+Inf' for the
# rest; not cumulative) and one 'sum' row. Rows are created by the first increment (an upsert).
metric_counters = Table(
    "metric_counters",
    metadata,
    Column("metric", String(64), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("bucket", String(16), nullable=False),
    Column("value", Float, nullable=False),
    PrimaryKeyConstraint("metric", "kind", "bucket"),
)

# The purges whose completion /metrics counted (0010): a purge completes once, even when a
# merge re-arms a done step of it (a restored file) and it completes again.
purge_completions = Table(
    "purge_completions",
    metadata,
    Column("purge_id", String(64), primary_key=True),
    Column("completed_at", UtcDateTime(), nullable=False),
)

# The conversations a purge concerns, for listing purges by conversation (0010): written with
# each acceptance (and each merged row) from the kind's ``conversations`` of its selectors.
purge_conversations = Table(
    "purge_conversations",
    metadata,
    Column("conversation_id", String(ID_LENGTH), nullable=False),
    Column("purge_id", String(64), nullable=False),
    PrimaryKeyConstraint("conversation_id", "purge_id"),
)

# One row per singleton role (the scheduler): who leads, until when (database clock).
leader_leases = Table(
    "leader_leases",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("owner", String(128), nullable=False),
    Column("expires_at", UtcDateTime(), nullable=False),
)

# What a preview showed, as ids only (no content), so a stale confirmation can name what changed.
purge_previews = Table(
    "purge_previews",
    metadata,
    Column("scope_digest", String(64), primary_key=True),
    Column("report", Text, nullable=False),
    _created_at(),
    Index("ix_purge_previews_created_at", "created_at"),
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
PURGE_TABLES = (
    purge_ledger,
    ledger_head,
    tombstones,
    author_erasures,
    retention_policies,
    retention_fences,
    retention_exemptions,
    legal_holds,
    legal_hold_subjects,
    identity_reservations,
    cleanup_steps,
    purge_previews,
    purge_audit,
    step_attempts,
    metric_counters,
    purge_completions,
    purge_conversations,
    leader_leases,
)
