"""One run of a retention policy: a purge of every placement in the policy's scope whose event
occurred before the run's cutoff (now - max_age when it was planned), that no earlier purge
fenced and no legal hold covers.

- **Acceptance is O(1) of what it expires**: a ``retention_fences`` row and its exemptions
  (the holds in force, and for a global run the conversations with a policy of their own:
  their number, never the events'), which every reader and trigger checks from that commit
  on. The bodies step then deletes the expiring placements in batches, fences (``event``
  tombstones, for this run) and empties the events that are then live nowhere, and unparks
  the attachments step; its last batch deletes the fence. The conversations' versions rise
  as placements go, batch by batch, not at acceptance.
- **Identity.** A run is its policy's version and its cutoff: the scheduler plans the cutoff
  first (``pending_cutoff``), then accepts with the idempotency key
  ``retention-run:<policy version>:<cutoff>``, so a leader that died between the two, or
  after the commit, leaves the same run for the next one: no ledger row twice, no cutoff
  skipped.
- **The window.** A run walks only what occurred since the policy's previous cutoff
  (``window_start``): backfill past the cutoff is refused by the triggers, and a release of a
  hold (or the end of a conversation's own policy) makes the next run walk everything again.
- **Agent runs.** A run never expires an event that a non-terminal agent run (queued,
  running, waiting) admitted, as a content purge refuses one (``ActiveRuns``); a policy runs
  unattended, so the run waits instead of refusing. At acceptance, with the admissions made
  final (``purgekeeper.schema.retention_queries.wait_for_admissions``), its cutoff is lowered to the earliest
  event of its window that such a run admitted and that it would expire: that event, and
  everything that occurred after it, are left to a later run. Its ledger row says so:
  ``cutoff`` is the lowered one, ``planned_cutoff`` the one planned (now - max_age),
  ``deferred_events`` how many admitted events waited and ``deferred_run_ids`` the runs (the
  first 20). The policy's window moves only to the lowered cutoff, so the next run walks the
  deferred events again. Lowering the cutoff needs no new exemption in the fence or the
  triggers: a fence expires what occurred before its cutoff, and that is all a run's row says.
  The run keeps its identity: the idempotency key names the planned cutoff (the policy's
  ``pending_cutoff``, which the acceptance clears), so a leader that dies between the plan
  and the acceptance leaves the same run for the next one, which lowers its cutoff again on
  what it finds then.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row

from purgekeeper.commands.kinds import selector_fields
from purgekeeper.commands.kinds.kind import Already, Decision, Env, Kind
from purgekeeper.schema import holds, ledger, restore, retention_queries, steps
from purgekeeper.schema.errors import NotFound, ValidationError
from purgekeeper.schema.ledger import utc_text
from purgekeeper.schema.states import Exemption, HoldSubject, PurgeKind, StepKind
from purgekeeper.workers import cleanup

IDEMPOTENCY_PREFIX = "retention-run"
EXEMPTION_FIELDS = {
    "held_conversations": (HoldSubject.CONVERSATION, Exemption.HOLD),
    "held_authors": (HoldSubject.AUTHOR, Exemption.HOLD),
    "own_policy_conversations": (HoldSubject.CONVERSATION, Exemption.OWN_POLICY),
}


@dataclass(frozen=True)
class Run:
    policy_id: str
    cutoff: dt.datetime


def idempotency_key(policy_purge_id: str, cutoff: dt.datetime) -> str:
    """A run is identified by its policy's version and its cutoff."""
    return f"{IDEMPOTENCY_PREFIX}:{policy_purge_id}:{utc_text(cutoff)}"


# -- the bodies step (the workers run it: ``purgekeeper.commands.kinds.bodies_steps``) --------------


MAX_RETENTION_WALKS = 3  # walks of a run's window before an attempt gives up (a writer racing it)
KEPT_ELSEWHERE = "event placed in a conversation it has not expired from"


