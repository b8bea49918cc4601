"""The HTTP API's request bodies, as the OpenAPI document declares them: each a ``_Body``,
with no field it does not declare, of the strict field types of ``fields``. ``upload_schema``
is the ``multipart/form-data`` body of ``upload_event``, whose text parts are an
``UploadedEvent``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from commands import validation
from commands.hold_commands import MAX_HOLD_SUBJECTS
from commands.http import uploads
from commands.http.field_types import (
    ID_PATTERN,
    MAX_PATH_LENGTH,
    MAX_SEQ,
    Actor,
    AttachmentName,
    Author,
    Base64Data,
    Id,
    Json,
    ProviderId,
    Reason,
    UtcTime,
)
from commands.kinds.retention import MAX_AGE_LIMIT
from commands.scope import MAX_SCOPE_EVENTS, EventScope


class _Body(BaseModel):
    """Every request body: no field it does not declare, and each value of the JSON type the
    document declares (strict: ``true`` is not 1, ``"2592000"`` not a number; times are
    ISO 8601 text, ``UtcTime``)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class NewConversation(_Body):
    conversation_id: Id
    kind: Literal["conversation", "channel"] = "conversation"
    bot_id: Id | None = None


class NewBot(_Body):
    bot_id: Id
    name: Annotated[str, Field(min_length=1, max_length=validation.MAX_BOT_NAME_LENGTH)]
    memory_path: Annotated[
        str | None,
        Field(min_length=1, max_length=MAX_PATH_LENGTH, description="a Git working tree inside a Memory root"),
    ] = None


class CasAttachment(_Body):
    kind: Literal["cas"]
    name: AttachmentName
    data_base64: Base64Data


class FileAttachment(_Body):
    kind: Literal["file"]
    name: AttachmentName
    data_base64: Base64Data


class ReuseAttachment(_Body):
    kind: Literal["reuse"]
    name: AttachmentName
    blob_id: Id
    binding: Literal["real_file", "legacy_cas"] = "real_file"


AttachmentIn = Annotated[CasAttachment | FileAttachment | ReuseAttachment, Field(discriminator="kind")]


class NewEvent(_Body):
    author: Author
    body: Annotated[str | None, Field(min_length=1, max_length=validation.MAX_BODY_BYTES)] = None
    provider_event_id: ProviderId | None = None
    event_id: Id | None = None
    occurred_at: UtcTime | None = None
    attachments: Annotated[list[AttachmentIn], Field(max_length=validation.MAX_ATTACHMENTS_PER_EVENT)] = []


class NewPlacement(_Body):
    event_id: Id


class NewRun(_Body):
    conversation_id: Id
    bot_id: Id
    run_id: Id | None = None


class RunFinish(_Body):
    status: Literal["succeeded", "failed", "cancelled", "abandoned"]
    output: Json = None


class NewAdmission(_Body):
    event_id: Id
    payload: Json


class NewDerivative(_Body):
    kind: Annotated[str, Field(min_length=1, max_length=validation.MAX_DERIVATIVE_KIND_LENGTH)]
    payload: Json
    source_event_ids: Annotated[list[Id], Field(max_length=validation.MAX_DERIVATIVE_SOURCES)] = []


class ScopeByEvents(_Body):
    event_ids: Annotated[list[Id], Field(min_length=1, max_length=MAX_SCOPE_EVENTS)]

    def scope(self) -> EventScope:
        return EventScope(event_ids=tuple(self.event_ids))


class ScopeByConversation(_Body):
    conversation_id: Id
    after: UtcTime | None = None
    before: UtcTime | None = None
    author: Author | None = None

    def scope(self) -> EventScope:
        return EventScope(
            conversation_id=self.conversation_id, after=self.after, before=self.before, author=self.author
        )


ScopeIn = ScopeByEvents | ScopeByConversation


class Accepting(_Body):
    """Who asks for an acceptance, and why; with an idempotency key, a retry is the same request."""

    actor: Actor
    reason: Reason
    idempotency_key: Id | None = None


