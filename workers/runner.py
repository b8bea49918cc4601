"""Run one cleanup step by id: claim, work, finish. Safe to run twice, or a hundred times:
a delivery that finds the step claimed, done or not yet due does nothing.

Each attempt logs two lines that name its purge, step and step kind (``extra=`` fields
``purge_id``, ``step_id``, ``step_kind``): ``step claimed`` (INFO) and ``step finished``
with its outcome and duration: INFO when done, WARNING when it will be retried or its lease
was lost, ERROR when the step ends incomplete (the purge is then incomplete until an
operator's retry), with the error. A delivery that finds the step's last attempt dead (its
lease ran out) ends the step incomplete, and logs that ERROR too.

A process that stops winds its attempts down (:func:`wind_down`): each ends at its next safe
point, between two batches, and gives its step back (``step finished: given back``, INFO); an
attempt still inside a batch when the grace is over is abandoned, and its step given back for
it. A delivery that comes while the process stops leaves its step alone.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import Connection
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential

from purgekeeper.schema import ledger, retry_policy, steps
from purgekeeper.schema.db import bound_lock_waits
from purgekeeper.schema.errors import InfrastructureError, LockTimeout, connection_lost
from purgekeeper.schema.states import StepKind, StepStatus
from purgekeeper.workers import grouped, identity
from purgekeeper.workers.cleanup import NotProvable, StepContext, Stopping, log_fields
from purgekeeper.workers.shutdown import STOP_GRACE, STOP_LOCK_WAIT

log = logging.getLogger(__name__)
T = TypeVar("T")

LEASE_LOST_ERROR = "the lease was lost; this attempt's writes were rejected"
DEFAULT_LEASE = retry_policy.LEASE
DEFAULT_BACKOFF_BASE = retry_policy.BACKOFF_BASE
DEFAULT_BACKOFF_CAP = retry_policy.BACKOFF_CAP


@dataclass(frozen=True)
class Policy:
    """The knobs of the step protocol (defaults and reasons: ``purgekeeper.schema.retry_policy``); tests
    shrink them (a 10 ms backoff, a 2 s lease)."""

    lease: dt.timedelta = DEFAULT_LEASE
    backoff_base: dt.timedelta = DEFAULT_BACKOFF_BASE
    backoff_cap: dt.timedelta = DEFAULT_BACKOFF_CAP


@dataclass(frozen=True)
class Outcome:
    status: str  # "skipped", "done", "retrying", "incomplete", "lease_lost" or "stopped"
    wake: tuple[str, ...] = ()


def worker_identity() -> str:
    """host:pid:tag:thread:random — unique per attempt, so a late attempt never passes for a
    new one; its process's tag (``purgekeeper.workers.identity``) says whose it is once that
    process is dead (``heartbeats.release_dead``)."""
    tag = identity.process_tag()
    return f"{socket.gethostname()}:{os.getpid()}:{tag}:{threading.get_native_id()}:{uuid.uuid4().hex[:8]}"


_active: dict[str, StepContext] = {}  # lease owner -> the context its attempt runs with
_active_changed = threading.Condition()


def active_owners(ctx: StepContext | None = None) -> list[str]:
    """The lease owners of the attempts running in this process now (with ``ctx`` only)."""
    with _active_changed:
        return _owners(ctx)


def _owners(ctx: StepContext | None) -> list[str]:
    return sorted(owner for owner, running in _active.items() if ctx is None or running is ctx)


def run_step(ctx: StepContext, step_id: str, *, policy: Policy) -> Outcome:
    owner = worker_identity()
    with _active_changed:
        _active[owner] = ctx
    try:
        if ctx.stopping.is_set():  # looked at once listed: wind_down waits for it, or it is not claimed
            log.debug("the process is stopping: step %s is left to another worker", step_id)
            return Outcome("skipped")
        return _run_step(ctx, step_id, owner, policy)
    finally:
        with _active_changed:
            del _active[owner]
            _active_changed.notify_all()


def wind_down(ctx: StepContext, *, grace: dt.timedelta = STOP_GRACE) -> int:
    """Stop the attempts running with ``ctx``: each ends at its next safe point and gives its
    step back; after ``grace``, the steps of those still inside a batch are given back for
    them (their batches are refused from then on, and roll back). No attempt with ``ctx``
    begins afterwards. Returns how many attempts were abandoned."""
    ctx.stopping.set()
    with _active_changed:
        _active_changed.wait_for(lambda: not _owners(ctx), timeout=grace.total_seconds())
        abandoned = _owners(ctx)
    if not abandoned:
        log.info("stopping: no attempt is running any more")
        return 0
    released = sum(_give_back(ctx, owner) for owner in abandoned)
    log.warning(
        "stopping: %d attempt(s) abandoned mid-batch after %gs, %d step(s) given back",
        len(abandoned),
        grace.total_seconds(),
        released,
    )
    return len(abandoned)


def _give_back(ctx: StepContext, owner: str) -> int:
    """Give back the steps of ``owner`` (waiting briefly for a row lock: a stop is bounded);
    a failure is logged, and those steps' leases run out instead."""

    def give_back(conn: Connection) -> int:
        bound_lock_waits(conn, STOP_LOCK_WAIT)
        return steps.give_back(conn, owner)

    try:
        return ctx.db.transact(give_back)
    except Exception as exc:  # the database is unreachable: the lease runs out by itself
        log.warning("could not give back the steps of %s (%s); their leases run out", owner, exc)
        return 0


