"""The OpenAPI document as a contract: every operation has its explicit operationId (the
command's name), a typed success response (a model, or bytes for the two downloads), the
400 ``ErrorOut`` it really answers and no 422; the acceptances answer 202 with a Location,
and nothing else does. The response models mirror the records field for field. (That each
response is exactly its model is checked on every response of the HTTP tests, by the
``as_documented`` hook of ``test_http_api.make_client``.)"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import purgekeeper
from purgekeeper.commands.http import create_app, models, receipt_models
from purgekeeper.commands.web.auth import Tokens
from purgekeeper.schema.states import PurgeKind
from tests.helpers.http import ENDPOINTS

OPERATION_IDS = {
    ("POST", "/v1/conversations"): "create_conversation",
    ("GET", "/v1/conversations"): "list_conversations",
    ("GET", "/v1/conversations/{conversation_id}"): "get_conversation",
    ("GET", "/v1/conversations/{conversation_id}/events"): "read_conversation",
    ("POST", "/v1/conversations/{conversation_id}/events"): "ingest_event",
    ("POST", "/v1/conversations/{conversation_id}/events/upload"): "upload_event",
    ("POST", "/v1/conversations/{conversation_id}/events:batch"): "ingest_events",
    ("POST", "/v1/conversations/{conversation_id}/placements"): "place_event",
    ("POST", "/v1/conversations/{conversation_id}/derivatives"): "add_derivative",
    ("POST", "/v1/conversations/{conversation_id}/purge"): "purge_conversation",
    ("POST", "/v1/channels/{channel_id}/delete"): "delete_channel",
    ("POST", "/v1/bots"): "register_bot",
    ("GET", "/v1/bots/{bot_id}/deletion-preview"): "preview_bot_deletion",
    ("GET", "/v1/conversations/{conversation_id}/purge-preview"): "preview_conversation_purge",
    ("GET", "/v1/channels/{channel_id}/deletion-preview"): "preview_channel_deletion",
    ("POST", "/v1/bots/{bot_id}/delete"): "delete_bot",
    ("POST", "/v1/authors/erasure-preview"): "preview_author_erasure",
    ("POST", "/v1/authors/erase"): "erase_author",
    ("POST", "/v1/runs"): "start_run",
    ("POST", "/v1/runs/{run_id}/finish"): "finish_run",
    ("POST", "/v1/runs/{run_id}/admissions"): "admit",
    ("GET", "/v1/attachments/{attachment_id}"): "open_attachment",
    ("POST", "/v1/purges/preview"): "preview_purge",
    ("POST", "/v1/purges/confirm"): "confirm_purge",
    ("GET", "/v1/purges"): "list_purges",
    ("GET", "/v1/purges/{purge_id}"): "status",
    ("GET", "/v1/purges/{purge_id}/wait"): "wait",
    ("GET", "/v1/purges/{purge_id}/receipt"): "receipt",
    ("GET", "/v1/purges/{purge_id}/completion"): "completion",
    ("GET", "/v1/ledger/consistency"): "consistency",
    ("POST", "/v1/purges/{purge_id}/retry"): "retry",
    ("POST", "/v1/resume"): "resume",
    ("GET", "/v1/ledger/verify"): "verify_ledger",
    ("GET", "/v1/ledger/checkpoint"): "checkpoint_ledger",
    ("POST", "/v1/ledger/merge"): "merge_ledger",
    ("POST", "/v1/retention/preview"): "preview_retention",
    ("PUT", "/v1/retention/{policy_id}"): "set_retention",
    ("POST", "/v1/retention/{policy_id}/remove"): "remove_retention",
    ("GET", "/v1/retention"): "list_retention",
    ("POST", "/v1/retention/{policy_id}/run"): "run_retention_policy",
    ("PUT", "/v1/holds/{hold_id}"): "place_hold",
    ("POST", "/v1/holds/{hold_id}/release"): "release_hold",
    ("GET", "/v1/holds"): "list_holds",
}
# Outside /v1, with no token and no error of the API's own (routes/probes.py).
PROBES = {("GET", "/healthz"): "healthz", ("GET", "/readyz"): "readyz"}
ACCEPTANCES = {
    "confirm_purge",
    "purge_conversation",
    "delete_channel",
    "delete_bot",
    "erase_author",
    "set_retention",
    "remove_retention",
    "place_hold",
    "release_hold",
}
DOWNLOADS = {"open_attachment": "application/octet-stream", "checkpoint_ledger": "application/x-ndjson"}
ERROR_BODY = {"$ref": "#/components/schemas/ErrorOut"}


@pytest.fixture(scope="module")
def document(sqlite_template: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("contract")
    database = root / "purgekeeper.db"
    database.write_bytes(sqlite_template.read_bytes())
    with purgekeeper.open(
        f"sqlite:///{database}", blob_root=root / "blobs", checkpoint_dir=root / "l", workers="none"
    ) as pk:
        return create_app(pk, tokens=Tokens(api="t")).openapi()


def operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(method.upper(), path): op for path, item in document["paths"].items() for method, op in item.items()}


def test_every_operation_has_its_command_s_operation_id(document: dict[str, Any]) -> None:
    assert set(OPERATION_IDS) == set(ENDPOINTS)
    assert {key: op["operationId"] for key, op in operations(document).items()} == OPERATION_IDS | PROBES


def test_the_probes_are_documented_without_a_token_or_the_api_s_errors(document: dict[str, Any]) -> None:
    """So a generated client and the HTTP reference show them, under their own tag."""
    found = {key: op for key, op in operations(document).items() if key in PROBES}
    assert {key: op["tags"] for key, op in found.items()} == {key: ["probes"] for key in PROBES}
    assert all("security" not in op for op in found.values())
    assert {key: sorted(op["responses"]) for key, op in found.items()} == {
        ("GET", "/healthz"): ["200"],
        ("GET", "/readyz"): ["200", "503"],
    }
    not_ready = found[("GET", "/readyz")]["responses"]["503"]["content"]["application/json"]["schema"]
    assert not_ready == {"$ref": "#/components/schemas/NotReadyOut"}


def test_the_document_lists_the_400_the_api_answers_and_no_422(document: dict[str, Any]) -> None:
    for key, operation in operations(document).items():
        if key in PROBES:
            continue
        responses = operation["responses"]
        assert "422" not in responses, key
        assert responses["400"]["content"]["application/json"]["schema"] == ERROR_BODY, key
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    error = schemas["ErrorOut"]
    assert set(error["required"]) == {"error", "detail"}
    assert {"reason", "diagnostics", "run_ids", "hold_ids", "purge_id", "ledger_seq"} <= set(error["properties"])


def test_every_success_is_typed(document: dict[str, Any]) -> None:
    for key, operation in operations(document).items():
        name = operation["operationId"]
        [(status, success)] = [(s, r) for s, r in operation["responses"].items() if s.startswith("2")]
        assert status == ("202" if name in ACCEPTANCES else "200"), key
        if name in DOWNLOADS:
            assert success["content"] == {DOWNLOADS[name]: {"schema": {"type": "string", "format": "binary"}}}
            continue
        ref = success["content"]["application/json"]["schema"]["$ref"]
        model = getattr(models, ref.rsplit("/", 1)[-1], None) or getattr(receipt_models, ref.rsplit("/", 1)[-1])
        assert model.model_json_schema()["properties"], key


def test_acceptances_document_the_location_of_the_status(document: dict[str, Any]) -> None:
    for key, operation in operations(document).items():
        if operation["operationId"] not in ACCEPTANCES:
            continue
        accepted = operation["responses"]["202"]
        assert accepted["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/AcceptanceOut"}
        assert set(accepted["headers"]) == {"Location"}, key


def test_the_list_of_purges_documents_its_filters(document: dict[str, Any]) -> None:
    parameters = {p["name"]: p for p in operations(document)[("GET", "/v1/purges")]["parameters"]}
    assert set(parameters) == {"status", "kind", "conversation_id", "since", "until", "limit", "after"}
    assert {"type": "string", "format": "date-time"} in parameters["since"]["schema"]["anyOf"]
    assert document["components"]["schemas"]["PurgeKind"]["enum"] == [kind.value for kind in PurgeKind]


@pytest.mark.parametrize("model", sorted(models.MIRRORS, key=lambda m: m.__name__), ids=lambda m: m.__name__)
def test_each_model_mirrors_its_record(model: type[Any]) -> None:
    record = models.MIRRORS[model]
    assert list(model.model_fields) == [field.name for field in dataclasses.fields(record)]


def test_every_response_model_is_a_mirror_or_a_wrapper_of_mirrors() -> None:
    """A new record field shows up in a mirror test; a new model needs its record here."""
    wrappers = {
        models.ConversationListOut,
        models.EventListOut,
        models.IngestBatchOut,
        models.PolicyListOut,
        models.HoldListOut,
        models.ResumedOut,
    }
    declared = {
        value
        for value in vars(models).values()
        if isinstance(value, type) and issubclass(value, models.BaseModel) and value.__module__ == models.__name__
    }
    bodies_of_their_own = {models._Model, models.ErrorOut, models.ProbeOut, models.NotReadyOut}
    assert declared - bodies_of_their_own == set(models.MIRRORS) | wrappers