class Confirmation(Accepting):
    scope: ScopeIn
    scope_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="from the preview")]


class ConversationPurge(Accepting):
    expected_version: Annotated[int | None, Field(ge=1, le=MAX_SEQ)] = None


class ChannelDeletion(Accepting):
    """A channel deletion asks for nothing more than who and why."""


class ReviewedRepository(_Body):
    path: Annotated[str, Field(min_length=1, max_length=MAX_PATH_LENGTH)]
    marker_id: Annotated[str, Field(min_length=1, max_length=validation.MAX_ID_LENGTH)]


class BotDeletion(Accepting):
    erase_memory: bool = False
    reviewed_repository: ReviewedRepository | None = None


class AuthorWindow(_Body):
    author: Author
    before: UtcTime | None = None


class AuthorErasure(AuthorWindow, Accepting):
    scope_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="from the preview")]
    close_author: bool = True


class RetryRequest(_Body):
    actor: Actor
    reason: Reason


MaxAgeSeconds = Annotated[
    int, Field(ge=1, le=int(MAX_AGE_LIMIT.total_seconds()), description="whole seconds, at most 100 years")
]
Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="from the preview")]


class RetentionDefinition(_Body):
    max_age_seconds: MaxAgeSeconds
    conversation_id: Annotated[Id | None, Field(description="null: every conversation and channel")] = None


class RetentionSetting(RetentionDefinition, Accepting):
    scope_digest: Digest


class RetentionRemoval(Accepting):
    """The policy is named by the path."""


class HoldPlacing(Accepting):
    conversation_ids: Annotated[list[Id], Field(max_length=MAX_HOLD_SUBJECTS)] = []
    authors: Annotated[list[Author], Field(max_length=MAX_HOLD_SUBJECTS)] = []


class HoldRelease(Accepting):
    """The hold is named by the path."""


class UploadedEvent(_Body):
    """The text parts of an ``upload_event`` request (its files are the attachments)."""

    author: Author
    body: Annotated[str | None, Field(min_length=1, max_length=validation.MAX_BODY_BYTES)] = None
    provider_event_id: ProviderId | None = None
    event_id: Id | None = None
    occurred_at: UtcTime | None = None


def upload_schema() -> dict[str, Any]:
    """The ``multipart/form-data`` body of ``upload_event``: the text fields as
    ``UploadedEvent`` has them, then the attachments by how they are bound."""
    assert uploads.FIELDS == tuple(UploadedEvent.model_fields)
    required = [name for name, field in UploadedEvent.model_fields.items() if field.is_required()]
    text: dict[str, Any] = {"type": "string"}
    ids = {**text, "minLength": 1, "maxLength": validation.MAX_ID_LENGTH, "pattern": ID_PATTERN}
    files = {"type": "array", "items": {"type": "string", "format": "binary"}}
    limit = validation.MAX_ATTACHMENTS_PER_EVENT
    properties = {
        "author": {**text, "minLength": 1, "maxLength": validation.MAX_AUTHOR_LENGTH},
        "body": {**text, "minLength": 1, "description": f"at most {validation.MAX_BODY_BYTES} bytes of UTF-8"},
        "provider_event_id": {**text, "minLength": 1, "maxLength": validation.MAX_PROVIDER_ID_LENGTH},
        "event_id": ids,
        "occurred_at": {**text, "format": "date-time", "description": "ISO 8601 with an offset"},
        "file": {**files, "maxItems": limit, "description": "attachments stored as real files; filename = name"},
        "cas": {**files, "maxItems": limit, "description": "attachments stored content-addressed; filename = name"},
    }
    schema = {"type": "object", "title": "EventUpload", "required": required, "properties": properties}
    return {"required": True, "content": {"multipart/form-data": {"schema": schema}}}


def uploaded_event(fields: dict[str, str]) -> UploadedEvent:
    """The upload's text parts as an event, checked as the JSON route checks its body."""
    try:
        return UploadedEvent.model_validate(fields)
    except PydanticValidationError as exc:
        raise RequestValidationError(exc.errors()) from None
