"""Retention policies: confirmed once by a person, then run by the leading scheduler for as
long as they stand (see ``purgekeeper.commands.kinds.retention`` and ``purgekeeper.commands.kinds.retention_run``).

A policy's turn, when it is due (``next_run_at``; a new or changed policy is due at once).
The due policies whose windows hold nothing to expire take their turns together, in one short
transaction (``purgekeeper.schema.retention_queries.quiet_turns``); each of the others:

1. **Plan**, in a short transaction under the policy's row lock: a run already planned and
   not accepted (its leader died) is taken as it is; otherwise the cutoff is now - max_age on
   the database clock, and if nothing in the window since the policy's last cutoff would
   expire (before the earliest event a non-terminal agent run admitted, which waits), the
   window moves on to there and the turn ends (no ledger row). Else the cutoff is written
   down (``pending_cutoff``).
2. **Accept** the run through the skeleton, with the idempotency key of its policy version
   and planned cutoff: a second leader, or the same one after a crash, gets the same
   acceptance. The acceptance lowers the run's cutoff below what agent runs admitted
   (``purgekeeper.commands.kinds.retention_run``), and the turn's outcome says what waits.
3. **Schedule** the next turn one ``retention_interval`` later.

**Who takes a turn, and why** (:class:`TurnTaker`): the scheduler, when a policy is due; or an
operator, now (``run_retention_policy`` with an actor and a reason: ``purgectl retention run
--actor --reason``). The policy records the last turn's (``last_run_by``,
``last_run_reason``), and the ledger row of a run an operator's turn accepts names the
operator and their reason (the scheduler's rows say what the run expires). A turn that agent
runs defer records since when they hold the policy back
(``purgekeeper.schema.retention_queries.record_turn``), which ``/metrics`` and the console show.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from purgekeeper.commands import kinds, validation
from purgekeeper.commands.acceptance import Acceptor
from purgekeeper.commands.kinds import retention as retention_kind
from purgekeeper.commands.kinds.retention_end import Removal
from purgekeeper.commands.kinds.retention_run import Run, idempotency_key
from purgekeeper.commands.kinds.skeleton import Causal
from purgekeeper.commands.purge_commands import check_digest
from purgekeeper.commands.records import (
    Acceptance,
    RetentionPolicy,
    RetentionPreview,
    RetentionRunOutcome,
    StandingPolicy,
)
from purgekeeper.schema import ledger, retention_queries
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import IdempotencyConflict, NotFound, PurgekeeperError
from purgekeeper.schema.ledger import utc_text
from purgekeeper.schema.states import PurgeKind
from purgekeeper.storage import failpoints

log = logging.getLogger(__name__)

DUE_LIMIT = 100  # policies taken per turn; the rest are due at the next sweep
SCHEDULER_ACTOR = "purgekeeper-scheduler"
SCHEDULER_ORIGIN = "scheduler"
DUE_TURN = "its turn was due"  # the scheduler's reason, on the policy
EARLY_TURN = "its turn, taken now (run_retention_policy)"
NOTHING_WAITS = retention_queries.Deferral()


@dataclass(frozen=True)
class TurnTaker:
    """Who takes a policy's turn, why, and through what (``origin``): recorded on the policy,
    and in the ledger row of a run the turn accepts, except that a ``scheduled`` turn's row
    keeps the scheduler's own reason, which says what the run expires."""

    actor: str
    reason: str
    origin: str
    scheduled: bool = False


SCHEDULER = TurnTaker(SCHEDULER_ACTOR, DUE_TURN, SCHEDULER_ORIGIN, scheduled=True)


@dataclass(frozen=True)
class _Plan:
    policy_purge_id: str
    cutoff: dt.datetime | None  # None: nothing to expire this turn
    deferral: retention_queries.Deferral = NOTHING_WAITS  # what agent runs keep, on a turn without a run


