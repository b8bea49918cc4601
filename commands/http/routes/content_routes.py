"""The content routes (tag ``content``): conversations and channels, their events (JSON, or
a streamed ``multipart/form-data`` upload), placements and derivatives, bots, runs and their
admissions, and an attachment's bytes."""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from purgekeeper.commands.attachments import NewAttachment
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.http import models, uploads
from purgekeeper.commands.http.bodies import (
    CasAttachmentIn,
    FileAttachmentIn,
    NewAdmissionIn,
    NewBotIn,
    NewConversationIn,
    NewDerivativeIn,
    NewEventIn,
    NewEventsIn,
    NewPlacementIn,
    NewRunIn,
    ReuseAttachmentIn,
    RunFinishIn,
    upload_schema,
    uploaded_event,
)
from purgekeeper.commands.http.field_types import IdPath
from purgekeeper.commands.http.routes.common import BINARY, UPLOAD_RESPONSES, as_json, v1
from purgekeeper.commands.ingest_batch import NewEvent
from purgekeeper.schema.errors import ValidationError


def content_routes(pk: Purgekeeper, max_attachment_bytes: int) -> APIRouter:
    router = v1("content")
    _conversation_routes(router, pk)
    _event_route(router, pk, max_attachment_bytes)
    _batch_route(router, pk)
    _upload_route(router, pk, max_attachment_bytes)
    _derived_routes(router, pk)
    _bot_and_run_routes(router, pk)
    _attachment_route(router, pk)
    return router


def _conversation_routes(router: APIRouter, pk: Purgekeeper) -> None:
    @router.post(
        "/conversations",
        operation_id="create_conversation",
        summary="Create a conversation or a channel",
        response_model=models.ConversationOut,
    )
    def create_conversation(new: NewConversationIn) -> JSONResponse:
        """A conversation (or, with `kind: channel`, a channel), owned by a bot if `bot_id` names one. Creating it again
        as it is returns it; a purged or deleted id is reserved for ever (409 `id_reserved`)."""
        return as_json(pk.create_conversation(new.conversation_id, kind=new.kind, bot_id=new.bot_id))

    @router.get(
        "/conversations",
        operation_id="list_conversations",
        summary="List the conversations",
        response_model=models.ConversationListOut,
    )
    def list_conversations() -> JSONResponse:
        """Every conversation and channel that is not purged, with its state and version."""
        return as_json({"conversations": pk.list_conversations()})

    @router.get(
        "/conversations/{conversation_id}",
        operation_id="get_conversation",
        summary="Read a conversation",
        response_model=models.ConversationOut,
    )
    def get_conversation(conversation_id: IdPath) -> JSONResponse:
        """Its kind, state, version and bot. 404 for an unknown id, 410 `conversation_purged` once it is purged."""
        found = pk.get_conversation(conversation_id)
        if found is None:
            raise pk.why_unreadable(conversation_id)
        return as_json(found)

    @router.get(
        "/conversations/{conversation_id}/events",
        operation_id="read_conversation",
        summary="Read a conversation's events",
        response_model=models.EventListOut,
    )
    def read_conversation(conversation_id: IdPath) -> JSONResponse:
        """The events no purge fences, oldest first, with their attachments (the bytes are at
        `/v1/attachments/{attachment_id}`). 410 `conversation_purged` once the conversation is purged."""
        events = pk.read_conversation(conversation_id)
        if not events and pk.get_conversation(conversation_id) is None:
            raise pk.why_unreadable(conversation_id)
        return as_json({"events": events})


def _event_route(router: APIRouter, pk: Purgekeeper, max_attachment_bytes: int) -> None:
    """An event as JSON, its attachments base64 inside it."""

    @router.post(
        "/conversations/{conversation_id}/events",
        operation_id="ingest_event",
        summary="Add an event",
        response_model=models.EventOut,
    )
    def ingest_event(conversation_id: IdPath, new: NewEventIn) -> JSONResponse:
        """One event (a message) in the conversation, with small attachments as base64 inside the JSON body
        (`upload_event` takes large ones). Idempotent on `provider_event_id`: the same delivery returns the first
        event. 409 when `event_id` already exists; 410 when the conversation, the author or the provider id is
        fenced."""
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
        return as_json(event)


def _batch_route(router: APIRouter, pk: Purgekeeper) -> None:
    @router.post(
        "/conversations/{conversation_id}/events:batch",
        operation_id="ingest_events",
        summary="Add many events",
        response_model=models.IngestBatchOut,
    )
    def ingest_events(conversation_id: IdPath, new: NewEventsIn) -> JSONResponse:
        """At most 1,000 events (and 1 MiB of JSON) in one transaction, for a host importing history; no
        attachments. One result per event, in order: `accepted`, `duplicate` (its `provider_event_id` was
        ingested already: the event stored first) or `refused` (its own fence, or its `event_id` taken: the
        error's code; nothing of it is written, the others are). 404 or 410 for the conversation refuse the whole
        batch, nothing written."""
        given = [NewEvent(**event.model_dump()) for event in new.events]
        return as_json({"results": pk.ingest_events(conversation_id, given)})


