"""Schemathesis over every operation of the OpenAPI document, with a valid bearer token: no
generated request, valid or not, gets a 5xx (a 503 would need a broken database, which this
handle does not have) or a traceback, and every response is one the document declares (its
status code, content type, headers and body schema: the typed models, the 202 Location, the
400 ``ErrorOut``). SQLite only, one handle for the module, for speed.

The handle is seeded with short ids that Hypothesis tends to generate (``0``, ``A``, ...), so
many requests reach existing conversations, events, runs, bots and blobs instead of stopping
at NotFound."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import commands
from commands import NewAttachment
from commands.http import create_app
from commands.web.auth import Tokens
from tests.helpers.http import ENDPOINTS

TOKEN = "fuzz-host-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
SEED_IDS = ("0", "00", "A", "a")
AS_DOCUMENTED = [
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def fuzzed_pk(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[commands.Purgekeeper]:
    root = tmp_path_factory.mktemp("fuzz")
    database = root / "purgekeeper.db"
    database.write_bytes(sqlite_template.read_bytes())
    handle = commands.open(
        f"sqlite:///{database}",
        blob_root=root / "blobs",
        file_root=root / "files",
        checkpoint_dir=root / "ledger",
        memory_roots=[root / "memory"],
        workers="none",
    )
    _seed(handle, root / "memory")
    yield handle
    handle.close()


def _seed(pk: commands.Purgekeeper, memory_root: Path) -> None:
    for n, the_id in enumerate(SEED_IDS):
        repository = memory_root / f"bot-{n}"
        subprocess.run(["git", "init", "-q", str(repository)], check=True, capture_output=True)
        pk.register_bot(the_id, name=f"bot {the_id}", memory_path=repository)
        pk.create_conversation(the_id, bot_id=the_id)
        event = pk.ingest_event(
            the_id,
            author="ada",
            body=f"hello {the_id}",
            event_id=the_id,
            provider_event_id=the_id,
            attachments=[NewAttachment.cas(b"shared bytes", name="a.txt")],
        )
        pk.start_run(the_id, bot_id=the_id, run_id=the_id)
        pk.add_derivative(the_id, kind="summary", payload={"of": the_id}, source_event_ids=[event.id])
    pk.create_conversation("ch", kind="channel")


@pytest.fixture(scope="module")
def fuzzed_app(fuzzed_pk: commands.Purgekeeper) -> FastAPI:
    return create_app(fuzzed_pk, tokens=Tokens(api=TOKEN), max_body_bytes=256 * 1024)


@pytest.fixture(scope="module")
def api_schema(fuzzed_app: FastAPI) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", fuzzed_app)


# schemathesis's pytest loader (``from_fixture``) does not run under pytest 9, so each operation
# is driven through its Hypothesis strategy (schemathesis's documented Python API).
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
@pytest.mark.parametrize(("method", "path"), sorted(ENDPOINTS))
def test_no_request_gets_a_server_error(api_schema: Any, method: str, path: str, mode: GenerationMode) -> None:
    operation = api_schema[path][method]

    @given(case=operation.as_strategy(mode))
    @settings(max_examples=20, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def no_server_error(case: Any) -> None:
        response = case.call(headers=HEADERS)
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path}: {response.status_code} {response.text}"
        )
        assert "Traceback" not in response.text
        if response.status_code >= 400:
            assert set(response.json()) >= {"error", "detail"}, response.text
        case.validate_response(response, checks=AS_DOCUMENTED, headers=HEADERS)

    no_server_error()


def test_the_fuzzed_operations_are_all_the_operations(api_schema: Any) -> None:
    """A route missing from the list above would not be fuzzed."""
    served = {(result.ok().method.upper(), result.ok().path) for result in api_schema.get_all_operations()}
    assert served == set(ENDPOINTS)
