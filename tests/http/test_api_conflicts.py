"""Issue 26, item 8: a conflict with what is stored is a 409, not a 400: an event id that
already exists, and a retry of a purge with no incomplete or retrying step (``conflict``,
``purgectl`` exit 3). Both backends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import purgekeeper
from purgekeeper import EventScope
from tests.helpers.cleanup import clean
from tests.helpers.http import AS_OPERATOR, WHO, TestClient, make_client, refused

Pk = purgekeeper.Purgekeeper


@pytest.fixture
def client(pk: Pk) -> Iterator[TestClient]:
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="hello", event_id="e1")
    with make_client(pk) as client:
        client.headers.update(AS_OPERATOR)
        yield client


def test_an_event_id_that_exists_is_a_409(pk: Pk, client: TestClient) -> None:
    again = {"author": "bob", "body": "another", "event_id": "e1"}
    body = refused(client.post("/v1/conversations/c1/events", json=again), 409, "conflict")
    assert body["detail"] == "an event with this id already exists"
    assert [event.body for event in pk.read_conversation("c1")] == ["hello"]


def test_a_retry_with_nothing_to_retry_is_a_409(pk: Pk, client: TestClient) -> None:
    scope = EventScope(event_ids=("e1",))
    purge_id = pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO).purge_id
    clean(pk, purge_id)
    body = refused(client.post(f"/v1/purges/{purge_id}/retry", json=WHO), 409, "conflict")
    assert body["detail"] == f"purge {purge_id} has no incomplete or retrying step to retry"


def test_a_bot_or_conversation_id_that_exists_is_a_409(pk: Pk, client: TestClient) -> None:
    pk.register_bot("b1", name="Bot")
    bot = refused(client.post("/v1/bots", json={"bot_id": "b1", "name": "Other"}), 409, "conflict")
    assert bot["detail"] == "a bot with id b1 already exists"
    other_kind = {"conversation_id": "c1", "kind": "channel"}
    conversation = refused(client.post("/v1/conversations", json=other_kind), 409, "conflict")
    assert "conversation c1 already exists as a conversation" in conversation["detail"]
    assert pk.get_conversation("c1").kind == "conversation"  # type: ignore[union-attr]
