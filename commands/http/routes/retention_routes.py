"""Retention policies and legal holds (tag ``operator``, the operator token). Setting or
removing a policy and placing or releasing a hold are acceptances (``202`` with the purge's
Location)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BeforeValidator

from commands.handle import Purgekeeper
from commands.http import models
from commands.http.bodies import (
    HoldPlacingIn,
    HoldReleaseIn,
    RetentionDefinitionIn,
    RetentionRemovalIn,
    RetentionSettingIn,
)
from commands.http.field_types import IdPath, RequestId, flag
from commands.http.routes.common import ACCEPTED, OPERATOR_TAG, accepted, as_json, causal, v1


def retention_routes(pk: Purgekeeper) -> APIRouter:
    router = v1(OPERATOR_TAG)

    @router.post("/retention/preview", operation_id="preview_retention", response_model=models.RetentionPreviewOut)
    def preview_retention(definition: RetentionDefinitionIn) -> JSONResponse:
        max_age = dt.timedelta(seconds=definition.max_age_seconds)
        return as_json(pk.preview_retention(max_age=max_age, conversation_id=definition.conversation_id))

    @router.put("/retention/{policy_id}", operation_id="set_retention", **ACCEPTED)
    def set_retention(policy_id: IdPath, setting: RetentionSettingIn, x_request_id: RequestId = None) -> JSONResponse:
        acceptance = pk.set_retention(
            policy_id,
            max_age=dt.timedelta(seconds=setting.max_age_seconds),
            conversation_id=setting.conversation_id,
            scope_digest=setting.scope_digest,
            **causal(setting, x_request_id),
        )
        return accepted(acceptance)

    @router.post("/retention/{policy_id}/remove", operation_id="remove_retention", **ACCEPTED)
    def remove_retention(
        policy_id: IdPath, removal: RetentionRemovalIn, x_request_id: RequestId = None
    ) -> JSONResponse:
        acceptance = pk.remove_retention(
            policy_id,
            **causal(removal, x_request_id),
        )
        return accepted(acceptance)

    @router.post(
        "/retention/{policy_id}/run",
        operation_id="run_retention_policy",
        response_model=models.RetentionRunOutcomeOut,
        summary="Take a standing policy's turn now",
        description=(
            "What the scheduler's turn does, now rather than at the policy's next run (after a "
            "hold's release, say): a run is accepted once per cutoff; `purge_id` is null when "
            "nothing new had expired. 404 for a policy that does not stand."
        ),
    )
    def run_retention_policy(policy_id: IdPath) -> JSONResponse:
        return as_json(pk.run_retention_policy(policy_id))

    @router.get("/retention", operation_id="list_retention", response_model=models.PolicyListOut)
    def list_retention() -> JSONResponse:
        return as_json({"policies": pk.list_retention()})

    return router


def hold_routes(pk: Purgekeeper) -> APIRouter:
    router = v1(OPERATOR_TAG)

    @router.put("/holds/{hold_id}", operation_id="place_hold", **ACCEPTED)
    def place_hold(hold_id: IdPath, placing: HoldPlacingIn, x_request_id: RequestId = None) -> JSONResponse:
        acceptance = pk.place_hold(
            hold_id,
            conversation_ids=placing.conversation_ids,
            authors=placing.authors,
            **causal(placing, x_request_id),
        )
        return accepted(acceptance)

    @router.post("/holds/{hold_id}/release", operation_id="release_hold", **ACCEPTED)
    def release_hold(hold_id: IdPath, release: HoldReleaseIn, x_request_id: RequestId = None) -> JSONResponse:
        acceptance = pk.release_hold(
            hold_id,
            **causal(release, x_request_id),
        )
        return accepted(acceptance)

    @router.get("/holds", operation_id="list_holds", response_model=models.HoldListOut)
    def list_holds(
        include_released: Annotated[bool, Query(description="also the released holds"), BeforeValidator(flag)] = False,
    ) -> JSONResponse:
        return as_json({"holds": pk.list_holds(include_released=include_released)})

    return router
