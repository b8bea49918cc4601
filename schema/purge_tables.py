"""The purge tables (purge_ledger .. purge_previews): the machinery that fences and cleans the
content tables, and its bookkeeping (``purgekeeper.schema.tables`` names every table). The triggers that
enforce the purge invariants live in ``schema/sql/<dialect>/``.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Float,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    literal_column,
    text,
)

from purgekeeper.schema import states
from purgekeeper.schema.table_base import (
    EXEMPTIONS,
    HOLD_SUBJECTS,
    ID_LENGTH,
    PURGE_KINDS,
    STEP_KINDS,
    STEP_STATUSES,
    TOMBSTONE_KINDS,
    UtcDateTime,
    created_at_column,
    enum_check,
    metadata,
    now_default,
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
    Column("salts", Text),  # the committed fields' salts (0018; NULL in rows of before it: schema.ledger)
    UniqueConstraint("purge_id"),
    Index("ix_purge_ledger_idempotency_key", "idempotency_key"),
    Index("ix_purge_ledger_kind_seq", "kind", "seq"),  # list_purges(kind=...), newest first (0010)
    Index("ix_purge_ledger_actor_seq", "actor", "seq"),  # the console's search by actor, newest first (0017)
    # and a partial index of the retention runs: dialect_indexes() below
    enum_check("kind", PURGE_KINDS, "kind"),
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
    created_at_column(),
    PrimaryKeyConstraint("kind", "id"),
    # and a partial index of the event tombstones by purge and id: dialect_indexes() below
    enum_check("kind", TOMBSTONE_KINDS, "kind"),
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
    created_at_column(),
    PrimaryKeyConstraint("author", "purge_id"),
    # and a hash index of the authors: dialect_indexes() below
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
    # Who took the last turn and why, and what agent runs hold back (0017: NULL, 0 before it).
    Column("last_run_by", Text),
    Column("last_run_reason", Text),
    Column("deferred_since", UtcDateTime()),  # the first turn of a deferral that still lasts
    Column("deferred_events", BigInteger, nullable=False, server_default="0"),
    Column("deferred_run_ids", Text),  # a JSON list, the first 20
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
    created_at_column(),
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
    enum_check("kind", HOLD_SUBJECTS, "kind"),
    enum_check("reason", EXEMPTIONS, "reason"),
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
    enum_check("kind", HOLD_SUBJECTS, "kind"),
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
    enum_check("namespace", ("conversation", "bot"), "namespace"),
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
    created_at_column(),
    Column("updated_at", UtcDateTime(), nullable=False, server_default=now_default()),
    UniqueConstraint("purge_id", "kind"),
    Index("ix_cleanup_steps_due", "status", "next_attempt_at"),
    Index("ix_cleanup_steps_lease", "status", "lease_expires_at"),
    enum_check("kind", STEP_KINDS, "kind"),
    enum_check("status", STEP_STATUSES, "status"),
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
    created_at_column(),
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
    created_at_column(),
    Index("ix_purge_previews_created_at", "created_at"),
)

# One row per start of a worker, scheduler or embedded process, which its heartbeat renews
# (0013, ``purgekeeper.schema.heartbeats``): the Workers view lists them, and "no live worker" is read
# from them. ``alive_until`` is the last beat plus the dead bound the process itself gave;
# ``queues`` and ``holding`` (its attempts' lease owners) are JSON lists.
worker_processes = Table(
    "worker_processes",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("role", String(16), nullable=False),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("queues", Text, nullable=False),
    Column("threads", Integer, nullable=False),
    Column("started_at", UtcDateTime(), nullable=False),
    Column("last_seen_at", UtcDateTime(), nullable=False),
    Column("alive_until", UtcDateTime(), nullable=False),
    Column("stopped_at", UtcDateTime()),
    Column("holding", Text, nullable=False),
    Index("ix_worker_processes_alive_until", "alive_until"),
    enum_check("role", states.values(states.WorkerRole), "role"),
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
    worker_processes,
)


def dialect_indexes() -> None:
    """The indexes with dialect options, attached by ``tables.with_dialect_indexes()``, not at
    import (see there)."""
    # The retention runs, for /metrics and /status (0009): a scan of them, not of the ledger.
    retention_runs = text("kind = 'retention_run'")
    Index("ix_purge_ledger_retention_runs", purge_ledger.c.purge_id, postgresql_where=retention_runs,
          sqlite_where=retention_runs)  # fmt: skip
    # Only event tombstones are looked up by purge (0005), in event id order (0016: the
    # attachments step walks a purge's fenced events a window at a time).
    event_kind = text("kind = 'event'")
    Index("ix_tombstones_event_purge_id", tombstones.c.purge_id, tombstones.c.id, postgresql_where=event_kind,
          sqlite_where=event_kind)  # fmt: skip
    # Every read probes it once per event: on PostgreSQL a hash index is one bucket page where
    # the primary key's b-tree is a descent (bench/erasure.py: 1.04x against 1.08-1.10x at
    # 1,000 events with 10,000 erasures). SQLite has no hash index and gets a plain one.
    Index("ix_author_erasures_author", author_erasures.c.author, postgresql_using="hash")
