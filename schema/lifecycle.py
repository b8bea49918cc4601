"""Two rules of a purge's life, each written once, in Python and in SQL side by side, so
that the worker, the sweep, the overview, the stalled check, the console and the purge list
cannot disagree (``tests/unit/test_lifecycle.py`` holds the two forms to the same answers).

**When a step is due.** A waiting step (``pending`` or ``retrying``) is due from its
``next_attempt_at``; a ``running`` step whose lease expired (its worker died or froze) is due
from its ``lease_expires_at``; ``done`` and ``incomplete`` steps are never due (an
operator's retry re-arms an incomplete one). A step is *due now* when that moment is at or
before now, and *stalled* when it has been due for longer than the stall bound. Times are
the database's clock.

**A purge's status**, from its steps: ``complete`` when every step is done (or it has none:
a policy, a hold, a channel's deletion); else ``incomplete`` when any step is incomplete;
else ``cleaning`` when any step was attempted; else ``accepted``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, Protocol

from sqlalchemy import and_, exists, not_, or_

from purgekeeper.schema.states import PurgeStatus, StepStatus
from purgekeeper.schema.tables import cleanup_steps

WAITING = (StepStatus.PENDING.value, StepStatus.RETRYING.value)


class StepTimes(Protocol):
    """What the due rule reads of a step (a row of ``cleanup_steps`` or a record of it)."""

    @property
    def status(self) -> str: ...
    @property
    def next_attempt_at(self) -> dt.datetime | None: ...
    @property
    def lease_expires_at(self) -> dt.datetime | None: ...


class StepProgress(Protocol):
    """What the status rule reads of a step."""

    @property
    def status(self) -> str: ...
    @property
    def attempts(self) -> int: ...


# -- when a step is due --------------------------------------------------------------------


def due_since(step: StepTimes) -> dt.datetime | None:
    """The moment ``step`` is due from (None: it is never due in its status)."""
    if step.status in WAITING:
        return step.next_attempt_at
    if step.status == StepStatus.RUNNING.value:
        return step.lease_expires_at
    return None


def is_due(step: StepTimes, now: dt.datetime) -> bool:
    since = due_since(step)
    return since is not None and since <= now


def is_stalled(steps: Iterable[StepTimes], *, now: dt.datetime, stall_after: dt.timedelta) -> bool:
    """Any step due for longer than ``stall_after``."""
    return any((since := due_since(step)) is not None and now - since > stall_after for step in steps)


def waiting_due_clause(moment: Any, *, before: bool = False) -> Any:
    """SQL: the waiting steps due at ``moment`` (``before``: since strictly before it)."""
    c = cleanup_steps.c
    reached = c.next_attempt_at < moment if before else c.next_attempt_at <= moment
    return and_(c.status.in_(WAITING), reached)


def lease_expired_clause(moment: Any, *, before: bool = False) -> Any:
    """SQL: the running steps whose lease expired at ``moment`` (``before``: strictly before)."""
    c = cleanup_steps.c
    reached = c.lease_expires_at < moment if before else c.lease_expires_at <= moment
    return and_(c.status == StepStatus.RUNNING.value, reached)


def due_clause(moment: Any, *, before: bool = False) -> Any:
    """SQL: the steps due at ``moment`` (``before``: due since strictly before it, what "due
    for longer than" asks); each branch is served by a status index."""
    return or_(waiting_due_clause(moment, before=before), lease_expired_clause(moment, before=before))


def stalled_clause(now: Any, stall_after: dt.timedelta) -> Any:
    """SQL: the steps due for longer than ``stall_after`` at ``now``."""
    return due_clause(now - stall_after, before=True)


# -- a purge's status ----------------------------------------------------------------------


def derive_status(steps: Iterable[StepProgress]) -> PurgeStatus:
    found = list(steps)
    if all(step.status == StepStatus.DONE.value for step in found):
        return PurgeStatus.COMPLETE
    if any(step.status == StepStatus.INCOMPLETE.value for step in found):
        return PurgeStatus.INCOMPLETE
    if any(step.attempts > 0 for step in found):
        return PurgeStatus.CLEANING
    return PurgeStatus.ACCEPTED


def status_clause(status: str, purge_id: Any) -> Any:
    """SQL: the purges (``purge_id``: the column naming them in the outer query) whose
    derived status is ``status``."""
    step = cleanup_steps.c
    mine = step.purge_id == purge_id
    any_incomplete = exists().where(mine, step.status == StepStatus.INCOMPLETE.value)
    any_unfinished = exists().where(mine, step.status != StepStatus.DONE.value)
    any_attempted = exists().where(mine, step.attempts > 0)
    return {
        PurgeStatus.COMPLETE: not_(any_unfinished),
        PurgeStatus.INCOMPLETE: any_incomplete,
        PurgeStatus.CLEANING: and_(not_(any_incomplete), any_unfinished, any_attempted),
        PurgeStatus.ACCEPTED: and_(not_(any_incomplete), any_unfinished, not_(any_attempted)),
    }[PurgeStatus(status)]
