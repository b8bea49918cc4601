"""The HTTP API's request bodies, as the OpenAPI document declares them: each a ``_Body``,
with no field it does not declare, of the strict field types of ``fields``. ``upload_schema``
is the ``multipart/form-data`` body of ``upload_event``, whose text parts are an
``UploadedEventIn``.

Each body's name ends in ``In`` (``ConfirmationIn``), as each response model's ends in ``Out``
(``models``), so none is the name of a record or a kind; ``Accepting``, the who and why of the
bodies that ask for an acceptance, is never a body on its own."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Tag
from pydantic import ValidationError as PydanticValidationError

from commands import validation
from commands.hold_commands import MAX_HOLD_SUBJECTS
from commands.http import uploads
from commands.http.field_types import (
    ID_PATTERN,
    MAX_PATH_LENGTH,
    MAX_SEQ,
    NUL,
    PROVIDER_ID_PATTERN,
    TEXT_PATTERN,
    Actor,
    AttachmentName,
    Author,
    Base64Data,
    EventBody,
    Id,
    Output,
    Payload,
    ProviderId,
    Reason,
    UtcTime,
    text,
    whole,
)
from commands.kinds.retention import MAX_AGE_LIMIT
from commands.scope import MAX_SCOPE_EVENTS, EventScope


class _Body(BaseModel):
    """Every request body: no field it does not declare, and each value of the JSON type the
    document declares (strict: ``true`` is not 1, ``"2592000"`` not a number; times are
    ISO 8601 text, ``UtcTime``)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class NewConversationIn(_Body):
    conversation_id: Id
    kind: Literal["conversation", "channel"] = "conversation"
    bot_id: Id | None = None


class NewBotIn(_Body):
    bot_id: Id
    name: Annotated[str, text(validation.MAX_BOT_NAME_LENGTH)]
    memory_path: Annotated[
        str | None,
        Field(
            min_length=2,
            max_length=MAX_PATH_LENGTH,
            pattern=r"^/[^\x00]*$",
            description="an absolute path: a Git working tree inside one of the server's Memory roots",
        ),
    ] = None


class CasAttachmentIn(_Body):
    kind: Literal["cas"]
    name: AttachmentName
    data_base64: Base64Data


class FileAttachmentIn(_Body):
    kind: Literal["file"]
    name: AttachmentName
    data_base64: Base64Data


class ReuseAttachmentIn(_Body):
    kind: Literal["reuse"]
    name: AttachmentName
    blob_id: Id
    binding: Literal["real_file", "legacy_cas"] = "real_file"


AttachmentIn = Annotated[CasAttachmentIn | FileAttachmentIn | ReuseAttachmentIn, Field(discriminator="kind")]


class NewEventIn(_Body):
    author: Author
    body: EventBody | None = None
    provider_event_id: ProviderId | None = None
    event_id: Id | None = None
    occurred_at: UtcTime | None = None
    attachments: Annotated[list[AttachmentIn], Field(max_length=validation.MAX_ATTACHMENTS_PER_EVENT)] = []


class NewPlacementIn(_Body):
    event_id: Id


class NewRunIn(_Body):
    conversation_id: Id
    bot_id: Id
    run_id: Id | None = None


class RunFinishIn(_Body):
    status: Literal["succeeded", "failed", "cancelled", "abandoned"]
    output: Output = None


class NewAdmissionIn(_Body):
    event_id: Id
    payload: Payload


class NewDerivativeIn(_Body):
    kind: Annotated[str, text(validation.MAX_DERIVATIVE_KIND_LENGTH)]
    payload: Payload
    source_event_ids: Annotated[list[Id], Field(max_length=validation.MAX_DERIVATIVE_SOURCES)] = []


class ScopeByEventsIn(_Body):
    event_ids: Annotated[list[Id], Field(min_length=1, max_length=MAX_SCOPE_EVENTS)]

    def scope(self) -> EventScope:
        return EventScope(event_ids=tuple(self.event_ids))


class ScopeByConversationIn(_Body):
    conversation_id: Id
    after: UtcTime | None = None
    before: UtcTime | None = None
    author: Author | None = None

    def scope(self) -> EventScope:
        return EventScope(
            conversation_id=self.conversation_id, after=self.after, before=self.before, author=self.author
        )


# The tags keep the names a 400's detail gives each case (``scope.ScopeByEvents.event_ids: ...``).
ScopeIn = (
    Annotated[ScopeByEventsIn, Tag("ScopeByEvents")] | Annotated[ScopeByConversationIn, Tag("ScopeByConversation")]
)


class Accepting(_Body):
    """Who asks for an acceptance, and why; with an idempotency key, a retry is the same request."""

    actor: Actor
    reason: Reason
    idempotency_key: Id | None = None


