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

from purgekeeper.commands import ingest_batch, validation
from purgekeeper.commands.hold_commands import MAX_HOLD_SUBJECTS
from purgekeeper.commands.http import uploads
from purgekeeper.commands.http.field_types import (
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
from purgekeeper.commands.kinds.retention import MAX_AGE_LIMIT
from purgekeeper.commands.scope import MAX_SCOPE_EVENTS, EventScope


class _Body(BaseModel):
    """Every request body: no field it does not declare, and each value of the JSON type the
    document declares (strict: ``true`` is not 1, ``"2592000"`` not a number; times are
    ISO 8601 text, ``UtcTime``)."""

    model_config = ConfigDict(extra="forbid", strict=True)


WHO = {"actor": "ops@example.org", "reason": "the user asked us to (ticket 1234)"}
DIGEST = "9f2c" * 16  # a preview's scope_digest


def example(**fields: Any) -> ConfigDict:
    """A body's example in the document (``examples``, JSON Schema's), which Schemathesis sends too."""
    return ConfigDict(json_schema_extra={"examples": [fields]})


class NewConversationIn(_Body):
    model_config = example(conversation_id="c-1042", kind="conversation")

    conversation_id: Id
    kind: Literal["conversation", "channel"] = "conversation"
    bot_id: Id | None = None


class NewBotIn(_Body):
    model_config = example(bot_id="b-7", name="Support bot")

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
    model_config = example(kind="cas", name="notes.txt", data_base64="aGVsbG8=")

    kind: Literal["cas"]
    name: AttachmentName
    data_base64: Base64Data


class FileAttachmentIn(_Body):
    model_config = example(kind="file", name="contract.pdf", data_base64="JVBERi0=")

    kind: Literal["file"]
    name: AttachmentName
    data_base64: Base64Data


class ReuseAttachmentIn(_Body):
    model_config = example(kind="reuse", name="logo.png", blob_id="0f4e1b", binding="real_file")

    kind: Literal["reuse"]
    name: AttachmentName
    blob_id: Id
    binding: Literal["real_file", "legacy_cas"] = "real_file"


AttachmentIn = Annotated[CasAttachmentIn | FileAttachmentIn | ReuseAttachmentIn, Field(discriminator="kind")]


class NewEventIn(_Body):
    model_config = example(
        author="ada",
        body="Here are my notes",
        provider_event_id="slack:T1/C1/1700000000.000100",
        occurred_at="2026-01-05T09:30:00Z",
        attachments=[{"kind": "cas", "name": "notes.txt", "data_base64": "aGVsbG8="}],
    )

    author: Author
    body: EventBody | None = None
    provider_event_id: ProviderId | None = None
    event_id: Id | None = None
    occurred_at: UtcTime | None = None
    attachments: Annotated[list[AttachmentIn], Field(max_length=validation.MAX_ATTACHMENTS_PER_EVENT)] = []


class BatchEventIn(_Body):
    model_config = example(
        author="ada",
        body="Here are my notes",
        provider_event_id="slack:T1/C1/1700000000.000100",
        occurred_at="2026-01-05T09:30:00Z",
    )

    author: Author
    body: EventBody | None = None
    provider_event_id: ProviderId | None = None
    event_id: Id | None = None
    occurred_at: UtcTime | None = None


class NewEventsIn(_Body):
    model_config = example(
        events=[
            {"author": "ada", "body": "Hello", "provider_event_id": "slack:T1/C1/1700000000.000100"},
            {"author": "bob", "body": "Hi", "provider_event_id": "slack:T1/C1/1700000001.000200"},
        ]
    )

    events: Annotated[list[BatchEventIn], Field(max_length=ingest_batch.MAX_BATCH_EVENTS)]


class NewPlacementIn(_Body):
    model_config = example(event_id="e-1")

    event_id: Id


class NewRunIn(_Body):
    model_config = example(conversation_id="c-1042", bot_id="b-7", run_id="r-1")

    conversation_id: Id
    bot_id: Id
    run_id: Id | None = None


class RunFinishIn(_Body):
    model_config = example(status="succeeded", output={"answer": "Done."})

    status: Literal["succeeded", "failed", "cancelled", "abandoned"]
    output: Output = None


class NewAdmissionIn(_Body):
    model_config = example(event_id="e-1", payload={"prompt": "Summarise the thread"})

    event_id: Id
    payload: Payload


class NewDerivativeIn(_Body):
    model_config = example(kind="summary", payload={"text": "Ada sent notes"}, source_event_ids=["e-1"])

    kind: Annotated[str, text(validation.MAX_DERIVATIVE_KIND_LENGTH)]
    payload: Payload
    source_event_ids: Annotated[list[Id], Field(max_length=validation.MAX_DERIVATIVE_SOURCES)] = []


class ScopeByEventsIn(_Body):
    model_config = example(event_ids=["e-1", "e-2"])

    event_ids: Annotated[list[Id], Field(min_length=1, max_length=MAX_SCOPE_EVENTS)]

    def scope(self) -> EventScope:
        return EventScope(event_ids=tuple(self.event_ids))


class ScopeByConversationIn(_Body):
    model_config = example(
        conversation_id="c-1042", after="2026-01-01T00:00:00Z", before="2026-02-01T00:00:00Z", author="ada"
    )

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
    model_config = example(scope={"event_ids": ["e-1"]}, scope_digest=DIGEST, **WHO, idempotency_key="t-1234")

    scope: ScopeIn
    scope_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="from the preview")]