def expire_retention(ctx: cleanup.StepContext, held: steps.Claim, entry: ledger.LedgerEntry) -> cleanup.Ran:
    """A retention run: its window, a batch at a time, loses its expiring placements; the
    events then live nowhere are fenced (``event`` tombstones, for this run) and emptied, the
    others are reported kept elsewhere, and what holds kept is counted (``held``). The batch
    that finds the walk done and nothing expiring left deletes the run's fence, unparks the
    attachments step and finishes this one; if a writer placed something behind the walk, it
    walks again. A rerun walks from the start (every batch is idempotent)."""
    fence = retention_queries.Fence.of(entry.purge_id, entry.selectors)
    first = True
    for _walk in range(MAX_RETENTION_WALKS):
        after: tuple[Any, ...] | None = None
        while True:
            work = functools.partial(_expire_batch, fence=fence, after=after, limit=ctx.batch_size, first=first)
            done = cleanup.run_batch(ctx, held, work)
            first = False
            if done.get("done"):
                return cleanup.Ran(tuple(done["wake"]), finished=True)
            if done.get("walked"):
                break
            after = done["after"]
    raise RuntimeError(
        f"retention run {entry.purge_id}: content it expires is still placed after {MAX_RETENTION_WALKS} walks"
    )


def _expire_batch(
    conn: Connection, *, fence: retention_queries.Fence, after: Any, limit: int, first: bool
) -> dict[str, Any]:
    batch = retention_queries.expire_batch(conn, fence, after=after, limit=limit)
    progress = {
        "removed": len(batch.expired),
        "retained": len(batch.kept_elsewhere),
        "kept_by_hold": len(batch.held),  # counted in the step's own ``held`` column
        "reasons": {KEPT_ELSEWHERE: batch.kept_elsewhere} if batch.kept_elsewhere else None,
        "restart_retained": first,
    }
    if batch.after is not None:
        return {**progress, "after": batch.after}
    if retention_queries.expiring_left(conn, fence):  # placed behind the walk meanwhile: walk again
        return {**progress, "walked": True}
    if retention_queries.fence_exists(conn, fence.purge_id):
        retention_queries.drop_fence(conn, fence.purge_id)
    return {**progress, "done": True, "wake": steps.unpark(conn, fence.purge_id, StepKind.ATTACHMENTS.value)}


# -- the kind ---------------------------------------------------------------------------------


