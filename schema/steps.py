"""The cleanup-step protocol, on the database clock. The step row is the source of truth; a
broker only carries wake-ups.

- ``claim``: a conditional UPDATE that counts the attempt and sets a lease. No row back means
  someone else has the step (or it is not due): the caller acks and returns.
- ``progress``: each batch's UPDATE is guarded by the lease owner and renews the lease; no
  row back means the lease was lost, and the batch's transaction must roll back.
- ``finish``: an UPDATE guarded by the lease owner, to ``done``, ``retrying`` (with backoff)
  or ``incomplete`` (attempts at the maximum, or a failure that retries cannot fix).

The same transactions keep the counters of ``/metrics`` (``purgekeeper.schema.overview``): a claim counts
the attempt started; closing an attempt counts its duration (from its start to the moment it
was closed: an attempt whose lease ran out is measured until the claim that found it lost)
and, if it ended ``retrying``, ``incomplete`` or ``lease_lost``, a failure; the transaction
that makes the last unfinished step of a purge ``done`` counts the time from the purge's
acceptance. A retry re-arms a step's ``attempts`` but never these counters.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, case, func, insert, select, update

from purgekeeper.schema import lifecycle, overview
from purgekeeper.schema.content_queries import upsert_insert
from purgekeeper.schema.ledger import clock, database_now
from purgekeeper.schema.overview import Counter
from purgekeeper.schema.states import StepStatus
from purgekeeper.schema.tables import (
    cleanup_steps,
    purge_completions,
    purge_ledger,
    step_attempts,
)

LEASE_EXPIRED = "the worker stopped during its last attempt (lease expired)"
LEASE_LOST = "lease_lost"  # an attempt's outcome: its lease ran out before it finished
STOPPED = "stopped"  # an attempt's outcome: its worker stopped cleanly and gave the step back
FAILED_OUTCOMES = frozenset({StepStatus.RETRYING.value, StepStatus.INCOMPLETE.value, LEASE_LOST})
# A step parked behind another (a conversation's attachments wait for its bodies step).
PARKED_UNTIL = dt.datetime(9999, 12, 31, tzinfo=dt.UTC)
MAX_ERROR_LENGTH = 2000
MAX_REASON_EXAMPLES = 10


class LeaseLost(Exception):
    """The step's lease expired and someone else claimed it: this attempt's writes are void."""


@dataclass(frozen=True)
class Claim:
    step_id: str
    purge_id: str
    kind: str
    attempt: int
    max_attempts: int
    owner: str


@dataclass(frozen=True)
class Exhausted:
    """A step whose lease ran out on its last attempt (its worker died every time): the claim
    that found it ended it incomplete instead of taking it."""

    step_id: str
    purge_id: str
    kind: str
    attempts: int


@dataclass(frozen=True)
class StepRef:
    """Which purge a step belongs to, and its kind: what a log line about the step names."""

    step_id: str
    purge_id: str
    kind: str


def refs(conn: Connection, step_ids: Sequence[str]) -> dict[str, StepRef]:
    """The purge and kind of each of ``step_ids`` (by primary key; unknown ids are left out)."""
    c = cleanup_steps.c
    rows = conn.execute(select(c.id, c.purge_id, c.kind).where(c.id.in_(list(step_ids))))
    return {row.id: StepRef(row.id, row.purge_id, row.kind) for row in rows}


def claim(conn: Connection, step_id: str, *, owner: str, lease: dt.timedelta) -> Claim | None:
    """Take the step if it is due or its lease expired. A step whose lease expired on its last
    attempt (the worker died every time) ends incomplete instead. Two UPDATEs, each reading
    the database clock inside itself; the attempt is recorded (``step_attempts``), and one
    whose lease ran out is closed as ``lease_lost``."""
    taken = claim_or_end(conn, step_id, owner=owner, lease=lease)
    return taken if isinstance(taken, Claim) else None


def claim_or_end(conn: Connection, step_id: str, *, owner: str, lease: dt.timedelta) -> Claim | Exhausted | None:
    """:func:`claim`, saying when it ended the step incomplete instead (for the worker's log)."""
    now = clock(conn)
    c = cleanup_steps.c
    # A row another transaction holds (a batch recording its progress) is skipped, not waited
    # for: PostgreSQL would compute the new lease before the wait, and a claim that waited a
    # while would write a lease that had already run out.
    unlocked = c.id.in_(select(c.id).where(c.id == step_id).with_for_update(skip_locked=True).scalar_subquery())
    ended = conn.execute(
        update(cleanup_steps)
        .where(unlocked, c.status == StepStatus.RUNNING.value, c.lease_expires_at <= now)
        .where(c.attempts >= c.max_attempts)
        .values(
            status=StepStatus.INCOMPLETE.value,
            last_error=func.coalesce(c.last_error, LEASE_EXPIRED),
            lease_owner=None,
            lease_expires_at=None,
            updated_at=now,
        )
        .returning(c.id, c.purge_id, c.kind, c.attempts)
    ).first()
    if ended is not None:
        _close_attempts(conn, step_id, outcome=LEASE_LOST, error=LEASE_EXPIRED)
        return Exhausted(ended.id, ended.purge_id, ended.kind, int(ended.attempts))
    row = conn.execute(
        update(cleanup_steps)
        .where(unlocked, lifecycle.due_clause(now))
        .values(**_taking(conn, owner, lease, now))
        .returning(c.id, c.purge_id, c.kind, c.attempts, c.max_attempts)
    ).first()
    if row is None:
        return None
    _close_attempts(conn, step_id, outcome=LEASE_LOST, error=LEASE_EXPIRED)  # an earlier attempt's lease ran out
    return _started(conn, [row], owner=owner, now=now)[0]


def _taking(conn: Connection, owner: str, lease: dt.timedelta, now: Any) -> dict[str, Any]:
    """What a claim writes on its step: running, one attempt more, leased to ``owner``."""
    c = cleanup_steps.c
    return {
        "status": StepStatus.RUNNING.value,
        "attempts": c.attempts + 1,
        "lease_owner": owner,
        "lease_expires_at": clock(conn, plus=lease),
        "updated_at": now,
    }


def _started(conn: Connection, rows: Sequence[Any], *, owner: str, now: Any) -> list[Claim]:
    """The attempts of steps just claimed (rows of ``id, purge_id, kind, attempts,
    max_attempts``), recorded in ``step_attempts`` and counted (one statement each)."""
    attempts = [
        {"id": uuid.uuid4().hex, "step_id": r.id, "purge_id": r.purge_id, "kind": r.kind, "attempt": int(r.attempts)}
        for r in rows
    ]
    conn.execute(insert(step_attempts).values(owner=owner, started_at=now), attempts)
    overview.add(conn, Counter.ATTEMPTS, rows[0].kind, len(rows))
    return [Claim(r.id, r.purge_id, r.kind, int(r.attempts), int(r.max_attempts), owner) for r in rows]


def claim_more(
    conn: Connection,
    *,
    kind: str,
    owner: str,
    lease: dt.timedelta,
    limit: int,
    besides: str,
    purge_kinds: Sequence[str] | None = None,
) -> list[Claim]:
    """Up to ``limit`` more steps of ``kind`` for ``owner``, beside the step ``besides`` it has
    just claimed: a group, worked together (``purgekeeper.workers.grouped``). Only waiting steps
    due now (oldest first), of purges of ``purge_kinds`` when given: a step whose lease ran out
    is left to its own delivery, whose claim closes the lost attempt. A step another worker is
    claiming at the same moment is skipped, not waited for (SKIP LOCKED on PostgreSQL; SQLite
    writes one transaction at a time). Each attempt is counted and recorded as ``claim``'s."""
    if limit <= 0:
        return []
    now = clock(conn)
    c = cleanup_steps.c
    candidates = select(c.id).where(c.kind == kind, c.id != besides, lifecycle.waiting_due_clause(now))
    if purge_kinds is not None:
        ledger_row = purge_ledger.c
        candidates = candidates.where(
            select(ledger_row.purge_id)
            .where(ledger_row.purge_id == c.purge_id, ledger_row.kind.in_(list(purge_kinds)))
            .exists()
        )
    candidates = candidates.order_by(c.next_attempt_at, c.id).limit(limit).with_for_update(skip_locked=True)
    rows = conn.execute(
        update(cleanup_steps)
        .where(c.id.in_(candidates.scalar_subquery()), lifecycle.waiting_due_clause(now))
        .values(**_taking(conn, owner, lease, now))
        .returning(c.id, c.purge_id, c.kind, c.attempts, c.max_attempts)
    ).all()
    return _started(conn, sorted(rows, key=lambda row: row.id), owner=owner, now=now) if rows else []


def renew(conn: Connection, owner: str, step_ids: Sequence[str], *, lease: dt.timedelta) -> set[str]:
    """Renew ``owner``'s leases of these steps, and lock their rows for the transaction: the
    ids it still holds (a step missing from them was taken over after its lease ran out, or
    given back; a group works on none of its rows then)."""
    if not step_ids:
        return set()
    c = cleanup_steps.c
    rows = conn.execute(
        update(cleanup_steps)
        .where(c.id.in_(list(step_ids)), c.lease_owner == owner, c.status == StepStatus.RUNNING.value)
        .values(lease_expires_at=clock(conn, plus=lease), updated_at=clock(conn))
        .returning(c.id)
    )
    return {row.id for row in rows}


def _close_attempts(
    conn: Connection, step_id: str, *, outcome: str, error: str | None, owner: str | None = None, at: Any = None
) -> None:
    """End the step's open attempts (``owner``'s only, if given), at the time the step's row
    was written (``at``) or now, and count them (their durations, and the failures)."""
    a = step_attempts.c
    query = update(step_attempts).where(a.step_id == step_id, a.finished_at.is_(None))
    if owner is not None:
        query = query.where(a.owner == owner)
    values = query.values(finished_at=clock(conn) if at is None else at, outcome=outcome, error=error)
    for closed in conn.execute(values.returning(a.kind, a.started_at, a.finished_at)).all():
        seconds = (closed.finished_at - closed.started_at).total_seconds()
        overview.observe(conn, Counter.ATTEMPT_SECONDS, closed.kind, seconds)
        if outcome in FAILED_OUTCOMES:
            overview.add(conn, Counter.FAILURES, closed.kind)


def _purge_completed(conn: Connection, purge_id: str) -> tuple[str, dt.datetime] | None:
    """After a step of the purge became ``done`` in this transaction: its (kind, acceptance
    time) if no step of it is left unfinished, else None. The purge's first step row is locked
    first, so of two transactions finishing its last two steps at once the second waits for
    the first to commit and then sees it: exactly one of them counts the completion. (Taken
    before any counter row, so the lock order is step rows, then counters, everywhere.)"""
    c = cleanup_steps.c
    conn.execute(select(c.id).where(c.purge_id == purge_id).order_by(c.id).limit(1).with_for_update())
    unfinished = select(func.count()).select_from(cleanup_steps)
    if conn.scalar(unfinished.where(c.purge_id == purge_id, c.status != StepStatus.DONE.value)):
        return None
    ledger = purge_ledger.c
    row = conn.execute(select(ledger.kind, ledger.accepted_at).where(ledger.purge_id == purge_id)).first()
    return None if row is None else (row.kind, row.accepted_at)


def _count_completion(
    conn: Connection, purge_id: str, completed: tuple[str, dt.datetime] | None, at: dt.datetime
) -> None:
    """Observe the purge's acceptance-to-complete, the first time it completes only
    (``purge_completions``: a merge that re-arms a done step makes it complete again)."""
    if completed is None:
        return
    first = conn.execute(
        upsert_insert(conn, purge_completions)
        .values(purge_id=purge_id, completed_at=at)
        .on_conflict_do_nothing(index_elements=["purge_id"])
        .returning(purge_completions.c.purge_id)
    ).first()
    if first is not None:
        kind, accepted_at = completed
        overview.observe(conn, Counter.PURGE_SECONDS, kind, (at - accepted_at).total_seconds())


def progress(
    conn: Connection,
    held: Claim,
    *,
    lease: dt.timedelta,
    removed: int = 0,
    retained: int = 0,
    reasons: Mapping[str, list[str]] | None = None,
    remaining: int | None = None,
    restart_retained: bool = False,
    kept_by_hold: int = 0,
    done: bool = False,
) -> None:
    """Record a batch's progress and renew the lease, in the batch's own transaction (one
    UPDATE: the new expiry is computed on the database clock inside it). ``restart_retained``
    starts the counts of retained and held (``kept_by_hold``) content afresh with this batch's: a step that
    re-walks everything on each attempt would otherwise count the same shared blob once per
    attempt.
    ``done``: this was the step's last batch, and the same UPDATE finishes it (status
    ``done``, lease released), so the last batch and the finish are one commit."""
    c = cleanup_steps.c
    values: dict[str, Any] = {
        "removed": c.removed + removed,
        "retained_shared": retained if restart_retained else c.retained_shared + retained,
        "held": kept_by_hold if restart_retained else c.held + kept_by_hold,
        "lease_expires_at": clock(conn, plus=lease),
        "updated_at": clock(conn),
    }
    if done:
        values.update(status=StepStatus.DONE.value, lease_owner=None, lease_expires_at=None)
    if remaining is not None:
        values["remaining"] = remaining
    if restart_retained:
        values["retained_reasons"] = _merge_reasons(None, reasons) if reasons else None
    elif reasons:
        current = conn.scalar(select(c.retained_reasons).where(c.id == held.step_id))
        values["retained_reasons"] = _merge_reasons(current, reasons)
    row = conn.execute(
        update(cleanup_steps)
        .where(c.id == held.step_id, c.lease_owner == held.owner, c.status == StepStatus.RUNNING.value)
        .values(**values)
        .returning(c.id, c.updated_at)
    ).first()
    if row is None:
        raise LeaseLost(f"step {held.step_id} is no longer leased to {held.owner}")
    if done:
        completed = _purge_completed(conn, held.purge_id)
        _close_attempts(
            conn, held.step_id, outcome=StepStatus.DONE.value, error=None, owner=held.owner, at=row.updated_at
        )
        _count_completion(conn, held.purge_id, completed, row.updated_at)


def remaining_of(conn: Connection, step_id: str) -> int | None:
    value = conn.scalar(select(cleanup_steps.c.remaining).where(cleanup_steps.c.id == step_id))
    return None if value is None else int(value)


def _merge_reasons(current: str | None, reasons: Mapping[str, list[str]]) -> str:
    """Reasons for retained content: a count and a few example ids each, never content."""
    merged: dict[str, Any] = json.loads(current) if current else {}
    for reason, ids in reasons.items():
        entry = merged.setdefault(reason, {"count": 0, "examples": []})
        entry["count"] += len(ids)
        entry["examples"] = (entry["examples"] + list(ids))[:MAX_REASON_EXAMPLES]
    return json.dumps(merged, sort_keys=True)


def finish(
    conn: Connection,
    held: Claim,
    *,
    outcome: StepStatus,
    error: str | None = None,
    retry_in: dt.timedelta = dt.timedelta(0),
) -> None:
    """End the attempt; LeaseLost if the lease was lost meanwhile (someone else owns the
    step), and then nothing is written."""
    c = cleanup_steps.c
    values: dict[str, Any] = {
        "status": outcome.value,
        "lease_owner": None,
        "lease_expires_at": None,
        "updated_at": clock(conn),
    }
    if outcome is StepStatus.RETRYING:
        values["next_attempt_at"] = clock(conn, plus=retry_in)
    if error is not None:
        values["last_error"] = error[:MAX_ERROR_LENGTH]
    row = conn.execute(
        update(cleanup_steps)
        .where(c.id == held.step_id, c.lease_owner == held.owner, c.status == StepStatus.RUNNING.value)
        .values(**values)
        .returning(c.id, c.updated_at)
    ).first()
    if row is None:
        raise LeaseLost(f"step {held.step_id} is no longer leased to {held.owner}")
    completed = _purge_completed(conn, held.purge_id) if outcome is StepStatus.DONE else None
    _close_attempts(
        conn, held.step_id, outcome=outcome.value, error=values.get("last_error"), owner=held.owner, at=row.updated_at
    )
    _count_completion(conn, held.purge_id, completed, row.updated_at)


def release(conn: Connection, owner: str) -> int:
    """Give up every lease of ``owner`` (a worker shutting down): the steps are due again. Its
    attempts stay open: a batch still running may finish (its real outcome), or another worker
    takes the step first and closes them ``lease_lost``."""
    now = database_now(conn)
    c = cleanup_steps.c
    rows = conn.execute(
        update(cleanup_steps)
        .where(c.lease_owner == owner, c.status == StepStatus.RUNNING.value)
        .values(lease_expires_at=now, updated_at=now)
        .returning(c.id)
    )
    return len(list(rows))


def give_back(conn: Connection, owner: str) -> int:
    """Give back every step ``owner`` holds (a worker that stops cleanly): each is waiting and
    due now, its lease cleared, with what its committed batches did, and its attempt given
    back (closed ``stopped``, no failure, and not counted: a stop is not the step's fault, so
    a step stopped by every deploy never ends incomplete for it). A batch of ``owner``'s still
    running is refused from then on (its UPDATE is guarded by the lease owner) and rolls
    back. Returns how many steps were given back."""
    now = database_now(conn)
    c = cleanup_steps.c
    rows = conn.execute(
        update(cleanup_steps)
        .where(c.lease_owner == owner, c.status == StepStatus.RUNNING.value)
        .values(
            status=case((c.attempts > 1, StepStatus.RETRYING.value), else_=StepStatus.PENDING.value),
            attempts=c.attempts - 1,
            next_attempt_at=now,
            lease_owner=None,
            lease_expires_at=None,
            updated_at=now,
        )
        .returning(c.id)
    ).all()
    for row in rows:
        _close_attempts(conn, row.id, outcome=STOPPED, error=None, owner=owner, at=now)
    return len(rows)


def unpark(conn: Connection, purge_id: str, kind: str) -> list[str]:
    """Make a parked step of the purge due now; returns its id if it was parked."""
    c = cleanup_steps.c
    rows = conn.execute(
        update(cleanup_steps)
        .where(c.purge_id == purge_id, c.kind == kind, c.next_attempt_at >= PARKED_UNTIL)
        .where(c.status.in_([StepStatus.PENDING.value, StepStatus.RETRYING.value]))
        .values(next_attempt_at=clock(conn), updated_at=clock(conn))
        .returning(c.id)
    )
    return [row.id for row in rows]


def due_steps(conn: Connection, *, limit: int) -> list[str]:
    """Ids of steps due now or whose lease expired, through the two status indexes: the cost
    follows the number of due steps, not the size of the ledger."""
    now = database_now(conn)
    c = cleanup_steps.c
    waiting = (
        select(c.id, c.next_attempt_at.label("since"))
        .where(lifecycle.waiting_due_clause(now))
        .order_by(c.next_attempt_at)
        .limit(limit)
    )
    expired = (
        select(c.id, c.lease_expires_at.label("since"))
        .where(lifecycle.lease_expired_clause(now))
        .order_by(c.lease_expires_at)
        .limit(limit)
    )
    rows = list(conn.execute(waiting)) + list(conn.execute(expired))
    return [row.id for row in sorted(rows, key=lambda row: row.since)][:limit]


def rearm_for_retry(conn: Connection, purge_id: str) -> list[str]:
    """An operator's retry: the purge's incomplete steps, and its retrying ones (an operator
    who fixed the cause need not wait for the next attempt), pending again, due now, with
    fresh attempts. A running step is left to its lease."""
    now = database_now(conn)
    c = cleanup_steps.c
    rows = conn.execute(
        update(cleanup_steps)
        .where(c.purge_id == purge_id, c.status.in_([StepStatus.INCOMPLETE.value, StepStatus.RETRYING.value]))
        .values(status=StepStatus.PENDING.value, attempts=0, next_attempt_at=now, updated_at=now)
        .returning(c.id)
    )
    return sorted(row.id for row in rows)
