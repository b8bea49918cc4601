"""``POST /v1/conversations/{id}/events:batch`` (``ingest_events``) on both backends: one
result per event, a refused event's error code, the batch's bound, and the whole batch
refused (nothing written) when its conversation is."""

from __future__ import annotations

from typing import Any

import pytest

import purgekeeper
from tests.helpers.factories import conversation, purge_conversation, purge_events
from tests.helpers.http import TestClient

Pk = purgekeeper.Purgekeeper


def post(client: TestClient, conversation_id: str, events: list[dict[str, Any]]) -> Any:
    return client.post(f"/v1/conversations/{conversation_id}/events:batch", json={"events": events})


def test_each_event_gets_its_result_in_order(pk: Pk, client: TestClient) -> None:
    conversation(pk, "c1")
    gone = pk.ingest_event("c1", author="ada", body="gone", provider_event_id="p-gone")
    purge_events(pk, gone.id)
    first = pk.ingest_event("c1", author="ada", body="first", provider_event_id="p-1")
    answer = post(
        client,
        "c1",
        [
            {"author": "ada", "body": "new", "event_id": "n1", "occurred_at": "2026-01-05T09:30:00Z"},
            {"author": "ada", "body": "again", "provider_event_id": "p-1"},
            {"author": "ada", "body": "back", "provider_event_id": "p-gone"},
        ],
    )
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [r["status"] for r in results] == ["accepted", "duplicate", "refused"]
    assert results[0]["event"]["id"] == "n1" and results[0]["event"]["occurred_at"] == "2026-01-05T09:30:00Z"
    assert results[1]["event"]["id"] == first.id and results[1]["event"]["body"] == "first"
    assert results[2]["event"] is None and results[2]["error"] == "content_purged" and results[2]["message"]
    assert [e.id for e in pk.read_conversation("c1")] == ["n1", first.id]  # oldest first


def test_a_batch_over_the_bound_or_with_bad_input_is_refused_whole(pk: Pk, client: TestClient) -> None:
    conversation(pk, "c1")
    too_many = post(client, "c1", [{"author": "ada", "body": "x"} for _ in range(1001)])
    assert too_many.status_code in (400, 413), too_many.text
    bad = post(client, "c1", [{"author": "ada", "body": "x"}, {"author": "", "body": "y"}])
    assert bad.status_code == 400 and bad.json()["error"] == "validation_error"
    assert pk.read_conversation("c1") == []


@pytest.mark.parametrize(("purged", "status", "code"), [(False, 404, "not_found"), (True, 410, "conversation_purged")])
def test_a_refused_conversation_refuses_the_batch(
    pk: Pk, client: TestClient, purged: bool, status: int, code: str
) -> None:
    if purged:
        conversation(pk, "c1")
        purge_conversation(pk, "c1")
    answer = post(client, "c1", [{"author": "ada", "body": "x", "event_id": "never"}])
    assert (answer.status_code, answer.json()["error"]) == (status, code)


def test_the_document_declares_the_batch(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    operation = document["paths"]["/v1/conversations/{conversation_id}/events:batch"]["post"]
    assert operation["operationId"] == "ingest_events"
    body = document["components"]["schemas"]["NewEventsIn"]["properties"]["events"]
    assert body["maxItems"] == 1000
