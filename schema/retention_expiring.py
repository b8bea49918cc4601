"""What a retention run expires, as queries: the placements whose event occurred before the
cutoff (and at or after the window's start), in a conversation that is not purged and is the
run's (or, a global run, any that has no policy of its own), and that no hold covers (the
conversation or the event's author); whether a policy has anything to expire at all
(``anything_to_expire``), and which due policies are quiet, their conversations' turns done
(``quiet_turns``). The statements here are shared by ``retention_fence`` (a run's cleanup)
and ``retention_preview`` (its totals and deferrals); ``purgekeeper.schema.retention_queries`` names them all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BindParameter,
    Connection,
    bindparam,
    case,
    exists,
    literal_column,
    not_,
    or_,
    select,
    update,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from purgekeeper.schema import ledger
from purgekeeper.schema.content_queries import NOT_PURGED, event_erased
from purgekeeper.schema.idlists import IDS, among
from purgekeeper.schema.locks import AdvisoryLock
from purgekeeper.schema.states import HoldSubject
from purgekeeper.schema.tables import (
    IS_EVENT_TOMBSTONE,
    UtcDateTime,
    conversations,
    events,
    legal_hold_subjects,
    legal_holds,
    placements,
    retention_policies,
    tombstones,
)

# The plans' lock ('pkrp'): the placements trigger takes it shared while a policy stands, a
# plan takes it exclusively before it looks for anything to expire, so every writer that
# checked a placement against the cutoff has committed it by then (0009_retention_and_holds.sql).
PLAN_LOCK_CLASS = 1886089840
_PLAN_LOCK = AdvisoryLock(PLAN_LOCK_CLASS)


_POLICY = retention_policies.c
_CUTOFF: Any = bindparam("cutoff", type_=UtcDateTime())
_START: Any = bindparam("window_start", type_=UtcDateTime())
_PLACED_BEFORE: Any = bindparam("placed_before", type_=UtcDateTime())
_CONVERSATION: BindParameter[Any] = bindparam("conversation_id")
_PURGE: BindParameter[Any] = bindparam("purge_id")
_CONVERSATION_KIND: Any = literal_column(f"'{HoldSubject.CONVERSATION.value}'")
_AUTHOR_KIND: Any = literal_column(f"'{HoldSubject.AUTHOR.value}'")
_SHAPES = [(g, w) for g in (False, True) for w in (False, True)]  # (global, windowed): a statement each


# -- what expires -----------------------------------------------------------------------------


def _held_now(kind: Any, subject: Any) -> Any:
    """A hold in force covers ``subject`` (a column) of ``kind``."""
    return (
        exists()
        .where(legal_hold_subjects.c.hold_id == legal_holds.c.hold_id, legal_holds.c.released_by.is_(None))
        .where(legal_hold_subjects.c.kind == kind, legal_hold_subjects.c.subject_id == subject)
    )


_own = retention_policies.alias("own_policy")
_HAS_OWN_POLICY = exists().where(_own.c.conversation_id == placements.c.conversation_id, _own.c.ended_by.is_(None))
_FENCED = or_(exists().where(IS_EVENT_TOMBSTONE, tombstones.c.id == events.c.id), event_erased(events.c.id))
_JOINED = placements.join(events, events.c.id == placements.c.event_id).join(
    conversations, conversations.c.id == placements.c.conversation_id
)


def _expiring_now(*, global_scope: bool, windowed: bool) -> Any:
    """The placements a run of the scope would expire now, as (event_id, conversation_id,
    author): the holds in force and the policies that stand decide the exemptions. Events an
    earlier purge fenced are not counted: there is nothing left of them to expire."""
    query = (
        select(placements.c.event_id, placements.c.conversation_id, events.c.author)
        .select_from(
            placements.join(events, events.c.id == placements.c.event_id).join(
                conversations, conversations.c.id == placements.c.conversation_id
            )
        )
        .where(events.c.occurred_at < _CUTOFF, NOT_PURGED, not_(_FENCED))
        .where(not_(_held_now(_CONVERSATION_KIND, placements.c.conversation_id)))
        .where(not_(_held_now(_AUTHOR_KIND, events.c.author)))
    )
    if windowed:
        query = query.where(events.c.occurred_at >= _START)
    if global_scope:
        return query.where(not_(_HAS_OWN_POLICY))
    return query.where(placements.c.conversation_id == _CONVERSATION)


def _window_params(conversation_id: str | None, cutoff: dt.datetime, start: dt.datetime | None) -> dict[str, Any]:
    return {"conversation_id": conversation_id, "cutoff": cutoff, "window_start": start}


class _cutoff(FunctionElement[Any]):
    """``now - max_age_seconds`` in the database's own time arithmetic: a policy's cutoff,
    computed per row."""

    type = UtcDateTime()
    inherit_cache = True
    name = "pk_cutoff"


@compiles(_cutoff, "postgresql")
def _cutoff_postgresql(element: _cutoff, compiler: SQLCompiler, **kw: Any) -> str:
    now, seconds = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"({now} - make_interval(secs => {seconds}))"


@compiles(_cutoff, "sqlite")
def _cutoff_sqlite(element: _cutoff, compiler: SQLCompiler, **kw: Any) -> str:
    now, seconds = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"strftime('%Y-%m-%d %H:%M:%f000', {now}, '-' || {seconds} || ' seconds')"


_NOW: Any = bindparam("now", type_=UtcDateTime())
_due = retention_policies.alias("due_policy")
_DUE_CUTOFF = _cutoff(_NOW, _due.c.max_age_seconds)
_LOCK_DUE = (
    select(_due.c.policy_id, _due.c.conversation_id, _due.c.max_age_seconds, _due.c.expired_through)
    .where(among(_due.c.policy_id, IDS), _due.c.ended_by.is_(None), _due.c.pending_cutoff.is_(None))
    .where(_due.c.next_run_at <= _NOW)
    .order_by(_due.c.policy_id)
    .with_for_update(of=_due)
)
# The due conversation policies with anything to expire in their windows, all in one
# statement: per policy one EXISTS over its conversation's placements (stopping at the first).
_BUSY_CONVERSATION_POLICIES = select(_due.c.policy_id).where(
    among(_due.c.policy_id, IDS),
    _due.c.conversation_id.is_not(None),
    exists()
    .select_from(_JOINED)
    .where(placements.c.conversation_id == _due.c.conversation_id, NOT_PURGED, not_(_FENCED))
    .where(events.c.occurred_at < _DUE_CUTOFF)
    .where(or_(_due.c.expired_through.is_(None), events.c.occurred_at >= _due.c.expired_through))
    .where(not_(_held_now(_CONVERSATION_KIND, placements.c.conversation_id)))
    .where(not_(_held_now(_AUTHOR_KIND, events.c.author))),
)


def quiet_turns(conn: Connection, *, policy_ids: Sequence[str], interval: dt.timedelta, by: str, why: str) -> set[str]:
    """The turns of these due policies that find nothing to expire, taken together in this
    transaction (a statement for all the conversation policies, an EXISTS for the global one,
    one UPDATE): their windows move to now - max_age, their next turns are due an
    ``interval`` later, taken ``by`` someone for a reason (``why``), deferring nothing, and no
    ledger row is written. Returns them; the others (something to
    expire, a run planned, or no longer due) are for one turn each. An event a non-terminal
    agent run admitted is something to expire here: its policy's turn lowers the cutoff below
    it (``deferral``), so no window moves past it while it waits."""
    now = ledger.database_now(conn)
    rows = conn.execute(_LOCK_DUE, {"ids": list(policy_ids), "now": now}).all()
    if not rows:
        return set()
    _PLAN_LOCK.take(conn, exclusive=True)  # the writers placing events have committed
    ids = [row.policy_id for row in rows]
    busy = set(conn.scalars(_BUSY_CONVERSATION_POLICIES, {"ids": ids, "now": now}))
    for row in rows:
        if row.conversation_id is None:  # the one global policy: through the events' time index
            cutoff, start = now - dt.timedelta(seconds=int(row.max_age_seconds)), row.expired_through
            if (start is None or cutoff > start) and anything_to_expire(
                conn, conversation_id=None, cutoff=cutoff, start=start
            ):
                busy.add(row.policy_id)
    quiet = [policy_id for policy_id in ids if policy_id not in busy]
    if quiet:
        each_cutoff = _cutoff(_NOW, _POLICY.max_age_seconds)
        behind = or_(_POLICY.expired_through.is_(None), _POLICY.expired_through < each_cutoff)
        conn.execute(
            update(retention_policies)
            .where(among(_POLICY.policy_id, IDS))
            .values(
                expired_through=case((behind, each_cutoff), else_=_POLICY.expired_through),
                last_run_at=ledger.clock(conn),
                next_run_at=ledger.clock(conn, plus=interval),
                last_run_by=by,
                last_run_reason=why,
                deferred_since=None,
                deferred_events=0,
                deferred_run_ids=None,
            ),
            {"ids": quiet, "now": now},
        )
    return set(quiet)


def anything_to_expire(
    conn: Connection, *, conversation_id: str | None, cutoff: dt.datetime, start: dt.datetime | None
) -> bool:
    """Whether a run of the scope with this window would expire anything: one EXISTS, which
    stops at the first placement found (through the events' time index for a global scope,
    the conversation's placements otherwise). It waits first for the writers that are placing
    events (the plans' lock), so none it cannot see yet is left behind the window."""
    _PLAN_LOCK.take(conn, exclusive=True)
    expiring = _expiring_now(global_scope=conversation_id is None, windowed=start is not None)
    return bool(conn.scalar(select(exists(expiring)), _window_params(conversation_id, cutoff, start)))
