"""Retention policies and legal holds (tag ``operator``, the operator token). Setting or
removing a policy and placing or releasing a hold are acceptances (``202`` with the purge's
Location)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Body, Query
from fastapi.responses import JSONResponse
from pydantic import BeforeValidator

from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.http import models
from purgekeeper.commands.http.bodies import (
    TURN_EXAMPLE,
    HoldPlacingIn,
    HoldReleaseIn,
    RetentionDefinitionIn,
    RetentionRemovalIn,
    RetentionSettingIn,
    RetentionTurnIn,
)
from purgekeeper.commands.http.field_types import IdPath, RequestId, flag
from purgekeeper.commands.http.routes.common import ACCEPTED, OPERATOR_TAG, ORIGIN, accepted, as_json, causal, v1

# the body is optional (no body: the scheduler's turn), so the example is the parameter's own
OptionalTurn = Annotated[RetentionTurnIn | None, Body(examples=[TURN_EXAMPLE])]


def retention_routes(pk: Purgekeeper) -> APIRouter:
    router = v1(OPERATOR_TAG)
    _policy_changes(router, pk)
    _policy_runs(router, pk)
    return router


def _policy_changes(router: APIRouter, pk: Purgekeeper) -> None:
    """A policy's preview, and the acceptances that set or remove it."""

    @router.post(
        "/retention/preview",
        operation_id="preview_retention",
        summary="Preview a retention policy",
        response_model=models.RetentionPreviewOut,
    )
    def preview_retention(definition: RetentionDefinitionIn) -> JSONResponse:
        """What a policy of `max_age_seconds` over one conversation (or all) would expire now, what holds keep, and the
        `scope_digest` to set it with."""
        max_age = dt.timedelta(seconds=definition.max_age_seconds)
        return as_json(pk.preview_retention(max_age=max_age, conversation_id=definition.conversation_id))

    @router.put("/retention/{policy_id}", operation_id="set_retention", summary="Set a retention policy", **ACCEPTED)
    def set_retention(policy_id: IdPath, setting: RetentionSettingIn, x_request_id: RequestId = None) -> JSONResponse:
        """Accepts the previewed policy (202); the scheduler runs it. 409 `policy_conflict` when another policy governs
        the scope."""
        acceptance = pk.set_retention(
            policy_id,
            max_age=dt.timedelta(seconds=setting.max_age_seconds),
            conversation_id=setting.conversation_id,
            scope_digest=setting.scope_digest,
            **causal(setting, x_request_id),
        )
        return accepted(acceptance)

    @router.post(
        "/retention/{policy_id}/remove",
        operation_id="remove_retention",
        summary="Remove a retention policy",
        **ACCEPTED,
    )
    def remove_retention(
        policy_id: IdPath, removal: RetentionRemovalIn, x_request_id: RequestId = None
    ) -> JSONResponse:
        """Runs already accepted finish their cleanup."""
        acceptance = pk.remove_retention(
            policy_id,
            **causal(removal, x_request_id),
        )
        return accepted(acceptance)


def _policy_runs(router: APIRouter, pk: Purgekeeper) -> None:
    """A policy's turn now, and the standing policies."""

    @router.post(
        "/retention/{policy_id}/run",
        operation_id="run_retention_policy",
        response_model=models.RetentionRunOutcomeOut,
        summary="Take a standing policy's turn now",
        description=(
            "What the scheduler's turn does, now rather than at the policy's next run (after a "
            "hold's release, say): a run is accepted once per cutoff; `purge_id` is null when "
            "nothing new had expired. With a body (an `actor` and a `reason`), they are "
            "recorded on the policy and in the ledger row of the run the turn accepts; without, "
            "the turn is the scheduler's. 404 for a policy that does not stand."
        ),
    )
    def run_retention_policy(policy_id: IdPath, turn: OptionalTurn = None) -> JSONResponse:
        if turn is None:
            return as_json(pk.run_retention_policy(policy_id))
        return as_json(pk.run_retention_policy(policy_id, actor=turn.actor, reason=turn.reason, origin=ORIGIN))

    @router.get(
        "/retention",
        operation_id="list_retention",
        summary="List the retention policies",
        response_model=models.PolicyListOut,
    )
    def list_retention() -> JSONResponse:
        """Each standing policy, with its last and next runs."""
        return as_json({"policies": pk.list_retention()})


def hold_routes(pk: Purgekeeper) -> APIRouter:
    router = v1(OPERATOR_TAG)

    @router.put("/holds/{hold_id}", operation_id="place_hold", summary="Place a legal hold", **ACCEPTED)
    def place_hold(hold_id: IdPath, placing: HoldPlacingIn, x_request_id: RequestId = None) -> JSONResponse:
        """On conversations and authors: while it stands, a purge that would remove what it covers is refused (409
        `legal_hold`), and retention keeps that content."""
        acceptance = pk.place_hold(
            hold_id,
            conversation_ids=placing.conversation_ids,
            authors=placing.authors,
            **causal(placing, x_request_id),
        )
        return accepted(acceptance)

    @router.post("/holds/{hold_id}/release", operation_id="release_hold", summary="Release a legal hold", **ACCEPTED)
    def release_hold(hold_id: IdPath, release: HoldReleaseIn, x_request_id: RequestId = None) -> JSONResponse:
        """The next run of every retention policy walks its whole scope again. A released hold's id is never reused."""
        acceptance = pk.release_hold(
            hold_id,
            **causal(release, x_request_id),
        )
        return accepted(acceptance)

    @router.get("/holds", operation_id="list_holds", summary="List the legal holds", response_model=models.HoldListOut)
    def list_holds(
        include_released: Annotated[bool, Query(description="also the released holds"), BeforeValidator(flag)] = False,
    ) -> JSONResponse:
        """The standing holds; with `include_released`, the released ones too."""
        return as_json({"holds": pk.list_holds(include_released=include_released)})

    return router