def _run_step(ctx: StepContext, step_id: str, owner: str, policy: Policy) -> Outcome:
    # Durable: the attempt must be counted even if the step takes the database server down
    # with it, or a step that does so every time would never end incomplete.
    claim = functools.partial(_claim, ctx, step_id=step_id, owner=owner, lease=policy.lease)
    held, entry, more = ctx.db.transact(claim)
    if isinstance(held, steps.Exhausted):
        _log_exhausted(held)
        return Outcome("skipped")
    if held is None:
        log.debug("step not due, or taken by another worker: nothing to do", extra={"step_id": step_id})
        return Outcome("skipped")
    if more is not None and entry is not None:
        return _run_group(ctx, [grouped.Member(held, entry), *more], policy)
    started = time.monotonic()
    _log_claimed(held)
    outcome, error = _attempt(ctx, held, entry, policy)
    _log_finished(held, outcome, error, time.monotonic() - started)
    return outcome


def _run_group(ctx: StepContext, members: list[grouped.Member], policy: Policy) -> Outcome:
    """Claimed steps worked together (``purgekeeper.workers.grouped``), each ending as it
    would alone, recorded and logged as it ends: the first one's outcome, with what every
    member unparked."""
    started = time.monotonic()
    for member in members:
        _log_claimed(member.held)
    outcomes: dict[str, Outcome] = {}

    def ended(member: grouped.Member, how: grouped.Ended) -> None:
        if how.how == grouped.STOPPED:  # given back together, below
            outcomes[member.held.step_id] = Outcome(steps.STOPPED)
            return
        try:
            outcome, error = _ended(ctx, member.held, how, policy)
        except Exception as exc:  # its end could not be recorded (the database is gone): its lease runs out
            outcome, error = Outcome("lease_lost"), f"the attempt's end could not be recorded: {_describe(exc)}"
        outcomes[member.held.step_id] = outcome
        _log_finished(member.held, outcome, error, time.monotonic() - started)

    group = grouped.Group(list(members), on_end=ended)
    try:
        # patience counts from the group's last committed batch: its leases were renewed then
        since = lambda: time.monotonic() - group.progressed_at  # noqa: E731
        _with_transient_retries(lambda: grouped.work(ctx, group), patience=policy.lease, since=since)
    except Exception as exc:  # a fault of the whole batch: each member still in it ends its attempt with it
        group.fail_all(exc)
    stopped = [m for m in members if outcomes[m.held.step_id].status == steps.STOPPED]
    if stopped:
        _give_back(ctx, members[0].held.owner)
        for member in stopped:
            _log_finished(member.held, outcomes[member.held.step_id], None, time.monotonic() - started)
    first = outcomes[members[0].held.step_id]
    return Outcome(first.status, tuple(step for outcome in outcomes.values() for step in outcome.wake))


