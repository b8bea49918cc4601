"""What the purge commands return: acceptances, statuses, steps and attempts, the operator's
views, and the previews of a bot's deletion and an author's erasure (``purgekeeper.commands.records``
re-exports them)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Row

if TYPE_CHECKING:
    from purgekeeper.commands.touched import FailurePlace

# -- purges -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Acceptance:
    """A purge durably accepted (``outcome="accepted"``), or one that was already in force
    (``"already_purged"``, naming the purge that covers it; for a policy or a hold: the row
    that already says the same). ``disclosures`` says what the acceptance does not do, in
    ids and counts (a hold names what earlier purges already removed in its scope)."""

    purge_id: str
    ledger_seq: int
    outcome: str
    disclosures: tuple[str, ...] = ()
    reserved_absent: bool = False  # a conversation purge of an id that did not exist: it is reserved


@dataclass(frozen=True)
class StepProgress:
    """A step's counters. ``held``: what legal holds kept out of a retention run."""

    removed: int
    retained_shared: int
    retained_reasons: dict[str, Any]
    remaining: int | None
    held: int = 0


@dataclass(frozen=True)
class StepState:
    id: str
    kind: str
    status: str
    attempts: int
    max_attempts: int
    last_error: str | None
    next_attempt_at: dt.datetime
    progress: StepProgress
    lease_owner: str | None = None  # the attempt that holds the step now, while it runs
    lease_expires_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None  # its last change (a claim, a batch, a finish)

    @classmethod
    def from_row(cls, row: Row[Any]) -> StepState:
        return cls(
            id=row.id,
            kind=row.kind,
            status=row.status,
            attempts=int(row.attempts),
            max_attempts=int(row.max_attempts),
            last_error=row.last_error,
            next_attempt_at=row.next_attempt_at,
            progress=StepProgress(
                removed=int(row.removed),
                retained_shared=int(row.retained_shared),
                retained_reasons=json.loads(row.retained_reasons) if row.retained_reasons else {},
                remaining=None if row.remaining is None else int(row.remaining),
                held=int(row.held),
            ),
            lease_owner=row.lease_owner,
            lease_expires_at=row.lease_expires_at,
            updated_at=row.updated_at,
        )


@dataclass(frozen=True)
class PurgeStatus:
    """A purge's status, derived from its steps: ``complete`` (no steps, or all done),
    ``incomplete`` (any step incomplete), ``cleaning`` (any step attempted), else ``accepted``.
    ``stalled`` flags a step that has been due for longer than the stall threshold.
    ``label`` says what the row is in a few words ("retention purge (policy p)", "legal
    hold h placed"; never a person's name); ``policy_id`` names the retention policy of a
    retention row."""

    purge_id: str
    kind: str
    status: str
    stalled: bool
    ledger_seq: int
    accepted_at: dt.datetime
    actor: str
    reason: str
    steps: tuple[StepState, ...]
    label: str = ""
    policy_id: str | None = None
    completed_at: dt.datetime | None = None  # complete: when its last step finished (or its acceptance)

    @property
    def duration(self) -> dt.timedelta | None:
        """From acceptance to complete."""
        return None if self.completed_at is None else self.completed_at - self.accepted_at


@dataclass(frozen=True)
class OperatorStatus:
    """A purge's status as ``purgectl status`` shows it, found by its id or the start of one:
    the ``status``, and where to act on what its steps not done failed at now (``where``: by
    step kind, the places of the files they could not unlink; see
    ``purgekeeper.commands.touched.FailurePlace``). A place is the same one the console's page
    of the purge names, once."""

    status: PurgeStatus
    where: Mapping[str, tuple[FailurePlace, ...]]


@dataclass(frozen=True)
class Attempt:
    """One attempt of a cleanup step: who ran it (``owner``, the lease owner), from when to
    when, and how it ended (``done``, ``retrying``, ``incomplete``, ``lease_lost``; None while
    it runs) with its error."""

    step_id: str
    step_kind: str
    attempt: int
    owner: str
    started_at: dt.datetime
    finished_at: dt.datetime | None
    outcome: str | None
    error: str | None

    @property
    def duration(self) -> dt.timedelta | None:
        return None if self.finished_at is None else self.finished_at - self.started_at

    @classmethod
    def from_row(cls, row: Row[Any]) -> Attempt:
        return cls(
            row.step_id, row.kind, int(row.attempt), row.owner, row.started_at, row.finished_at, row.outcome, row.error
        )


