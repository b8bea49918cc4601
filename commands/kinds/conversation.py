"""A conversation purge: a whole conversation (or channel), whatever its size, accepted in
O(1) and emptied by its cleanup. An absent id is reserved anyway."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row

from purgekeeper.commands.kinds import selector_fields, skeleton
from purgekeeper.commands.kinds.kind import Already, Decision, Env, Kind
from purgekeeper.commands.records import ConversationPreview
from purgekeeper.schema import (
    cleanup_queries,
    content_queries,
    conversation_preview,
    holds,
    ledger,
    purges,
    restore,
    steps,
)
from purgekeeper.schema.errors import VersionConflict
from purgekeeper.schema.states import ConversationKind, PurgeKind, StepKind, TombstoneKind
from purgekeeper.workers import cleanup


@dataclass(frozen=True)
class ConversationPurgeRequest:
    conversation_id: str
    expected_version: int | None


# -- the bodies step (the workers run it: ``purgekeeper.commands.kinds.bodies_steps``) --------------


def conversation_batch(conn: Connection, entry: ledger.LedgerEntry, limit: int) -> dict[str, Any]:
    """The next ``limit`` events placed in the conversation: events placed only here lose
    their content and are fenced; events live elsewhere keep it there and are reported
    retained-shared. Once its events are all done, its runs, admissions and derivatives go (in
    the same transaction as the last events), and the batch that finds none left unparks the
    attachments step, which waits for this one, and finishes the step. Each batch finds what
    is left by itself, so workers may run several conversations' steps together
    (``purgekeeper.workers.grouped``)."""
    purge_id, conversation_id = entry.purge_id, str(entry.selectors["conversation_id"])
    placed = cleanup_queries.placed_events(conn, conversation_id, limit=limit + 1)  # one more: is there a next batch?
    if len(placed) > limit:
        some = _empty_events(conn, placed[:limit], purge_id=purge_id, conversation_id=conversation_id)
        return {**some, "cost": limit}
    done = _empty_events(conn, placed, purge_id=purge_id, conversation_id=conversation_id)
    rows = _delete_rows(conn, purge_id=purge_id, conversation_id=conversation_id, limit=limit)
    return {
        **done,
        "removed": done["removed"] + rows["removed"],
        "done": not rows["more"],
        "wake": rows["wake"],
        "cost": len(placed) + rows["removed"],
    }


def _empty_events(conn: Connection, placed: list[str], *, purge_id: str, conversation_id: str) -> dict[str, Any]:
    if not placed:
        return {"removed": 0}
    live_elsewhere = cleanup_queries.live_elsewhere(conn, placed, conversation_id)
    shared = sorted(live_elsewhere)
    only_here = [event_id for event_id in placed if event_id not in live_elsewhere]
    cleanup_queries.tombstone_events(conn, purge_id, only_here)
    removed = cleanup_queries.null_content_of(conn, only_here)
    removed += cleanup_queries.remove_placements(conn, conversation_id, placed)
    return {
        "removed": removed,
        "retained": len(shared),
        "reasons": {"event placed in a live conversation": shared} if shared else None,
    }


def _delete_rows(conn: Connection, *, purge_id: str, conversation_id: str, limit: int) -> dict[str, Any]:
    """A batch of the conversation's runs (with their admissions) and derivatives; once none
    are left, the attachments step is unparked in the same transaction."""
    runs = cleanup_queries.delete_runs_batch(conn, conversation_id, limit=limit)
    derived = cleanup_queries.delete_derivatives_batch(conn, conversation_id, limit=limit)
    more = runs >= limit or derived >= limit
    wake = [] if more else steps.unpark(conn, purge_id, StepKind.ATTACHMENTS.value)
    return {"removed": runs + derived, "more": more, "wake": wake}


# -- the preview ------------------------------------------------------------------------------

ABSENT = "no conversation has this id: a purge reserves it, so that it is never used again"
STAYS_ELSEWHERE = (
    "{n} of its events are placed in another conversation too; each stays there if it is still live "
    "there when the cleanup runs"
)
NOT_ERASED = "what was copied out of purgekeeper (exports, logs, a provider's own history) is not erased"
HISTORY_STAYS = "nothing is removed: the history stays readable (purge the conversation to remove it)"


def preview_of(conn: Connection, conversation_id: str, *, removes_content: bool) -> ConversationPreview:
    """The counts, holds and what stays, read in the preview's transaction."""
    row = content_queries.conversation_row(conn, conversation_id)
    purged = purges.tombstone_of(conn, TombstoneKind.CONVERSATION, conversation_id)
    exists = row is not None and purged is None
    counted = conversation_preview.counts(conn, conversation_id) if exists else conversation_preview.NONE
    held = tuple(sorted(holds.holds_of_conversation(conn, conversation_id))) if exists else ()
    active = tuple(purges.active_run_ids(conn, conversation_ids=[conversation_id])) if exists else ()
    disclosures = [HISTORY_STAYS] if not removes_content else []
    if row is None and purged is None:
        disclosures.append(ABSENT)
    if removes_content and counted.events_placed_elsewhere:
        disclosures.append(STAYS_ELSEWHERE.format(n=counted.events_placed_elsewhere))
    if removes_content:
        disclosures.append(NOT_ERASED)
    return ConversationPreview(
        conversation_id=conversation_id,
        kind=row.kind if row is not None else None,
        exists=exists,
        unknown=row is None and purged is None,
        version=row.version if exists and row is not None else None,
        purged_by=purged.purge_id if purged is not None else None,
        removes_content=removes_content,
        events=counted.events,
        events_placed_elsewhere=counted.events_placed_elsewhere,
        attachments=counted.attachments,
        runs=counted.runs,
        active_runs=active,
        derivatives=counted.derivatives,
        holds=held,
        disclosures=tuple(disclosures),
    )