class RetentionCommands:
    """The retention commands of :class:`commands.Purgekeeper` (each documented there):
    policies confirmed through ``acceptance``, their turns planned and scheduled in ``db``,
    one ``retention_interval`` apart."""

    def __init__(self, db: Database, acceptance: Acceptor, retention_interval: dt.timedelta) -> None:
        self.db = db
        self.acceptance = acceptance
        self.retention_interval = retention_interval

    def preview_retention(self, *, max_age: dt.timedelta, conversation_id: str | None = None) -> RetentionPreview:
        """What a policy of ``max_age`` over the conversation (None: every conversation and
        channel) would expire if it ran now, what holds would keep, and the ``scope_digest``
        of its definition that ``set_retention`` names."""
        return self.acceptance.preview(kinds.RETENTION, _definition(max_age, conversation_id))

    def set_retention(
        self,
        policy_id: str,
        *,
        max_age: dt.timedelta,
        conversation_id: str | None = None,
        scope_digest: str,
        actor: str,
        reason: str,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        origin: str | None = None,
    ) -> Acceptance:
        """Set (or change) a retention policy, previewed with ``preview_retention``; the
        scheduler runs it at its next sweep, then every ``retention_interval``."""
        validation.check_id(policy_id, "policy_id")
        definition = _definition(max_age, conversation_id)
        check_digest(scope_digest, "preview_retention()")
        causal = Causal.check(actor, reason, idempotency_key, request_id, origin)
        request = {
            "policy_id": policy_id,
            "conversation_id": definition.conversation_id,
            "max_age_seconds": definition.max_age_seconds,
        }
        setting = retention_kind.Setting(policy_id, definition, scope_digest)
        return self.acceptance.accept(kinds.RETENTION, setting, request, causal)

    def remove_retention(
        self,
        policy_id: str,
        *,
        actor: str,
        reason: str,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        origin: str | None = None,
    ) -> Acceptance:
        """Remove a policy: it is not run again. Runs already accepted finish their cleanup."""
        validation.check_id(policy_id, "policy_id")
        causal = Causal.check(actor, reason, idempotency_key, request_id, origin)
        return self.acceptance.accept(kinds.RETENTION_END, Removal(policy_id), {"policy_id": policy_id}, causal)

    def list_retention(self) -> list[RetentionPolicy]:
        """The standing policies, by id."""
        return [standing.policy for standing in self.list_standing()]

    def list_standing(self) -> list[StandingPolicy]:
        """The standing policies, by id, each with who took its last turn and why, and what
        non-terminal agent runs hold back of it (``purgectl retention list``, the console)."""
        with self.db.read() as conn:
            return [StandingPolicy.from_row(row) for row in retention_queries.list_policies(conn)]

    def run_retention(self) -> list[RetentionRunOutcome]:
        """Take the turn of every policy that is due now (the leading scheduler does at every
        sweep, and ``resume()`` does): one run accepted per policy with anything to expire."""
        with self.db.read() as conn:
            due = retention_queries.due_policies(conn, limit=DUE_LIMIT)
        if not due:
            return []
        quiet = self.db.transact(
            functools.partial(
                retention_queries.quiet_turns,
                policy_ids=due,
                interval=self.retention_interval,
                by=SCHEDULER.actor,
                why=SCHEDULER.reason,
            )
        )
        return [RetentionRunOutcome(p, None, None) if p in quiet else self._turn(p, SCHEDULER) for p in due]

    def run_retention_policy(
        self,
        policy_id: str,
        *,
        actor: str | None = None,
        reason: str | None = None,
        origin: str | None = None,
    ) -> RetentionRunOutcome:
        """Take one standing policy's turn now, whenever its next one was due (an operator
        after a hold's release, rather than wait ``retention_interval``): exactly what the
        scheduler's turn does, so a run is accepted once per cutoff and a second call at once
        finds nothing new. NotFound for a policy that does not stand. Taken by ``actor`` for
        ``reason`` (``purgectl retention run --actor --reason``): recorded on the policy, and in
        the ledger row of the run the turn accepts; without both, the turn is recorded as the
        scheduler's. ValidationError for one without the other, or an empty or too long one."""
        if actor is None and reason is None:
            return self._turn_now(policy_id, TurnTaker(SCHEDULER_ACTOR, EARLY_TURN, SCHEDULER_ORIGIN, scheduled=True))
        causal = Causal.check(actor, reason, None, None, origin)
        return self._turn_now(policy_id, TurnTaker(causal.actor, causal.reason, causal.origin))

    def _turn_now(self, policy_id: str, taker: TurnTaker) -> RetentionRunOutcome:
        validation.check_id(policy_id, "policy_id")
        if not self.db.transact(functools.partial(retention_queries.due_now, policy_id=policy_id)):
            raise NotFound(f"no standing retention policy {policy_id}")
        return self._turn(policy_id, taker)

    def _turn(self, policy_id: str, taker: TurnTaker) -> RetentionRunOutcome:
        """Plan, accept, schedule (see the module docstring); a failure is logged and left for
        the next turn, which finds the planned run as it was."""
        cutoff: dt.datetime | None = None
        try:
            planning = functools.partial(_plan, policy_id=policy_id, interval=self.retention_interval, taker=taker)
            plan = self.db.transact(planning)
            if plan is None or plan.cutoff is None:
                return _quiet_outcome(policy_id, plan.deferral if plan else NOTHING_WAITS)
            cutoff = plan.cutoff
            failpoints.hit("retention.planned")
            purge_id = self._accept(policy_id, plan, taker)
            failpoints.hit("retention.accepted")
            outcome = self._accepted_outcome(policy_id, purge_id, cutoff)
            self.db.transact(
                functools.partial(
                    _schedule, policy_id=policy_id, interval=self.retention_interval, taker=taker, outcome=outcome
                )
            )
        except Exception as exc:  # one policy's failure never stops the others' turns
            detail = exc.detail if isinstance(exc, PurgekeeperError) else f"unexpected {type(exc).__name__}"
            log.warning("retention policy %s: its turn failed (%s); the next one tries again", policy_id, detail)
            return RetentionRunOutcome(policy_id, cutoff, None, error=detail)
        return outcome

    def _accept(self, policy_id: str, plan: _Plan, taker: TurnTaker) -> str:
        """The planned run, accepted under ``taker``'s name; when another turn (the scheduler's)
        accepted it first from the same plan, under its own name, that run."""
        assert plan.cutoff is not None
        causal = _run_causal(taker, policy_id, plan.policy_purge_id, plan.cutoff)
        request = {"policy_id": policy_id, "cutoff": utc_text(plan.cutoff)}
        try:
            return self.acceptance.accept(kinds.RETENTION_RUN, Run(policy_id, plan.cutoff), request, causal).purge_id
        except IdempotencyConflict:
            with self.db.read() as conn:
                entry = ledger.entry_by_idempotency_key(conn, str(causal.idempotency_key))
            if entry is None or entry.kind != PurgeKind.RETENTION_RUN or entry.selectors.get("policy_id") != policy_id:
                raise
            return entry.purge_id

    def _accepted_outcome(self, policy_id: str, purge_id: str, planned: dt.datetime) -> RetentionRunOutcome:
        """The run as its ledger row says (a replayed acceptance's too): its cutoff, and what
        it left to a later run."""
        with self.db.read() as conn:
            entry = ledger.entry_by_purge_id(conn, purge_id)
        selectors = entry.selectors if entry is not None else {}
        cutoff = ledger.from_utc_text(str(selectors["cutoff"])) if "cutoff" in selectors else planned
        run_ids = tuple(str(r) for r in selectors.get("deferred_run_ids") or ())
        deferred = int(selectors.get("deferred_events") or 0)
        log.info("retention policy %s: run %s accepted (cutoff %s)", policy_id, purge_id, utc_text(cutoff))
        if deferred:
            log.info("retention policy %s: %d events admitted by agent runs wait for a later run", policy_id, deferred)
        return RetentionRunOutcome(policy_id, cutoff, purge_id, deferred_events=deferred, deferred_run_ids=run_ids)


