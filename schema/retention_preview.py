"""What a retention run would do, before its acceptance: the agent runs it defers to and the
totals its preview shows.

- **Agent runs** (``deferral``): the events of a run's window that a non-terminal run
  admitted, and that the run would expire, lower its cutoff to the earliest of them (see
  ``purgekeeper.commands.kinds.retention_run``); an acceptance first makes the admissions final
  (``wait_for_admissions``).
- **Totals** (``preview_totals``): what the run would expire, and what holds keep out of it.

``purgekeeper.schema.retention_queries`` names all of it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    and_,
    distinct,
    exists,
    func,
    literal_column,
    not_,
    or_,
    select,
    text,
)

from purgekeeper.schema.content_queries import NOT_PURGED
from purgekeeper.schema.retention_expiring import (
    _AUTHOR_KIND,
    _CONVERSATION,
    _CONVERSATION_KIND,
    _CUTOFF,
    _FENCED,
    _HAS_OWN_POLICY,
    _SHAPES,
    _START,
    _expiring_now,
    _held_now,
    _own,
    _window_params,
)
from purgekeeper.schema.retention_fence import lock_fences
from purgekeeper.schema.states import ACTIVE_RUN_STATUSES
from purgekeeper.schema.tables import (
    admissions,
    conversations,
    events,
    legal_hold_subjects,
    legal_holds,
    placements,
    runs,
)

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