# -- the kind ---------------------------------------------------------------------------------


class ConversationPurgeKind(Kind[ConversationPurgeRequest, Row[Any] | None]):
    label = "conversation purge"
    name = PurgeKind.CONVERSATION
    head_first = True  # an absent id has no row to lock: the head serialises its reservation
    policy_lock = "shared"
    bodies = cleanup.Batched(conversation_batch)

    def preview(self, conn: Connection, env: Env, conversation_id: str) -> tuple[ConversationPreview, None]:
        """Counts, holds and what stays. Confirmed by its id and, optionally, the version the
        preview showed (``expected_version``): nothing to remember."""
        return preview_of(conn, conversation_id, removes_content=True), None

    def check_selectors(self, selectors: Mapping[str, Any]) -> None:
        selector_fields.require_id(selectors, "conversation_id")
        kind = selectors.get("conversation_kind")
        if kind is not None and kind not in {k.value for k in ConversationKind}:
            raise selector_fields.RowInvalid("conversation_kind is neither conversation nor channel")
        selector_fields.flag(selectors, "reserved_absent_id")

    def lock(self, conn: Connection, env: Env, args: ConversationPurgeRequest) -> Row[Any] | None:
        return purges.lock_conversation(conn, args.conversation_id)

    def decide(
        self, conn: Connection, env: Env, args: ConversationPurgeRequest, locked: Row[Any] | None
    ) -> Decision | Already:
        """The tombstone first: a repeat is ``already_purged``, even with the original
        expected version."""
        row, conversation_id = locked, args.conversation_id
        done = purges.tombstone_of(conn, TombstoneKind.CONVERSATION, conversation_id)
        if done:
            return skeleton.already(done)
        if row is not None and args.expected_version is not None and row.version != args.expected_version:
            raise VersionConflict(
                f"conversation {conversation_id} is at version {row.version}, not {args.expected_version}"
            )
        if row is not None:
            skeleton.refuse_active_runs(purges.active_run_ids(conn, conversation_ids=[conversation_id]))
            skeleton.refuse_held(holds.holds_of_conversation(conn, conversation_id), f"conversation {conversation_id}")
        selectors = {
            "conversation_id": conversation_id,
            "conversation_kind": row.kind if row is not None else None,
            "reserved_absent_id": row is None,
        }
        if row is None:
            return Decision(selectors)
        # The attachments wait for the bodies step, which decides (when it runs) which events
        # are no longer live anywhere and fences them.
        return Decision(selectors, (StepKind.BODIES, StepKind.ATTACHMENTS), parked=(StepKind.ATTACHMENTS,))

    def fence(self, conn: Connection, purge_id: str, selectors: Mapping[str, Any]) -> None:
        purges.insert_tombstones(conn, purge_id, {TombstoneKind.CONVERSATION: [selectors["conversation_id"]]})

    def left_after_restore(self, conn: Connection, entry: ledger.LedgerEntry) -> list[tuple[StepKind, bool]]:
        if restore.conversation_left(conn, str(entry.selectors["conversation_id"]), entry.purge_id):
            # the bodies step fences the events placed only here, then unparks attachments
            return [(StepKind.BODIES, False), (StepKind.ATTACHMENTS, True)]
        return [(StepKind.ATTACHMENTS, False)] if restore.bytes_left(conn, entry.purge_id) else []
