"""The database-enforced purge fences: trigger names and their SQL, per dialect.

The SQL lives in ``schema/sql/<dialect>/NNNN_*.sql``; a migration installs the file of its
revision, so a later change to the fences is a new file and a new migration, never an edit.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

STATEMENT_SEPARATOR = "-- ;;"

POSTGRESQL_TRIGGERS = frozenset(
    {
        "pk_conversations_before_insert",
        "pk_conversations_before_update",
        "pk_events_before_insert",
        "pk_events_before_update",
        "pk_events_after_update",
        "pk_placements_before_write",
        "pk_placements_after_insert",
        "pk_placements_after_delete",
        "pk_runs_before_insert",
        "pk_runs_before_update",
        "pk_runs_after_write",
        "pk_admissions_before_write",
        "pk_admissions_after_insert",
        "pk_derivatives_before_write",
        "pk_derivatives_after_write",
        "pk_derivative_sources_before_write",
        "pk_attachments_before_write",
        "pk_attachments_after_insert",
        "pk_blobs_before_update",
        "pk_bots_before_insert",
        "pk_bots_before_update",
        "pk_tombstones_before_insert",
        "pk_tombstones_after_insert",
        "pk_tombstones_permanent",
        "pk_tombstones_no_truncate",
        "pk_purge_ledger_append_only",
        "pk_purge_ledger_no_truncate",
        "pk_purge_ledger_chain",
        # 0006
        "pk_events_never_deleted",
        "pk_cleanup_steps_never_deleted",
        "pk_admissions_after_delete",
        "pk_derivative_sources_after_delete",
        "pk_attachments_after_delete",
        "pk_blobs_before_insert",
        "pk_identity_reservations_permanent",
        # 0007
        "pk_purge_ledger_move_head",
        # 0008
        "pk_author_erasures_permanent",
        "pk_author_erasures_no_truncate",
        # 0009
        "pk_retention_fences_guard",
        "pk_retention_exemptions_guard",
        "pk_legal_holds_guard",
        "pk_legal_hold_subjects_bound",
        "pk_legal_hold_subjects_guard",
        "pk_retention_policies_guard",
        # 0012
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
        "pk_author_erasures_mark",
        "pk_author_erasure_marks_guard",
        "pk_author_erasure_marks_no_truncate",
        *(
            f"pk_{table}_no_truncate"
            for table in (
                "retention_policies",
                "retention_fences",
                "retention_exemptions",
                "legal_holds",
                "legal_hold_subjects",
            )
        ),
        *(
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
            )
        ),
    }
)

SQLITE_TRIGGERS = frozenset(
    {
        "pk_conversations_before_insert",
        "pk_conversations_before_update",
        "pk_conversations_bump_version",
        "pk_events_before_insert",
        "pk_events_before_update",
        "pk_events_before_content_update",
        "pk_events_after_update",
        "pk_placements_before_insert",
        "pk_placements_before_update",
        "pk_placements_after_insert",
        "pk_placements_after_delete",
        "pk_runs_before_insert",
        "pk_runs_before_update",
        "pk_runs_after_insert",
        "pk_runs_after_update",
        "pk_admissions_before_insert",
        "pk_admissions_before_update",
        "pk_admissions_after_insert",
        "pk_derivatives_before_insert",
        "pk_derivatives_before_update",
        "pk_derivatives_before_content_update",
        "pk_derivatives_after_insert",
        "pk_derivatives_after_update",
        "pk_derivative_sources_before_insert",
        "pk_derivative_sources_before_update",
        "pk_attachments_before_insert",
        "pk_attachments_before_update",
        "pk_attachments_after_insert",
        "pk_blobs_before_update",
        "pk_bots_before_insert",
        "pk_bots_before_update",
        "pk_tombstones_after_insert",
        "pk_tombstones_no_update",
        "pk_tombstones_no_delete",
        "pk_purge_ledger_no_update",
        "pk_purge_ledger_no_delete",
        "pk_purge_ledger_chain",
        "pk_purge_ledger_moves_head",
        # 0006
        "pk_events_never_deleted",
        "pk_placements_before_delete",
        "pk_admissions_before_delete",
        "pk_derivative_sources_before_delete",
        "pk_attachments_before_delete",
        "pk_cleanup_steps_never_deleted",
        "pk_blobs_before_insert",
        "pk_identity_reservations_no_update",
        "pk_identity_reservations_no_delete",
        # 0008
        "pk_author_erasures_no_update",
        "pk_author_erasures_no_delete",
        # 0009
        "pk_retention_fences_no_update",
        "pk_retention_fences_before_delete",
        "pk_retention_exemptions_no_update",
        "pk_retention_exemptions_before_insert",
        "pk_retention_exemptions_before_delete",
        "pk_legal_holds_no_delete",
        "pk_legal_holds_before_update",
        "pk_legal_holds_before_insert",
        "pk_legal_hold_subjects_before_insert",
        "pk_purge_ledger_no_replace",
        "pk_legal_hold_subjects_no_update",
        "pk_legal_hold_subjects_no_delete",
        "pk_retention_policies_no_delete",
        "pk_retention_policies_before_update",
        # 0012
        "pk_events_held_content",
        "pk_events_held_author",
        "pk_events_held_replace",
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
        "pk_author_erasures_mark",
        "pk_author_erasure_marks_no_delete",
        "pk_author_erasure_marks_before_update",
        "pk_events_canonical_times",
        "pk_events_canonical_times_update",
        "pk_placements_canonical_times",
        "pk_author_erasures_canonical_times",
        "pk_retention_fences_canonical_times",
        "pk_retention_policies_canonical_times",
        "pk_retention_policies_canonical_times_update",
        "pk_retention_policies_before_insert",
    }
)

TRIGGERS = {"postgresql": POSTGRESQL_TRIGGERS, "sqlite": SQLITE_TRIGGERS}


def statements(dialect: str, revision_file: str) -> list[str]:
    """The SQL statements of one fences file, e.g. ``statements("sqlite", "0001_fences.sql")``."""
    if dialect not in TRIGGERS:
        raise ValueError(f"unsupported dialect {dialect!r}")
    text = resources.files("schema").joinpath("sql", dialect, revision_file).read_text("utf-8")
    parts: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip() == STATEMENT_SEPARATOR:
            parts.append([])
        else:
            parts[-1].append(line)
    statements = ("\n".join(lines).strip() for lines in parts)
    return [statement for statement in statements if _has_sql(statement)]


def install(bind: Any, revision_file: str) -> None:
    """Run one fences file on a migration's connection, through a raw cursor with no
    parameters: the trigger bodies hold % and : as written."""
    dbapi_connection = bind.connection.dbapi_connection
    assert dbapi_connection is not None
    cursor = dbapi_connection.cursor()
    try:
        for statement in statements(bind.dialect.name, revision_file):
            cursor.execute(statement)
    finally:
        cursor.close()


def _has_sql(part: str) -> bool:
    return any(line.strip() and not line.strip().startswith("--") for line in part.splitlines())
