"""What the commands return: frozen dataclasses with timezone-aware UTC timestamps."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row

from schema.ledger import LedgerReport as LedgerReport  # re-exported: the report of verify_ledger()
from schema.states import Binding, BotState, ConversationKind, ConversationState, RunStatus


@dataclass(frozen=True)
class Conversation:
    id: str
    kind: ConversationKind
    state: ConversationState
    version: int
    bot_id: str | None
    created_at: dt.datetime

    @classmethod
    def from_row(cls, row: Row[Any]) -> Conversation:
        return cls(
            id=row.id,
            kind=ConversationKind(row.kind),
            state=ConversationState(row.state),
            version=int(row.version),
            bot_id=row.bot_id,
            created_at=row.created_at,
        )


@dataclass(frozen=True)
class Bot:
    id: str
    name: str
    state: BotState
    memory_path: str | None
    marker_id: str | None
    created_at: dt.datetime

    @classmethod
    def from_row(cls, row: Row[Any]) -> Bot:
        return cls(
            id=row.id,
            name=row.name,
            state=BotState(row.state),
            memory_path=row.memory_path,
            marker_id=row.marker_id,
            created_at=row.created_at,
        )


@dataclass(frozen=True)
class Attachment:
    id: str
    blob_id: str
    binding: Binding
    name: str
    size: int

    @classmethod
    def from_row(cls, row: Row[Any]) -> Attachment:
        return cls(
            id=row.id,
            blob_id=row.blob_id,
            binding=Binding(row.binding),
            name=row.name,
            size=int(row.size),
        )


@dataclass(frozen=True, slots=True)  # no __dict__: half the objects a read of 10,000 events makes
class Event:
    id: str
    provider_event_id: str | None
    author: str
    occurred_at: dt.datetime
    body: str | None
    attachments: tuple[Attachment, ...] = ()

    @classmethod
    def from_row(cls, row: Row[Any], attachments: Sequence[Attachment] = ()) -> Event:
        return cls(
            id=row.id,
            provider_event_id=row.provider_event_id,
            author=row.author,
            occurred_at=row.occurred_at,
            body=row.body,
            attachments=tuple(attachments),
        )


_EVENT_FIELDS = ("id", "provider_event_id", "author", "occurred_at", "body", "attachments")
assert tuple(f.name for f in dataclasses.fields(Event)) == _EVENT_FIELDS  # make_event sets them in this order
_set_id, _set_provider_event_id, _set_author, _set_occurred_at, _set_body, _set_attachments = (
    getattr(Event, name).__set__ for name in _EVENT_FIELDS
)
_new = object.__new__


def make_event(
    id: str,
    provider_event_id: str | None,
    author: str,
    occurred_at: dt.datetime,
    body: str | None,
    attachments: tuple[Attachment, ...],
) -> Event:
    """``Event(...)`` of values a read already holds in their types, at half the cost: the
    same frozen object, its slots set through their own descriptors rather than one
    ``object.__setattr__`` call per field through the frozen ``__init__`` (a read of 10,000
    events makes 10,000)."""
    event = _new(Event)
    _set_id(event, id)
    _set_provider_event_id(event, provider_event_id)
    _set_author(event, author)
    _set_occurred_at(event, occurred_at)
    _set_body(event, body)
    _set_attachments(event, attachments)
    return event


@dataclass(frozen=True)
class Placement:
    event_id: str
    conversation_id: str


@dataclass(frozen=True)
class Run:
    id: str
    conversation_id: str
    bot_id: str
    status: RunStatus
    output: str | None
    created_at: dt.datetime
    finished_at: dt.datetime | None

    @classmethod
    def from_row(cls, row: Row[Any]) -> Run:
        return cls(
            id=row.id,
            conversation_id=row.conversation_id,
            bot_id=row.bot_id,
            status=RunStatus(row.status),
            output=_from_json(row.output),
            created_at=row.created_at,
            finished_at=row.finished_at,
        )


@dataclass(frozen=True)
class Admission:
    id: str
    event_id: str
    run_id: str
    payload: Any


@dataclass(frozen=True)
class Derivative:
    id: str
    conversation_id: str
    kind: str
    payload: Any
    source_event_ids: tuple[str, ...]


def _from_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


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


# -- retention and legal holds -----------------------------------------------------------------


@dataclass(frozen=True)
class RetentionPreview:
    """What a retention policy would do if it ran now (``cutoff`` = now - ``max_age``):
    ``events`` expire from ``placements`` in ``conversations`` (``by_conversation`` lists the
    most placements first, bounded; the totals count them all); ``kept_elsewhere`` of those
    events stay live in a conversation the policy leaves alone. ``held`` events past the
    cutoff are kept by the legal holds ``hold_ids``. A global policy leaves alone the
    conversations with a policy of their own (``governed_elsewhere``, bounded). ``replaces``:
    the standing policy of the same scope. ``scope_digest`` covers the policy's definition
    (its scope and ``max_age``), not what it finds: confirm with ``set_retention``."""

    conversation_id: str | None
    max_age: dt.timedelta
    cutoff: dt.datetime
    events: int
    placements: int
    conversations: int
    kept_elsewhere: int
    by_conversation: tuple[ConversationCount, ...]
    held: int
    hold_ids: tuple[str, ...]
    governed_elsewhere: tuple[str, ...]
    replaces: str | None
    disclosures: tuple[str, ...]
    scope_digest: str


@dataclass(frozen=True)
class RetentionPolicy:
    """A standing retention policy: its scope (``conversation_id``; None is every
    conversation and channel), ``max_age``, the ledger row that set this version
    (``purge_id``, ``set_at``, ``set_by``), and its runs: ``last_run`` (a run, or a check
    that found nothing to expire), ``last_cutoff`` and ``last_purge_id`` of the last run
    accepted, ``next_run`` when it is next due."""

    policy_id: str
    conversation_id: str | None
    max_age: dt.timedelta
    purge_id: str
    set_at: dt.datetime | None
    set_by: str | None
    last_run: dt.datetime | None
    last_cutoff: dt.datetime | None
    last_purge_id: str | None
    next_run: dt.datetime | None

    @classmethod
    def from_row(cls, row: Row[Any]) -> RetentionPolicy:
        return cls(
            policy_id=row.policy_id,
            conversation_id=row.conversation_id,
            max_age=dt.timedelta(seconds=int(row.max_age_seconds)),
            purge_id=row.purge_id,
            set_at=row.set_at,
            set_by=row.set_by,
            last_run=row.last_run_at,
            last_cutoff=row.last_cutoff,
            last_purge_id=row.last_purge_id,
            next_run=row.next_run_at,
        )


@dataclass(frozen=True)
class RetentionRunOutcome:
    """What one due policy's turn did: ``purge_id`` of the run accepted (or resumed), or None
    when nothing had expired (no ledger row); ``error`` when the turn failed (the next one
    tries again). ``cutoff`` is the run's, lowered below now - max_age when non-terminal agent
    runs admitted events it would expire: ``deferred_events`` of them wait for a later run,
    admitted by ``deferred_run_ids`` (the first 20), also when the turn wrote no row."""

    policy_id: str
    cutoff: dt.datetime | None
    purge_id: str | None
    error: str | None = None
    deferred_events: int = 0
    deferred_run_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class HoldCount:
    """A hold in force, in counts: how many conversations and authors it covers."""

    hold_id: str
    conversations: int
    authors: int
    placed_at: dt.datetime | None


@dataclass(frozen=True)
class Hold:
    """A legal hold: the conversations (everything placed in them) and authors (everything
    they wrote) it covers, who placed it and why (its ledger row, ``purge_id``), and who
    released it and when (the release's row, ``release_purge_id``; None while in force)."""

    hold_id: str
    conversation_ids: tuple[str, ...]
    authors: tuple[str, ...]
    purge_id: str
    placed_at: dt.datetime | None
    placed_by: str | None
    reason: str | None
    release_purge_id: str | None
    released_by: str | None
    released_at: dt.datetime | None
