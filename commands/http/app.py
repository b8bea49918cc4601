"""The HTTP API: a thin layer over the same ``commands`` methods, everything under ``/v1``.

The OpenAPI document is at ``/openapi.json`` (and ``/docs``). Every operation has an
explicit ``operationId`` (the command's name) and a typed response (``commands.http.models``;
the JSON is ``commands.surface.plain`` of the record). A request that does not match the
document is a ``400 validation_error``: the document says so, and lists no 422. A repeated
idempotent write returns the same record, so a creation is not told apart from a replay.

Acceptances (``202``): every route that accepts a purge, a deletion, a retention policy or
a legal hold answers ``202 Accepted`` with a ``Location: /v1/purges/{purge_id}`` header and
the ``Acceptance``; an idempotent replay (``"outcome": "already_purged"``) answers the same,
with the purge that covers it. Poll the Location (or ``.../wait``) for the cleanup.

=======  ==========================================  ========================  ======  ========
method   path                                        command (operationId)     status  who
=======  ==========================================  ========================  ======  ========
POST     /v1/conversations                           create_conversation       200     host
GET      /v1/conversations                           list_conversations        200     host
GET      /v1/conversations/{id}                      get_conversation          200     host
GET      /v1/conversations/{id}/events               read_conversation         200     host
POST     /v1/conversations/{id}/events               ingest_event              200     host
POST     /v1/conversations/{id}/events/upload        upload_event (multipart)  200     host
POST     /v1/conversations/{id}/placements           place_event               200     host
POST     /v1/conversations/{id}/derivatives          add_derivative            200     host
POST     /v1/conversations/{id}/purge                purge_conversation        202     host
POST     /v1/channels/{id}/delete                    delete_channel            202     host
POST     /v1/bots                                    register_bot              200     host
GET      /v1/bots/{id}/deletion-preview              preview_bot_deletion      200     host
POST     /v1/bots/{id}/delete                        delete_bot                202     host
POST     /v1/authors/erasure-preview                 preview_author_erasure    200     host
POST     /v1/authors/erase                           erase_author              202     host
POST     /v1/runs                                    start_run                 200     host
POST     /v1/runs/{id}/finish                        finish_run                200     host
POST     /v1/runs/{id}/admissions                    admit                     200     host
GET      /v1/attachments/{id}                        open_attachment (bytes)   200     host
POST     /v1/purges/preview                          preview_purge             200     host
POST     /v1/purges/confirm                          confirm_purge             202     host
GET      /v1/purges                                  list_purges               200     host
GET      /v1/purges/{id}                             status                    200     host
GET      /v1/purges/{id}/wait                        wait                      200     host
GET      /v1/purges/{id}/receipt                     receipt                   200     host
GET      /v1/purges/{id}/completion                  completion                200     host
GET      /v1/ledger/consistency?from=N               consistency               200     host
POST     /v1/purges/{id}/retry                       retry                     200     operator
POST     /v1/resume                                  resume                    200     operator
GET      /v1/ledger/verify                           verify_ledger             200     operator
GET      /v1/ledger/checkpoint                       checkpoint_ledger (file)  200     operator
POST     /v1/ledger/merge                            merge_ledger (upload)     200     operator
POST     /v1/retention/preview                       preview_retention         200     operator
PUT      /v1/retention/{id}                          set_retention             202     operator
POST     /v1/retention/{id}/remove                   remove_retention          202     operator
GET      /v1/retention                               list_retention            200     operator
PUT      /v1/holds/{id}                              place_hold                202     operator
POST     /v1/holds/{id}/release                      release_hold              202     operator
GET      /v1/holds                                   list_holds                200     operator
=======  ==========================================  ========================  ======  ========

Hosts poll status, so ``status``, ``list_purges`` and ``wait`` are host endpoints; the
commands that change or reveal the machinery as a whole (re-arming, re-sending, the ledger
itself, retention policies and legal holds) are operator endpoints. ``GET /v1/purges``
filters by ``status``, ``kind``, ``conversation_id`` and acceptance time (``since`` <=
accepted_at < ``until``, ISO 8601 with an offset: a naive or malformed time is a 400),
newest first, a page of ``limit`` at a time (``after``: the previous page's ``next_after``).
A policy's ``max_age`` is sent as ``max_age_seconds`` and returned as ``max_age`` in
seconds; the lists come back as ``{"policies": [...]}`` and ``{"holds": [...]}``. ``/status``
and ``/metrics`` come from ``commands.web.status`` and ``commands.web.metrics`` and do their
own authentication.

Authentication (``commands.web.auth``): every ``/v1`` request needs ``Authorization: Bearer
<token>``, checked before the body is read. Host endpoints take the host or the operator
token; operator endpoints take the operator token when one is configured, else the host
token. A missing or wrong token is ``401 {"error": "unauthorized"}``. ``/openapi.json`` and
``/docs`` hold no data and need no token, and neither does the signed log's public part:
``GET /log/checkpoint`` (the newest signed checkpoint, ``text/plain``) and ``GET
/log/tile/<L>/<N>[.p/<W>]`` (C2SP tlog-tiles of hashes, ``application/octet-stream``), which
hold hashes only; any other path under ``/log`` is a 404.

Errors are ``{"error": CODE, "detail": ...}`` with docs/design.md's statuses
(``commands.surface``). The HTTP layer adds:

- ``400 validation_error`` for a request that does not match the OpenAPI schema (wrong
  types, unknown fields, lengths, patterns, bad base64, nesting deeper than
  ``MAX_JSON_DEPTH``, a malformed multipart body); only a short message, never the input.
  Types are strict: a value is never converted to the type declared (``true`` is not 1,
  ``"2592000"`` not a number); a time is ISO 8601 text with an offset, within
  ``validation``'s range of times; a form or query flag is ``true`` or ``false``;
- ``401 unauthorized``, ``404 not_found`` (no such endpoint, or an unknown id),
  ``405 method_not_allowed``, ``415 unsupported_media_type`` (an upload that is not
  ``multipart/form-data``);
- ``410 conversation_purged`` when reading a purged conversation (the Python API returns
  ``None`` or ``[]``);
- ``413 payload_too_large`` for a body over its cap, refused before the request reaches a
  command and with nothing kept;
- ``500 internal_error`` for a bug: the traceback goes to the log, never to the client.

Caps (``RequestGuard``): a JSON body is at most ``max_body_bytes`` (1 MiB). Attachments
sent in it are base64 (4 bytes for every 3), so together they stay under 768 KiB, less the
rest of the JSON: ``ingest_event`` is for small ones. ``upload_event`` takes the same event as ``multipart/form-data``
and is where attachments reach their limit: each at most ``max_attachment_bytes`` (64 MiB,
``validation.MAX_ATTACHMENT_BYTES``), at most ``validation.MAX_ATTACHMENTS_PER_EVENT`` per
event, and the whole request at most ``max_attachment_bytes + UPLOAD_ALLOWANCE_BYTES`` (the
fields and framing). Its body is never held in memory: ``commands.http.uploads`` writes
each part to a spool file under the blob root as it arrives, and the event is ingested
from those files. A merge upload is at most ``max_upload_bytes``, also streamed. ``wait``
blocks at most ``MAX_WAIT_SECONDS`` (a longer timeout is shortened, and the status returned
as on any timeout).

The API never reads or writes a server path that a client names: the checkpoint is a
download written to a private temporary file, a merge is an upload, an upload's spool
files are named here, and ``register_bot``'s ``memory_path`` must lie inside one of the
configured Memory roots.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import importlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Literal

from fastapi import APIRouter, Body, FastAPI, File, Form, Header, Query, Request, Security, UploadFile
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic import AfterValidator, AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, JsonValue
from pydantic import ValidationError as PydanticValidationError
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from commands import surface, validation
from commands.attachments import NewAttachment
from commands.handle import Purgekeeper
from commands.holds import MAX_HOLD_SUBJECTS
from commands.http import models, uploads
from commands.http.guard import API_PREFIX, OPERATOR_STATE, RequestGuard
from commands.kinds.retention import MAX_AGE_LIMIT
from commands.operations import MAX_PAGE, OPERATOR_KINDS
from commands.purges import MAX_ACTOR_LENGTH, MAX_REASON_LENGTH
from commands.records import Acceptance, PurgeStatus, RepositoryIdentity
from commands.scope import MAX_SCOPE_EVENTS, EventScope
from commands.web.auth import Tokens
from schema.errors import NotFound, PurgekeeperError, ValidationError
from schema.states import PurgeKind

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 1_048_576
DEFAULT_MAX_UPLOAD_BYTES = 64 * 1_048_576
MAX_WAIT_SECONDS = 30.0
MAX_JSON_DEPTH = 64
MAX_MERGE_FILES = 64
MAX_PATH_LENGTH = 4096
MAX_SEQ = 2**63 - 1
MAX_DETAIL_LENGTH = 500
OPERATOR_TAG = "operator"
WEB_ROUTER_MODULES = ("commands.web.status", "commands.web.metrics")
ORIGIN = "http"

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]*$"
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
HTTP_ERROR_CODES = {
    400: "validation_error",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}

# -- request shapes -------------------------------------------------------------------------


def _iso_time(value: Any) -> dt.datetime:
    """A time is ISO 8601 text: pydantic would read a number, or a text of digits, as a Unix
    time (``"before": 0`` an erasure's window ending in 1970)."""
    if not isinstance(value, str):
        raise ValueError("must be an ISO 8601 time with an offset, as a string")
    try:
        return dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("must be an ISO 8601 time with an offset") from None


def _flag(value: Any) -> bool:
    """A form or query flag is ``true`` or ``false``, not any text a cast would take (``1``, ``yes``, ``on``)."""
    if value not in ("true", "false"):
        raise ValueError("must be true or false")
    return value == "true"


def _utc(value: dt.datetime) -> dt.datetime:
    """In UTC and in the range of times the commands take (``validation.to_utc``)."""
    try:
        return validation.to_utc(value, "the time")
    except ValidationError as exc:  # e.g. 0001-01-01T00:00:00+01:00, 9999-12-31T23:59:59Z
        raise ValueError(exc.detail) from None


def _shallow(value: JsonValue) -> JsonValue:
    """Refuse JSON nested deeper than MAX_JSON_DEPTH, which later encoding would recurse into."""
    level: list[Any] = [value]
    for _depth in range(MAX_JSON_DEPTH):
        level = [c for v in level for c in (v.values() if isinstance(v, dict) else v if isinstance(v, list) else ())]
        if not level:
            return value
    raise ValueError(f"JSON is nested deeper than {MAX_JSON_DEPTH} levels")


def _provider_id(value: str) -> str:
    """The id another system gave an event, checked as the Python API checks it."""
    try:
        return validation.check_provider_id(value)
    except ValidationError as exc:
        raise ValueError(exc.detail) from None


Id = Annotated[str, Field(min_length=1, max_length=validation.MAX_ID_LENGTH, pattern=ID_PATTERN)]
ProviderId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=validation.MAX_PROVIDER_ID_LENGTH,
        description="printable, no whitespace: slack:T1/C1/1700000000.000100, $abc:example.org, <a@b>",
    ),
    AfterValidator(_provider_id),
]
Author = Annotated[str, Field(min_length=1, max_length=validation.MAX_AUTHOR_LENGTH)]
Actor = Annotated[str, Field(min_length=1, max_length=MAX_ACTOR_LENGTH)]
Reason = Annotated[str, Field(min_length=1, max_length=MAX_REASON_LENGTH)]
UtcTime = Annotated[AwareDatetime, BeforeValidator(_iso_time), AfterValidator(_utc)]
Json = Annotated[JsonValue, AfterValidator(_shallow)]
IdPath = Annotated[str, PathParam(min_length=1, max_length=validation.MAX_ID_LENGTH, pattern=ID_PATTERN)]
RequestId = Annotated[
    str | None,
    Header(min_length=1, max_length=validation.MAX_ID_LENGTH, pattern=ID_PATTERN, description="kept in the ledger"),
]
AttachmentName = Annotated[str, Field(min_length=1, max_length=validation.MAX_NAME_LENGTH)]
Base64Data = Annotated[
    str,
    Field(
        min_length=4,
        max_length=4 * -(-validation.MAX_ATTACHMENT_BYTES // 3),
        pattern=BASE64_PATTERN,
        description="the bytes, base64-encoded (standard alphabet, padded)",
    ),
]


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


class _Accepting(_Body):
    """Who asks for an acceptance, and why; with an idempotency key, a retry is the same request."""

    actor: Actor
    reason: Reason
    idempotency_key: Id | None = None


class Confirmation(_Accepting):
    scope: ScopeIn
    scope_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="from the preview")]


