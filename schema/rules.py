"""The rules the database enforces, and the triggers (or functions) that enforce each one per
dialect.

``schema/sql/<dialect>/current.sql`` holds the triggers' current source; this table says what
each of them is for. A rule names its triggers on both backends, or says why it is one
backend's by nature (``only`` and ``why``). ``tests/unit/test_dialect_rules.py`` holds the
table and both files together: every trigger in either file belongs to a rule of its dialect,
every name here is defined in that dialect's file, and a rule missing on one side fails.

A trigger may serve several rules (PostgreSQL folds many checks into one trigger function per
table and event; SQLite splits them), so the mapping is many to many.
"""

from __future__ import annotations

from dataclasses import dataclass

DIALECTS = ("postgresql", "sqlite")


@dataclass(frozen=True)
class Rule:
    id: str
    meaning: str  # one line
    postgresql: tuple[str, ...] = ()
    sqlite: tuple[str, ...] = ()
    only: str | None = None  # the one dialect that has this rule, by nature
    why: str = ""  # why the other dialect needs no trigger for it

    def names(self, dialect: str) -> tuple[str, ...]:
        if dialect not in DIALECTS:
            raise ValueError(f"unsupported dialect {dialect!r}")
        return self.postgresql if dialect == "postgresql" else self.sqlite


_NO_TRUNCATE = tuple(
    f"pk_{table}_no_truncate"
    for table in (
        "bots",
        "conversations",
        "events",
        "placements",
        "runs",
        "admissions",
        "derivatives",
        "derivative_sources",
        "blobs",
        "attachments",
        "cleanup_steps",
        "identity_reservations",
        "tombstones",
        "purge_ledger",
        "author_erasures",
        "author_erasure_marks",
        "retention_policies",
        "retention_fences",
        "retention_exemptions",
        "legal_holds",
        "legal_hold_subjects",
    )
)

_HELD = (
    "pk_events_held_content",
    "pk_events_held_author",
    "pk_placements_held_delete",
    "pk_attachments_held_content",
    "pk_attachments_held_delete",
    "pk_admissions_held_content",
    "pk_admissions_held_delete",
    "pk_runs_held_content",
    "pk_runs_held_delete",
    "pk_derivatives_held_content",
    "pk_derivatives_held_delete",
    "pk_derivative_sources_held_delete",
)