class RetentionRunKind(Kind[Run, Row[Any] | None]):
    label = "retention purge (policy {policy_id})"
    names_policy = True
    name = PurgeKind.RETENTION_RUN
    head_first = False  # the policy's row lock serialises its runs; the head is taken last
    policy_lock = "shared"  # a hold placed meanwhile waits for the run, or the run for the hold
    ledger_first = True  # the triggers check its state against its ledger row (0011)
    preview = None  # confirmed once, with its policy
    bodies = staticmethod(expire_retention)

    def check_selectors(self, selectors: Mapping[str, Any]) -> None:
        selector_fields.require_id(selectors, "policy_id")
        selector_fields.text(selectors.get("policy_purge_id"), "policy_purge_id", 64)
        if selectors.get("conversation_id") is not None:
            selector_fields.require_id(selectors, "conversation_id")
        cutoff = selector_fields.timestamp(selectors, "cutoff", required=True)
        selector_fields.timestamp(selectors, "window_start")
        planned = selector_fields.timestamp(selectors, "planned_cutoff")
        if planned is not None and cutoff is not None and planned < cutoff:
            raise selector_fields.RowInvalid("planned_cutoff is before cutoff (a cutoff is only ever lowered)")
        deferred = selectors.get("deferred_events", 0)
        if not isinstance(deferred, int) or isinstance(deferred, bool) or deferred < 0:
            raise selector_fields.RowInvalid("deferred_events is not a count")
        selector_fields.ids(selectors, "deferred_run_ids")
        selector_fields.timestamp(selectors, "placed_before", required=True)
        selector_fields.ids(selectors, "held_conversations")
        selector_fields.ids(selectors, "own_policy_conversations")
        selector_fields.ids(selectors, "hold_ids")
        for author in selector_fields.listed_values(selectors, "held_authors"):
            selector_fields.text(author, "held_authors", None)

    def lock(self, conn: Connection, env: Env, args: Run) -> Row[Any] | None:
        return retention_queries.policy_row(conn, args.policy_id, lock=True)

    def decide(self, conn: Connection, env: Env, args: Run, locked: Row[Any] | None) -> Decision | Already:
        row = locked
        if row is None:
            raise NotFound(f"no retention policy {args.policy_id}")
        # A run already accepted is found by its idempotency key (its policy version and
        # cutoff), before this stage: anything else here is a run still to accept.
        if row.ended_by is not None or row.pending_cutoff != args.cutoff:
            raise ValidationError(
                f"retention policy {args.policy_id} has no run planned at {utc_text(args.cutoff)} (it was removed or "
                "changed since)"
            )
        held = holds.held_subjects(conn)
        retention_queries.wait_for_admissions(conn)
        deferral = retention_queries.deferral(
            conn, conversation_id=row.conversation_id, cutoff=args.cutoff, start=row.expired_through
        )
        selectors = {
            "policy_id": row.policy_id,
            "policy_purge_id": row.purge_id,
            "conversation_id": row.conversation_id,
            "max_age_seconds": int(row.max_age_seconds),
            "cutoff": utc_text(deferral.cutoff(args.cutoff)),
            **_deferred(deferral, args.cutoff),
            "window_start": utc_text(row.expired_through) if row.expired_through else None,
            "placed_before": utc_text(ledger.database_now(conn)),  # later placements are never this run's
            "held_conversations": [s for k, s in held if k == HoldSubject.CONVERSATION],
            "held_authors": [s for k, s in held if k == HoldSubject.AUTHOR],
            "own_policy_conversations": (
                retention_queries.own_policy_conversations(conn) if row.conversation_id is None else []
            ),
            "hold_ids": holds.hold_ids_in_force(conn),
        }
        steps = (StepKind.BODIES, StepKind.ATTACHMENTS)
        return Decision(selectors, steps, parked=(StepKind.ATTACHMENTS,), disclosures=disclosures(deferral))

    def fence(self, conn: Connection, purge_id: str, selectors: Mapping[str, Any]) -> None:
        run = retention_queries.Fence.of(purge_id, selectors)
        retention_queries.insert_fence(conn, run, exemptions(selectors))
        retention_queries.record_run(
            conn,
            policy_id=run.policy_id,
            policy_purge_id=str(selectors["policy_purge_id"]),
            purge_id=purge_id,
            cutoff=run.cutoff,
            start=run.window_start,
            planned=selector_fields.timestamp(selectors, "planned_cutoff"),
        )

    def left_after_restore(self, conn: Connection, entry: ledger.LedgerEntry) -> list[tuple[StepKind, bool]]:
        """Content the run expired is back: the bodies step walks its window again (then
        unparks attachments). Nothing back: its fence, written again by the merge, goes now
        (the triggers check that nothing it expires is left)."""
        run = retention_queries.Fence.of(entry.purge_id, entry.selectors)
        if retention_queries.expiring_left(conn, run) or restore.fenced_content_left(conn, entry.purge_id):
            return [(StepKind.BODIES, False), (StepKind.ATTACHMENTS, True)]
        if retention_queries.fence_exists(conn, entry.purge_id):
            retention_queries.drop_fence(conn, entry.purge_id)
        return [(StepKind.ATTACHMENTS, False)] if restore.bytes_left(conn, entry.purge_id) else []


def _deferred(deferral: retention_queries.Deferral, planned: dt.datetime) -> dict[str, Any]:
    """What the run's row says of the events it leaves to a later run (nothing, if none)."""
    if not deferral.events:
        return {}
    return {
        "planned_cutoff": utc_text(planned),
        "deferred_events": deferral.events,
        "deferred_run_ids": list(deferral.run_ids),
    }


def disclosures(deferral: retention_queries.Deferral) -> tuple[str, ...]:
    """Why the run expires less than its policy's max age says."""
    if not deferral.events:
        return ()
    runs = ", ".join(deferral.run_ids)
    return (
        f"{deferral.events} events admitted by non-terminal agent runs ({runs}), and what occurred after the "
        "earliest of them, wait for a later run of the policy",
    )


def exemptions(selectors: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The run's exemptions as (kind, subject, reason), as its ledger row records them; a
    held conversation with a policy of its own is recorded once, as held."""
    found: dict[tuple[str, str], str] = {}
    for name, (kind, reason) in EXEMPTION_FIELDS.items():
        for subject in selectors.get(name) or []:
            found.setdefault((kind.value, str(subject)), reason.value)
    return [(kind, subject, reason) for (kind, subject), reason in sorted(found.items())]