def _ended(ctx: StepContext, held: steps.Claim, ended: grouped.Ended, policy: Policy) -> tuple[Outcome, str | None]:
    """A group member's attempt as it ended: recorded on its own step."""
    if ended.how == grouped.DONE:  # its last batch set it done, in the same commit
        return Outcome(StepStatus.DONE.value, ended.wake), None
    if ended.how == grouped.LEASE_LOST:
        return Outcome(steps.LEASE_LOST), LEASE_LOST_ERROR
    if ended.how == grouped.STOPPED:
        return Outcome(steps.STOPPED), None
    assert ended.error is not None
    return _failed(ctx, held, ended.error, policy)


def _log_claimed(held: steps.Claim) -> None:
    log.info(
        "step claimed: attempt %d of %d",
        held.attempt,
        held.max_attempts,
        extra={**log_fields(held), "attempt": held.attempt, "owner": held.owner},
    )


def _attempt(
    ctx: StepContext, held: steps.Claim, entry: ledger.LedgerEntry | None, policy: Policy
) -> tuple[Outcome, str | None]:
    """Run the claimed step and record how it ended: its outcome, and its error if any."""
    try:
        ran = _with_transient_retries(lambda: grouped.run(ctx, held, entry), patience=policy.lease)
    except steps.LeaseLost:
        return Outcome(steps.LEASE_LOST), LEASE_LOST_ERROR
    except Stopping:
        _give_back(ctx, held.owner)
        return Outcome(steps.STOPPED), None
    except Exception as exc:  # every failure is recorded on the step, where the operator sees it
        return _failed(ctx, held, exc, policy)
    if ran.finished:  # its last batch set it done, in the same commit
        return Outcome(StepStatus.DONE.value, ran.wake), None
    return _finish(ctx, held, StepStatus.DONE, None, wake=ran.wake), None


def _failed(ctx: StepContext, held: steps.Claim, exc: BaseException, policy: Policy) -> tuple[Outcome, str | None]:
    """A failed attempt, recorded on its step: retrying with backoff, or incomplete at the
    maximum of attempts, or at once for a failure no retry can fix."""
    if isinstance(exc, NotProvable):
        error = f"memory erasure unavailable: {exc}"
        return _finish(ctx, held, StepStatus.INCOMPLETE, error), error
    error = _describe(exc)
    if held.attempt >= held.max_attempts:
        return _finish(ctx, held, StepStatus.INCOMPLETE, error), error
    delay = retry_policy.backoff(
        held.attempt, base=policy.backoff_base.total_seconds(), cap=policy.backoff_cap.total_seconds()
    )
    return _finish(ctx, held, StepStatus.RETRYING, error, retry_in=dt.timedelta(seconds=delay)), error


def _log_finished(held: steps.Claim, outcome: Outcome, error: str | None, seconds: float) -> None:
    """``step finished``: INFO when done, WARNING when it is retried or its lease was lost,
    ERROR when the step (and so its purge) ends incomplete."""
    fields = {**log_fields(held), "attempt": held.attempt, "outcome": outcome.status, "duration_s": round(seconds, 6)}
    if error is not None:
        fields["error"] = error
    if outcome.status == StepStatus.INCOMPLETE.value:
        log.error(
            "purge %s is incomplete: its %s step failed on attempt %d of %d (%s); an operator's retry re-arms it",
            held.purge_id,
            held.kind,
            held.attempt,
            held.max_attempts,
            error,
            extra=fields,
        )
        return
    if outcome.status == StepStatus.DONE.value:
        log.info("step finished: done after %.3fs (attempt %d)", seconds, held.attempt, extra=fields)
        return
    if outcome.status == steps.STOPPED:
        log.info("step finished: given back after %.3fs, its worker is stopping", seconds, extra=fields)
        return
    then = "lease lost" if outcome.status == "lease_lost" else "retrying"
    log.warning(
        "step finished: attempt %d failed after %.3fs, %s: %s", held.attempt, seconds, then, error, extra=fields
    )


