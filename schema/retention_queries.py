"""Queries of retention: the policies, the runs' fences, and the cleanup that carries a run
out.

- **Policies** (``retention_policies``) are the state the ledger's ``retention`` and
  ``retention_end`` rows leave, plus the scheduler's bookkeeping: ``next_run_at`` (an index
  makes "which are due" one probe, whatever the number of policies), a planned run's
  ``pending_cutoff``, and ``expired_through``, before which everything in scope has expired
  or is exempt (a run walks only what occurred since; NULL walks everything).
- **A run's fence** (``retention_fences`` and its ``retention_exemptions``) is written at its
  acceptance, in O(1) of what it expires, and read by every reader and trigger
  (``purgekeeper.schema.expiry``); the run's bodies step deletes the placements it expires in batches,
  fences the events that are then live nowhere, and finally deletes the fence, which the
  triggers allow only once nothing it expires is left.

An expiring placement: the event occurred before the cutoff (and at or after the window's
start), its conversation is not purged and is the run's (or, a global run, any that has no
policy of its own), and no hold covers the conversation or the event's author.

- **Agent runs** (``deferral``): the events of a run's window that a non-terminal run
  admitted, and that the run would expire, lower its cutoff to the earliest of them (see
  ``purgekeeper.commands.kinds.retention_run``); an acceptance first makes the admissions final
  (``wait_for_admissions``).

Here: the policies, the schedule and the summary the operator surfaces show; what expires
is in ``retention_expiring``, a run's fence and cleanup in ``retention_fence``, its
deferrals and preview totals in ``retention_preview``. Every name is importable from here.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    String,
    and_,
    exists,
    func,
    literal_column,
    select,
    update,
)

from purgekeeper.schema import ledger
from purgekeeper.schema.content_queries import upsert_insert
from purgekeeper.schema.overview import UNFINISHED_STEP_STATUSES
from purgekeeper.schema.retention_expiring import PLAN_LOCK_CLASS, anything_to_expire, quiet_turns
from purgekeeper.schema.retention_fence import (
    FENCE_LOCK_CLASS,
    Batch,
    Fence,
    drop_fence,
    expire_batch,
    expiring_left,
    fence_exists,
    insert_fence,
    lock_fences,
)
from purgekeeper.schema.retention_preview import (
    DEFERRED_RUNS_LISTED,
    Deferral,
    RetentionTotals,
    deferral,
    preview_totals,
    wait_for_admissions,
)
from purgekeeper.schema.states import PurgeKind
from purgekeeper.schema.tables import (
    cleanup_steps,
    legal_holds,
    metric_counters,
    purge_ledger,
    retention_fences,
    retention_policies,
)

_POLICY = retention_policies.c
_STANDING = _POLICY.ended_by.is_(None)


# -- policies ---------------------------------------------------------------------------------


def policy_row(conn: Connection, policy_id: str, *, lock: bool = False) -> Row[Any] | None:
    query = select(retention_policies).where(_POLICY.policy_id == policy_id)
    return conn.execute(query.with_for_update() if lock else query).first()


def standing_for_scope(conn: Connection, conversation_id: str | None) -> Row[Any] | None:
    """The standing policy whose scope is exactly this one (a conversation, or global)."""
    scope = _POLICY.conversation_id.is_(None) if conversation_id is None else _POLICY.conversation_id == conversation_id
    return conn.execute(select(retention_policies).where(_STANDING, scope)).first()


def set_policy(
    conn: Connection, *, policy_id: str, conversation_id: str | None, max_age_seconds: int, purge_id: str
) -> None:
    """Write the policy's new version: standing, due now, its window from the beginning."""
    version = {
        "conversation_id": conversation_id,
        "max_age_seconds": max_age_seconds,
        "purge_id": purge_id,
        "ended_by": None,
        "next_run_at": ledger.clock(conn),
        "pending_cutoff": None,
        "expired_through": None,
    }
    statement = upsert_insert(conn, retention_policies).values(policy_id=policy_id, **version)
    conn.execute(statement.on_conflict_do_update(index_elements=["policy_id"], set_=version))


def end_policy(conn: Connection, *, policy_id: str, purge_id: str) -> None:
    """The policy no longer stands; a run planned and not accepted is dropped with it."""
    conn.execute(
        update(retention_policies)
        .where(_POLICY.policy_id == policy_id, _STANDING)
        .values(ended_by=purge_id, next_run_at=None, pending_cutoff=None)
    )


def walk_everything_again(conn: Connection, *, global_only: bool = False) -> None:
    """Make the next run of every standing policy (or of the global one) walk its whole
    scope: content a hold or a conversation's own policy kept out of earlier runs may have
    become theirs."""
    query = update(retention_policies).where(_STANDING)
    if global_only:
        query = query.where(_POLICY.conversation_id.is_(None))
    conn.execute(query.values(expired_through=None))