def _upload_route(router: APIRouter, pk: Purgekeeper, max_attachment_bytes: int) -> None:
    spool = uploads.spool_directory(pk.settings.blob_root)

    @router.post(
        "/conversations/{conversation_id}/events/upload",
        operation_id="upload_event",
        summary="Add an event with attachments (multipart)",
        response_model=models.EventOut,
        responses=UPLOAD_RESPONSES,
        openapi_extra={"requestBody": upload_schema()},
    )
    async def upload_event(conversation_id: IdPath, request: Request) -> JSONResponse:
        """``ingest_event`` as ``multipart/form-data``: the event's fields as text parts, each
        attachment a file part named ``file`` or ``cas`` (its filename is its name)."""
        await run_in_threadpool(uploads.sweep_stale, pk.settings.blob_root)  # a crashed upload's leftovers
        upload = await uploads.receive(request, spool=spool, max_attachment_bytes=max_attachment_bytes)
        try:
            new = uploaded_event(upload.fields)
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
        return as_json(event)


def _derived_routes(router: APIRouter, pk: Purgekeeper) -> None:
    """What hangs off the events: placements and derivatives."""

    @router.post(
        "/conversations/{conversation_id}/placements",
        operation_id="place_event",
        summary="Place an event in another conversation",
        response_model=models.PlacementOut,
    )
    def place_event(conversation_id: IdPath, new: NewPlacementIn) -> JSONResponse:
        """A forward: the same event, placed in one more conversation. 410 when the event is no longer live."""
        return as_json(pk.place_event(new.event_id, conversation_id))

    @router.post(
        "/conversations/{conversation_id}/derivatives",
        operation_id="add_derivative",
        summary="Record a derivative",
        response_model=models.DerivativeOut,
    )
    def add_derivative(conversation_id: IdPath, new: NewDerivativeIn) -> JSONResponse:
        """Data made from events (a summary, an index entry), linked to the events it came from: a purge of any of them
        clears its payload."""
        derivative = pk.add_derivative(
            conversation_id, kind=new.kind, payload=new.payload, source_event_ids=new.source_event_ids
        )
        return as_json(derivative)


def _bot_and_run_routes(router: APIRouter, pk: Purgekeeper) -> None:
    """Bots, their runs, and what the runs were given."""

    @router.post("/bots", operation_id="register_bot", summary="Register a bot", response_model=models.BotOut)
    def register_bot(new: NewBotIn) -> JSONResponse:
        """A bot, and its Memory repository if it has one (a Git working tree inside one of the server's Memory roots),
        in which an ownership marker is written so that an erasure can prove the repository is the bot's."""
        memory_path = _inside_memory_roots(new.memory_path, pk.settings.memory_roots)
        return as_json(pk.register_bot(new.bot_id, name=new.name, memory_path=memory_path))

    @router.post("/runs", operation_id="start_run", summary="Start an agent run", response_model=models.RunOut)
    def start_run(new: NewRunIn) -> JSONResponse:
        """A run of the bot in the conversation. 410 for a deleted bot or a purged or deleted conversation."""
        return as_json(pk.start_run(new.conversation_id, bot_id=new.bot_id, run_id=new.run_id))

    @router.post(
        "/runs/{run_id}/finish", operation_id="finish_run", summary="Finish a run", response_model=models.RunOut
    )
    def finish_run(run_id: IdPath, finish: RunFinishIn) -> JSONResponse:
        """The run's terminal status and its output (JSON). A finished run is not finished again."""
        return as_json(pk.finish_run(run_id, status=finish.status, output=finish.output))

    @router.post(
        "/runs/{run_id}/admissions",
        operation_id="admit",
        summary="Admit an event to a run",
        response_model=models.AdmissionOut,
    )
    def admit(run_id: IdPath, new: NewAdmissionIn) -> JSONResponse:
        """Records that the event was given to the run, with its input payload; a purge of the event
        clears the payload."""
        return as_json(pk.admit(new.event_id, run_id, payload=new.payload))


def _attachment_route(router: APIRouter, pk: Purgekeeper) -> None:
    @router.get(
        "/attachments/{attachment_id}",
        operation_id="open_attachment",
        summary="Download an attachment",
        response_class=StreamingResponse,
        responses={200: {"content": {"application/octet-stream": BINARY}, "description": "the bytes"}},
    )
    def open_attachment(attachment_id: IdPath) -> StreamingResponse:
        """The bytes of a live attachment, streamed. 410 `content_purged` once its event is purged."""
        stream = pk.open_attachment(attachment_id)
        return StreamingResponse(
            _chunks(stream), media_type="application/octet-stream", background=BackgroundTask(stream.close)
        )


def _attachment(
    attachment: CasAttachmentIn | FileAttachmentIn | ReuseAttachmentIn, index: int, cap: int
) -> NewAttachment:
    if isinstance(attachment, ReuseAttachmentIn):
        return NewAttachment.reuse(attachment.blob_id, name=attachment.name, binding=attachment.binding)
    try:
        data = base64.b64decode(attachment.data_base64, validate=True)
    except binascii.Error as exc:
        raise ValidationError(f"attachments[{index}].data_base64 is not valid base64") from exc
    if len(data) > cap:
        raise ValidationError(f"attachments[{index}] is larger than {cap} bytes")
    build = NewAttachment.cas if isinstance(attachment, CasAttachmentIn) else NewAttachment.file
    return build(data, name=attachment.name)


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
