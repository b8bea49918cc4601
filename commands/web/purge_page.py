"""The console's page of one purge (``/status/purges/{id}``): what it reads and what its
template is given besides the frame.

- **Its status, steps, attempts and audit rows** (``Purgekeeper.purge_detail``).
- **What it touched** (``Purgekeeper.purge_touched``): conversations, counts of events and
  attachments, the erased author, the deleted bot, a hold's subjects; and where each failed
  unlink is (the root and the path below it).
- **Where to act**, once, above the steps: the places the last errors of the steps not done
  name (an attempt's error is history: it names no place). A step's last error has a row of
  its own under the step, the table's whole width, so that at 1,024 px nothing of it hides
  behind a scrollbar (``tests/browser/test_purge_page_width.py``).
- **Rounds**: an operator's retry gives a step fresh attempts, numbered from 1 again. Each
  retry that re-armed a step starts a new round of it, so an attempt is told as "round 2,
  attempt 1" and never seems to repeat.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.records import Attempt, AuditEntry, PurgeDetail, StepState
from purgekeeper.commands.touched import FailurePlace, PurgeTouched
from purgekeeper.schema.states import StepStatus

TEMPLATE = "purge.html"


@dataclass(frozen=True)
class NumberedAttempt:
    """An attempt and the round of its step it belongs to (1 before any retry)."""

    round: int
    attempt: Attempt


@dataclass(frozen=True)
class PurgeView:
    now: dt.datetime  # the database's clock, which every time on the page is relative to
    detail: PurgeDetail
    touched: PurgeTouched
    attempts: tuple[NumberedAttempt, ...]
    rounds: dict[str, int]  # each step's round now, by step id

    @property
    def where(self) -> tuple[tuple[StepState, FailurePlace], ...]:
        """Where to act: each step not done, and the places its last error names."""
        steps = [step for step in self.detail.status.steps if step.status != StepStatus.DONE]
        return tuple((step, place) for step in steps for place in self.touched.places_in(step.last_error))

    def context(self) -> dict[str, Any]:
        """What the template is given besides the frame."""
        return {
            "detail": self.detail,
            "purge": self.detail.status,
            "touched": self.touched,
            "attempts": self.attempts,
            "rounds": self.rounds,
            "where": self.where,
        }


def gather(pk: Purgekeeper, purge_id: str) -> PurgeView:
    """Bounded reads only; raises ``PurgekeeperError`` for an unknown or bad id, or when the
    database cannot answer."""
    detail = pk.purge_detail(purge_id)
    touched = pk.purge_touched(purge_id)
    now = pk.database_now()
    rounds = {step.id: step_round(step.id, detail.audit) for step in detail.status.steps}
    return PurgeView(now, detail, touched, numbered(detail.attempts), rounds)


def step_round(step_id: str, audit: Sequence[AuditEntry]) -> int:
    """1, plus one for every retry that re-armed the step."""
    return 1 + sum(step_id in entry.step_ids for entry in audit if entry.action == "retry")


def numbered(attempts: Sequence[Attempt]) -> tuple[NumberedAttempt, ...]:
    """Each attempt with its round: within a round a step's attempt numbers only rise, so an
    attempt numbered no higher than the step's one before it opens the next round (a retry
    reset the count). Attempts come oldest first."""
    last: dict[str, tuple[int, int]] = {}  # step id -> (round, attempt number)
    told = []
    for attempt in attempts:
        round_, before = last.get(attempt.step_id, (1, 0))
        if attempt.attempt <= before:
            round_ += 1
        last[attempt.step_id] = (round_, attempt.attempt)
        told.append(NumberedAttempt(round_, attempt))
    return tuple(told)