def own_policy_conversations(conn: Connection) -> list[str]:
    """The conversations with a standing policy of their own: a global run leaves them alone."""
    query = select(_POLICY.conversation_id).where(_STANDING, _POLICY.conversation_id.is_not(None))
    return sorted(conn.scalars(query))


def list_policies(conn: Connection) -> list[Row[Any]]:
    """The standing policies with when and by whom each version was set (its ledger row)."""
    query = (
        select(retention_policies, purge_ledger.c.accepted_at.label("set_at"), purge_ledger.c.actor.label("set_by"))
        .outerjoin(purge_ledger, purge_ledger.c.purge_id == _POLICY.purge_id)
        .where(_STANDING)
        .order_by(_POLICY.policy_id)
    )
    return list(conn.execute(query).all())


def ledger_seq(conn: Connection, purge_id: str | None) -> int | None:
    """The seq of a ledger row; None when it is not in the ledger (yet: an acceptance writes
    its row after the fences)."""
    if purge_id is None:
        return None
    value = conn.scalar(select(purge_ledger.c.seq).where(purge_ledger.c.purge_id == purge_id))
    return None if value is None else int(value)


# -- the schedule -----------------------------------------------------------------------------


def due_policies(conn: Connection, *, limit: int) -> list[str]:
    """Standing policies whose next run is due (one range probe of the next_run_at index)."""
    now = ledger.database_now(conn)
    query = select(_POLICY.policy_id).where(_POLICY.next_run_at <= now).order_by(_POLICY.next_run_at).limit(limit)
    return list(conn.scalars(query))


def due_now(conn: Connection, *, policy_id: str) -> bool:
    """A standing policy's next turn moved to now (an operator's "run now"); False when no
    such policy stands."""
    now = ledger.database_now(conn)
    moved = conn.execute(
        update(retention_policies)
        .where(_POLICY.policy_id == policy_id, _STANDING)
        .values(next_run_at=now)
        .returning(_POLICY.policy_id)
    ).first()
    return moved is not None


def plan_run(conn: Connection, policy_id: str, cutoff: dt.datetime) -> None:
    """Remember the run's cutoff before accepting it: a leader that dies between the two
    leaves it for the next one, which accepts exactly this cutoff."""
    conn.execute(update(retention_policies).where(_POLICY.policy_id == policy_id).values(pending_cutoff=cutoff))


def nothing_to_expire(conn: Connection, policy_id: str, cutoff: dt.datetime, next_run_at: Any) -> None:
    """A run that found nothing: no ledger row, the window moves on, the next one is due later."""
    conn.execute(
        update(retention_policies)
        .where(_POLICY.policy_id == policy_id)
        .values(expired_through=cutoff, last_run_at=ledger.clock(conn), next_run_at=next_run_at)
    )


def record_turn(
    conn: Connection, policy_id: str, *, by: str, why: str, deferred_events: int, deferred_run_ids: Sequence[str]
) -> None:
    """Who took the policy's turn and why, and what non-terminal agent runs held back of it
    (0017): a deferral keeps the moment of its first turn (``deferred_since``) for as long as
    each turn defers something; a turn that defers nothing clears it."""
    deferring = deferred_events > 0
    conn.execute(
        update(retention_policies)
        .where(_POLICY.policy_id == policy_id)
        .values(
            last_run_by=by,
            last_run_reason=why,
            deferred_since=func.coalesce(_POLICY.deferred_since, ledger.clock(conn)) if deferring else None,
            deferred_events=deferred_events,
            deferred_run_ids=json.dumps(list(deferred_run_ids)) if deferring else None,
        )
    )


def schedule(conn: Connection, policy_id: str, next_run_at: Any) -> None:
    conn.execute(
        update(retention_policies).where(_POLICY.policy_id == policy_id, _STANDING).values(next_run_at=next_run_at)
    )


def record_run(
    conn: Connection,
    *,
    policy_id: str,
    policy_purge_id: str,
    purge_id: str,
    cutoff: dt.datetime,
    start: Any,
    planned: dt.datetime | None = None,
) -> None:
    """The run is accepted (or merged): the version it ran for no longer has it planned (at
    ``planned``, when its cutoff was lowered below the plan's), and its window moves to the
    cutoff when the run's window began where the policy's stood."""
    row = policy_row(conn, policy_id, lock=True)
    if row is None or row.purge_id != policy_purge_id:
        return  # the policy changed since (a merge of an older run): its window is its own
    values: dict[str, Any] = {"last_run_at": ledger.clock(conn), "last_cutoff": cutoff, "last_purge_id": purge_id}
    if row.pending_cutoff is not None and row.pending_cutoff <= max(cutoff, planned or cutoff):
        values["pending_cutoff"] = None
    if (start is None or (row.expired_through is not None and row.expired_through >= start)) and not widened_since(
        conn, purge_id
    ):
        if row.expired_through is None or row.expired_through < cutoff:
            values["expired_through"] = cutoff
    conn.execute(update(retention_policies).where(_POLICY.policy_id == policy_id).values(**values))


