"""Issue 26, item 1, over HTTP: a conversation or channel has a preview, and every acceptance
says whether it reserved an absent id. The API keeps the library's semantics (a purge of an
absent id reserves it, 202), and says so: ``"reserved_absent": true``. Both backends; every
response is checked against the OpenAPI document (``make_client``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import purgekeeper
from tests.helpers.http import AS_HOST, WHO, TestClient, accepted, make_client, ok, refused

Pk = purgekeeper.Purgekeeper


@pytest.fixture
def host(pk: Pk) -> Iterator[TestClient]:
    pk.create_conversation("c1")
    pk.create_conversation("ch1", kind="channel")
    pk.ingest_event("c1", author="ada", body="hello", event_id="e1")
    with make_client(pk) as client:
        client.headers.update(AS_HOST)
        yield client


def test_a_conversation_preview_over_http_counts_and_names_its_version(host: TestClient, pk: Pk) -> None:
    preview = ok(host.get("/v1/conversations/c1/purge-preview"))
    version = pk.get_conversation("c1").version  # type: ignore[union-attr]
    assert (preview["exists"], preview["kind"], preview["version"], preview["events"]) == (
        True,
        "conversation",
        version,
        1,
    )
    assert preview["holds"] == [] and preview["removes_content"] is True
    absent = ok(host.get("/v1/conversations/nonexistent/purge-preview"))
    assert (absent["exists"], absent["unknown"], absent["version"]) == (False, True, None)


def test_a_channel_preview_over_http_removes_nothing(host: TestClient) -> None:
    preview = ok(host.get("/v1/channels/ch1/deletion-preview"))
    assert (preview["kind"], preview["removes_content"]) == ("channel", False)
    refused(host.get("/v1/channels/nope/deletion-preview"), 404, "not_found")
    refused(host.get("/v1/channels/c1/deletion-preview"), 400, "validation_error")


def test_an_acceptance_says_whether_it_reserved_an_absent_id(host: TestClient) -> None:
    absent = accepted(host.post("/v1/conversations/nonexistent/purge", json=WHO))
    present = accepted(host.post("/v1/conversations/c1/purge", json=WHO))
    channel = accepted(host.post("/v1/channels/ch1/delete", json=WHO))
    assert (absent["reserved_absent"], present["reserved_absent"], channel["reserved_absent"]) == (True, False, False)
