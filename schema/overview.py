"""The aggregate reads of the operator's views (``/metrics`` and ``/status``): cleanup steps
by status and kind, the oldest due step, and the incomplete and stalled purges. Each is a
handful of aggregate statements through the step status indexes: the cost does not grow with
one purge's size, and nothing is read per purge."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, distinct, func, or_, select

from schema.states import StepKind, StepStatus
from schema.tables import cleanup_steps

WAITING = (StepStatus.PENDING.value, StepStatus.RETRYING.value)


@dataclass(frozen=True)
class StepTotals:
    """One (status, kind) group of cleanup steps."""

    steps: int = 0
    attempts: int = 0
    removed: int = 0
    retained_shared: int = 0


def summed(groups: list[StepTotals]) -> StepTotals:
    return StepTotals(
        steps=sum(g.steps for g in groups),
        attempts=sum(g.attempts for g in groups),
        removed=sum(g.removed for g in groups),
        retained_shared=sum(g.retained_shared for g in groups),
    )


_c = cleanup_steps.c
_STEP_TOTALS = select(
    _c.status,
    _c.kind,
    func.count().label("steps"),
    func.coalesce(func.sum(_c.attempts), 0).label("attempts"),
    func.coalesce(func.sum(_c.removed), 0).label("removed"),
    func.coalesce(func.sum(_c.retained_shared), 0).label("retained_shared"),
).group_by(_c.status, _c.kind)


def _due_before(moment: dt.datetime) -> Any:
    """Steps due since before ``moment``: waiting ones by their next attempt, running ones by
    their lease expiry (the same rule as the scheduler's sweep and ``is_stalled``)."""
    return or_(
        and_(_c.status.in_(WAITING), _c.next_attempt_at < moment),
        and_(_c.status == StepStatus.RUNNING.value, _c.lease_expires_at < moment),
    )


def step_totals(conn: Connection) -> dict[tuple[str, str], StepTotals]:
    totals = {
        (row.status, row.kind): StepTotals(
            int(row.steps), int(row.attempts), int(row.removed), int(row.retained_shared)
        )
        for row in conn.execute(_STEP_TOTALS)
    }
    for status in StepStatus:
        for kind in StepKind:
            totals.setdefault((status.value, kind.value), StepTotals())
    return totals


def oldest_due_since(conn: Connection, now: dt.datetime) -> dt.datetime | None:
    """Since when the longest-waiting due step has been due (None: nothing is due)."""
    waiting = select(func.min(_c.next_attempt_at)).where(_c.status.in_(WAITING), _c.next_attempt_at <= now)
    expired = select(func.min(_c.lease_expires_at)).where(
        _c.status == StepStatus.RUNNING.value, _c.lease_expires_at <= now
    )
    row = conn.execute(select(waiting.scalar_subquery(), expired.scalar_subquery())).one()
    return min((since for since in row if since is not None), default=None)


def purge_counts(conn: Connection, now: dt.datetime, stall_after: dt.timedelta) -> tuple[int, int]:
    """(incomplete purges, stalled purges), by COUNT(DISTINCT purge_id) over the status indexes."""
    incomplete = select(func.count(distinct(_c.purge_id))).where(_c.status == StepStatus.INCOMPLETE.value)
    stalled = select(func.count(distinct(_c.purge_id))).where(_due_before(now - stall_after))
    row = conn.execute(select(incomplete.scalar_subquery(), stalled.scalar_subquery())).one()
    return int(row[0]), int(row[1])


def stalled_purge_ids(conn: Connection, now: dt.datetime, stall_after: dt.timedelta, *, limit: int) -> list[str]:
    """Up to ``limit`` purges with a step due for longer than ``stall_after``, longest first."""
    due_since = func.min(func.coalesce(_c.lease_expires_at, _c.next_attempt_at))
    query = (
        select(_c.purge_id)
        .where(_due_before(now - stall_after))
        .group_by(_c.purge_id)
        .order_by(due_since, _c.purge_id)
        .limit(limit)
    )
    return list(conn.scalars(query))