class ConversationPurge(_Accepting):
    expected_version: Annotated[int | None, Field(ge=1, le=MAX_SEQ)] = None


class ChannelDeletion(_Accepting):
    """A channel deletion asks for nothing more than who and why."""


class ReviewedRepository(_Body):
    path: Annotated[str, Field(min_length=1, max_length=MAX_PATH_LENGTH)]
    marker_id: Annotated[str, Field(min_length=1, max_length=validation.MAX_ID_LENGTH)]


class BotDeletion(_Accepting):
    erase_memory: bool = False
    reviewed_repository: ReviewedRepository | None = None


class AuthorWindow(_Body):
    author: Author
    before: UtcTime | None = None


class AuthorErasure(AuthorWindow, _Accepting):
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


class RetentionSetting(RetentionDefinition, _Accepting):
    scope_digest: Digest


class RetentionRemoval(_Accepting):
    """The policy is named by the path."""


class HoldPlacing(_Accepting):
    conversation_ids: Annotated[list[Id], Field(max_length=MAX_HOLD_SUBJECTS)] = []
    authors: Annotated[list[Author], Field(max_length=MAX_HOLD_SUBJECTS)] = []


class HoldRelease(_Accepting):
    """The hold is named by the path."""


class UploadedEvent(_Body):
    """The text parts of an ``upload_event`` request (its files are the attachments)."""

    author: Author
    body: Annotated[str | None, Field(min_length=1, max_length=validation.MAX_BODY_BYTES)] = None
    provider_event_id: ProviderId | None = None
    event_id: Id | None = None
    occurred_at: UtcTime | None = None


