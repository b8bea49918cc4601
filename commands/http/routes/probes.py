"""The probes (tag ``probes``): for a load balancer, an orchestrator's liveness and readiness
checks and an uptime monitor. Outside ``/v1``, they need no token, so they reveal nothing: no
version, path, database URL or count, only a status and, when not ready, one fixed reason.

=======  ========  =========================================================================
method   path      answers
=======  ========  =========================================================================
GET      /healthz  ``200 {"status": "ok"}`` whenever the process answers
GET      /readyz   ``200 {"status": "ok"}`` when content reads are served; else ``503
                   {"status": "unavailable", "reason": CODE}``
=======  ========  =========================================================================

Liveness looks at nothing but the process (its event loop; no database), because restarting
the process cures no database outage: an orchestrator that restarts on ``/healthz`` must not
see one there. Readiness makes the gate's O(1) check as the next content call would make it
(``Gate.quick``: one primary-key read of the ledger head and a ``stat`` of its copy), the
check ``purgectl health --quick`` reports. Its reasons:

- ``database_unreachable``: the database did not answer (an ``InfrastructureError``: refused,
  ended, timed out);
- ``messaging_unavailable``: the gate is closed (a restore merge under way, the ledger behind
  or unlike its copy outside the database, damage the audit found).

Why is the operator's to read, with a token: ``/status``, ``purgectl health`` and the
diagnostics of any content call's ``messaging_unavailable``. A ready process may still fail to
accept a purge whose ledger row cannot be copied (``ledger_not_copied``, which ``purgectl
health`` checks by writing to the checkpoint directory): reads are what readiness promises.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.http import models
from purgekeeper.schema.errors import InfrastructureError

PROBES_TAG = "probes"
OK = {"status": "ok"}
NOT_CACHED = {"Cache-Control": "no-store"}  # a cache in between must never answer for the process
NOT_READY: dict[int | str, dict[str, Any]] = {
    503: {"model": models.NotReadyOut, "description": "content reads are not served, for the reason given"}
}


def probe_routes(pk: Purgekeeper) -> APIRouter:
    router = APIRouter(tags=[PROBES_TAG])

    @router.get(
        "/healthz", operation_id="healthz", summary="Liveness: the process answers", response_model=models.ProbeOut
    )
    async def healthz() -> JSONResponse:
        """Always 200 while the process answers; it reads nothing (no token, no database)."""
        return JSONResponse(OK, headers=NOT_CACHED)

    @router.get(
        "/readyz",
        operation_id="readyz",
        summary="Readiness: content reads are served",
        response_model=models.ProbeOut,
        responses=NOT_READY,
    )
    def readyz() -> JSONResponse:
        """200 when the database answers and the gate is open; else 503 with a fixed reason
        (``database_unreachable``, ``messaging_unavailable``) and nothing more. No token."""
        reason = unready_reason(pk)
        if reason is None:
            return JSONResponse(OK, headers=NOT_CACHED)
        return JSONResponse({"status": "unavailable", "reason": reason}, status_code=503, headers=NOT_CACHED)

    return router


def unready_reason(pk: Purgekeeper) -> models.NotReadyReason | None:
    """Why content reads are not served now, as a fixed code; None when they are."""
    try:
        state = pk.gate.quick()
    except InfrastructureError:
        return "database_unreachable"
    return None if state.open else "messaging_unavailable"
