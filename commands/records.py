"""What the commands return: frozen dataclasses with timezone-aware UTC timestamps."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row

# The purge, retention and hold records live beside, re-exported: one import for every record.
from purgekeeper.commands.purge_records import (
    Acceptance as Acceptance,
)
from purgekeeper.commands.purge_records import (
    Attempt as Attempt,
)
from purgekeeper.commands.purge_records import (
    AuditEntry as AuditEntry,
)
from purgekeeper.commands.purge_records import (
    AuthorErasurePreview as AuthorErasurePreview,
)
from purgekeeper.commands.purge_records import (
    BotDeletionPreview as BotDeletionPreview,
)
from purgekeeper.commands.purge_records import (
    ConversationCount as ConversationCount,
)
from purgekeeper.commands.purge_records import (
    ConversationPreview as ConversationPreview,
)
from purgekeeper.commands.purge_records import (
    ErasureTotals as ErasureTotals,
)
from purgekeeper.commands.purge_records import (
    HeldStep as HeldStep,
)
from purgekeeper.commands.purge_records import (
    MemoryPreview as MemoryPreview,
)
from purgekeeper.commands.purge_records import (
    OperatorStatus as OperatorStatus,
)
from purgekeeper.commands.purge_records import (
    PurgeDetail as PurgeDetail,
)
from purgekeeper.commands.purge_records import (
    PurgePage as PurgePage,
)
from purgekeeper.commands.purge_records import (
    PurgeStatus as PurgeStatus,
)
from purgekeeper.commands.purge_records import (
    RepositoryIdentity as RepositoryIdentity,
)
from purgekeeper.commands.purge_records import (
    SharedAttachment as SharedAttachment,
)
from purgekeeper.commands.purge_records import (
    StepProgress as StepProgress,
)
from purgekeeper.commands.purge_records import (
    StepState as StepState,
)
from purgekeeper.commands.purge_records import (
    WorkerLeases as WorkerLeases,
)
from purgekeeper.commands.retention_records import (
    Hold as Hold,
)
from purgekeeper.commands.retention_records import (
    HoldCount as HoldCount,
)
from purgekeeper.commands.retention_records import (
    PolicyDeferral as PolicyDeferral,
)
from purgekeeper.commands.retention_records import (
    RetentionPolicy as RetentionPolicy,
)
from purgekeeper.commands.retention_records import (
    RetentionPreview as RetentionPreview,
)
from purgekeeper.commands.retention_records import (
    RetentionRunOutcome as RetentionRunOutcome,
)
from purgekeeper.commands.retention_records import (
    StandingPolicy as StandingPolicy,
)
from purgekeeper.schema.ledger import LedgerReport as LedgerReport  # re-exported: the report of verify_ledger()
from purgekeeper.schema.states import Binding, BotState, ConversationKind, ConversationState, RunStatus


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
    def from_row(cls, row: Row[Any], *, output: str | None = None) -> Run:
        """The run of a row, its ``output`` the JSON text given (the row holds it sealed)."""
        return cls(
            id=row.id,
            conversation_id=row.conversation_id,
            bot_id=row.bot_id,
            status=RunStatus(row.status),
            output=_from_json(output),
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