def _upload_schema() -> dict[str, Any]:
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


# -- responses ------------------------------------------------------------------------------

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": models.ErrorBody, "description": description}
    for status, description in (
        (400, "invalid request (validation_error)"),
        (401, "missing or wrong bearer token"),
        (404, "unknown id"),
        (409, "conflict (a legal hold or a policy conflict among them), reserved id or Memory erasure unavailable"),
        (410, "purged, deleted or fenced"),
        (413, "body too large"),
        (503, "messaging or infrastructure unavailable"),
    )
}
UPLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    413: {"model": models.ErrorBody, "description": "an attachment or the whole request is too large"},
    415: {"model": models.ErrorBody, "description": "not multipart/form-data"},
}
ACCEPTED: dict[str, Any] = {
    "status_code": 202,
    "response_model": models.Acceptance,
    "responses": {
        202: {
            "description": "accepted (or already in force): the purge's status is at the Location",
            "headers": {
                "Location": {"description": "/v1/purges/{purge_id}", "schema": {"type": "string"}},
            },
        }
    },
}
BINARY = {"schema": {"type": "string", "format": "binary"}}
UPLOAD_ALLOWANCE_BYTES = 1_048_576  # an upload's fields and multipart framing, beside its attachments
VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")

# -- the app --------------------------------------------------------------------------------


