"""A content purge's scope and the records of its dependency report (the preview): what
the API takes and returns. The report is built by the content kind
(``purgekeeper.commands.kinds.content.build_report``).

``scope_digest`` is the SHA-256 of the canonical JSON of exactly what the report shows,
except the marks on events that are already fenced: a purge that fences some of them in the
meantime does not make a confirmation stale, it only leaves less to fence.

A scope selects at most ``MAX_SCOPE_EVENTS`` events; a larger selection is refused with a
``ValidationError`` that asks for a narrower scope.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from purgekeeper.commands import validation
from purgekeeper.schema import content_queries
from purgekeeper.schema.errors import ConversationPurged, NotFound, ValidationError
from purgekeeper.schema.states import ConversationState, TombstoneKind

MAX_SCOPE_EVENTS = 10_000
DIGEST_VERSION = 2  # 2: the legal holds' marks

DISCLOSURES = (
    "Database backups, dumps and replicas made before the purge still hold the content; restore them "
    "only through `purgectl ledger merge`, which re-applies every purge before content is readable.",
    "PostgreSQL keeps removed rows in its data files until the space is reused (VACUUM FULL of the "
    "affected tables is the operator's option); SQLite overwrites removed rows (secure_delete), but its "
    "WAL may hold copies until the next checkpoint.",
    "Copies held by providers (the chat platform, model providers) are not recalled.",
    "Logs, exports and files outside purgekeeper's roots are not wiped.",
    "Attachment bytes shared with content outside the scope are kept, and the other references are named.",
)


@dataclass(frozen=True)
class EventScope:
    """What a content purge selects: ``event_ids``, or a ``conversation_id`` with an optional
    ``after <= occurred_at < before`` window or an ``author``. Time range and author are
    metadata of the resolved ids; the ledger records the ids."""

    event_ids: tuple[str, ...] | None = None
    conversation_id: str | None = None
    after: dt.datetime | None = None
    before: dt.datetime | None = None
    author: str | None = None

    def __post_init__(self) -> None:
        if self.event_ids is not None:
            ids = validation.check_id_list(self.event_ids, "event_ids", max_count=MAX_SCOPE_EVENTS)
            if not ids:
                raise ValidationError("event_ids must name at least one event")
            object.__setattr__(self, "event_ids", tuple(ids))
            if any(v is not None for v in (self.conversation_id, self.after, self.before, self.author)):
                raise ValidationError("a scope selects either event_ids or a conversation, not both")
            return
        if self.conversation_id is None:
            raise ValidationError("a scope needs event_ids or a conversation_id")
        validation.check_id(self.conversation_id, "conversation_id")
        object.__setattr__(self, "after", aware(self.after, "after"))
        object.__setattr__(self, "before", aware(self.before, "before"))
        if self.after and self.before and self.after >= self.before:
            raise ValidationError("after must be earlier than before")
        if self.author is not None:
            validation.check_text(self.author, "author", max_length=validation.MAX_AUTHOR_LENGTH)

    def canonical(self) -> dict[str, Any]:
        """The scope as the ledger records it (metadata beside the resolved ids)."""
        if self.event_ids is not None:
            return {"event_ids": sorted(self.event_ids)}
        return {
            "conversation_id": self.conversation_id,
            "after": self.after,
            "before": self.before,
            "author": self.author,
        }


def aware(value: Any, name: str) -> dt.datetime | None:
    if value is None:
        return None
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise ValidationError(f"{name} must be a timezone-aware datetime")
    return validation.to_utc(value, name)


# -- the report ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreviewEvent:
    id: str
    provider_event_id: str | None
    author: str
    occurred_at: dt.datetime
    placements: tuple[str, ...]
    already_fenced: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class PreviewAdmission:
    id: str
    event_id: str
    run_id: str


@dataclass(frozen=True)
class PreviewRun:
    id: str
    conversation_id: str
    bot_id: str
    status: str
    has_output: bool


@dataclass(frozen=True)
class PreviewDerivative:
    id: str
    conversation_id: str
    kind: str
    source_event_ids: tuple[str, ...]


@dataclass(frozen=True)
class Reference:
    attachment_id: str
    event_id: str
    binding: str


@dataclass(frozen=True)
class PreviewAttachment:
    id: str
    event_id: str
    blob_id: str
    binding: str
    name: str | None  # None once the purge's cleanup cleared it
    size: int
    other_references: tuple[Reference, ...] = ()


@dataclass(frozen=True)
class HeldEvent:
    """A selected event a legal hold covers (by its author, or a conversation it is placed
    in): a confirmation raises ``LegalHold`` while it does."""

    event_id: str
    hold_ids: tuple[str, ...]


@dataclass(frozen=True)
class PurgePreview:
    """The dependency report of a content purge. ``runs`` are the runs that admitted a
    selected event (their outputs are NULLed too); ``blocking_runs`` are the non-terminal
    runs that refuse the purge (in a conversation of a selected event, or admitting one);
    ``held`` marks the selected events legal holds cover (the digest covers the marks)."""

    scope: EventScope
    events: tuple[PreviewEvent, ...]
    admissions: tuple[PreviewAdmission, ...]
    runs: tuple[PreviewRun, ...]
    derivatives: tuple[PreviewDerivative, ...]
    exclusive_attachments: tuple[PreviewAttachment, ...]
    shared_attachments: tuple[PreviewAttachment, ...]
    blocking_runs: tuple[PreviewRun, ...]
    disclosures: tuple[str, ...]
    scope_digest: str
    held: tuple[HeldEvent, ...] = ()

    @property
    def event_ids(self) -> tuple[str, ...]:
        return tuple(e.id for e in self.events)

    @property
    def already_fenced(self) -> tuple[str, ...]:
        return tuple(e.id for e in self.events if e.already_fenced)

    @property
    def conversation_ids(self) -> tuple[str, ...]:
        return tuple(sorted({c for e in self.events for c in e.placements}))

    def id_summary(self) -> dict[str, list[str]]:
        """What the preview showed, as ids only: kept to name what changed when stale."""
        return {
            "events": list(self.event_ids),
            "placements": sorted(f"{e.id}@{c}" for e in self.events for c in e.placements),
            "admissions": [a.id for a in self.admissions],
            "runs with outputs": [r.id for r in self.runs],
            "derivatives": [d.id for d in self.derivatives],
            "exclusive attachments": [a.id for a in self.exclusive_attachments],
            "shared attachments": [a.id for a in self.shared_attachments],
            "blocking runs": [r.id for r in self.blocking_runs],
            "held events": [h.event_id for h in self.held],
        }


def require_purgeable_conversation(conn: Connection, conversation_id: str) -> None:
    """NotFound for an unknown conversation, ConversationPurged for a purged one."""
    if content_queries.is_tombstoned(conn, [TombstoneKind.CONVERSATION], conversation_id):
        raise ConversationPurged(f"conversation {conversation_id} is already purged")
    row = content_queries.conversation_row(conn, conversation_id)
    if row is None:
        raise NotFound(f"no conversation {conversation_id}")
    if row.state == ConversationState.PURGED:
        raise ConversationPurged(f"conversation {conversation_id} is already purged")
