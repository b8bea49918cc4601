"""The purge routes (tag ``purges``): the previews and the acceptances of purges, deletions
and erasures (each a ``202`` with the purge's Location), then the purges' status: the list,
one purge, and waiting for one."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse

from purgekeeper.commands import validation
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.http import models
from purgekeeper.commands.http.bodies import (
    AuthorErasureIn,
    AuthorWindowIn,
    BotDeletionIn,
    ChannelDeletionIn,
    ConfirmationIn,
    ConversationPurgeIn,
    ScopeIn,
)
from purgekeeper.commands.http.field_types import ID_PATTERN, MAX_SEQ, IdPath, RequestId, UtcTime
from purgekeeper.commands.http.routes.common import ACCEPTED, accepted, as_json, by_operator, causal, v1, visible
from purgekeeper.commands.purge_reads import MAX_PAGE
from purgekeeper.commands.records import RepositoryIdentity
from purgekeeper.schema.states import PurgeKind

MAX_WAIT_SECONDS = 30.0


def purge_routes(pk: Purgekeeper) -> APIRouter:
    router = v1("purges")
    _content_purges(router, pk)
    _conversations_and_channels(router, pk)
    _bot_and_author_purges(router, pk)
    return router


def _content_purges(router: APIRouter, pk: Purgekeeper) -> None:
    @router.post(
        "/purges/preview",
        operation_id="preview_purge",
        summary="Preview a content purge",
        response_model=models.PurgePreviewOut,
    )
    def preview_purge(scope: Annotated[ScopeIn, Body()]) -> JSONResponse:
        """What a purge of these events (by id, or a conversation with a time window or an author) would touch: events,
        admissions, runs, derivatives, the attachments whose bytes go and those kept, the runs that block it, legal
        holds and disclosures. Send its `scope_digest` with the confirmation."""
        return as_json(pk.preview_purge(scope.scope()))

    @router.post("/purges/confirm", operation_id="confirm_purge", summary="Confirm a content purge", **ACCEPTED)
    def confirm_purge(confirmation: ConfirmationIn, x_request_id: RequestId = None) -> JSONResponse:
        """Accepts the previewed purge (202, its status at the Location). 409 `stale_confirmation` when the scope
        changed since the preview, `active_runs` or `legal_hold` when something refuses it."""
        acceptance = pk.confirm_purge(
            confirmation.scope.scope(),
            scope_digest=confirmation.scope_digest,
            **causal(confirmation, x_request_id),
        )
        return accepted(acceptance)


def _conversations_and_channels(router: APIRouter, pk: Purgekeeper) -> None:
    @router.get(
        "/conversations/{conversation_id}/purge-preview",
        operation_id="preview_conversation_purge",
        summary="Preview a conversation's purge",
        response_model=models.ConversationPreviewOut,
    )
    def preview_conversation_purge(conversation_id: IdPath) -> JSONResponse:
        """What purging the whole conversation would remove, in counts (events, those also placed elsewhere,
        attachments, runs, derivatives), the runs and legal holds that would refuse it, what stays, and its `version`
        to send as `expected_version`. An id no conversation has is no error: `unknown` says so (a purge reserves it).
        """
        return as_json(pk.preview_conversation_purge(conversation_id))

    @router.get(
        "/channels/{channel_id}/deletion-preview",
        operation_id="preview_channel_deletion",
        summary="Preview a channel's deletion",
        response_model=models.ConversationPreviewOut,
    )
    def preview_channel_deletion(channel_id: IdPath) -> JSONResponse:
        """What the channel holds, in counts; its deletion removes none of it (`removes_content` is false). 404 for an
        unknown id, 400 for a conversation that is not a channel."""
        return as_json(pk.preview_channel_deletion(channel_id))

    @router.post(
        "/conversations/{conversation_id}/purge",
        operation_id="purge_conversation",
        summary="Purge a conversation or a channel",
        **ACCEPTED,
    )
    def purge_conversation(
        conversation_id: IdPath, purge: ConversationPurgeIn, x_request_id: RequestId = None
    ) -> JSONResponse:
        """Accepts the purge of the whole conversation in O(1), whatever its size, optionally only at `expected_version`
        (409 `version_conflict`). An absent id is reserved for ever, and the answer says `"reserved_absent": true`; a
        repeat answers `already_purged`."""
        acceptance = pk.purge_conversation(
            conversation_id,
            expected_version=purge.expected_version,
            **causal(purge, x_request_id),
        )
        return accepted(acceptance)

    @router.post("/channels/{channel_id}/delete", operation_id="delete_channel", summary="Delete a channel", **ACCEPTED)
    def delete_channel(channel_id: IdPath, deletion: ChannelDeletionIn, x_request_id: RequestId = None) -> JSONResponse:
        """Closes the channel to new members, routing and content; its history stays readable until it is purged."""
        acceptance = pk.delete_channel(
            channel_id,
            **causal(deletion, x_request_id),
        )
        return accepted(acceptance)


def _bot_and_author_purges(router: APIRouter, pk: Purgekeeper) -> None:
    @router.get(
        "/bots/{bot_id}/deletion-preview",
        operation_id="preview_bot_deletion",
        summary="Preview a bot's deletion",
        response_model=models.BotDeletionPreviewOut,
    )
    def preview_bot_deletion(bot_id: IdPath) -> JSONResponse:
        """The runs that block it, whether its Memory repository can be erased (and the identity to send back as
        `reviewed_repository`), the holds on its conversations, and disclosures."""
        return as_json(pk.preview_bot_deletion(bot_id))

    @router.post("/bots/{bot_id}/delete", operation_id="delete_bot", summary="Delete a bot", **ACCEPTED)
    def delete_bot(bot_id: IdPath, deletion: BotDeletionIn, x_request_id: RequestId = None) -> JSONResponse:
        """Refused while the bot has non-terminal runs (409 `active_runs`). With `erase_memory`, the reviewed repository
        must still be provably the bot's (409 `memory_erasure_unavailable`)."""
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
        summary="Preview an author erasure",
        response_model=models.AuthorErasurePreviewOut,
    )
    def preview_author_erasure(window: AuthorWindowIn) -> JSONResponse:
        """The totals of what erasing everything the author wrote (before `before`, if given) would touch, per
        conversation, with shared attachments, blocking runs, holds, disclosures and the `scope_digest` to confirm
        with."""
        return as_json(pk.preview_author_erasure(window.author, before=window.before))

    @router.post("/authors/erase", operation_id="erase_author", summary="Erase an author", **ACCEPTED)
    def erase_author(erasure: AuthorErasureIn, x_request_id: RequestId = None) -> JSONResponse:
        """Accepts the previewed erasure in O(1). With `close_author` (the default) every later event by the author is
        refused too (410 `author_erased`)."""
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
    _list_route(router, pk)
    _one_purge_routes(router, pk)
    return router