def create_app(
    pk: Purgekeeper,
    *,
    tokens: Tokens,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
    max_attachment_bytes: int = validation.MAX_ATTACHMENT_BYTES,
) -> FastAPI:
    """The FastAPI app over ``pk``. The caller keeps ``pk`` open while the app serves."""
    app = FastAPI(
        title="purgekeeper",
        version="1",
        summary="Confirmed content purges for chat and agent hosts.",
        redoc_url=None,
    )
    operator = (_operator_routes(pk), _retention_routes(pk), _hold_routes(pk))
    routers = (_content_routes(pk, max_attachment_bytes), _purge_routes(pk), _status_routes(pk), *operator)
    for routes in routers:
        app.include_router(routes)
    app.include_router(_log_routes(pk))
    _include_web_routers(app, pk, tokens)
    _install_error_handlers(app)
    _document_400_not_422(app)
    uploads.sweep_stale(pk.settings.blob_root)
    streamed = {"merge_ledger": max_upload_bytes, "upload_event": max_attachment_bytes + UPLOAD_ALLOWANCE_BYTES}
    app.add_middleware(
        RequestGuard,
        tokens=tokens,
        operator_routes=_api_routes(*operator),
        max_body_bytes=max_body_bytes,
        streamed=[(route, streamed[route.name]) for route in _api_routes(*routers) if route.name in streamed],
    )
    return app


def _api_routes(*routers: APIRouter) -> list[APIRoute]:
    return [route for router in routers for route in router.routes if isinstance(route, APIRoute)]


def _v1(tag: str) -> APIRouter:
    """One group of ``/v1`` routes; the bearer scheme is declared for the OpenAPI document (the
    ``RequestGuard`` middleware checks the token)."""
    return APIRouter(
        prefix=API_PREFIX,
        tags=[tag],
        dependencies=[Security(HTTPBearer(auto_error=False))],
        responses=ERROR_RESPONSES,
    )


def _document_400_not_422(app: FastAPI) -> None:
    """A request that does not match the document is a 400 ``ErrorBody`` (``_invalid_request``),
    so the 422 FastAPI documents for every operation with parameters is taken out again."""
    generate = app.openapi

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            for item in schema["paths"].values():
                for operation in item.values():
                    operation["responses"].pop("422", None)
            for name in VALIDATION_SCHEMAS:
                schema.get("components", {}).get("schemas", {}).pop(name, None)
        return app.openapi_schema or generate()

    app.openapi = document  # type: ignore[method-assign]


def _json(value: Any) -> JSONResponse:
    return JSONResponse(surface.plain(value))


def _by_operator(request: Request) -> bool:
    """Whether the request carries the operator's token (``RequestGuard`` says)."""
    return bool(getattr(request.state, OPERATOR_STATE, False))


def _visible(status: PurgeStatus, request: Request) -> PurgeStatus:
    """A policy's or a hold's row is the operator's (``OPERATOR_KINDS``): to a host, not found."""
    if status.kind in OPERATOR_KINDS and not _by_operator(request):
        raise NotFound(f"no purge {status.purge_id}")
    return status


def _causal(body: _Accepting, request_id: str | None) -> dict[str, Any]:
    """An acceptance's who, why and which request, as every accepting command takes them."""
    return {
        "actor": body.actor,
        "reason": body.reason,
        "idempotency_key": body.idempotency_key,
        "request_id": request_id,
        "origin": ORIGIN,
    }


def _accepted(acceptance: Acceptance) -> JSONResponse:
    """202 with the Location of the purge's status (the same for an idempotent replay)."""
    location = f"{API_PREFIX}/purges/{acceptance.purge_id}"
    return JSONResponse(surface.plain(acceptance), status_code=202, headers={"Location": location})


