"""The whole purgekeeper schema as SQLAlchemy Core tables.

The content tables (conversations .. attachments) are the host's store; the purge tables
(purge_ledger .. cleanup_steps) are the machinery that fences and cleans it. The triggers
that enforce the purge invariants live in ``schema/sql/<dialect>/``.

This module names them all; they are defined, with the metadata they are registered on, in
``table_base`` (the metadata, the column type and helpers, the enum values),
``content_tables`` and ``purge_tables`` (registered in that order).
"""

from __future__ import annotations

import functools

from sqlalchemy import MetaData

from purgekeeper.schema import content_tables, purge_tables
from purgekeeper.schema.content_tables import (
    CONTENT_TABLES,
    admissions,
    attachments,
    blobs,
    bots,
    conversations,
    derivative_sources,
    derivatives,
    events,
    placements,
    runs,
)
from purgekeeper.schema.purge_tables import (
    IS_EVENT_TOMBSTONE,
    PURGE_TABLES,
    author_erasure_marks,
    author_erasures,
    cleanup_steps,
    identity_reservations,
    leader_leases,
    ledger_head,
    legal_hold_subjects,
    legal_holds,
    metric_counters,
    purge_audit,
    purge_completions,
    purge_conversations,
    purge_ledger,
    purge_previews,
    retention_exemptions,
    retention_fences,
    retention_policies,
    step_attempts,
    tombstones,
    worker_processes,
)
from purgekeeper.schema.table_base import (
    ACTIVE_RUNS_PREDICATE,
    BINDINGS,
    BLOB_KINDS,
    BLOB_STATES,
    BOT_STATES,
    CONVERSATION_KINDS,
    CONVERSATION_STATES,
    EXEMPTIONS,
    HOLD_SUBJECTS,
    ID_LENGTH,
    NAMING_CONVENTION,
    PURGE_KINDS,
    RUN_STATUSES,
    SQLITE_NOW,
    STEP_KINDS,
    STEP_STATUSES,
    TOMBSTONE_KINDS,
    UtcDateTime,
    metadata,
    now_default,
)


@functools.cache
def with_dialect_indexes() -> MetaData:
    """The metadata with its partial and hash indexes, for what compares DDL with it (Alembic's
    autogenerate, the migration check). The migrations create those indexes, and no query
    needs their Index objects; their dialect options (``postgresql_where``) would load every
    dialect's module at import, and the PostgreSQL one costs a command-line call on SQLite
    50 ms (``bench/cli_startup.py``)."""
    content_tables.dialect_indexes()
    purge_tables.dialect_indexes()
    return metadata


__all__ = [
    "ACTIVE_RUNS_PREDICATE",
    "BINDINGS",
    "BLOB_KINDS",
    "BLOB_STATES",
    "BOT_STATES",
    "CONTENT_TABLES",
    "CONVERSATION_KINDS",
    "CONVERSATION_STATES",
    "EXEMPTIONS",
    "HOLD_SUBJECTS",
    "ID_LENGTH",
    "IS_EVENT_TOMBSTONE",
    "NAMING_CONVENTION",
    "PURGE_KINDS",
    "PURGE_TABLES",
    "RUN_STATUSES",
    "SQLITE_NOW",
    "STEP_KINDS",
    "STEP_STATUSES",
    "TOMBSTONE_KINDS",
    "UtcDateTime",
    "admissions",
    "attachments",
    "author_erasure_marks",
    "author_erasures",
    "blobs",
    "bots",
    "cleanup_steps",
    "conversations",
    "derivative_sources",
    "derivatives",
    "events",
    "identity_reservations",
    "leader_leases",
    "ledger_head",
    "legal_hold_subjects",
    "legal_holds",
    "metadata",
    "metric_counters",
    "now_default",
    "placements",
    "purge_audit",
    "purge_completions",
    "purge_conversations",
    "purge_ledger",
    "purge_previews",
    "retention_exemptions",
    "retention_fences",
    "retention_policies",
    "runs",
    "step_attempts",
    "tombstones",
    "with_dialect_indexes",
    "worker_processes",
]
