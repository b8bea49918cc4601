"""A content purge: the events a scope selects (by ids, or a conversation with a window or
an author), previewed with their dependency report and confirmed with its digest."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from commands.kinds import fields, skeleton
from commands.kinds.base import Already, Decision, Env, Kind
from commands.scope import EventScope, PurgePreview, build_report, describe_changes
from schema import authors, ledger, purges, restore
from schema.errors import StaleConfirmation
from schema.states import PurgeKind, StepKind, TombstoneKind
from workers import cleanup


@dataclass(frozen=True)
class Confirmation:
    scope: EventScope
    scope_digest: str


class Content(Kind[Confirmation, PurgePreview]):
    label = "content purge"
    name = PurgeKind.CONTENT
    head_first = False  # the events' row locks serialise it; the head is taken last, for the least time
    policy_lock = "shared"  # a hold on the events waits for it, or it for the hold
    bodies = staticmethod(cleanup.null_fenced_content)

    def preview(self, conn: Connection, env: Env, scope: EventScope) -> tuple[PurgePreview, dict[str, Any]]:
        report = build_report(conn, scope)
        return report, report.id_summary()  # a stale confirmation names what changed

    def conversations(self, conn: Connection, selectors: Mapping[str, Any]) -> list[str]:
        """Where its events are placed, as accepted (``conversation_ids``); a row from before
        0010 lacks them: where its events are placed now, and its scope's conversation."""
        if "conversation_ids" in selectors:
            return [str(c) for c in selectors["conversation_ids"]]
        scoped = ((selectors.get("request") or {}).get("scope") or {}).get("conversation_id")
        placed = purges.conversations_of(conn, [str(e) for e in selectors.get("event_ids", [])])
        return sorted({*placed, *([str(scoped)] if scoped else [])})

    def check_selectors(self, selectors: Mapping[str, Any]) -> None:
        fields.ids(selectors, "event_ids", required=True)
        fields.ids(selectors, "already_fenced")
        fields.provider_ids(selectors, "provider_event_ids")
        fields.ids(selectors, "conversation_ids")

    def lock(self, conn: Connection, env: Env, args: Confirmation) -> PurgePreview:
        return build_report(conn, args.scope, lock=True)

    def decide(self, conn: Connection, env: Env, args: Confirmation, locked: PurgePreview) -> Decision | Already:
        report = locked
        fresh = [e for e in report.events if not e.already_fenced]
        fresh_ids = {e.id for e in fresh}
        held = [mark for mark in report.held if mark.event_id in fresh_ids]  # read under the locks
        hold_ids = sorted({hold_id for mark in held for hold_id in mark.hold_ids})
        skeleton.refuse_held(hold_ids, f"events {_few([mark.event_id for mark in held])}")
        if report.scope_digest != args.scope_digest:
            raise StaleConfirmation(describe_changes(purges.saved_preview(conn, args.scope_digest), report))
        skeleton.refuse_active_runs([r.id for r in report.blocking_runs])
        if not fresh:  # fenced by event tombstones, or by an author erasure not cleaned up yet
            found = [
                purges.latest_covering_purge(conn, report.event_ids),
                authors.covering_erasure(conn, report.event_ids),
            ]
            return skeleton.already(max((row for row in found if row is not None), key=lambda row: row.seq or 0))
        event_ids = sorted(fresh_ids)
        attachments = report.exclusive_attachments + report.shared_attachments
        attached = any(a.event_id in fresh_ids for a in attachments)
        selectors = {
            "event_ids": event_ids,
            "provider_event_ids": sorted(e.provider_event_id for e in fresh if e.provider_event_id),
            "already_fenced": sorted(report.already_fenced),
            "conversation_ids": list(report.conversation_ids),  # where they are placed: for listing
        }
        steps = (StepKind.BODIES, StepKind.ATTACHMENTS) if attached else (StepKind.BODIES,)
        return Decision(selectors, steps, digest=report.scope_digest, touched=report.conversation_ids)

    def fence(self, conn: Connection, purge_id: str, selectors: Mapping[str, Any]) -> None:
        purges.insert_tombstones(
            conn,
            purge_id,
            {
                TombstoneKind.EVENT: selectors.get("event_ids", []),
                TombstoneKind.PROVIDER_EVENT: selectors.get("provider_event_ids", []),
            },
        )

    def left_after_restore(self, conn: Connection, entry: ledger.LedgerEntry) -> list[tuple[StepKind, bool]]:
        needed = []
        if restore.content_left(conn, list(entry.selectors.get("event_ids", []))):
            needed.append((StepKind.BODIES, False))
        if restore.bytes_left(conn, entry.purge_id):
            needed.append((StepKind.ATTACHMENTS, False))
        return needed


def _few(ids: list[str], limit: int = 5) -> str:
    return ", ".join(ids[:limit]) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")