def _content_routes(pk: Purgekeeper, max_attachment_bytes: int) -> APIRouter:
    router = _v1("content")

    @router.post("/conversations", operation_id="create_conversation", response_model=models.Conversation)
    def create_conversation(new: NewConversation) -> JSONResponse:
        return _json(pk.create_conversation(new.conversation_id, kind=new.kind, bot_id=new.bot_id))

    @router.get("/conversations", operation_id="list_conversations", response_model=models.ConversationList)
    def list_conversations() -> JSONResponse:
        return _json({"conversations": pk.list_conversations()})

    @router.get("/conversations/{conversation_id}", operation_id="get_conversation", response_model=models.Conversation)
    def get_conversation(conversation_id: IdPath) -> JSONResponse:
        found = pk.get_conversation(conversation_id)
        if found is None:
            raise pk.why_unreadable(conversation_id)
        return _json(found)

    @router.get(
        "/conversations/{conversation_id}/events", operation_id="read_conversation", response_model=models.EventList
    )
    def read_conversation(conversation_id: IdPath) -> JSONResponse:
        events = pk.read_conversation(conversation_id)
        if not events and pk.get_conversation(conversation_id) is None:
            raise pk.why_unreadable(conversation_id)
        return _json({"events": events})

    @router.post("/conversations/{conversation_id}/events", operation_id="ingest_event", response_model=models.Event)
    def ingest_event(conversation_id: IdPath, new: NewEvent) -> JSONResponse:
        attachments = [_attachment(a, i, max_attachment_bytes) for i, a in enumerate(new.attachments)]
        event = pk.ingest_event(
            conversation_id,
            author=new.author,
            body=new.body,
            provider_event_id=new.provider_event_id,
            event_id=new.event_id,
            occurred_at=new.occurred_at,
            attachments=attachments,
        )
        return _json(event)

    spool = uploads.spool_directory(pk.settings.blob_root)

    @router.post(
        "/conversations/{conversation_id}/events/upload",
        operation_id="upload_event",
        response_model=models.Event,
        responses=UPLOAD_RESPONSES,
        openapi_extra={"requestBody": _upload_schema()},
    )
    async def upload_event(conversation_id: IdPath, request: Request) -> JSONResponse:
        """``ingest_event`` as ``multipart/form-data``: the event's fields as text parts, each
        attachment a file part named ``file`` or ``cas`` (its filename is its name)."""
        await run_in_threadpool(uploads.sweep_stale, pk.settings.blob_root)  # a crashed upload's leftovers
        upload = await uploads.receive(request, spool=spool, max_attachment_bytes=max_attachment_bytes)
        try:
            new = _uploaded_event(upload.fields)
            event = await run_in_threadpool(
                pk.ingest_event,
                conversation_id,
                author=new.author,
                body=new.body,
                provider_event_id=new.provider_event_id,
                event_id=new.event_id,
                occurred_at=new.occurred_at,
                attachments=upload.attachments(),
            )
        finally:
            upload.discard()
        return _json(event)

    @router.post(
        "/conversations/{conversation_id}/placements", operation_id="place_event", response_model=models.Placement
    )
    def place_event(conversation_id: IdPath, new: NewPlacement) -> JSONResponse:
        return _json(pk.place_event(new.event_id, conversation_id))

    @router.post(
        "/conversations/{conversation_id}/derivatives", operation_id="add_derivative", response_model=models.Derivative
    )
    def add_derivative(conversation_id: IdPath, new: NewDerivative) -> JSONResponse:
        derivative = pk.add_derivative(
            conversation_id, kind=new.kind, payload=new.payload, source_event_ids=new.source_event_ids
        )
        return _json(derivative)

    @router.post("/bots", operation_id="register_bot", response_model=models.Bot)
    def register_bot(new: NewBot) -> JSONResponse:
        memory_path = _inside_memory_roots(new.memory_path, pk.settings.memory_roots)
        return _json(pk.register_bot(new.bot_id, name=new.name, memory_path=memory_path))

    @router.post("/runs", operation_id="start_run", response_model=models.Run)
    def start_run(new: NewRun) -> JSONResponse:
        return _json(pk.start_run(new.conversation_id, bot_id=new.bot_id, run_id=new.run_id))

    @router.post("/runs/{run_id}/finish", operation_id="finish_run", response_model=models.Run)
    def finish_run(run_id: IdPath, finish: RunFinish) -> JSONResponse:
        return _json(pk.finish_run(run_id, status=finish.status, output=finish.output))

    @router.post("/runs/{run_id}/admissions", operation_id="admit", response_model=models.Admission)
    def admit(run_id: IdPath, new: NewAdmission) -> JSONResponse:
        return _json(pk.admit(new.event_id, run_id, payload=new.payload))

    @router.get(
        "/attachments/{attachment_id}",
        operation_id="open_attachment",
        response_class=StreamingResponse,
        responses={200: {"content": {"application/octet-stream": BINARY}, "description": "the bytes"}},
    )
    def open_attachment(attachment_id: IdPath) -> StreamingResponse:
        stream = pk.open_attachment(attachment_id)
        return StreamingResponse(
            _chunks(stream), media_type="application/octet-stream", background=BackgroundTask(stream.close)
        )

    return router


