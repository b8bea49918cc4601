"""The purge routes (tag ``purges``): the previews and the acceptances of purges, deletions
and erasures (each a ``202`` with the purge's Location), then the purges' status: the list,
one purge, and waiting for one."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse

from commands import validation
from commands.handle import Purgekeeper
from commands.http import models
from commands.http.bodies import (
    AuthorErasureIn,
    AuthorWindowIn,
    BotDeletionIn,
    ChannelDeletionIn,
    ConfirmationIn,
    ConversationPurgeIn,
    ScopeIn,
)
from commands.http.field_types import ID_PATTERN, MAX_SEQ, IdPath, RequestId, UtcTime
from commands.http.routes.common import ACCEPTED, accepted, as_json, by_operator, causal, v1, visible
from commands.operations import MAX_PAGE
from commands.records import RepositoryIdentity
from schema.states import PurgeKind

MAX_WAIT_SECONDS = 30.0


def purge_routes(pk: Purgekeeper) -> APIRouter:
    router = v1("purges")
    _content_purges(router, pk)
    _bot_and_author_purges(router, pk)
    return router


def _content_purges(router: APIRouter, pk: Purgekeeper) -> None:
    @router.post("/purges/preview", operation_id="preview_purge", response_model=models.PurgePreviewOut)
    def preview_purge(scope: Annotated[ScopeIn, Body()]) -> JSONResponse:
        return as_json(pk.preview_purge(scope.scope()))

    @router.post("/purges/confirm", operation_id="confirm_purge", **ACCEPTED)
    def confirm_purge(confirmation: ConfirmationIn, x_request_id: RequestId = None) -> JSONResponse:
        acceptance = pk.confirm_purge(
            confirmation.scope.scope(),
            scope_digest=confirmation.scope_digest,
            **causal(confirmation, x_request_id),
        )
        return accepted(acceptance)

    @router.post("/conversations/{conversation_id}/purge", operation_id="purge_conversation", **ACCEPTED)
    def purge_conversation(
        conversation_id: IdPath, purge: ConversationPurgeIn, x_request_id: RequestId = None
    ) -> JSONResponse:
        acceptance = pk.purge_conversation(
            conversation_id,
            expected_version=purge.expected_version,
            **causal(purge, x_request_id),
        )
        return accepted(acceptance)

    @router.post("/channels/{channel_id}/delete", operation_id="delete_channel", **ACCEPTED)
    def delete_channel(channel_id: IdPath, deletion: ChannelDeletionIn, x_request_id: RequestId = None) -> JSONResponse:
        acceptance = pk.delete_channel(
            channel_id,
            **causal(deletion, x_request_id),
        )
        return accepted(acceptance)


def _bot_and_author_purges(router: APIRouter, pk: Purgekeeper) -> None:
    @router.get(
        "/bots/{bot_id}/deletion-preview",
        operation_id="preview_bot_deletion",
        response_model=models.BotDeletionPreviewOut,
    )
    def preview_bot_deletion(bot_id: IdPath) -> JSONResponse:
        return as_json(pk.preview_bot_deletion(bot_id))

    @router.post("/bots/{bot_id}/delete", operation_id="delete_bot", **ACCEPTED)
    def delete_bot(bot_id: IdPath, deletion: BotDeletionIn, x_request_id: RequestId = None) -> JSONResponse:
        reviewed = deletion.reviewed_repository
        acceptance = pk.delete_bot(
            bot_id,
            erase_memory=deletion.erase_memory,
            reviewed_repository=RepositoryIdentity(reviewed.path, reviewed.marker_id) if reviewed else None,
            **causal(deletion, x_request_id),
        )
        return accepted(acceptance)

    @router.post(
        "/authors/erasure-preview",
        operation_id="preview_author_erasure",
        response_model=models.AuthorErasurePreviewOut,
    )
    def preview_author_erasure(window: AuthorWindowIn) -> JSONResponse:
        return as_json(pk.preview_author_erasure(window.author, before=window.before))

    @router.post("/authors/erase", operation_id="erase_author", **ACCEPTED)
    def erase_author(erasure: AuthorErasureIn, x_request_id: RequestId = None) -> JSONResponse:
        acceptance = pk.erase_author(
            erasure.author,
            scope_digest=erasure.scope_digest,
            before=erasure.before,
            close_author=erasure.close_author,
            **causal(erasure, x_request_id),
        )
        return accepted(acceptance)


def status_routes(pk: Purgekeeper) -> APIRouter:
    """Hosts poll status, so these are host routes; a policy's or a hold's row is the
    operator's (``visible``)."""
    router = v1("purges")

    @router.get("/purges", operation_id="list_purges", response_model=models.PurgePageOut)
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
            operator_rows=by_operator(request),
        )
        return as_json(page)

    @router.get("/purges/{purge_id}", operation_id="status", response_model=models.PurgeStatusOut)
    def status(purge_id: IdPath, request: Request) -> JSONResponse:
        return as_json(visible(pk.status(purge_id), request))

    @router.get("/purges/{purge_id}/wait", operation_id="wait", response_model=models.PurgeStatusOut)
    def wait(
        purge_id: IdPath,
        request: Request,
        timeout: Annotated[
            float, Query(ge=0, allow_inf_nan=False, description=f"seconds; at most {MAX_WAIT_SECONDS:g} are waited")
        ] = 10.0,
    ) -> JSONResponse:
        visible(pk.status(purge_id), request)
        return as_json(pk.wait(purge_id, min(timeout, MAX_WAIT_SECONDS)))

    return router