class ConfirmationIn(Accepting):
    scope: ScopeIn
    scope_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="from the preview")]


class ConversationPurgeIn(Accepting):
    expected_version: Annotated[int, Field(ge=1, le=MAX_SEQ), BeforeValidator(whole)] | None = None


class ChannelDeletionIn(Accepting):
    """A channel deletion asks for nothing more than who and why."""


class ReviewedRepositoryIn(_Body):
    path: Annotated[str, Field(min_length=1, max_length=MAX_PATH_LENGTH)]
    marker_id: Annotated[str, Field(min_length=1, max_length=validation.MAX_ID_LENGTH)]


class BotDeletionIn(Accepting):
    erase_memory: bool = False
    reviewed_repository: ReviewedRepositoryIn | None = None


class AuthorWindowIn(_Body):
    author: Author
    before: UtcTime | None = None


class AuthorErasureIn(AuthorWindowIn, Accepting):
    scope_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="from the preview")]
    close_author: bool = True


class RetryRequestIn(_Body):
    actor: Actor
    reason: Reason


MaxAgeSeconds = Annotated[
    int,
    Field(ge=1, le=int(MAX_AGE_LIMIT.total_seconds()), description="whole seconds, at most 100 years"),
    BeforeValidator(whole),
]
Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="from the preview")]


class RetentionDefinitionIn(_Body):
    max_age_seconds: MaxAgeSeconds
    conversation_id: Annotated[Id | None, Field(description="null: every conversation and channel")] = None


class RetentionSettingIn(RetentionDefinitionIn, Accepting):
    scope_digest: Digest


class RetentionRemovalIn(Accepting):
    """The policy is named by the path."""


class HoldPlacingIn(Accepting):
    """A hold covers at least one conversation or author."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": [subjects], "properties": {subjects: {"minItems": 1}}}
                for subjects in ("conversation_ids", "authors")
            ]
        }
    )

    conversation_ids: Annotated[list[Id], Field(max_length=MAX_HOLD_SUBJECTS)] = []
    authors: Annotated[list[Author], Field(max_length=MAX_HOLD_SUBJECTS)] = []


class HoldReleaseIn(Accepting):
    """The hold is named by the path."""


class UploadedEventIn(_Body):
    """The text parts of an ``upload_event`` request (its files are the attachments)."""

    author: Author
    body: EventBody | None = None
    provider_event_id: ProviderId | None = None
    event_id: Id | None = None
    occurred_at: UtcTime | None = None


def upload_schema() -> dict[str, Any]:
    """The ``multipart/form-data`` body of ``upload_event``: the text fields as
    ``UploadedEventIn`` has them, then the attachments by how they are bound."""
    assert uploads.FIELDS == tuple(UploadedEventIn.model_fields)
    required = [name for name, field in UploadedEventIn.model_fields.items() if field.is_required()]
    string: dict[str, Any] = {"type": "string"}
    ids = {**string, "minLength": 1, "maxLength": validation.MAX_ID_LENGTH, "pattern": ID_PATTERN}
    files = {"type": "array", "items": {"type": "string", "format": "binary", "minLength": 1}}
    limit = validation.MAX_ATTACHMENTS_PER_EVENT
    properties = {
        "author": {**string, "minLength": 1, "maxLength": validation.MAX_AUTHOR_LENGTH, "pattern": TEXT_PATTERN},
        "body": {
            **string,
            "minLength": 1,
            "not": {"pattern": NUL},
            "description": f"at most {validation.MAX_BODY_BYTES} bytes of UTF-8",
        },
        "provider_event_id": {
            **string,
            "minLength": 1,
            "maxLength": validation.MAX_PROVIDER_ID_LENGTH,
            "pattern": PROVIDER_ID_PATTERN,
        },
        "event_id": ids,
        "occurred_at": {**string, "format": "date-time", "description": "ISO 8601 with an offset"},
        "file": {**files, "maxItems": limit, "description": "attachments stored as real files; filename = name"},
        "cas": {**files, "maxItems": limit, "description": "attachments stored content-addressed; filename = name"},
    }
    schema = {
        "type": "object",
        "title": "EventUpload",
        "required": required,
        "properties": properties,
        "additionalProperties": False,  # any other part is refused
    }
    return {"required": True, "content": {"multipart/form-data": {"schema": schema}}}


def uploaded_event(fields: dict[str, str]) -> UploadedEventIn:
    """The upload's text parts as an event, checked as the JSON route checks its body."""
    try:
        return UploadedEventIn.model_validate(fields)
    except PydanticValidationError as exc:
        raise RequestValidationError(exc.errors()) from None
