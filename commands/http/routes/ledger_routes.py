"""The proofs and the signed log. ``proof_routes`` (tag ``purges``, host routes): a purge's
receipt (its inclusion proof) and completion statement, and the ledger's consistency proof
between two tree sizes. ``log_routes``: the signed log's public part under ``/log``, which
holds hashes only and needs no token (not in the OpenAPI document): ``GET /log/checkpoint``,
``GET /log/tile/<L>/<N>[.p/<W>]``, ``GET /log/rotation/<n>`` (the key's rotation statements)
and ``GET /log/consistency?from=N`` (the same document as
``GET /v1/ledger/consistency``: the proof from the tree of ``N`` leaves to the newest
checkpoint, which it carries)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.http import receipt_models
from purgekeeper.commands.http.field_types import MAX_SEQ, IdPath
from purgekeeper.commands.http.routes.common import as_json, visible


def proof_routes(router: APIRouter, pk: Purgekeeper) -> None:
    """Added to the group of the purges' status (``purges.status_routes``): the same tag and
    the same callers, and one router as before the routes were split into modules."""

    @router.get(
        "/purges/{purge_id}/receipt",
        operation_id="receipt",
        summary="Read a purge's receipt",
        response_model=receipt_models.ReceiptOut,
    )
    def receipt(
        purge_id: IdPath,
        request: Request,
        for_subject: Annotated[
            bool,
            Query(
                description="the receipt for the person whose data was purged: without the actor, the reason and "
                "the request's metadata (the leaf holds them as salted commitments). 400 `validation_error` for a "
                "purge accepted before leaf version 2, whose leaf holds them in clear"
            ),
        ] = False,
    ) -> JSONResponse:
        """Its ledger row's leaf, the inclusion proof and the signed checkpoint: proof of acceptance, which
        `tlog/verify.py` checks offline. By default it also discloses the actor, the reason and the request's
        metadata (each with its salt); `for_subject=true` leaves them out."""
        visible(pk.status(purge_id), request)
        return as_json(pk.receipt(purge_id, for_subject=for_subject))

    @router.get(
        "/purges/{purge_id}/completion",
        operation_id="completion",
        summary="Read a purge's completion statement",
        response_model=receipt_models.CompletionStatementOut,
    )
    def completion(purge_id: IdPath, request: Request) -> JSONResponse:
        """A signed statement that every cleanup step of the purge finished. 409 `cleanup_not_complete` before then."""
        visible(pk.status(purge_id), request)
        return as_json(pk.completion(purge_id))

    @router.get(
        "/ledger/consistency",
        operation_id="consistency",
        summary="Prove the ledger consistent",
        response_model=receipt_models.ConsistencyProofOut,
    )
    def consistency(
        from_size: Annotated[int, Query(alias="from", ge=1, le=MAX_SEQ, description="the older tree's size")],
    ) -> JSONResponse:
        """A consistency proof from the tree of size `from` to the newest signed checkpoint: the older ledger is a
        prefix of today's."""
        return as_json(pk.consistency(from_size))


# C2SP tlog-tiles (https://c2sp.org/tlog-tiles), "Checkpoints": the checkpoint "is mutable, so
# its headers SHOULD prevent caching beyond a few seconds"; "Merkle Tree": a tile "is
# immutable, so its caching headers SHOULD be long-lived". A full tile is fsynced before the
# checkpoint that names it and never changes. A partial tile is kept as briefly as the
# checkpoint: it takes no fsync, so after a crash it may be wrong until a writer rebuilds it
# (``purgekeeper.storage.signed_log``), and the log removes it once a wider one is signed. A
# consistency proof ends at the newest checkpoint, so it ages with it.
BRIEFLY = "public, max-age=5"
IMMUTABLE = "public, max-age=31536000, immutable"
PARTIAL_TILE = ".p/"  # in a partial tile's path only: tile/<L>/<N>.p/<W>


def log_routes(pk: Purgekeeper) -> APIRouter:
    """The signed log's public part, without a token: the checkpoint and the hash tiles
    (C2SP tlog-tiles), and a consistency proof from an older tree size to the newest
    checkpoint, which holds hashes only too (``GET /v1/ledger/consistency``'s document)."""
    router = APIRouter(prefix="/log", include_in_schema=False)

    @router.get("/checkpoint")
    def log_checkpoint() -> Response:
        return Response(
            pk.receipts.log_file("checkpoint"),
            media_type="text/plain; charset=utf-8",
            headers={"Cache-Control": BRIEFLY},
        )

    @router.get("/tile/{path:path}")
    def log_tile(path: str) -> Response:
        data = pk.receipts.log_file(f"tile/{path}")
        cache = BRIEFLY if PARTIAL_TILE in path else IMMUTABLE
        return Response(data, media_type="application/octet-stream", headers={"Cache-Control": cache})

    @router.get("/rotation/{number}")
    def log_rotation(number: str) -> Response:
        """A key rotation statement: the old key's signed note naming the new key; never changes."""
        return Response(
            pk.receipts.log_file(f"rotation/{number}"),
            media_type="text/plain; charset=utf-8",
            headers={"Cache-Control": IMMUTABLE},
        )

    @router.get("/consistency")
    def log_consistency(
        from_size: Annotated[int, Query(alias="from", ge=1, le=MAX_SEQ, description="the older tree's size")],
    ) -> JSONResponse:
        response = as_json(pk.consistency(from_size))
        response.headers["Cache-Control"] = BRIEFLY
        return response

    return router