def _purge_routes(pk: Purgekeeper) -> APIRouter:
    router = _v1("purges")

    @router.post("/purges/preview", operation_id="preview_purge", response_model=models.PurgePreview)
    def preview_purge(scope: Annotated[ScopeIn, Body()]) -> JSONResponse:
        return _json(pk.preview_purge(scope.scope()))

    @router.post("/purges/confirm", operation_id="confirm_purge", **ACCEPTED)
    def confirm_purge(confirmation: Confirmation, x_request_id: RequestId = None) -> JSONResponse:
        acceptance = pk.confirm_purge(
            confirmation.scope.scope(),
            scope_digest=confirmation.scope_digest,
            **_causal(confirmation, x_request_id),
        )
        return _accepted(acceptance)

    @router.post("/conversations/{conversation_id}/purge", operation_id="purge_conversation", **ACCEPTED)
    def purge_conversation(
        conversation_id: IdPath, purge: ConversationPurge, x_request_id: RequestId = None
    ) -> JSONResponse:
        acceptance = pk.purge_conversation(
            conversation_id,
            expected_version=purge.expected_version,
            **_causal(purge, x_request_id),
        )
        return _accepted(acceptance)

    @router.post("/channels/{channel_id}/delete", operation_id="delete_channel", **ACCEPTED)
    def delete_channel(channel_id: IdPath, deletion: ChannelDeletion, x_request_id: RequestId = None) -> JSONResponse:
        acceptance = pk.delete_channel(
            channel_id,
            **_causal(deletion, x_request_id),
        )
        return _accepted(acceptance)

    @router.get(
        "/bots/{bot_id}/deletion-preview",
        operation_id="preview_bot_deletion",
        response_model=models.BotDeletionPreview,
    )
    def preview_bot_deletion(bot_id: IdPath) -> JSONResponse:
        return _json(pk.preview_bot_deletion(bot_id))

    @router.post("/bots/{bot_id}/delete", operation_id="delete_bot", **ACCEPTED)
    def delete_bot(bot_id: IdPath, deletion: BotDeletion, x_request_id: RequestId = None) -> JSONResponse:
        reviewed = deletion.reviewed_repository
        acceptance = pk.delete_bot(
            bot_id,
            erase_memory=deletion.erase_memory,
            reviewed_repository=RepositoryIdentity(reviewed.path, reviewed.marker_id) if reviewed else None,
            **_causal(deletion, x_request_id),
        )
        return _accepted(acceptance)

    @router.post(
        "/authors/erasure-preview",
        operation_id="preview_author_erasure",
        response_model=models.AuthorErasurePreview,
    )
    def preview_author_erasure(window: AuthorWindow) -> JSONResponse:
        return _json(pk.preview_author_erasure(window.author, before=window.before))

    @router.post("/authors/erase", operation_id="erase_author", **ACCEPTED)
    def erase_author(erasure: AuthorErasure, x_request_id: RequestId = None) -> JSONResponse:
        acceptance = pk.erase_author(
            erasure.author,
            scope_digest=erasure.scope_digest,
            before=erasure.before,
            close_author=erasure.close_author,
            **_causal(erasure, x_request_id),
        )
        return _accepted(acceptance)

    return router