def _list_route(router: APIRouter, pk: Purgekeeper) -> None:
    @router.get("/purges", operation_id="list_purges", summary="List purges", response_model=models.PurgePageOut)
    def list_purges(
        request: Request,
        status: Annotated[
            Literal["accepted", "cleaning", "retrying", "complete", "incomplete"] | None,
            Query(description="a derived status, or retrying: a step waits for its next attempt after a failed one"),
        ] = None,
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
        """Newest first, filtered by status, kind, conversation and acceptance time (`since` <= accepted_at < `until`),
        a page of `limit` at a time; pass `next_after` as `after` for the next page."""
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


def _one_purge_routes(router: APIRouter, pk: Purgekeeper) -> None:
    @router.get(
        "/purges/{purge_id}",
        operation_id="status",
        summary="Read a purge's status",
        response_model=models.PurgeStatusOut,
    )
    def status(purge_id: IdPath, request: Request) -> JSONResponse:
        """Derived from its cleanup steps (accepted, cleaning, complete or incomplete), with each step's attempts,
        progress and last error."""
        return as_json(visible(pk.status(purge_id), request))

    @router.get(
        "/purges/{purge_id}/wait",
        operation_id="wait",
        summary="Wait for a purge to finish",
        response_model=models.PurgeStatusOut,
    )
    def wait(
        purge_id: IdPath,
        request: Request,
        timeout: Annotated[
            float, Query(ge=0, allow_inf_nan=False, description=f"seconds; at most {MAX_WAIT_SECONDS:g} are waited")
        ] = 10.0,
    ) -> JSONResponse:
        """Blocks until the purge is complete or incomplete, or `timeout` seconds pass (at most 30), and returns its
        status."""
        visible(pk.status(purge_id), request)
        return as_json(pk.wait(purge_id, min(timeout, MAX_WAIT_SECONDS)))
