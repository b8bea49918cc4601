"""Queries of retention: the policies, the runs' fences, and the cleanup that carries a run
out.

- **Policies** (``retention_policies``) are the state the ledger's ``retention`` and
  ``retention_end`` rows leave, plus the scheduler's bookkeeping: ``next_run_at`` (an index
  makes "which are due" one probe, whatever the number of policies), a planned run's
  ``pending_cutoff``, and ``expired_through``, before which everything in scope has expired
  or is exempt (a run walks only what occurred since; NULL walks everything).
- **A run's fence** (``retention_fences`` and its ``retention_exemptions``) is written at its
  acceptance, in O(1) of what it expires, and read by every reader and trigger
  (``schema.expiry``); the run's bodies step deletes the placements it expires in batches,
  fences the events that are then live nowhere, and finally deletes the fence, which the
  triggers allow only once nothing it expires is left.

An expiring placement: the event occurred before the cutoff (and at or after the window's
start), its conversation is not purged and is the run's (or, a global run, any that has no
policy of its own), and no hold covers the conversation or the event's author.

- **Agent runs** (``deferral``): the events of a run's window that a non-terminal run
  admitted, and that the run would expire, lower its cutoff to the earliest of them (see
  ``commands.kinds.retention_run``); an acceptance first makes the admissions final
  (``wait_for_admissions``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BindParameter,
    Connection,
    Row,
    Text,
    and_,
    bindparam,
    case,
    delete,
    distinct,
    exists,
    func,
    insert,
    literal_column,
    not_,
    or_,
    select,
    text,
    tuple_,
    type_coerce,
    update,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from schema import ledger
from schema.content import NOT_PURGED, event_erased, live_event, upsert_insert
from schema.idlists import IDS, among
from schema.locks import AdvisoryLock
from schema.states import ACTIVE_RUN_STATUSES, Exemption, HoldSubject, PurgeKind
from schema.tables import (
    IS_EVENT_TOMBSTONE,
    UtcDateTime,
    admissions,
    cleanup_steps,
    conversations,
    events,
    legal_hold_subjects,
    legal_holds,
    placements,
    purge_ledger,
    retention_exemptions,
    retention_fences,
    retention_policies,
    runs,
    tombstones,
)

# The fences' lock (two int4 keys: this, 0; 'pkrt'): a run's fence is written under it
# exclusively, and every batch of a run's cleanup holds it shared. A batch decides which
# events are live nowhere, then deletes placements, whose trigger checks liveness again in a
# later snapshot: a fence committed in between would make the two disagree.
FENCE_LOCK_CLASS = 1886089844
_FENCE_LOCK = AdvisoryLock(FENCE_LOCK_CLASS)
# The plans' lock ('pkrp'): the placements trigger takes it shared while a policy stands, a
# plan takes it exclusively before it looks for anything to expire, so every writer that
# checked a placement against the cutoff has committed it by then (0009_retention_and_holds.sql).
PLAN_LOCK_CLASS = 1886089840
_PLAN_LOCK = AdvisoryLock(PLAN_LOCK_CLASS)

_POLICY = retention_policies.c
_STANDING = _POLICY.ended_by.is_(None)
_CUTOFF: Any = bindparam("cutoff", type_=UtcDateTime())
_START: Any = bindparam("window_start", type_=UtcDateTime())
_PLACED_BEFORE: Any = bindparam("placed_before", type_=UtcDateTime())
_CONVERSATION: BindParameter[Any] = bindparam("conversation_id")
_PURGE: BindParameter[Any] = bindparam("purge_id")
_CONVERSATION_KIND: Any = literal_column(f"'{HoldSubject.CONVERSATION.value}'")
_AUTHOR_KIND: Any = literal_column(f"'{HoldSubject.AUTHOR.value}'")
_SHAPES = [(g, w) for g in (False, True) for w in (False, True)]  # (global, windowed): a statement each


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


def quiet_turns(conn: Connection, *, policy_ids: Sequence[str], interval: dt.timedelta) -> set[str]:
    """The turns of these due policies that find nothing to expire, taken together in this
    transaction (a statement for all the conversation policies, an EXISTS for the global one,
    one UPDATE): their windows move to now - max_age, their next turns are due an
    ``interval`` later, and no ledger row is written. Returns them; the others (something to
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


# -- what agent runs defer ----------------------------------------------------------------------

DEFERRED_RUNS_LISTED = 20  # a run's ledger row names at most this many of the runs it waited for
_ACTIVE_RUN = runs.c.status.in_([literal_column(f"'{status}'") for status in ACTIVE_RUN_STATUSES])  # partial index
_admitted = events.alias("admitted_event")


def _admitted_statement(*, global_scope: bool, windowed: bool) -> Any:
    """The events of the window that a non-terminal run admitted and a run of the scope would
    expire now, each with a run that admitted it: driven by the active runs (their partial
    index) and their admissions, not by the window's volume."""
    expiring = _expiring_now(global_scope=global_scope, windowed=windowed).where(
        placements.c.event_id == _admitted.c.id
    )
    query = (
        select(_admitted.c.id, _admitted.c.occurred_at, runs.c.id.label("run_id"))
        .select_from(
            runs.join(admissions, admissions.c.run_id == runs.c.id).join(
                _admitted, _admitted.c.id == admissions.c.event_id
            )
        )
        .where(_ACTIVE_RUN, _admitted.c.occurred_at < _CUTOFF, exists(expiring))
    )
    return query.where(_admitted.c.occurred_at >= _START) if windowed else query


def _deferral_statements(*, global_scope: bool, windowed: bool) -> tuple[Any, Any]:
    admitted = _admitted_statement(global_scope=global_scope, windowed=windowed).subquery("admitted")
    totals = select(func.min(admitted.c.occurred_at), func.count(distinct(admitted.c.id)))
    listed = select(admitted.c.run_id).distinct().order_by(admitted.c.run_id).limit(DEFERRED_RUNS_LISTED)
    return totals, listed


_DEFERRALS = {(g, w): _deferral_statements(global_scope=g, windowed=w) for g, w in _SHAPES}


@dataclass(frozen=True)
class Deferral:
    """What a run of a window leaves to a later one because non-terminal agent runs admitted
    it: ``events`` of the window (the earliest occurred at ``earliest``), admitted by
    ``run_ids`` (the first :data:`DEFERRED_RUNS_LISTED`, by id). None of them: nothing waits."""

    earliest: dt.datetime | None = None
    events: int = 0
    run_ids: tuple[str, ...] = ()

    def cutoff(self, planned: dt.datetime) -> dt.datetime:
        """The run's cutoff: the planned one, lowered to the earliest admitted event, so that
        it, and what occurred after it, wait for a later run."""
        return planned if self.earliest is None else min(planned, self.earliest)


def deferral(
    conn: Connection, *, conversation_id: str | None, cutoff: dt.datetime, start: dt.datetime | None
) -> Deferral:
    """What non-terminal agent runs admitted of the events a run of this window would expire."""
    totals, listed = _DEFERRALS[(conversation_id is None, start is not None)]
    params = _window_params(conversation_id, cutoff, start)
    earliest, count = conn.execute(totals, params).one()
    if not count:
        return Deferral()
    return Deferral(earliest, int(count), tuple(conn.scalars(listed, params)))


def wait_for_admissions(conn: Connection) -> None:
    """Make what non-terminal runs admitted final until the transaction ends (PostgreSQL): an
    admission being written commits first, a later one waits, then sees the run's fence (the
    triggers refuse an event no longer live). The fences' lock comes first, in the order a
    run's cleanup batch takes the two (it empties admissions under that lock). SQLite
    serialises writers already."""
    if conn.dialect.name == "postgresql":
        lock_fences(conn, exclusive=True)
        conn.execute(text("LOCK TABLE admissions IN SHARE MODE"))


@dataclass(frozen=True)
class RetentionTotals:
    """What a run of the scope would do now: ``events`` expire from ``placements`` in
    ``conversations`` (``by_conversation``: the most placements first, bounded); of those
    events, ``kept_elsewhere`` stay live in a conversation the run leaves alone. ``held``
    events past the cutoff are kept by the holds ``hold_ids``."""

    events: int
    placements: int
    conversations: int
    kept_elsewhere: int
    held: int
    hold_ids: tuple[str, ...]
    by_conversation: tuple[tuple[str, int], ...]


_other = placements.alias("other_placement")
_other_conversation = conversations.alias("other_conversation")


def preview_totals(
    conn: Connection, *, conversation_id: str | None, cutoff: dt.datetime, limit: int
) -> RetentionTotals:
    """The preview's counts, set-based (they cost the scope's volume)."""
    global_scope = conversation_id is None
    expiring = _expiring_now(global_scope=global_scope, windowed=False).cte("expiring")
    params = _window_params(conversation_id, cutoff, None)
    leaves_alone = _other.c.conversation_id != conversation_id if not global_scope else _other_owns_policy()
    kept = (
        exists()
        .where(_other.c.event_id == expiring.c.event_id, _other_conversation.c.id == _other.c.conversation_id)
        .where(_other_conversation.c.state != literal_column("'purged'"))
        .where(or_(leaves_alone, _held_now(_CONVERSATION_KIND, _other.c.conversation_id)))
    )
    totals = conn.execute(
        select(
            func.count(distinct(expiring.c.event_id)),
            func.count(),
            func.count(distinct(expiring.c.conversation_id)),
            select(func.count(distinct(expiring.c.event_id))).where(kept).scalar_subquery(),
        ).select_from(expiring),
        params,
    ).one()
    per = (
        select(expiring.c.conversation_id, func.count().label("n"))
        .group_by(expiring.c.conversation_id)
        .order_by(func.count().desc(), expiring.c.conversation_id)
        .limit(limit)
    )
    held, hold_ids = _held_past(conn, conversation_id=conversation_id, cutoff=cutoff)
    return RetentionTotals(
        events=int(totals[0]),
        placements=int(totals[1]),
        conversations=int(totals[2]),
        kept_elsewhere=int(totals[3]),
        held=held,
        hold_ids=hold_ids,
        by_conversation=tuple((row[0], int(row[1])) for row in conn.execute(per, params)),
    )


def _other_owns_policy() -> Any:
    return exists().where(_own.c.conversation_id == _other.c.conversation_id, _own.c.ended_by.is_(None))


def _held_past(conn: Connection, *, conversation_id: str | None, cutoff: dt.datetime) -> tuple[int, tuple[str, ...]]:
    """The events past the cutoff in scope that holds keep, and the holds that keep them."""
    in_scope = (
        select(placements.c.event_id, placements.c.conversation_id, events.c.author)
        .join(events, events.c.id == placements.c.event_id)
        .join(conversations, conversations.c.id == placements.c.conversation_id)
        .where(events.c.occurred_at < _CUTOFF, NOT_PURGED, not_(_FENCED))
        .where(not_(_HAS_OWN_POLICY) if conversation_id is None else placements.c.conversation_id == _CONVERSATION)
        .cte("in_scope")
    )
    subjects = legal_hold_subjects.join(legal_holds, legal_holds.c.hold_id == legal_hold_subjects.c.hold_id)
    covering = (
        select(in_scope.c.event_id, legal_hold_subjects.c.hold_id)
        .select_from(in_scope.join(subjects, legal_holds.c.released_by.is_(None)))
        .where(
            or_(
                and_(
                    legal_hold_subjects.c.kind == _CONVERSATION_KIND,
                    legal_hold_subjects.c.subject_id == in_scope.c.conversation_id,
                ),
                and_(legal_hold_subjects.c.kind == _AUTHOR_KIND, legal_hold_subjects.c.subject_id == in_scope.c.author),
            )
        )
        .subquery("covering")
    )
    params = _window_params(conversation_id, cutoff, None)
    held = conn.scalar(select(func.count(distinct(covering.c.event_id))), params)
    hold_ids = conn.scalars(select(covering.c.hold_id).distinct().order_by(covering.c.hold_id), params)
    return int(held or 0), tuple(hold_ids)


# -- a run's fence ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fence:
    """A run's fence as its ledger row records it."""

    purge_id: str
    policy_id: str
    conversation_id: str | None
    cutoff: dt.datetime
    window_start: dt.datetime | None
    placed_before: dt.datetime

    @classmethod
    def of(cls, purge_id: str, selectors: Mapping[str, Any]) -> Fence:
        """The fence a run's ledger row (its selectors, already checked) records."""
        start = selectors.get("window_start")
        return cls(
            purge_id=purge_id,
            policy_id=str(selectors["policy_id"]),
            conversation_id=selectors.get("conversation_id"),
            cutoff=ledger.from_utc_text(str(selectors["cutoff"])),
            window_start=ledger.from_utc_text(str(start)) if start else None,
            placed_before=ledger.from_utc_text(str(selectors["placed_before"])),
        )

    @property
    def shape(self) -> tuple[bool, bool]:
        """(global, windowed): which of the statements built once serves this fence."""
        return self.conversation_id is None, self.window_start is not None

    def params(self) -> dict[str, Any]:
        window = _window_params(self.conversation_id, self.cutoff, self.window_start)
        return {"purge_id": self.purge_id, "placed_before": self.placed_before, **window}


def lock_fences(conn: Connection, *, exclusive: bool) -> None:
    """Hold the fences' lock until the transaction ends (PostgreSQL; SQLite serialises
    writers already)."""
    _FENCE_LOCK.take(conn, exclusive=exclusive)


def insert_fence(conn: Connection, fence: Fence, exemptions: Sequence[tuple[str, str, str]]) -> None:
    """Write the run's exemptions, then its fence, under the fences' lock; a fence already
    there (a merge of a run whose cleanup had not finished) is kept as it is."""
    lock_fences(conn, exclusive=True)
    if conn.scalar(select(exists().where(retention_fences.c.purge_id == fence.purge_id))):
        return
    if exemptions:
        rows = [{"purge_id": fence.purge_id, "kind": k, "subject_id": s, "reason": r} for k, s, r in exemptions]
        conn.execute(insert(retention_exemptions), rows)
    conn.execute(
        insert(retention_fences).values(
            purge_id=fence.purge_id,
            policy_id=fence.policy_id,
            conversation_id=fence.conversation_id,
            cutoff=fence.cutoff,
            window_start=fence.window_start,
            placed_before=fence.placed_before,
        )
    )


def drop_fence(conn: Connection, purge_id: str) -> None:
    """Delete the fence (the triggers refuse while it still expires anything), then its
    exemptions."""
    conn.execute(delete(retention_fences).where(retention_fences.c.purge_id == purge_id))
    conn.execute(delete(retention_exemptions).where(retention_exemptions.c.purge_id == purge_id))


def fence_exists(conn: Connection, purge_id: str) -> bool:
    return bool(conn.scalar(select(exists().where(retention_fences.c.purge_id == purge_id))))


def _exempt(name: str, kind: Any, subject: Any, *, reason: Exemption | None = None) -> Any:
    """The run ``:purge_id`` exempts ``subject`` of ``kind`` (for ``reason``, if given): one
    probe of the exemptions' primary key, under an alias of its own (``name``)."""
    x = retention_exemptions.alias(name)
    query = exists().where(x.c.purge_id == _PURGE, x.c.kind == kind, x.c.subject_id == subject)
    return query.where(x.c.reason == literal_column(f"'{reason.value}'")) if reason else query


_OWN_POLICY_EXEMPT = _exempt(
    "exempt_own_policy", _CONVERSATION_KIND, placements.c.conversation_id, reason=Exemption.OWN_POLICY
)
_EXPIRES = and_(
    not_(_exempt("exempt_conversation", _CONVERSATION_KIND, placements.c.conversation_id)),
    not_(_exempt("exempt_author", _AUTHOR_KIND, events.c.author)),
)


def _in_window(occurred_at: Any, *, windowed: bool) -> Any:
    return and_(occurred_at < _CUTOFF, occurred_at >= _START) if windowed else occurred_at < _CUTOFF


def _concerned(*, global_scope: bool, windowed: bool) -> Any:
    """The placements of the run's window it is concerned with: in its scope (a global run:
    not in a conversation with a policy of its own), in a conversation not purged; they
    expire, or a hold keeps them."""
    scope = not_(_OWN_POLICY_EXEMPT) if global_scope else placements.c.conversation_id == _CONVERSATION
    placed = placements.c.created_at < _PLACED_BEFORE
    return and_(_in_window(events.c.occurred_at, windowed=windowed), NOT_PURGED, placed, scope)


def _walk_statement(dialect: str, *, global_scope: bool, windowed: bool, after: bool) -> Any:
    """The next events of the window with a placement the run is concerned with: a global run
    walks the events by (occurred_at, id) through their time index (SQLite: the stored text,
    never re-rendered, so no row is skipped or read twice); a conversation's run walks its
    placements by event id."""
    if not global_scope:
        query = (
            select(placements.c.event_id.label("id"), placements.c.event_id.label("key"))
            .select_from(_JOINED)
            .where(_concerned(global_scope=False, windowed=windowed))
            .order_by(placements.c.event_id)
            .limit(bindparam("limit"))
        )
        return query.where(placements.c.event_id > bindparam("after_id")) if after else query
    key_type = Text() if dialect == "sqlite" else UtcDateTime()
    walked = events.alias("walked")
    concerned = (
        exists()
        .where(placements.c.event_id == walked.c.id)
        .where(conversations.c.id == placements.c.conversation_id, NOT_PURGED)
        .where(placements.c.created_at < _PLACED_BEFORE, not_(_OWN_POLICY_EXEMPT))
    )
    query = (
        select(walked.c.id, type_coerce(walked.c.occurred_at, key_type).label("key"))
        .where(_in_window(walked.c.occurred_at, windowed=windowed), concerned)
        .order_by(walked.c.occurred_at, walked.c.id)
        .limit(bindparam("limit"))
    )
    if after:
        keyset = tuple_(bindparam("after_at", type_=key_type), bindparam("after_id"))
        query = query.where(tuple_(walked.c.occurred_at, walked.c.id) > keyset)
    return query


_WALKS = {
    (dialect, g, w, after): _walk_statement(dialect, global_scope=g, windowed=w, after=after)
    for dialect in ("postgresql", "sqlite")
    for g, w in _SHAPES
    for after in (False, True)
}


def _placements_statement(*, global_scope: bool, windowed: bool) -> Any:
    """The batch's placements the run is concerned with, each with whether it expires."""
    return (
        select(placements.c.event_id, placements.c.conversation_id, _EXPIRES.label("expires"))
        .select_from(_JOINED)
        .where(among(placements.c.event_id, IDS), _concerned(global_scope=global_scope, windowed=windowed))
    )


_PLACEMENTS = {(g, w): _placements_statement(global_scope=g, windowed=w) for g, w in _SHAPES}
_LIVE = select(events.c.id).where(among(events.c.id, IDS), live_event(events.c.id))


def _delete_statement(*, global_scope: bool, windowed: bool) -> Any:
    expired = (
        select(placements.c.event_id, placements.c.conversation_id)
        .select_from(_JOINED)
        .where(among(placements.c.event_id, IDS), _concerned(global_scope=global_scope, windowed=windowed), _EXPIRES)
    )
    return delete(placements).where(tuple_(placements.c.event_id, placements.c.conversation_id).in_(expired))


_DELETES = {(g, w): _delete_statement(global_scope=g, windowed=w) for g, w in _SHAPES}


@dataclass(frozen=True)
class Batch:
    """One batch of a run's walk: the events some placement of which expired (``expired``),
    those of them now live nowhere, fenced and emptied (``fenced``), those still live in a
    conversation the run leaves alone (``kept_elsewhere``), those a hold kept in at least one
    of the run's conversations (``held``), and
    the keyset to pass next, or None once the walk is done."""

    expired: list[str]
    fenced: list[str]
    kept_elsewhere: list[str]
    held: list[str]
    after: tuple[Any, ...] | None


def expire_batch(conn: Connection, fence: Fence, *, after: tuple[Any, ...] | None, limit: int) -> Batch:
    """The next ``limit`` events of the run's window: the ones no longer live anywhere once
    their expiring placements go get their ``event`` tombstones (for this run) and lose
    their content, then the expiring placements are deleted. Idempotent."""
    from schema import cleanup  # the cleanup's NULLs and tombstones; cleanup imports content, not this

    lock_fences(conn, exclusive=False)
    shape = fence.shape
    params: dict[str, Any] = {**fence.params(), "limit": limit}
    if after is not None:
        params.update(after_at=after[0], after_id=after[1])
    walked = conn.execute(_WALKS[(conn.dialect.name, *shape, after is not None)], params).all()
    ids = [row.id for row in walked]
    rows = conn.execute(_PLACEMENTS[shape], {**fence.params(), "ids": ids}).all() if ids else []
    expired = sorted({row.event_id for row in rows if row.expires})
    held = sorted({row.event_id for row in rows if not row.expires})
    live = set(conn.scalars(_LIVE, {"ids": expired})) if expired else set()
    fenced = [event_id for event_id in expired if event_id not in live]
    cleanup.tombstone_events(conn, fence.purge_id, fenced)
    cleanup.null_content_of(conn, fenced)
    if expired:
        conn.execute(_DELETES[shape], {**fence.params(), "ids": expired})
    last = (walked[-1].key, walked[-1].id) if len(walked) >= limit else None
    return Batch(expired, fenced, sorted(live), held, last)


def _left_statement(*, global_scope: bool, windowed: bool) -> Any:
    concerned = _concerned(global_scope=global_scope, windowed=windowed)
    return select(exists().select_from(_JOINED).where(concerned, _EXPIRES))


_LEFT = {(g, w): _left_statement(global_scope=g, windowed=w) for g, w in _SHAPES}


def expiring_left(conn: Connection, fence: Fence) -> bool:
    """A placement the fence expires is still there (the triggers ask the same before the
    fence may go)."""
    return bool(conn.scalar(_LEFT[fence.shape], fence.params()))


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


_RUN_STEPS = (
    select(
        func.count(distinct(purge_ledger.c.purge_id)).label("runs"),
        func.coalesce(func.sum(cleanup_steps.c.removed), 0).label("expired"),
        func.coalesce(func.sum(cleanup_steps.c.held), 0).label("held"),
    )
    .select_from(
        purge_ledger.outerjoin(
            cleanup_steps,
            and_(
                cleanup_steps.c.purge_id == purge_ledger.c.purge_id,
                cleanup_steps.c.kind == literal_column("'bodies'"),
            ),
        )
    )
    .where(purge_ledger.c.kind == literal_column("'retention_run'"))
)
_COUNTS = select(
    select(func.count()).where(_STANDING).scalar_subquery(),
    select(func.count()).where(legal_holds.c.released_by.is_(None)).scalar_subquery(),
    select(func.count()).select_from(retention_fences).scalar_subquery(),
)


def summary(conn: Connection) -> Summary:
    """Two aggregate statements: the runs through the ledger's partial index of them (their
    cost follows the runs, as the step totals' follows the steps), then three counts."""
    runs = conn.execute(_RUN_STEPS).one()
    policies, holds_in_force, fences = conn.execute(_COUNTS).one()
    return Summary(
        policies=int(policies),
        runs=int(runs.runs),
        expired=int(runs.expired),
        held=int(runs.held),
        holds=int(holds_in_force),
        fences=int(fences),
    )
