"""Issue 26, item 8: a body sent without ``Content-Type: application/json`` gets a clear
``415 unsupported_media_type`` (it was "Input should be a valid dictionary"), declared by
every operation whose body is JSON; and a ``405`` says in ``Allow`` every method of the path
it names (Starlette named only those of the first route that matched: ``POST`` for ``GET
/v1/conversations``'s path). Both backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import purgekeeper
from tests.helpers.http import AS_HOST, AS_OPERATOR, TestClient, make_client, ok, refused

Pk = purgekeeper.Purgekeeper
NEW = b'{"conversation_id": "c2"}'


@pytest.fixture
def client(pk: Pk) -> Iterator[TestClient]:
    with make_client(pk) as client:
        yield client


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx"],
)
def test_a_json_body_under_another_media_type_is_a_415_that_writes_nothing(
    pk: Pk, client: TestClient, content_type: str | None
) -> None:
    headers = {**AS_HOST, **({"Content-Type": content_type} if content_type else {})}
    body = refused(client.post("/v1/conversations", content=NEW, headers=headers), 415, "unsupported_media_type")
    assert "application/json" in body["detail"]
    assert pk.list_conversations() == []


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"])
def test_json_is_taken_with_its_parameters(pk: Pk, client: TestClient, content_type: str) -> None:
    ok(client.post("/v1/conversations", content=NEW, headers={**AS_HOST, "Content-Type": content_type}))
    assert [c.id for c in pk.list_conversations()] == ["c2"]


def test_an_empty_body_is_a_missing_body_whatever_its_type(client: TestClient) -> None:
    response = client.post("/v1/conversations", content=b"", headers={**AS_HOST, "Content-Type": "text/plain"})
    assert "body" in refused(response, 400, "validation_error")["detail"]


def test_every_operation_with_a_json_body_declares_the_415(client: TestClient) -> None:
    document: dict[str, Any] = client.app.openapi()  # type: ignore[attr-defined]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            content = operation.get("requestBody", {}).get("content", {})
            checked = "application/json" in content or operation["operationId"] == "upload_event"
            assert ("415" in operation["responses"]) == checked, (method, path)


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/v1/conversations", "GET, POST"),
        ("/v1/conversations/c1/events", "GET, POST"),
        ("/v1/purges/confirm", "POST"),  # not GET: /v1/purges/{purge_id} matches its text, not its path
        ("/v1/purges/p1", "GET"),
        ("/v1/retention/preview", "POST"),
        ("/v1/retention/p1", "PUT"),
        ("/v1/holds", "GET"),
    ],
)
@pytest.mark.parametrize("method", ["OPTIONS", "DELETE", "PATCH"])
def test_a_405_allows_the_methods_of_its_path(client: TestClient, path: str, allowed: str, method: str) -> None:
    response = client.request(method, path, headers=AS_OPERATOR)
    refused(response, 405, "method_not_allowed")
    assert response.headers["allow"] == allowed