class ConversationPurgeIn(Accepting):
    model_config = example(expected_version=12, **WHO)

    expected_version: Annotated[int, Field(ge=1, le=MAX_SEQ), BeforeValidator(whole)] | None = None


class ChannelDeletionIn(Accepting):
    """A channel deletion asks for nothing more than who and why."""

    model_config = example(**WHO)


class ReviewedRepositoryIn(_Body):
    path: Annotated[str, Field(min_length=1, max_length=MAX_PATH_LENGTH)]
    marker_id: Annotated[str, Field(min_length=1, max_length=validation.MAX_ID_LENGTH)]


class BotDeletionIn(Accepting):
    """``erase_memory`` needs the ``reviewed_repository`` its preview showed."""

    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"erase_memory": {"const": True}}, "required": ["erase_memory"]},
            "then": {"properties": {"reviewed_repository": {"type": "object"}}, "required": ["reviewed_repository"]},
            "examples": [{"erase_memory": False, **WHO}],
        }
    )

    erase_memory: bool = False
    reviewed_repository: ReviewedRepositoryIn | None = None


class AuthorWindowIn(_Body):
    model_config = example(author="ada", before="2026-02-01T00:00:00Z")

    author: Author
    before: UtcTime | None = None


class AuthorErasureIn(AuthorWindowIn, Accepting):
    model_config = example(author="ada", scope_digest=DIGEST, close_author=True, **WHO)

    scope_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="from the preview")]
    close_author: bool = True


class RetryRequestIn(_Body):
    model_config = example(actor="oncall@example.org", reason="freed the blob path")

    actor: Actor
    reason: Reason


TURN_EXAMPLE = {"actor": "oncall@example.org", "reason": "the hold LEGAL-7 was released"}


class RetentionTurnIn(_Body):
    """Who takes a policy's turn now, and why (without a body, the turn is the scheduler's)."""

    model_config = example(**TURN_EXAMPLE)

    actor: Actor
    reason: Reason


MaxAgeSeconds = Annotated[
    int,
    Field(ge=1, le=int(MAX_AGE_LIMIT.total_seconds()), description="whole seconds, at most 100 years"),
    BeforeValidator(whole),
]
Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="from the preview")]


class RetentionDefinitionIn(_Body):
    model_config = example(max_age_seconds=2592000, conversation_id="c-1042")

    max_age_seconds: MaxAgeSeconds
    conversation_id: Annotated[Id | None, Field(description="null: every conversation and channel")] = None


class RetentionSettingIn(RetentionDefinitionIn, Accepting):
    model_config = example(max_age_seconds=2592000, conversation_id="c-1042", scope_digest=DIGEST, **WHO)

    scope_digest: Digest


class RetentionRemovalIn(Accepting):
    """The policy is named by the path."""

    model_config = example(**WHO)


class HoldPlacingIn(Accepting):
    """A hold covers at least one conversation or author."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": [subjects], "properties": {subjects: {"minItems": 1}}}
                for subjects in ("conversation_ids", "authors")
            ],
            "examples": [
                {"conversation_ids": ["c-1042"], "authors": ["ada"], **WHO, "reason": "litigation Doe v. Roe"}
            ],
        }
    )

    conversation_ids: Annotated[list[Id], Field(max_length=MAX_HOLD_SUBJECTS)] = []
    authors: Annotated[list[Author], Field(max_length=MAX_HOLD_SUBJECTS)] = []


class HoldReleaseIn(Accepting):
    """The hold is named by the path."""

    model_config = example(**WHO)


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
        "examples": [{"author": "ada", "body": "The signed contract", "occurred_at": "2026-01-05T09:30:00Z"}],
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
