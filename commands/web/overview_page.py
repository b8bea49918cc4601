"""The console's overview (``/status``): its query (filters and the cursor), what it reads,
and what its table shows of each purge: one row with its status, kind, age, steps done of
total and the last error of a step that is not done. Its retention section lists each
standing policy with its last turn (who took it, and why) and what non-terminal agent runs
hold back of it, for how long: past ``LATE_DEFERRAL`` (a day, when the shipped alert fires)
it is marked.

The route, the sign-in and the frame live with the other routes (``commands/web/status.py``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from purgekeeper.commands import status_overview
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.records import HoldCount, PurgeStatus, StandingPolicy, StepState
from purgekeeper.schema.errors import NotFound, ValidationError
from purgekeeper.schema.states import StepStatus
from purgekeeper.schema.steps import PARKED_UNTIL

TEMPLATE = "overview.html"
LISTED = 100  # policies and holds listed; the summary counts them all
ATTENTION = ("incomplete", "stalled")
MAX_CURSOR_DIGITS = 19
FAILING = (StepStatus.INCOMPLETE, StepStatus.RETRYING)  # whose last error is the purge's present trouble
LATE_DEFERRAL = dt.timedelta(days=1)  # PurgekeeperRetentionDeferred's threshold (deploy/prometheus/alerts.yml)


@dataclass(frozen=True)
class Filters:
    """The overview's query: ``status``, ``kind``, the ``after`` cursor, ``refresh=off``."""

    status: str | None = None
    kind: str | None = None
    after: int | None = None
    paused: bool = False

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> Filters:
        """Empty fields mean any; a bad status or kind is ``list_purges``' to refuse."""
        after = query.get("after") or None
        if after is not None and not (after.isascii() and after.isdigit() and len(after) <= MAX_CURSOR_DIGITS):
            raise ValidationError("after must be a positive ledger seq (the link to older purges)")
        return cls(
            status=query.get("status") or None,
            kind=query.get("kind") or None,
            after=None if after is None else int(after),
            paused=query.get("refresh") == "off",
        )

    @property
    def narrowed(self) -> bool:
        return self.status is not None or self.kind is not None or self.after is not None

    def href(self, base: str, **changes: Any) -> str:
        """The overview with these filters, changed as given."""
        changed = dataclasses.replace(self, **changes)
        query = {
            "status": changed.status,
            "kind": changed.kind,
            "after": changed.after,
            "refresh": "off" if changed.paused else None,
        }
        return with_query(base, query)


def with_query(path: str, query: Mapping[str, object]) -> str:
    given = {name: value for name, value in query.items() if value is not None}
    return path + ("?" + urlencode(given) if given else "")


@dataclass(frozen=True)
class Overview:
    snapshot: status_overview.Snapshot
    attention: tuple[PurgeStatus, ...] | None  # incomplete and stalled, newest first; None when filtered
    purges: tuple[PurgeStatus, ...]  # this page of the list, without those above
    next_after: int | None  # the cursor of the next, older page
    policies: tuple[StandingPolicy, ...]  # the standing retention policies, the first LISTED of them
    holds: tuple[HoldCount, ...]  # the legal holds in force, the first LISTED of them, in counts


def marks(purge: PurgeStatus) -> list[str]:
    """Why a purge needs attention: "incomplete", "stalled", both or neither."""
    return [mark for mark, on in zip(ATTENTION, (purge.status == "incomplete", purge.stalled), strict=True) if on]


def steps_done(purge: PurgeStatus) -> str:
    """ "1/2": steps done of all its steps; "" for a row that cleans nothing (a policy, a hold)."""
    done = sum(step.status == StepStatus.DONE for step in purge.steps)
    return f"{done}/{len(purge.steps)}" if purge.steps else ""


def steps_told(purge: PurgeStatus) -> str:
    """Each step and its status, for the steps cell's title: "bodies done, attachments retrying"."""
    return ", ".join(f"{step.kind} {step.status}" for step in purge.steps)


def failing_step(purge: PurgeStatus) -> StepState | None:
    """The step whose error is the purge's trouble now: an incomplete one, else a retrying one
    (a done step's old error is history, shown on the purge's page)."""
    for status in FAILING:
        for step in purge.steps:
            if step.status == status and step.last_error:
                return step
    return None


def waiting_step(purge: PurgeStatus) -> StepState | None:
    """A stalled purge's step that has waited longest for a worker (not parked, not running)."""
    waiting = [
        step
        for step in purge.steps
        if step.status in (StepStatus.PENDING, StepStatus.RETRYING) and step.next_attempt_at < PARKED_UNTIL
    ]
    return min(waiting, key=lambda step: step.next_attempt_at, default=None) if purge.stalled else None


def gather(pk: Purgekeeper, check: status_overview.LedgerCheck, filters: Filters, *, page_size: int) -> Overview:
    """Bounded reads only: the aggregates, one page of the list, and at most ``page_size``
    purges needing attention."""
    snapshot = status_overview.snapshot(pk, check)
    page = pk.list_purges(filters.status, kind=filters.kind, limit=page_size, after=filters.after)
    attention = None if filters.narrowed else needing_attention(pk, page.purges, limit=page_size)
    shown = {purge.purge_id for purge in attention or ()}
    return Overview(
        snapshot=snapshot,
        attention=attention,
        purges=tuple(purge for purge in page.purges if purge.purge_id not in shown),
        next_after=page.next_after,
        policies=tuple(pk.retention.list_standing()[:LISTED]),
        holds=tuple(pk.count_holds(limit=LISTED)),
    )


def needing_attention(pk: Purgekeeper, newest: tuple[PurgeStatus, ...], *, limit: int) -> tuple[PurgeStatus, ...]:
    incomplete = pk.list_purges("incomplete", limit=limit).purges
    stalled_ids = pk.stalled_purge_ids(limit=limit)
    known = {p.purge_id: p for p in (*newest, *incomplete)}
    stalled = [known.get(purge_id) or status_or_none(pk, purge_id) for purge_id in stalled_ids]
    flagged = {p.purge_id: p for p in (*incomplete, *stalled, *newest) if p is not None and marks(p)}
    return tuple(sorted(flagged.values(), key=lambda p: p.ledger_seq, reverse=True))


def status_or_none(pk: Purgekeeper, purge_id: str) -> PurgeStatus | None:
    """A step whose ledger row is missing (a damaged database) is the ledger check's to report."""
    try:
        return pk.status(purge_id)
    except NotFound:
        return None


# What the templates' purge rows and step macros call on.
STEP_HELPERS: dict[str, Any] = {
    "marks": marks,
    "steps_done": steps_done,
    "steps_told": steps_told,
    "failing_step": failing_step,
    "waiting_step": waiting_step,
    "parked_until": PARKED_UNTIL,
    "finished_steps": (StepStatus.DONE, StepStatus.INCOMPLETE),
}
