"""The aggregate reads of the operator's views (``/metrics`` and ``/status``): cleanup steps
by status and kind, the oldest due step, and the incomplete and stalled purges. Each is a
handful of aggregate statements through the step status indexes: the cost does not grow with
one purge's size, and nothing is read per purge. The steps that are done are not read at all:
their totals are counters the database keeps (migration 0015, ``DONE_STEPS``).

And the counters of ``/metrics`` (``metric_counters``): the step protocol (``purgekeeper.schema.steps``)
adds to them in the transaction that starts or ends an attempt, or completes a purge, and a
scrape reads them all with one statement of a bounded number of rows (metrics x kinds x
buckets), however long the history. Several API processes and workers share one database, so
no process could keep them in memory. Each increment is an upsert (``value = value + n``),
safe under concurrent writers on both backends; a transaction adds to the rows of one step
kind, in the order of :class:`Counter`, so two of them never wait on each other in a cycle.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from sqlalchemy import Connection, distinct, func, select

from purgekeeper.schema import lifecycle
from purgekeeper.schema.content_queries import upsert_insert
from purgekeeper.schema.states import StepKind, StepStatus
from purgekeeper.schema.tables import cleanup_steps, metric_counters


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
UNFINISHED_STEP_STATUSES = tuple(status.value for status in StepStatus if status is not StepStatus.DONE)
# The done steps' totals by step kind, kept by the triggers of 0015 as steps become done (or
# are done no more): metric ``done_steps``, one bucket per StepTotals field.
DONE_STEPS = "done_steps"
_UNFINISHED_TOTALS = (
    select(
        _c.status,
        _c.kind,
        func.count().label("steps"),
        func.coalesce(func.sum(_c.attempts), 0).label("attempts"),
        func.coalesce(func.sum(_c.removed), 0).label("removed"),
        func.coalesce(func.sum(_c.retained_shared), 0).label("retained_shared"),
    )
    .where(_c.status.in_(UNFINISHED_STEP_STATUSES))
    .group_by(_c.status, _c.kind)
)
_DONE_TOTALS = select(metric_counters.c.kind, metric_counters.c.bucket, metric_counters.c.value).where(
    metric_counters.c.metric == DONE_STEPS
)


def step_totals(conn: Connection) -> dict[tuple[str, str], StepTotals]:
    """Every (status, kind): the unfinished steps summed through the status index, the done
    ones read from their counters. The cost follows the steps not done, not the history."""
    totals = {
        (row.status, row.kind): StepTotals(
            int(row.steps), int(row.attempts), int(row.removed), int(row.retained_shared)
        )
        for row in conn.execute(_UNFINISHED_TOTALS)
    }
    done: dict[str, dict[str, int]] = {}
    for row in conn.execute(_DONE_TOTALS):
        done.setdefault(row.kind, {})[row.bucket] = round(row.value)
    for kind, fields in done.items():
        totals[(StepStatus.DONE.value, kind)] = StepTotals(**fields)
    for status in StepStatus:
        for kind in StepKind:
            totals.setdefault((status.value, kind.value), StepTotals())
    return totals


def oldest_due_since(conn: Connection, now: dt.datetime) -> dt.datetime | None:
    """Since when the longest-waiting due step has been due (None: nothing is due)."""
    waiting = select(func.min(_c.next_attempt_at)).where(lifecycle.waiting_due_clause(now))
    expired = select(func.min(_c.lease_expires_at)).where(lifecycle.lease_expired_clause(now))
    row = conn.execute(select(waiting.scalar_subquery(), expired.scalar_subquery())).one()
    return min((since for since in row if since is not None), default=None)


def purge_counts(conn: Connection, now: dt.datetime, stall_after: dt.timedelta) -> tuple[int, int]:
    """(incomplete purges, stalled purges), by COUNT(DISTINCT purge_id) over the status indexes."""
    incomplete = select(func.count(distinct(_c.purge_id))).where(_c.status == StepStatus.INCOMPLETE.value)
    stalled = select(func.count(distinct(_c.purge_id))).where(lifecycle.stalled_clause(now, stall_after))
    row = conn.execute(select(incomplete.scalar_subquery(), stalled.scalar_subquery())).one()
    return int(row[0]), int(row[1])


def stalled_purge_ids(conn: Connection, now: dt.datetime, stall_after: dt.timedelta, *, limit: int) -> list[str]:
    """Up to ``limit`` purges with a step due for longer than ``stall_after``, longest first."""
    due_since = func.min(func.coalesce(_c.lease_expires_at, _c.next_attempt_at))
    query = (
        select(_c.purge_id)
        .where(lifecycle.stalled_clause(now, stall_after))
        .group_by(_c.purge_id)
        .order_by(due_since, _c.purge_id)
        .limit(limit)
    )
    return list(conn.scalars(query))


# -- the counters of /metrics ---------------------------------------------------------------------


class Counter(StrEnum):
    """What ``metric_counters`` counts (its ``metric`` column), in the order a transaction
    adds to them."""

    ATTEMPT_SECONDS = "step_attempt_seconds"  # histogram by step kind: start to end of an attempt
    FAILURES = "step_failures"  # by step kind: attempts that ended retrying, incomplete or lease_lost
    ATTEMPTS = "step_attempts"  # by step kind: attempts started (claims)
    PURGE_SECONDS = "purge_seconds"  # histogram by purge kind: acceptance to complete


# Upper bounds in seconds. An attempt takes from milliseconds (a small bodies step) to the
# lease's worth of batches; a purge completes from a fraction of a second to a day (retries
# with backoff, an operator's retry).
ATTEMPT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
PURGE_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0)
BUCKETS = {Counter.ATTEMPT_SECONDS: ATTEMPT_BUCKETS, Counter.PURGE_SECONDS: PURGE_BUCKETS}
INF = "+Inf"
SUM = "sum"
PLAIN = ""  # the bucket of a plain counter


def bucket_label(bound: float) -> str:
    return INF if bound == float("inf") else format(bound, "g")


def add(conn: Connection, counter: Counter, kind: str, amount: float = 1) -> None:
    """Add ``amount`` to a plain counter."""
    _upsert(conn, counter, kind, [(PLAIN, amount)])


def observe(conn: Connection, counter: Counter, kind: str, seconds: float) -> None:
    """Count one observation in its histogram: its bucket (the smallest bound at or above it)
    and the sum, in one statement."""
    bounds = BUCKETS[counter]
    seconds = max(seconds, 0.0)
    at = bisect.bisect_left(bounds, seconds)
    bucket = bucket_label(bounds[at]) if at < len(bounds) else INF
    _upsert(conn, counter, kind, [(bucket, 1), (SUM, seconds)])


def _upsert(conn: Connection, counter: Counter, kind: str, amounts: list[tuple[str, float]]) -> None:
    rows = [{"metric": counter.value, "kind": kind, "bucket": b, "value": v} for b, v in amounts]
    statement = upsert_insert(conn, metric_counters).values(rows)
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=["metric", "kind", "bucket"],
            set_={"value": metric_counters.c.value + statement.excluded.value},
        )
    )


@dataclass(frozen=True)
class Histogram:
    """One histogram series: cumulative counts at each upper bound (``+Inf`` last), and the
    sum of the observations."""

    buckets: tuple[tuple[str, float], ...]
    total: float = 0.0

    @property
    def count(self) -> float:
        return self.buckets[-1][1]

    @classmethod
    def of(cls, bounds: Sequence[float], rows: Mapping[str, float]) -> Histogram:
        """From the stored per-bucket rows (a row of a bound this code no longer uses counts in
        the next bound above it)."""
        counts = [0.0] * (len(bounds) + 1)
        for label, value in rows.items():
            if label != SUM:
                counts[bisect.bisect_left(bounds, float(label))] += value
        cumulative, running = [], 0.0
        for bound, count in zip([*bounds, float("inf")], counts, strict=True):
            running += count
            cumulative.append((bucket_label(bound), running))
        return cls(tuple(cumulative), rows.get(SUM, 0.0))


@dataclass(frozen=True)
class Counters:
    """Every counter, by kind: the step counters and attempt durations for every step kind
    (zeros included), the completion times for the purge kinds that have completed."""

    attempts: Mapping[str, float] = field(default_factory=dict)
    failures: Mapping[str, float] = field(default_factory=dict)
    attempt_seconds: Mapping[str, Histogram] = field(default_factory=dict)
    purge_seconds: Mapping[str, Histogram] = field(default_factory=dict)


_COUNTERS = select(metric_counters.c.metric, metric_counters.c.kind, metric_counters.c.bucket, metric_counters.c.value)


def counters(conn: Connection) -> Counters:
    """All of ``metric_counters``, one statement."""
    rows: dict[tuple[str, str], dict[str, float]] = {}
    for row in conn.execute(_COUNTERS):
        rows.setdefault((row.metric, row.kind), {})[row.bucket] = float(row.value)
    step_kinds = [kind.value for kind in StepKind]

    def plain(counter: Counter) -> dict[str, float]:
        return {kind: rows.get((counter.value, kind), {}).get(PLAIN, 0.0) for kind in step_kinds}

    purge_kinds = sorted(kind for metric, kind in rows if metric == Counter.PURGE_SECONDS.value)
    return Counters(
        attempts=plain(Counter.ATTEMPTS),
        failures=plain(Counter.FAILURES),
        attempt_seconds={
            kind: Histogram.of(ATTEMPT_BUCKETS, rows.get((Counter.ATTEMPT_SECONDS.value, kind), {}))
            for kind in step_kinds
        },
        purge_seconds={
            kind: Histogram.of(PURGE_BUCKETS, rows[(Counter.PURGE_SECONDS.value, kind)]) for kind in purge_kinds
        },
    )
