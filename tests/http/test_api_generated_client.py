"""A client generated from the OpenAPI document (``openapi-python-client``) drives one purge
through a real ``purgectl serve``: it creates a conversation, ingests an event (JSON) and one
with an attachment (the multipart upload), previews, confirms (202 with the Location of the
status), waits until the cleanup is complete, and reads the conversation back without the
purged event. The document is the running server's own ``/openapi.json``, and the generator
runs with ``--fail-on-warning``: every operation, body and response must be usable as typed.

SQLite, the embedded default (the in-process worker does the cleanup). Skipped locally when
the generator is not installed; a failure on CI.
"""

from __future__ import annotations

import importlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from tests.helpers import served
from tests.helpers.databases import ON_CI

BIN = Path(sys.executable).parent
GENERATOR = BIN / "openapi-python-client"
HOST_TOKEN = "generated-client-host-token"
PACKAGE = "purgekeeper_generated_client"
GENERATOR_CONFIG = """\
content_type_overrides:
  application/x-ndjson: application/octet-stream
post_hooks: []
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    env = served.clean_environment(PURGEKEEPER_DATA_DIR=str(tmp_path / "data"), PURGEKEEPER_API_TOKEN=HOST_TOKEN)
    served.run([str(BIN / "purgectl"), "init", "--json"], env, tmp_path)
    with served.serving(env, tmp_path) as running:
        yield running.url


@pytest.fixture
def generated(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    if not os.access(GENERATOR, os.X_OK):
        message = f"{GENERATOR} is not installed (pip install -e '.[dev]')"
        if ON_CI:
            pytest.fail(message)
        pytest.skip(message)
    document, config = tmp_path / "openapi.json", tmp_path / "generator.yaml"
    document.write_bytes(httpx.get(f"{server}/openapi.json").content)
    config.write_text(GENERATOR_CONFIG)
    command = [str(GENERATOR), "generate", "--path", str(document), "--config", str(config), "--meta", "none"]
    command += ["--output-path", str(tmp_path / "client" / PACKAGE), "--fail-on-warning"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    monkeypatch.syspath_prepend(str(tmp_path / "client"))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        for name in [name for name in sys.modules if name == PACKAGE or name.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def _module(name: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.{name}")


def test_a_generated_client_drives_a_purge_end_to_end(server: str, generated: ModuleType) -> None:
    authenticated = generated.AuthenticatedClient(base_url=server, token=HOST_TOKEN, raise_on_unexpected_status=True)
    with authenticated as client:  # its connections are closed at the end
        drive_a_purge(client, _module("models"), _module("types"))


def drive_a_purge(client: Any, models: Any, types: Any) -> None:

    created = _call("content.create_conversation", client, body=models.NewConversationIn(conversation_id="c1"))
    assert isinstance(created, models.ConversationOut) and created.version == 1
    kept = _call(
        "content.ingest_event", client, conversation_id="c1", body=models.NewEventIn(author="ada", body="keep")
    )
    upload = models.UploadEventEventUpload(
        author="ada",
        body="my home address, attached",
        file=[types.File(payload=io.BytesIO(b"1 Example Lane\n"), file_name="address.txt")],
    )
    gone = _call("content.upload_event", client, conversation_id="c1", body=upload)
    assert [(a.name, a.size) for a in gone.attachments] == [("address.txt", 15)]

    scope = models.ScopeByEventsIn(event_ids=[gone.id])
    preview = _call("purges.preview_purge", client, body=scope)
    assert [e.id for e in preview.events] == [gone.id]
    assert [a.id for a in preview.exclusive_attachments] == [gone.attachments[0].id]
    confirmation = models.ConfirmationIn(
        scope=scope, scope_digest=preview.scope_digest, actor="ops@example.org", reason="the user asked"
    )
    response = _module("api.purges.confirm_purge").sync_detailed(client=client, body=confirmation)
    assert response.status_code == 202
    acceptance = response.parsed
    assert isinstance(acceptance, models.AcceptanceOut) and acceptance.outcome.value == "accepted"
    assert response.headers["location"] == f"/v1/purges/{acceptance.purge_id}"

    status = _call("purges.wait", client, purge_id=acceptance.purge_id, timeout=20.0)
    assert (status.status.value, status.kind) == ("complete", "content"), status
    assert {step.status.value for step in status.steps} == {"done"}
    events = _call("content.read_conversation", client, conversation_id="c1").events
    assert [e.id for e in events] == [kept.id]
    page = _call("purges.list_purges", client, conversation_id="c1")
    assert [p.purge_id for p in page.purges] == [acceptance.purge_id]
    refused = _module("api.content.open_attachment").sync_detailed(gone.attachments[0].id, client=client)
    assert refused.status_code == 410


def _call(operation: str, client: Any, *args: Any, **kwargs: Any) -> Any:
    """``api.<tag>.<operationId>.sync``: the typed result; an ``ErrorOut`` fails the test."""
    result = _module(f"api.{operation}").sync(*args, client=client, **kwargs)
    assert not isinstance(result, _module("models").ErrorOut), (operation, result)
    return result