@dataclass(frozen=True)
class AuditEntry:
    """An operator's action on a purge (a retry): who, why, when, and the steps it re-armed."""

    action: str
    actor: str
    reason: str
    step_ids: tuple[str, ...]
    at: dt.datetime

    @classmethod
    def from_row(cls, row: Row[Any]) -> AuditEntry:
        return cls(row.action, row.actor, row.reason, tuple(json.loads(row.step_ids)), row.created_at)


@dataclass(frozen=True)
class PurgeDetail:
    """Everything the console's page of one purge shows: its status (steps, leases, times),
    every attempt of its steps, and the operators' actions on it."""

    status: PurgeStatus
    attempts: tuple[Attempt, ...]
    audit: tuple[AuditEntry, ...]


@dataclass(frozen=True)
class HeldStep:
    step_id: str
    purge_id: str
    kind: str
    attempt: int
    lease_expires_at: dt.datetime


@dataclass(frozen=True)
class WorkerLeases:
    """A worker attempt holding steps under live leases (its ``owner`` is host:thread:random)."""

    owner: str
    steps: tuple[HeldStep, ...]


@dataclass(frozen=True)
class PurgePage:
    """One page of ``list_purges``, newest first; pass ``next_after`` to get the next page."""

    purges: tuple[PurgeStatus, ...]
    next_after: int | None


@dataclass(frozen=True)
class RepositoryIdentity:
    """The Memory repository a person reviewed: its path and the marker id inside it."""

    path: str
    marker_id: str


@dataclass(frozen=True)
class MemoryPreview:
    path: str | None
    erasable: bool
    reason: str | None
    detail: str | None
    identity: RepositoryIdentity | None


@dataclass(frozen=True)
class ConversationPreview:
    """What purging a whole conversation (``removes_content``), or deleting a channel (which
    removes nothing), would touch, in counts. ``exists`` is false for an id never created
    (its purge reserves it) and for one already purged (``purged_by`` names that purge).
    ``holds``: the legal holds that refuse the purge. ``version`` is what a confirmation
    passes as ``expected_version``, so that a conversation that changed is refused."""

    conversation_id: str
    kind: str | None  # conversation | channel; None when it does not exist
    exists: bool
    unknown: bool  # no conversation has the id and no purge reserved it: most often a typo
    version: int | None
    purged_by: str | None
    removes_content: bool
    events: int
    events_placed_elsewhere: int
    attachments: int
    runs: int
    active_runs: tuple[str, ...]
    derivatives: int
    holds: tuple[str, ...]
    disclosures: tuple[str, ...]


@dataclass(frozen=True)
class BotDeletionPreview:
    """What deleting the bot does. ``held_by``: the legal holds on the bot's conversations,
    which refuse its Memory erasure (a deletion without erasure removes no content)."""

    bot_id: str
    name: str
    state: str
    blocking_runs: tuple[str, ...]
    memory: MemoryPreview
    disclosures: tuple[str, ...]
    held_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class ErasureTotals:
    """What an author erasure touches. ``events`` counts the events it would newly fence;
    ``already_fenced`` those an earlier purge already fenced."""

    events: int
    placements: int
    conversations: int
    admissions: int
    run_outputs: int
    derivatives: int
    exclusive_attachments: int
    shared_attachments: int
    already_fenced: int


@dataclass(frozen=True)
class ConversationCount:
    conversation_id: str
    events: int


@dataclass(frozen=True)
class SharedAttachment:
    """An attachment whose bytes the erasure keeps: ``other_references`` bindings of events
    outside the erasure still use them."""

    attachment_id: str
    event_id: str
    blob_id: str
    other_references: int


@dataclass(frozen=True)
class AuthorErasurePreview:
    """The dependency report of an author erasure ("Purge Everywhere"). ``conversations``
    lists at most a bounded number of the conversations touched, most events first (the
    totals count them all); ``shared_attachments`` likewise. ``held_by``: the legal holds
    that cover the author or a conversation of theirs (a confirmation raises ``LegalHold``
    while any does; the digest covers them)."""

    author: str
    before: dt.datetime | None
    totals: ErasureTotals
    conversations: tuple[ConversationCount, ...]
    shared_attachments: tuple[SharedAttachment, ...]
    blocking_runs: tuple[str, ...]
    disclosures: tuple[str, ...]
    scope_digest: str
    held_by: tuple[str, ...] = ()
