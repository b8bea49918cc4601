"""The HTTP API under test: the tokens, the endpoint table, a test client whose every response is
checked (no traceback; a JSON success is the model the OpenAPI document names), and the
assertions on a response (``ok``, ``accepted``, ``refused``)."""

from __future__ import annotations

import base64
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from pydantic import BaseModel
from sqlalchemy import select

import purgekeeper
from purgekeeper.commands.http import models, receipt_models
from purgekeeper.commands.http.app import create_app
from purgekeeper.commands.validation import MAX_ATTACHMENT_BYTES
from purgekeeper.commands.web.auth import Tokens
from purgekeeper.schema.tables import metadata

with warnings.catch_warnings():  # starlette warns at import when httpx2 is not installed
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient


Pk = purgekeeper.Purgekeeper
HOST = "host-token-5d1e"
OPERATOR = "operator-token-a93b"
TOKENS = Tokens(api=HOST, operator=OPERATOR)
AS_HOST = {"Authorization": f"Bearer {HOST}"}
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR}"}
WHO = {"actor": "ops@example.org", "reason": "the user asked"}
BODY_CAP = 64 * 1024
UPLOAD_CAP = 256 * 1024


# The whole surface: (method, path) → who may call it. A new route must be added here.
ENDPOINTS = {
    ("POST", "/v1/conversations"): "host",
    ("GET", "/v1/conversations"): "host",
    ("GET", "/v1/conversations/{conversation_id}"): "host",
    ("GET", "/v1/conversations/{conversation_id}/events"): "host",
    ("POST", "/v1/conversations/{conversation_id}/events"): "host",
    ("POST", "/v1/conversations/{conversation_id}/events/upload"): "host",
    ("POST", "/v1/conversations/{conversation_id}/events:batch"): "host",
    ("POST", "/v1/conversations/{conversation_id}/placements"): "host",
    ("POST", "/v1/conversations/{conversation_id}/derivatives"): "host",
    ("GET", "/v1/conversations/{conversation_id}/purge-preview"): "host",
    ("POST", "/v1/conversations/{conversation_id}/purge"): "host",
    ("GET", "/v1/channels/{channel_id}/deletion-preview"): "host",
    ("POST", "/v1/channels/{channel_id}/delete"): "host",
    ("POST", "/v1/bots"): "host",
    ("GET", "/v1/bots/{bot_id}/deletion-preview"): "host",
    ("POST", "/v1/bots/{bot_id}/delete"): "host",
    ("POST", "/v1/authors/erasure-preview"): "host",
    ("POST", "/v1/authors/erase"): "host",
    ("POST", "/v1/runs"): "host",
    ("POST", "/v1/runs/{run_id}/finish"): "host",
    ("POST", "/v1/runs/{run_id}/admissions"): "host",
    ("GET", "/v1/attachments/{attachment_id}"): "host",
    ("POST", "/v1/purges/preview"): "host",
    ("POST", "/v1/purges/confirm"): "host",
    ("GET", "/v1/purges"): "host",
    ("GET", "/v1/purges/{purge_id}"): "host",
    ("GET", "/v1/purges/{purge_id}/wait"): "host",
    ("GET", "/v1/purges/{purge_id}/receipt"): "host",
    ("GET", "/v1/purges/{purge_id}/completion"): "host",
    ("GET", "/v1/ledger/consistency"): "host",
    ("POST", "/v1/purges/{purge_id}/retry"): "operator",
    ("POST", "/v1/resume"): "operator",
    ("GET", "/v1/ledger/verify"): "operator",
    ("GET", "/v1/ledger/checkpoint"): "operator",
    ("POST", "/v1/ledger/merge"): "operator",
    ("POST", "/v1/retention/preview"): "operator",
    ("PUT", "/v1/retention/{policy_id}"): "operator",
    ("POST", "/v1/retention/{policy_id}/remove"): "operator",
    ("GET", "/v1/retention"): "operator",
    ("POST", "/v1/retention/{policy_id}/run"): "operator",
    ("PUT", "/v1/holds/{hold_id}"): "operator",
    ("POST", "/v1/holds/{hold_id}/release"): "operator",
    ("GET", "/v1/holds"): "operator",
}


def no_traceback(response: httpx.Response) -> None:
    response.read()
    assert "Traceback" not in response.text
    assert 'File "' not in response.text


Declared = list[tuple[str, re.Pattern[str], str, type[BaseModel]]]
_declared: Declared = []  # the document's JSON successes, read once (every app has the same)


def as_documented(app: FastAPI) -> Callable[[httpx.Response], None]:
    """A response hook: a JSON success is exactly the model the OpenAPI document names for it
    (validated and dumped back, so a missing, extra or differently written field fails)."""
    declared = _declared or _declared_successes(app)

    def check(response: httpx.Response) -> None:
        response.read()
        request = response.request
        if not response.is_success or not request.url.path.startswith("/v1/"):
            return
        if response.headers.get("content-type") != "application/json":
            return
        found = [
            (status, model)
            for method, pattern, status, model in declared
            if method == request.method and pattern.match(request.url.path)
        ]
        assert [status for status, _ in found] == [str(response.status_code)], (request.url.path, found)
        body = response.json()
        assert found[0][1].model_validate(body).model_dump(mode="json") == body, request.url.path

    return check


def _declared_successes(app: FastAPI) -> Declared:
    for path, item in app.openapi()["paths"].items():
        pattern = re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                ref = response.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref", "")
                if status.startswith("2") and ref:
                    _declared.append((method.upper(), pattern, status, _model(ref.rsplit("/", 1)[-1])))
    return _declared


def make_client(
    pk: Pk, tokens: Tokens = TOKENS, *, max_attachment_bytes: int = MAX_ATTACHMENT_BYTES, **kwargs: Any
) -> TestClient:
    app = create_app(
        pk,
        tokens=tokens,
        max_body_bytes=BODY_CAP,
        max_upload_bytes=UPLOAD_CAP,
        max_attachment_bytes=max_attachment_bytes,
    )
    client = TestClient(app, **kwargs)
    client.event_hooks["response"] = [no_traceback, as_documented(app)]
    return client


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def accepted(response: httpx.Response) -> Any:
    """An acceptance: 202, with the Location of the purge's status."""
    assert response.status_code == 202, response.text
    body = response.json()
    assert response.headers["location"] == f"/v1/purges/{body['purge_id']}"
    return body


def refused(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == code, body
    assert isinstance(body["detail"], str) and body["detail"]
    return dict(body)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True)
class World:
    """Made through the Python API: a bot with a Memory repository, a conversation ``c1``
    with an event ``e1`` (a CAS and a file attachment), a channel ``ch1``, a running run
    ``r1`` and a finished run ``r-done``."""

    pk: Pk
    memory_root: Path
    repository: Path
    attachment_ids: tuple[str, ...]


def snapshot(world: World) -> dict[str, Any]:
    """Every row of every table, and every file under the roots."""
    state: dict[str, Any] = {}
    with world.pk.db.read() as conn:
        for table in metadata.sorted_tables:
            state[table.name] = sorted(repr(tuple(row)) for row in conn.execute(select(table)))
    settings = world.pk.settings
    for root in (settings.blob_root, settings.file_root, world.memory_root):
        state[str(root)] = sorted((str(p.relative_to(root)), p.read_bytes()) for p in root.rglob("*") if p.is_file())
    return state


def _model(name: str) -> type[BaseModel]:
    """A response model by its name in the document: a record's mirror, or a receipt document."""
    found: type[BaseModel] = getattr(models, name, None) or getattr(receipt_models, name)
    return found