def _status_routes(pk: Purgekeeper) -> APIRouter:
    router = _v1("purges")

    @router.get("/purges", operation_id="list_purges", response_model=models.PurgePage)
    def list_purges(
        request: Request,
        status: Annotated[Literal["accepted", "cleaning", "complete", "incomplete"] | None, Query()] = None,
        kind: Annotated[PurgeKind | None, Query(description="what the ledger row is")] = None,
        conversation_id: Annotated[
            str | None,
            Query(
                min_length=1,
                max_length=validation.MAX_ID_LENGTH,
                pattern=ID_PATTERN,
                description="purges that concern this conversation or channel",
            ),
        ] = None,
        since: Annotated[UtcTime | None, Query(description="accepted at or after (ISO 8601 with an offset)")] = None,
        until: Annotated[UtcTime | None, Query(description="accepted before (ISO 8601 with an offset)")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
        after: Annotated[int | None, Query(ge=1, le=MAX_SEQ, description="next_after of the previous page")] = None,
    ) -> JSONResponse:
        page = pk.list_purges(
            status,
            kind=None if kind is None else kind.value,
            conversation_id=conversation_id,
            since=since,
            until=until,
            limit=limit,
            after=after,
            operator_rows=_by_operator(request),
        )
        return _json(page)

    @router.get("/purges/{purge_id}", operation_id="status", response_model=models.PurgeStatus)
    def status(purge_id: IdPath, request: Request) -> JSONResponse:
        return _json(_visible(pk.status(purge_id), request))

    @router.get("/purges/{purge_id}/wait", operation_id="wait", response_model=models.PurgeStatus)
    def wait(
        purge_id: IdPath,
        request: Request,
        timeout: Annotated[
            float, Query(ge=0, allow_inf_nan=False, description=f"seconds; at most {MAX_WAIT_SECONDS:g} are waited")
        ] = 10.0,
    ) -> JSONResponse:
        _visible(pk.status(purge_id), request)
        return _json(pk.wait(purge_id, min(timeout, MAX_WAIT_SECONDS)))

    @router.get("/purges/{purge_id}/receipt", operation_id="receipt", response_model=models.Receipt)
    def receipt(purge_id: IdPath, request: Request) -> JSONResponse:
        _visible(pk.status(purge_id), request)
        return _json(pk.receipt(purge_id))

    @router.get("/purges/{purge_id}/completion", operation_id="completion", response_model=models.CompletionStatement)
    def completion(purge_id: IdPath, request: Request) -> JSONResponse:
        _visible(pk.status(purge_id), request)
        return _json(pk.completion(purge_id))

    @router.get("/ledger/consistency", operation_id="consistency", response_model=models.ConsistencyProof)
    def consistency(
        from_size: Annotated[int, Query(alias="from", ge=1, le=MAX_SEQ, description="the older tree's size")],
    ) -> JSONResponse:
        return _json(pk.consistency(from_size))

    return router


def _log_routes(pk: Purgekeeper) -> APIRouter:
    """The signed log's public part, without a token: the checkpoint and the hash tiles."""
    router = APIRouter(prefix="/log", include_in_schema=False)

    @router.get("/checkpoint")
    def log_checkpoint() -> Response:
        return Response(pk.receipts.log_file("checkpoint"), media_type="text/plain; charset=utf-8")

    @router.get("/tile/{path:path}")
    def log_tile(path: str) -> Response:
        return Response(pk.receipts.log_file(f"tile/{path}"), media_type="application/octet-stream")

    return router


def _operator_routes(pk: Purgekeeper) -> APIRouter:
    router = _v1(OPERATOR_TAG)

    @router.post("/purges/{purge_id}/retry", operation_id="retry", response_model=models.PurgeStatus)
    def retry(purge_id: IdPath, request: RetryRequest) -> JSONResponse:
        return _json(pk.retry(purge_id, actor=request.actor, reason=request.reason))

    @router.post("/resume", operation_id="resume", response_model=models.Resumed)
    def resume() -> JSONResponse:
        return _json({"resent": pk.resume()})

    @router.get("/ledger/verify", operation_id="verify_ledger", response_model=models.LedgerReport)
    def verify_ledger() -> JSONResponse:
        return _json(pk.verify_ledger())

    @router.get(
        "/ledger/checkpoint",
        operation_id="checkpoint_ledger",
        response_class=Response,
        responses={200: {"content": {"application/x-ndjson": BINARY}, "description": "a ledger export (version 2)"}},
    )
    def checkpoint_ledger() -> Response:
        directory = tempfile.mkdtemp(prefix="purgekeeper-checkpoint-")  # removed once it is sent
        try:
            written = pk.checkpoint_ledger(Path(directory) / "checkpoint.jsonl")
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return FileResponse(
            written.path,
            media_type="application/x-ndjson",
            filename=f"{written.database_id}-{written.seq:012d}.jsonl",
            background=BackgroundTask(shutil.rmtree, directory, ignore_errors=True),
        )

    @router.post("/ledger/merge", operation_id="merge_ledger", response_model=models.MergeReport)
    def merge_ledger(
        files: Annotated[list[UploadFile], File(description="checkpoint files to merge (restore)")],
        from_other_database: Annotated[
            bool,
            Form(description="also merge files written by another database; refused otherwise"),
            BeforeValidator(_flag),
        ] = False,
    ) -> JSONResponse:
        return _json(_merge(pk, files, allow_other_database=from_other_database))

    return router


def _retention_routes(pk: Purgekeeper) -> APIRouter:
    router = _v1(OPERATOR_TAG)

    @router.post("/retention/preview", operation_id="preview_retention", response_model=models.RetentionPreview)
    def preview_retention(definition: RetentionDefinition) -> JSONResponse:
        max_age = dt.timedelta(seconds=definition.max_age_seconds)
        return _json(pk.preview_retention(max_age=max_age, conversation_id=definition.conversation_id))

    @router.put("/retention/{policy_id}", operation_id="set_retention", **ACCEPTED)
    def set_retention(policy_id: IdPath, setting: RetentionSetting, x_request_id: RequestId = None) -> JSONResponse:
        acceptance = pk.set_retention(
            policy_id,
            max_age=dt.timedelta(seconds=setting.max_age_seconds),
            conversation_id=setting.conversation_id,
            scope_digest=setting.scope_digest,
            **_causal(setting, x_request_id),
        )
        return _accepted(acceptance)

    @router.post("/retention/{policy_id}/remove", operation_id="remove_retention", **ACCEPTED)
    def remove_retention(policy_id: IdPath, removal: RetentionRemoval, x_request_id: RequestId = None) -> JSONResponse:
        acceptance = pk.remove_retention(
            policy_id,
            **_causal(removal, x_request_id),
        )
        return _accepted(acceptance)

    @router.get("/retention", operation_id="list_retention", response_model=models.PolicyList)
    def list_retention() -> JSONResponse:
        return _json({"policies": pk.list_retention()})

    return router


def _hold_routes(pk: Purgekeeper) -> APIRouter:
    router = _v1(OPERATOR_TAG)

    @router.put("/holds/{hold_id}", operation_id="place_hold", **ACCEPTED)
    def place_hold(hold_id: IdPath, placing: HoldPlacing, x_request_id: RequestId = None) -> JSONResponse:
        acceptance = pk.place_hold(
            hold_id,
            conversation_ids=placing.conversation_ids,
            authors=placing.authors,
            **_causal(placing, x_request_id),
        )
        return _accepted(acceptance)

    @router.post("/holds/{hold_id}/release", operation_id="release_hold", **ACCEPTED)
    def release_hold(hold_id: IdPath, release: HoldRelease, x_request_id: RequestId = None) -> JSONResponse:
        acceptance = pk.release_hold(
            hold_id,
            **_causal(release, x_request_id),
        )
        return _accepted(acceptance)

    @router.get("/holds", operation_id="list_holds", response_model=models.HoldList)
    def list_holds(
        include_released: Annotated[bool, Query(description="also the released holds"), BeforeValidator(_flag)] = False,
    ) -> JSONResponse:
        return _json({"holds": pk.list_holds(include_released=include_released)})

    return router


def _merge(pk: Purgekeeper, files: Sequence[UploadFile], *, allow_other_database: bool) -> dict[str, Any]:
    """The uploads go to private temporary files under names chosen here; the report names
    the files as the client did."""
    if not 1 <= len(files) <= MAX_MERGE_FILES:
        raise ValidationError(f"upload 1 to {MAX_MERGE_FILES} checkpoint files")
    with tempfile.TemporaryDirectory(prefix="purgekeeper-merge-") as directory:
        paths = []
        for number, upload in enumerate(files):
            path = Path(directory) / f"upload-{number:03d}.json"
            with path.open("wb") as target:
                shutil.copyfileobj(upload.file, target)
            paths.append(path)
        report = surface.plain(pk.merge_ledger(*paths, allow_other_database=allow_other_database))
    report["files"] = [upload.filename or f"upload-{number:03d}" for number, upload in enumerate(files)]
    return dict(report)


# -- helpers --------------------------------------------------------------------------------


def _attachment(attachment: CasAttachment | FileAttachment | ReuseAttachment, index: int, cap: int) -> NewAttachment:
    if isinstance(attachment, ReuseAttachment):
        return NewAttachment.reuse(attachment.blob_id, name=attachment.name, binding=attachment.binding)
    try:
        data = base64.b64decode(attachment.data_base64, validate=True)
    except binascii.Error as exc:
        raise ValidationError(f"attachments[{index}].data_base64 is not valid base64") from exc
    if len(data) > cap:
        raise ValidationError(f"attachments[{index}] is larger than {cap} bytes")
    build = NewAttachment.cas if isinstance(attachment, CasAttachment) else NewAttachment.file
    return build(data, name=attachment.name)


def _uploaded_event(fields: dict[str, str]) -> UploadedEvent:
    """The upload's text parts as an event, checked as the JSON route checks its body."""
    try:
        return UploadedEvent.model_validate(fields)
    except PydanticValidationError as exc:
        raise RequestValidationError(exc.errors()) from None


def _inside_memory_roots(memory_path: str | None, roots: Sequence[Path]) -> Path | None:
    """A client may name a Memory repository only inside a configured Memory root."""
    if memory_path is None:
        return None
    if "\x00" in memory_path or not os.path.isabs(memory_path):
        raise ValidationError("memory_path must be an absolute path inside a Memory root")
    path = Path(memory_path)
    for root in roots:
        inside = path != root and path.is_relative_to(root) and ".." not in path.parts
        if inside and Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root)):
            return path
    raise ValidationError("memory_path must lie inside one of the configured Memory roots")