# The rows after which every standing policy's next run walks its whole scope again (a hold's
# release, a policy's end or setting): a run accepted before one of them does not move the
# window (a merge re-applies it in order; the triggers refuse it too, 0011).
WIDENING_KINDS = (PurgeKind.HOLD_RELEASE.value, PurgeKind.RETENTION_END.value, PurgeKind.RETENTION.value)


def widened_since(conn: Connection, purge_id: str) -> bool:
    """Whether a row of :data:`WIDENING_KINDS` is newer in the ledger than ``purge_id``'s."""
    mine = select(purge_ledger.c.seq).where(purge_ledger.c.purge_id == purge_id).scalar_subquery()
    later = select(purge_ledger.c.seq).where(purge_ledger.c.kind.in_(WIDENING_KINDS), purge_ledger.c.seq > mine)
    return conn.scalar(select(exists(later))) is True


# -- what the operator surfaces show ------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """Retention and holds at a glance (``/metrics`` and ``/status``): ``policies`` standing,
    ``runs`` accepted, ``expired`` events the runs' bodies steps expired, ``held`` events
    holds kept out of runs, ``holds`` in force, ``fences`` of runs still cleaning up."""

    policies: int
    runs: int
    expired: int
    held: int
    holds: int
    fences: int
    oldest_deferral: dt.datetime | None = None  # the first turn of the oldest deferral that lasts


# Kept by the triggers of 0015 as the runs are accepted and their bodies steps are done
# (``metric_counters``, kind ``retention_run``): a scrape reads three rows, not every run.
RUNS_COUNTER = "retention_runs"
EXPIRED_COUNTER = "retention_expired"
HELD_COUNTER = "retention_held"
_RUN_KIND = literal_column("'retention_run'", String())  # a literal: the ledger's partial index of runs


def _counted(metric: str) -> Any:
    m = metric_counters.c
    value = select(m.value).where(m.metric == metric, m.kind == _RUN_KIND, m.bucket == "").scalar_subquery()
    return func.coalesce(value, 0)


# The bodies steps of runs not done yet: their progress so far (through the status index).
_UNFINISHED_RUN_STEPS = (
    select(
        func.coalesce(func.sum(cleanup_steps.c.removed), 0).label("expired"),
        func.coalesce(func.sum(cleanup_steps.c.held), 0).label("held"),
    )
    .select_from(
        cleanup_steps.join(
            purge_ledger, and_(purge_ledger.c.purge_id == cleanup_steps.c.purge_id, purge_ledger.c.kind == _RUN_KIND)
        )
    )
    .where(cleanup_steps.c.kind == literal_column("'bodies'"), cleanup_steps.c.status.in_(UNFINISHED_STEP_STATUSES))
    .subquery()
)
_SUMMARY = select(
    _counted(RUNS_COUNTER).label("runs"),
    (_counted(EXPIRED_COUNTER) + _UNFINISHED_RUN_STEPS.c.expired).label("expired"),
    (_counted(HELD_COUNTER) + _UNFINISHED_RUN_STEPS.c.held).label("held"),
    select(func.count()).where(_STANDING).scalar_subquery().label("policies"),
    select(func.count()).where(legal_holds.c.released_by.is_(None)).scalar_subquery().label("holds"),
    select(func.count()).select_from(retention_fences).scalar_subquery().label("fences"),
    select(func.min(_POLICY.deferred_since)).where(_STANDING).scalar_subquery().label("oldest_deferral"),
).select_from(_UNFINISHED_RUN_STEPS)


def summary(conn: Connection) -> Summary:
    """One statement: the runs' counters, the progress of their bodies steps not done yet, three
    counts and the oldest deferral. Its cost follows the standing policies, the holds, the
    fences and the unfinished steps: what changes, not the runs accepted over the years."""
    row = conn.execute(_SUMMARY).one()
    return Summary(
        policies=int(row.policies),
        runs=int(row.runs),
        expired=int(row.expired),
        held=int(row.held),
        holds=int(row.holds),
        fences=int(row.fences),
        oldest_deferral=row.oldest_deferral,
    )


__all__ = [
    "DEFERRED_RUNS_LISTED",
    "EXPIRED_COUNTER",
    "FENCE_LOCK_CLASS",
    "HELD_COUNTER",
    "PLAN_LOCK_CLASS",
    "RUNS_COUNTER",
    "WIDENING_KINDS",
    "Batch",
    "Deferral",
    "Fence",
    "RetentionTotals",
    "Summary",
    "anything_to_expire",
    "deferral",
    "drop_fence",
    "due_policies",
    "end_policy",
    "expire_batch",
    "expiring_left",
    "fence_exists",
    "insert_fence",
    "ledger_seq",
    "list_policies",
    "lock_fences",
    "nothing_to_expire",
    "own_policy_conversations",
    "plan_run",
    "policy_row",
    "preview_totals",
    "quiet_turns",
    "record_run",
    "record_turn",
    "schedule",
    "set_policy",
    "standing_for_scope",
    "summary",
    "wait_for_admissions",
    "walk_everything_again",
    "widened_since",
]
