"""The reads of purges a one-shot command needs, and nothing else: a purge's status and the
list of purges. ``purgectl status`` and ``list`` open only these (``purgekeeper.commands.reading``), not
the whole handle, and load one purge kind per kind they show (``purgekeeper.commands.kinds.kind_of``), so
they start sooner (``bench/cli_startup.py``). The handle's operator commands
(``purgekeeper.commands.operations.OperatorCommands``) are these reads and the rest."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from purgekeeper.commands import kinds, validation
from purgekeeper.commands.records import PurgePage, PurgeStatus, StepState
from purgekeeper.schema import heartbeats, ledger, lifecycle, purges, states
from purgekeeper.schema.errors import NotFound, ValidationError
from purgekeeper.schema.states import FINISHED_PURGE_STATUSES, PurgeKind, values

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from purgekeeper.schema.db import Database

STALL_AFTER = dt.timedelta(minutes=10)
MAX_PAGE = states.MAX_PAGE
PURGE_STATUSES = values(states.PurgeStatus)
FINISHED = FINISHED_PURGE_STATUSES
PURGE_KINDS = tuple(kind.value for kind in PurgeKind)


def derive_status(steps: Sequence[StepState]) -> str:
    """The purge's status from its steps (``purgekeeper.schema.lifecycle``, the one rule)."""
    return lifecycle.derive_status(steps).value


def stall_bound(presence: heartbeats.Presence, stall_after: dt.timedelta) -> dt.timedelta:
    """How long a step may be due before its purge is stalled: ``stall_after``, or nothing
    when nobody is there to do the work (``heartbeats.Presence.nobody_to_work``)."""
    return dt.timedelta(0) if presence.nobody_to_work else stall_after


def check_limit(limit: int) -> None:
    """A page's size: an integer from 1 to ``MAX_PAGE``."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
        raise ValidationError(f"limit must be an integer from 1 to {MAX_PAGE}")


def completed_at(entry: ledger.LedgerEntry, steps: Sequence[StepState]) -> dt.datetime:
    """When a complete purge completed: its last step's finish, or its acceptance if it had
    no cleanup (a policy, a hold, a channel deletion)."""
    finished = [step.updated_at for step in steps if step.updated_at is not None]
    return max(finished, default=entry.accepted_at)


class PurgeReads:
    """A purge's status and the list of purges, read from ``db``; a step due for longer than
    ``stall_after`` (or at all while no worker is alive) stalls its purge."""

    def __init__(self, db: Database, stall_after: dt.timedelta = STALL_AFTER) -> None:
        self.db = db
        self.stall_after = stall_after

    def status(self, purge_id: str) -> PurgeStatus:
        """A purge's derived status, with each step's attempts, progress and last error."""
        validation.check_id(purge_id, "purge_id")
        with self.db.read() as conn:
            entry = ledger.entry_by_purge_id(conn, purge_id)
            if entry is None:
                raise NotFound(f"no purge {purge_id}")
            return self._statuses(conn, [entry])[0]

    def list_purges(
        self,
        status: str | None = None,
        *,
        kind: str | None = None,
        conversation_id: str | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        limit: int = 100,
        after: int | None = None,
        operator_rows: bool = True,
    ) -> PurgePage:
        """Purges newest first: of one derived ``status``, one ``kind``, concerning one
        conversation or channel, accepted in ``[since, until)``, as given. ``after`` is the
        ``next_after`` of the previous page. ``operator_rows=False`` leaves out the policies'
        and holds' rows (``OPERATOR_KINDS``), as a host is shown the list."""
        where = purges.LedgerFilter(
            status=None if status is None else validation.check_choice(status, "status", PURGE_STATUSES),
            kind=None if kind is None else validation.check_choice(kind, "kind", PURGE_KINDS),
            conversation_id=validation.check_optional_id(conversation_id, "conversation_id"),
            since=validation.check_optional_moment(since, "since"),
            until=validation.check_optional_moment(until, "until"),
            hidden_kinds=() if operator_rows else kinds.OPERATOR_KINDS,
        )
        check_limit(limit)
        if after is not None and (not isinstance(after, int) or isinstance(after, bool) or not 1 <= after < 2**63):
            raise ValidationError("after must be a positive ledger seq (the next_after of a page)")
        with self.db.read() as conn:
            rows = purges.list_ledger(conn, where=where, limit=limit + 1, before_seq=after)
            entries = [ledger.LedgerEntry.from_row(row) for row in rows[:limit]]
            statuses = self._statuses(conn, entries)
        next_after = entries[-1].seq if len(rows) > limit else None
        return PurgePage(purges=tuple(statuses), next_after=next_after)

    def _statuses(self, conn: Connection, entries: Sequence[ledger.LedgerEntry]) -> list[PurgeStatus]:
        by_purge: dict[str, list[Any]] = defaultdict(list)
        for row in purges.steps_of(conn, [e.purge_id for e in entries]):
            by_purge[row.purge_id].append(row)
        now = ledger.database_now(conn)
        bound = stall_bound(heartbeats.presence(conn, now), self.stall_after)
        return [self._status(entry, by_purge[entry.purge_id], now, bound) for entry in entries]

    def _status(
        self, entry: ledger.LedgerEntry, rows: Sequence[Any], now: dt.datetime, stall_after: dt.timedelta
    ) -> PurgeStatus:
        steps = tuple(StepState.from_row(row) for row in rows)
        status = derive_status(steps)
        return PurgeStatus(
            purge_id=entry.purge_id,
            kind=entry.kind,
            status=status,
            stalled=lifecycle.is_stalled(rows, now=now, stall_after=stall_after),
            ledger_seq=entry.seq,
            accepted_at=entry.accepted_at,
            actor=entry.actor,
            reason=entry.reason,
            steps=steps,
            label=kinds.label_of(entry),  # what a row is shown as is its kind's (purgekeeper.commands.kinds)
            policy_id=str(entry.selectors["policy_id"]) if kinds.names_policy(entry.kind) else None,
            completed_at=completed_at(entry, steps) if status == "complete" else None,
        )