def _chunks(stream: BinaryIO, size: int = 64 * 1024) -> Iterator[bytes]:
    with stream:
        while chunk := stream.read(size):
            yield chunk


def _include_web_routers(app: FastAPI, pk: Purgekeeper, tokens: Tokens) -> None:
    """``/status`` and ``/metrics`` live in their own modules; a missing one is skipped."""
    for name in WEB_ROUTER_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            log.warning("%s is not available; its routes are not served", name)
            continue
        app.include_router(module.router(pk, tokens))


# -- errors ---------------------------------------------------------------------------------


def _install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(PurgekeeperError, _domain_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)


async def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PurgekeeperError)
    return JSONResponse(surface.error_body(exc), status_code=surface.http_status(exc))


async def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"error": "validation_error", "detail": _short(exc.errors())}, status_code=400)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = HTTP_ERROR_CODES.get(exc.status_code, "http_error")
    detail = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    return JSONResponse({"error": code, "detail": detail}, status_code=exc.status_code, headers=exc.headers)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"error": "internal_error", "detail": "internal error"}, status_code=500)


def _short(errors: Sequence[Any]) -> str:
    """Where and what, for the first few problems; never the input itself."""
    parts = []
    for error in errors[:3]:
        if error.get("type") == "json_invalid":
            parts.append("body: not valid JSON")
            continue
        location = [str(p) for p in error.get("loc", ())]
        if len(location) > 1 and location[0] == "body":
            location = location[1:]
        parts.append(f"{'.'.join(location) or 'request'}: {error.get('msg', 'invalid')}")
    if len(errors) > 3:
        parts.append(f"and {len(errors) - 3} more")
    return "; ".join(parts)[:MAX_DETAIL_LENGTH] or "invalid request"