def _log_exhausted(ended: steps.Exhausted) -> None:
    """The ERROR of a step ended incomplete by the claim that found its last lease run out."""
    log.error(
        "purge %s is incomplete: its %s step's worker stopped during its last attempt (%d), whose lease "
        "ran out; an operator's retry re-arms it",
        ended.purge_id,
        ended.kind,
        ended.attempts,
        extra={
            "purge_id": ended.purge_id,
            "step_id": ended.step_id,
            "step_kind": ended.kind,
            "attempt": ended.attempts,
            "outcome": StepStatus.INCOMPLETE.value,
            "error": steps.LEASE_EXPIRED,
        },
    )


def _claim(
    ctx: StepContext, conn: Connection, *, step_id: str, owner: str, lease: dt.timedelta
) -> tuple[steps.Claim | steps.Exhausted | None, ledger.LedgerEntry | None, list[grouped.Member] | None]:
    """The claim, and the step's ledger row read in the same transaction; for a step that is
    worked in groups, the others of its group claimed with it (None for a step alone)."""
    held = steps.claim_or_end(conn, step_id, owner=owner, lease=lease)
    if not isinstance(held, steps.Claim):
        return held, None, None
    entry = ledger.entry_by_purge_id(conn, held.purge_id)
    if entry is None or not grouped.groupable(ctx, held.kind, entry):
        return held, entry, None
    bodies = held.kind == StepKind.BODIES.value
    more = steps.claim_more(
        conn,
        kind=held.kind,
        owner=owner,
        lease=lease,
        limit=ctx.group_steps - 1,
        besides=held.step_id,
        purge_kinds=grouped.batched_kinds(ctx) if bodies else None,
    )
    entries = ledger.entries_by_purge_ids(conn, [claim.purge_id for claim in more])
    return held, entry, [grouped.Member(claim, entries[claim.purge_id]) for claim in more]


def _with_transient_retries(
    work: Callable[[], T], *, patience: dt.timedelta, since: Callable[[], float] | None = None
) -> T:
    """tenacity, for transient faults (``purgekeeper.schema.retry_policy``, faults 2 and 3). A lost
    database connection is retried for as long as the attempt's lease (``patience``), counted
    from the start or from ``since()`` seconds ago (a group's last committed batch, which
    renewed its leases): a step whose database comes back within its lease goes on in the
    same attempt. Another transient fault is retried a few times. A lock that stayed held
    past the step's whole lock budget is not transient."""
    for attempt in Retrying(
        retry=retry_if_exception(_transient),
        stop=functools.partial(_give_up, patience=patience.total_seconds(), since=since),
        wait=wait_exponential(multiplier=0.05, max=retry_policy.TRANSIENT_WAIT_MAX_S),
        reraise=True,
    ):
        with attempt:
            return work()
    raise AssertionError("unreachable")  # pragma: no cover


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, InfrastructureError) and not isinstance(exc, LockTimeout)


def _give_up(state: RetryCallState, *, patience: float, since: Callable[[], float] | None) -> bool:
    waited = since() if since is not None else (state.seconds_since_start or 0.0)
    if waited >= patience:
        return True
    failed = state.outcome.exception() if state.outcome is not None else None
    return (
        not (failed is not None and connection_lost(failed)) and state.attempt_number >= retry_policy.TRANSIENT_ATTEMPTS
    )


def _finish(
    ctx: StepContext,
    held: steps.Claim,
    status: StepStatus,
    error: str | None,
    *,
    retry_in: dt.timedelta = dt.timedelta(0),
    wake: tuple[str, ...] = (),
) -> Outcome:
    finish = functools.partial(steps.finish, held=held, outcome=status, error=error, retry_in=retry_in)
    try:  # durable: a status once shown (done, incomplete) never reverts after a server crash
        _with_transient_retries(lambda: ctx.db.transact(finish), patience=ctx.lease)
    except steps.LeaseLost:
        return Outcome("lease_lost")
    return Outcome(status.value, wake)


def _describe(exc: BaseException) -> str:
    """The error as the step's ``last_error``. A file system error names no path: a real
    file's path holds its attachment name, which may be purged content."""
    if isinstance(exc, OSError) and (exc.filename is not None or exc.filename2 is not None):
        return f"{type(exc).__name__}: [Errno {exc.errno}] {exc.strerror} (path withheld)"
    return f"{type(exc).__name__}: {exc}"
