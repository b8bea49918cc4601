"""What the route modules share: a group of ``/v1`` routes (``v1``), the responses every
operation documents, and the answers: ``as_json`` (``surface.plain`` of a record) and
``accepted`` (a ``202`` with the purge's Location)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer

from purgekeeper.commands import kinds, surface
from purgekeeper.commands.http import models
from purgekeeper.commands.http.bodies import Accepting
from purgekeeper.commands.http.guard import API_PREFIX, OPERATOR_STATE
from purgekeeper.commands.http.media_types import JsonBodyRoute
from purgekeeper.commands.records import Acceptance, PurgeStatus
from purgekeeper.schema.errors import NotFound

OPERATOR_TAG = "operator"
ORIGIN = "http"

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": models.ErrorOut, "description": description}
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
    413: {"model": models.ErrorOut, "description": "an attachment or the whole request is too large"},
    415: {"model": models.ErrorOut, "description": "not multipart/form-data"},
}
ACCEPTED: dict[str, Any] = {
    "status_code": 202,
    "response_model": models.AcceptanceOut,
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


def v1(tag: str) -> APIRouter:
    """One group of ``/v1`` routes; the bearer scheme is declared for the OpenAPI document (the
    ``RequestGuard`` middleware checks the token), and a JSON body must come as JSON
    (``JsonBodyRoute``)."""
    return APIRouter(
        prefix=API_PREFIX,
        tags=[tag],
        route_class=JsonBodyRoute,
        dependencies=[Security(HTTPBearer(auto_error=False))],
        responses=ERROR_RESPONSES,
    )


def as_json(value: Any) -> JSONResponse:
    return JSONResponse(surface.plain(value))


def by_operator(request: Request) -> bool:
    """Whether the request carries the operator's token (``RequestGuard`` says)."""
    return bool(getattr(request.state, OPERATOR_STATE, False))


def visible(status: PurgeStatus, request: Request) -> PurgeStatus:
    """A policy's or a hold's row is the operator's (``OPERATOR_KINDS``): to a host, not found."""
    if status.kind in kinds.OPERATOR_KINDS and not by_operator(request):
        raise NotFound(f"no purge {status.purge_id}")
    return status


def causal(body: Accepting, request_id: str | None) -> dict[str, Any]:
    """An acceptance's who, why and which request, as every accepting command takes them."""
    return {
        "actor": body.actor,
        "reason": body.reason,
        "idempotency_key": body.idempotency_key,
        "request_id": request_id,
        "origin": ORIGIN,
    }


def accepted(acceptance: Acceptance) -> JSONResponse:
    """202 with the Location of the purge's status (the same for an idempotent replay)."""
    location = f"{API_PREFIX}/purges/{acceptance.purge_id}"
    return JSONResponse(surface.plain(acceptance), status_code=202, headers={"Location": location})
