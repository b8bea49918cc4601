"""What the commands return: frozen dataclasses with timezone-aware UTC timestamps."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row

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


@dataclass(frozen=True)
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