RULES: tuple[Rule, ...] = (
    Rule(
        "conversation_lifecycle",
        "a conversation is created active; its id and kind never change; its state only moves forward, "
        "by its tombstone",
        postgresql=("pk_conversations_before_insert", "pk_conversations_before_update"),
        sqlite=("pk_conversations_before_insert", "pk_conversations_before_update"),
    ),
    Rule(
        "conversation_version",
        "every write to a conversation's content raises its version, which never falls",
        postgresql=(
            "pk_conversations_before_update",
            "pk_events_after_update",
            "pk_placements_after_insert",
            "pk_placements_after_delete",
            "pk_runs_after_write",
            "pk_admissions_after_insert",
            "pk_derivatives_after_write",
            "pk_attachments_after_insert",
        ),
        sqlite=(
            "pk_conversations_before_update",
            "pk_conversations_bump_version",
            "pk_events_after_update",
            "pk_placements_after_insert",
            "pk_placements_after_delete",
            "pk_runs_after_insert",
            "pk_runs_after_update",
            "pk_admissions_after_insert",
            "pk_derivatives_after_insert",
            "pk_derivatives_after_update",
            "pk_attachments_after_insert",
        ),
    ),
    Rule(
        "identity_reserved",
        "an id a tombstone or reservation has taken (conversation, channel, bot, event) is never created again",
        postgresql=(
            "pk_conversations_before_insert",
            "pk_bots_before_insert",
            "pk_events_before_insert",
            "pk_tombstones_before_insert",
            "pk_identity_reservations_permanent",
        ),
        sqlite=(
            "pk_conversations_before_insert",
            "pk_bots_before_insert",
            "pk_events_before_insert",
            "pk_identity_reservations_no_update",
            "pk_identity_reservations_no_delete",
        ),
    ),
    Rule(
        "tombstone_moves_state",
        "an identity tombstone moves its conversation to purged, its channel or bot to deleted",
        postgresql=("pk_tombstones_after_insert",),
        sqlite=("pk_tombstones_after_insert",),
    ),
    Rule(
        "tombstones_permanent",
        "tombstones are never changed or removed",
        postgresql=("pk_tombstones_permanent",),
        sqlite=("pk_tombstones_no_update", "pk_tombstones_no_delete"),
    ),
    Rule(
        "bot_lifecycle",
        "a bot is created active and deleted only by its tombstone; nothing new is written for a deleted bot",
        postgresql=(
            "pk_bots_before_insert",
            "pk_bots_before_update",
            "pk_conversations_before_insert",
            "pk_runs_before_insert",
            "pk_admissions_before_write",
        ),
        sqlite=(
            "pk_bots_before_insert",
            "pk_bots_before_update",
            "pk_conversations_before_insert",
            "pk_runs_before_insert",
            "pk_admissions_before_insert",
        ),
    ),
    Rule(
        "conversation_closed",
        "nothing is written into a purged conversation or a deleted channel",
        postgresql=(
            "pk_placements_before_write",
            "pk_runs_before_insert",
            "pk_runs_before_update",
            "pk_admissions_before_write",
            "pk_derivatives_before_write",
            "pk_derivative_sources_before_write",
            "pk_events_before_update",
            "pk_attachments_before_write",
        ),
        sqlite=(
            "pk_placements_before_insert",
            "pk_runs_before_insert",
            "pk_runs_before_update",
            "pk_admissions_before_insert",
            "pk_derivatives_before_insert",
            "pk_derivatives_before_content_update",
            "pk_derivative_sources_before_insert",
            "pk_events_before_content_update",
            "pk_attachments_before_insert",
        ),
    ),
    Rule(
        "content_purged",
        "the content of an event that is not live is never written again, nor anything made from it",
        postgresql=(
            "pk_events_before_insert",
            "pk_events_before_update",
            "pk_placements_before_write",
            "pk_runs_before_update",
            "pk_admissions_before_write",
            "pk_derivatives_before_write",
            "pk_derivative_sources_before_write",
            "pk_attachments_before_write",
        ),
        sqlite=(
            "pk_events_before_insert",
            "pk_events_before_content_update",
            "pk_placements_before_insert",
            "pk_runs_before_update",
            "pk_admissions_before_insert",
            "pk_derivatives_before_content_update",
            "pk_derivative_sources_before_insert",
            "pk_attachments_before_insert",
        ),
    ),
    Rule(
        "fixed_references",
        "ids and references never change: events, placements, runs, admissions, derivatives, sources, attachments",
        postgresql=(
            "pk_events_before_update",
            "pk_placements_before_write",
            "pk_runs_before_update",
            "pk_admissions_before_write",
            "pk_derivatives_before_write",
            "pk_derivative_sources_before_write",
            "pk_attachments_before_write",
        ),
        sqlite=(
            "pk_events_before_update",
            "pk_placements_before_update",
            "pk_runs_before_update",
            "pk_admissions_before_update",
            "pk_derivatives_before_update",
            "pk_derivative_sources_before_update",
            "pk_attachments_before_update",
        ),
    ),
    Rule(
        "purged_rows_stay",
        "events and cleanup steps are never deleted; rows of purged content stay until the purge's cleanup",
        postgresql=(
            "pk_events_never_deleted",
            "pk_cleanup_steps_never_deleted",
            "pk_placements_after_delete",
            "pk_admissions_after_delete",
            "pk_derivative_sources_after_delete",
            "pk_attachments_after_delete",
        ),
        sqlite=(
            "pk_events_never_deleted",
            "pk_cleanup_steps_never_deleted",
            "pk_placements_before_delete",
            "pk_admissions_before_delete",
            "pk_derivative_sources_before_delete",
            "pk_attachments_before_delete",
        ),
    ),
    Rule(
        "no_truncate",
        "no table a trigger guards is truncated",
        postgresql=_NO_TRUNCATE,
        only="postgresql",
        why="SQLite has no TRUNCATE; its DELETE without WHERE runs a table's delete triggers like any other",
    ),
    Rule(
        "blob_lifecycle",
        "a new blob's path is canonical; a blob then only changes state, forward (present, deleting, deleted)",
        postgresql=("pk_blobs_before_insert", "pk_blobs_before_update"),
        sqlite=("pk_blobs_before_insert", "pk_blobs_before_update"),
    ),
    Rule(
        "attachment_binding",
        "an attachment binds a present blob, and a blob holding only purged content is bound to nothing new",
        postgresql=("pk_attachments_before_write",),
        sqlite=("pk_attachments_before_insert",),
    ),
    Rule(
        "ledger_append_only",
        "the purge ledger rejects UPDATE and DELETE, and a row is never written over",
        postgresql=("pk_purge_ledger_append_only",),
        sqlite=("pk_purge_ledger_no_update", "pk_purge_ledger_no_delete", "pk_purge_ledger_no_replace"),
    ),
    Rule(
        "ledger_chain",
        "a ledger row extends the chain: its seq and prev_hash follow the row before it, as ledger_head holds it",
        postgresql=("pk_purge_ledger_chain",),
        sqlite=("pk_purge_ledger_chain",),
    ),
    Rule(
        "ledger_head_moves",
        "ledger_head moves to the last row appended (PostgreSQL: once per statement)",
        postgresql=("pk_purge_ledger_move_head",),
        sqlite=("pk_purge_ledger_moves_head",),
    ),
    Rule(
        "author_erased",
        "nothing by an erased or closed author is written inside the erasure; an erased event's author "
        "and time never change",
        postgresql=("pk_events_before_insert", "pk_events_before_update"),
        sqlite=("pk_events_before_insert", "pk_events_before_content_update"),
    ),
    Rule(
        "author_erasures_permanent",
        "author erasures are never changed or removed",
        postgresql=("pk_author_erasures_permanent",),
        sqlite=("pk_author_erasures_no_update", "pk_author_erasures_no_delete"),
    ),
    Rule(
        "author_erasure_marks",
        "every author erasure raises its author's mark, which only counts up and is never removed",
        postgresql=("pk_author_erasures_mark", "pk_author_erasure_marks_guard"),
        sqlite=(
            "pk_author_erasures_mark",
            "pk_author_erasure_marks_no_delete",
            "pk_author_erasure_marks_before_update",
        ),
    ),
    Rule(
        "retention_expiry",
        "an event is never placed where a retention run expires it, nor past an in-force policy's cutoff unless held",
        postgresql=("pk_placements_before_write", "pk_events_before_update"),
        sqlite=("pk_placements_before_insert", "pk_events_before_content_update"),
    ),
    Rule(
        "retention_fence_stands",
        "a retention fence never changes and goes only once nothing it expires is left; its exemptions are fixed",
        postgresql=("pk_retention_fences_guard", "pk_retention_exemptions_guard"),
        sqlite=(
            "pk_retention_fences_no_update",
            "pk_retention_fences_before_delete",
            "pk_retention_exemptions_no_update",
            "pk_retention_exemptions_before_insert",
            "pk_retention_exemptions_before_delete",
        ),
    ),
    Rule(
        "retention_policy_bound",
        "a policy's definition and end are written only with their ledger row; its window moves forward, "
        "never past now; it is never deleted",
        postgresql=("pk_retention_policies_guard",),
        sqlite=(
            "pk_retention_policies_before_insert",
            "pk_retention_policies_before_update",
            "pk_retention_policies_no_delete",
        ),
    ),
    Rule(
        "legal_hold_bound",
        "a hold, its release and what it covers are written only as their ledger rows say, then never change; "
        "a hold is never deleted",
        postgresql=("pk_legal_holds_guard", "pk_legal_hold_subjects_bound", "pk_legal_hold_subjects_guard"),
        sqlite=(
            "pk_legal_holds_before_insert",
            "pk_legal_holds_before_update",
            "pk_legal_holds_no_delete",
            "pk_legal_hold_subjects_before_insert",
            "pk_legal_hold_subjects_no_update",
            "pk_legal_hold_subjects_no_delete",
        ),
    ),
    Rule(
        "legal_hold_preserves",
        "while a hold is in force, live content it covers is not removed or overwritten, by any writer",
        # PostgreSQL asks a deleted placement's hold in its statement trigger (0014)
        # and a sealing of held content is refused where a key is set (0020)
        postgresql=(
            *(name for name in _HELD if name != "pk_placements_held_delete"),
            "pk_placements_after_delete",
            "pk_events_before_update",
        ),
        sqlite=(*_HELD, "pk_events_held_replace", "pk_events_sealing"),
    ),
    Rule(
        "sealing",
        "a row's key is set once: at insert, at a run's finish, or by sealing live plain content no hold covers "
        "(content to pk1:, nothing else changed, no version bump); it never changes",
        postgresql=(
            "pk_events_before_update",
            "pk_events_after_update",
            "pk_runs_before_update",
            "pk_runs_after_write",
            "pk_admissions_before_write",
            "pk_derivatives_before_write",
            "pk_derivatives_after_write",
            "pk_attachments_before_write",
        ),
        sqlite=(
            "pk_events_sealing",
            "pk_events_before_content_update",
            "pk_events_after_update",
            "pk_runs_sealing",
            "pk_runs_after_update",
            "pk_admissions_sealing",
            "pk_admissions_before_update",
            "pk_derivatives_sealing",
            "pk_derivatives_before_content_update",
            "pk_derivatives_after_update",
            "pk_attachments_sealing",
            "pk_attachments_before_update",
        ),
    ),
    Rule(
        "canonical_times",
        "every time a trigger compares is written as the library writes it (YYYY-MM-DD HH:MM:SS.ffffff, UTC)",
        sqlite=(
            "pk_events_canonical_times",
            "pk_events_canonical_times_update",
            "pk_placements_canonical_times",
            "pk_author_erasures_canonical_times",
            "pk_retention_fences_canonical_times",
            "pk_retention_policies_canonical_times",
            "pk_retention_policies_canonical_times_update",
        ),
        only="sqlite",
        why="SQLite compares times as text; PostgreSQL's timestamptz stores the instant whatever the text",
    ),
    Rule(
        "writer_locks",
        "a writer's checks cannot be overtaken by a purge: they run under the locks of what they write",
        postgresql=("pk_lock_for_write", "pk_identity_lock", "pk_author_lock_shared", "pk_probe_reservation"),
        only="postgresql",
        why="SQLite serialises writers (BEGIN IMMEDIATE): a check inside the writing transaction reads the "
        "latest state",
    ),
    Rule(
        "scrape_counters",
        "what the done steps and the retention runs total is counted as they are written, not walked at a scrape",
        postgresql=(
            "pk_count_done_steps",
            "pk_cleanup_steps_count_done_insert",
            "pk_cleanup_steps_count_done_update",
            "pk_purge_ledger_count_runs",
        ),
        sqlite=(
            "pk_cleanup_steps_count_done_insert",
            "pk_cleanup_steps_count_done_update",
            "pk_purge_ledger_count_runs",
        ),
    ),
)


def rules_of(dialect: str, name: str) -> tuple[Rule, ...]:
    """The rules a trigger or function of ``dialect`` enforces."""
    return tuple(rule for rule in RULES if name in rule.names(dialect))


def names(dialect: str) -> frozenset[str]:
    """Every trigger and function the table names for ``dialect``."""
    return frozenset(name for rule in RULES for name in rule.names(dialect))