def _quiet_outcome(policy_id: str, deferral: retention_queries.Deferral) -> RetentionRunOutcome:
    if deferral.events:
        log.info("retention policy %s: %d events admitted by agent runs wait", policy_id, deferral.events)
    return RetentionRunOutcome(
        policy_id, None, None, deferred_events=deferral.events, deferred_run_ids=deferral.run_ids
    )


def _plan(conn: Connection, *, policy_id: str, interval: dt.timedelta, taker: TurnTaker) -> _Plan | None:
    """The run to accept, if any; None when the policy is not due (another leader took it)."""
    row = retention_queries.policy_row(conn, policy_id, lock=True)
    if row is None or row.ended_by is not None:
        return None
    if row.pending_cutoff is not None:
        return _Plan(row.purge_id, row.pending_cutoff)  # planned by a leader that did not finish
    now = ledger.database_now(conn)
    if row.next_run_at is None or row.next_run_at > now:
        return None
    cutoff = now - dt.timedelta(seconds=int(row.max_age_seconds))
    start = row.expired_through
    deferral = NOTHING_WAITS
    if start is None or cutoff > start:
        deferral = retention_queries.deferral(conn, conversation_id=row.conversation_id, cutoff=cutoff, start=start)
    lowered = deferral.cutoff(cutoff)  # what agent runs admitted waits, with what occurred after it
    if (start is not None and lowered <= start) or not retention_queries.anything_to_expire(
        conn, conversation_id=row.conversation_id, cutoff=lowered, start=start
    ):
        retention_queries.nothing_to_expire(
            conn, policy_id, max(lowered, start or lowered), ledger.clock(conn, plus=interval)
        )
        _record(conn, policy_id, taker, deferral.events, deferral.run_ids)
        return _Plan(row.purge_id, None, deferral)
    retention_queries.plan_run(conn, policy_id, cutoff)  # the acceptance lowers it again, on what it finds then
    return _Plan(row.purge_id, cutoff)


def _schedule(
    conn: Connection, *, policy_id: str, interval: dt.timedelta, taker: TurnTaker, outcome: RetentionRunOutcome
) -> None:
    retention_queries.schedule(conn, policy_id, ledger.clock(conn, plus=interval))
    _record(conn, policy_id, taker, outcome.deferred_events, outcome.deferred_run_ids)


def _record(conn: Connection, policy_id: str, taker: TurnTaker, events: int, run_ids: tuple[str, ...]) -> None:
    retention_queries.record_turn(
        conn, policy_id, by=taker.actor, why=taker.reason, deferred_events=events, deferred_run_ids=run_ids
    )


def _run_causal(taker: TurnTaker, policy_id: str, policy_purge_id: str, cutoff: dt.datetime) -> Causal:
    """The run's ledger row names who took the turn; the scheduler's says what the run expires."""
    expires = f"retention policy {policy_id}: expire what occurred before {utc_text(cutoff)}"
    return Causal(
        actor=taker.actor,
        reason=expires if taker.scheduled else taker.reason,
        idempotency_key=idempotency_key(policy_purge_id, cutoff),
        request_id=uuid.uuid4().hex,
        origin=taker.origin,
    )


def _definition(max_age: Any, conversation_id: Any) -> retention_kind.Definition:
    return retention_kind.Definition(
        validation.check_optional_id(conversation_id, "conversation_id"), retention_kind.check_max_age(max_age)
    )
