"""The reads of purges a one-shot command needs, and nothing else: a purge's status and the
list of purges. ``purgectl status`` and ``list`` open only these (``purgekeeper.commands.reading``), not
the whole handle, and load one purge kind per kind they show (``purgekeeper.commands.kinds.kind_of``), so
they start sooner (``bench/cli_startup.py``). The handle's operator commands
(``purgekeeper.commands.operations.OperatorCommands``) are these reads and the rest.

``purgectl status`` takes the start of a purge id, as the console's search does
(:meth:`PurgeReads.operator_status`): the one purge whose id begins with it; several are a
``ValidationError`` that names them (exit 2: the input does not say which purge), none a
``NotFound`` (exit 1). It also says where to act on a failed unlink (the root and the path
below it, ``purgekeeper.commands.touched.FailurePlaces``), as the console's page of the purge does.
The list filters by a purge's derived status, or by ``retrying``: the purges with a step
waiting for its next attempt after a failed one (they are ``cleaning``, or ``incomplete`` when
another step gave up)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from purgekeeper.commands import kinds, touched, validation
from purgekeeper.commands.records import OperatorStatus, PurgePage, PurgeStatus, StepState
from purgekeeper.schema import heartbeats, ledger, lifecycle, purge_touched, purges, states
from purgekeeper.schema.errors import NotFound, ValidationError
from purgekeeper.schema.states import FINISHED_PURGE_STATUSES, PurgeKind, StepStatus, values

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from purgekeeper.schema.db import Database

STALL_AFTER = dt.timedelta(minutes=10)
MAX_PAGE = states.MAX_PAGE
PURGE_STATUSES = values(states.PurgeStatus)
FINISHED = FINISHED_PURGE_STATUSES
PURGE_KINDS = tuple(kind.value for kind in PurgeKind)
RETRYING = StepStatus.RETRYING.value
LIST_STATUSES = (*PURGE_STATUSES, RETRYING)  # a purge's status, or a step of it retrying
NAMED_IN_ERRORS = 20  # the purges an id's start could mean, named in its validation error


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
    ``stall_after`` (or at all while no worker is alive) stalls its purge. ``places`` finds
    where to act on a failed unlink (without it, ``operator_status`` names no place)."""

    def __init__(
        self, db: Database, stall_after: dt.timedelta = STALL_AFTER, *, places: touched.FailurePlaces | None = None
    ) -> None:
        self.db = db
        self.stall_after = stall_after
        self.places = places

    def status(self, purge_id: str) -> PurgeStatus:
        """A purge's derived status, with each step's attempts, progress and last error."""
        validation.check_id(purge_id, "purge_id")
        with self.db.read() as conn:
            entry = ledger.entry_by_purge_id(conn, purge_id)
            if entry is None:
                raise NotFound(f"no purge {purge_id}")
            return self._statuses(conn, [entry])[0]

    def operator_status(self, given: str) -> OperatorStatus:
        """The purge whose id is ``given``, or the one whose id begins with it, and where to act
        on the failures of its steps not done. NotFound when no purge id begins with it;
        ValidationError naming them (the first 20, newest first) when several do."""
        validation.check_id(given, "purge_id")
        with self.db.read() as conn:
            status = self._statuses(conn, [_one_entry(conn, given)])[0]
            failing = {s.kind: s.last_error for s in status.steps if s.status != StepStatus.DONE and s.last_error}
            found = self.places.found(conn, failing.values()) if self.places else {}
        where = {kind: tuple(touched.places_in(error, found)) for kind, error in failing.items()}
        return OperatorStatus(status, {kind: places for kind, places in where.items() if places})

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
        """Purges newest first: of one derived ``status`` (or ``retrying``: with a step waiting
        for its next attempt after a failed one), one ``kind``, concerning one conversation or
        channel, accepted in ``[since, until)``, as given. ``after`` is the ``next_after`` of the
        previous page. ``operator_rows=False`` leaves out the policies' and holds' rows
        (``OPERATOR_KINDS``), as a host is shown the list."""
        chosen = None if status is None else validation.check_choice(status, "status", LIST_STATUSES)
        where = purges.LedgerFilter(
            status=None if chosen == RETRYING else chosen,
            step_status=RETRYING if chosen == RETRYING else None,
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


def _one_entry(conn: Connection, given: str) -> ledger.LedgerEntry:
    """The ledger row of the purge ``given`` names: its whole id, or the start of one id only."""
    entry = ledger.entry_by_purge_id(conn, given)
    if entry is not None:
        return entry
    found = purge_touched.purge_ids_starting(conn, given, limit=NAMED_IN_ERRORS + 1)
    if not found:
        raise NotFound(f"no purge {given}")  # nor one whose id begins with it
    entries = [e for e in (ledger.entry_by_purge_id(conn, purge_id) for purge_id in found) if e is not None]
    if len(entries) > 1:
        raise ValidationError(_ambiguous(given, entries))
    return entries[0]


def _ambiguous(given: str, entries: Sequence[ledger.LedgerEntry]) -> str:
    """Which purges the start of an id could mean, newest first, so that the next try is one."""
    many = f"more than {NAMED_IN_ERRORS}" if len(entries) > NAMED_IN_ERRORS else str(len(entries))
    named = "; ".join(
        f"{e.purge_id} ({kinds.label_of(e)}, accepted {ledger.utc_text(e.accepted_at)})"
        for e in entries[:NAMED_IN_ERRORS]
    )
    return f"{many} purges begin with {given}: {named}; give more of the id"
