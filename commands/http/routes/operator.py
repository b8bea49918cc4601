"""The operator's machinery routes (tag ``operator``, the operator token): re-arming a
purge's cleanup, re-sending due steps, and the ledger itself (verify, a checkpoint download,
a merge of uploaded checkpoint files)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, UploadFile
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BeforeValidator
from starlette.background import BackgroundTask

from purgekeeper.commands import surface
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.http import models
from purgekeeper.commands.http.bodies import RetryRequestIn
from purgekeeper.commands.http.field_types import IdPath, flag
from purgekeeper.commands.http.routes.common import BINARY, OPERATOR_TAG, as_json, v1
from purgekeeper.schema.errors import ValidationError

MAX_MERGE_FILES = 64
MERGE_EXAMPLE = {"files": ["(the bytes of a file from GET /v1/ledger/checkpoint)"], "from_other_database": False}


def operator_routes(pk: Purgekeeper) -> APIRouter:
    router = v1(OPERATOR_TAG)

    @router.post(
        "/purges/{purge_id}/retry",
        operation_id="retry",
        summary="Retry a purge's cleanup now",
        response_model=models.PurgeStatusOut,
    )
    def retry(purge_id: IdPath, request: RetryRequestIn) -> JSONResponse:
        """Re-arms the purge's incomplete and retrying steps: due now, with fresh attempts, recorded in the audit with
        the actor and reason. 409 when no step is incomplete or retrying."""
        return as_json(pk.retry(purge_id, actor=request.actor, reason=request.reason))

    @router.post(
        "/resume", operation_id="resume", summary="Re-send the due cleanup steps", response_model=models.ResumedOut
    )
    def resume() -> JSONResponse:
        """Runs the due retention policies and one scheduler sweep now; answers how many steps were sent."""
        return as_json({"resent": pk.resume()})

    @router.get(
        "/ledger/verify",
        operation_id="verify_ledger",
        summary="Verify the ledger",
        response_model=models.LedgerReportOut,
    )
    def verify_ledger() -> JSONResponse:
        """Walks the ledger's hash chain and compares it with its copy outside the database."""
        return as_json(pk.verify_ledger())

    _ledger_file_routes(router, pk)
    return router


def _ledger_file_routes(router: APIRouter, pk: Purgekeeper) -> None:
    """A checkpoint is a download written to a private temporary file, a merge an upload:
    the API never reads or writes a server path that a client names."""

    @router.get(
        "/ledger/checkpoint",
        operation_id="checkpoint_ledger",
        summary="Download a ledger checkpoint",
        response_class=Response,
        responses={200: {"content": {"application/x-ndjson": BINARY}, "description": "a ledger export (version 2)"}},
    )
    def checkpoint_ledger() -> Response:
        """The ledger's export (version 2) as a file, to merge into a database restored from an older backup."""
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

    @router.post(
        "/ledger/merge",
        operation_id="merge_ledger",
        summary="Merge checkpoint files (restore)",
        response_model=models.MergeReportOut,
        openapi_extra={"requestBody": {"content": {"multipart/form-data": {"example": MERGE_EXAMPLE}}}},
    )
    def merge_ledger(
        files: Annotated[
            list[UploadFile],
            File(min_length=1, max_length=MAX_MERGE_FILES, description="checkpoint files to merge (restore)"),
        ],
        from_other_database: Annotated[
            bool,
            Form(description="also merge files written by another database; refused otherwise"),
            BeforeValidator(flag),
        ] = False,
    ) -> JSONResponse:
        """Re-applies the purges a restored database lacks, from uploaded checkpoint files. A damaged file, or one of
        another database (unless `from_other_database`), is refused and nothing changes."""
        return as_json(_merge(pk, files, allow_other_database=from_other_database))


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
