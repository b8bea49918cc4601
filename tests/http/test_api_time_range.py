"""Times over HTTP on SQLite and PostgreSQL: a time outside the range the commands take
(``validation.EARLIEST_MOMENT`` to ``LATEST_MOMENT``, years 2 to 9998 in UTC) is a 400
``validation_error`` wherever a request carries one, and nothing is written; an author whose
event a database from before the range holds at ``datetime.max`` gets a 400 from the erasure
preview, not a 500."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select, update

import purgekeeper
from purgekeeper.commands import validation
from purgekeeper.schema.tables import events, metadata
from tests.helpers.http import AS_HOST, WHO, TestClient, make_client, ok, refused

Pk = purgekeeper.Purgekeeper
LATEST = "9998-12-31T23:59:59.999999Z"
OUTSIDE = ("9999-12-31T23:59:59.999999Z", "0001-01-01T00:00:00Z", "9999-01-01T00:00:00Z", "0001-12-31T23:59:59Z")


@pytest.fixture
def client(pk: Pk) -> Iterator[TestClient]:
    with make_client(pk) as test_client:
        test_client.headers.update(AS_HOST)
        pk.create_conversation("c1")
        pk.ingest_event("c1", author="ada", body="hello", event_id="e1")
        yield test_client


def counts(pk: Pk) -> dict[str, int]:
    with pk.db.read() as conn:
        return {table.name: len(conn.execute(select(table)).all()) for table in metadata.sorted_tables}


def requests_with(when: str) -> list[tuple[str, str, dict[str, Any]]]:
    digest = "0" * 64
    return [
        ("POST", "/v1/conversations/c1/events", {"json": {"author": "ada", "body": "x", "occurred_at": when}}),
        (
            "POST",
            "/v1/conversations/c1/events/upload",
            {"data": {"author": "ada", "occurred_at": when}, "files": [("file", ("a.txt", b"bytes"))]},
        ),
        ("POST", "/v1/authors/erasure-preview", {"json": {"author": "ada", "before": when}}),
        ("POST", "/v1/authors/erase", {"json": {"author": "ada", "before": when, "scope_digest": digest, **WHO}}),
        ("POST", "/v1/purges/preview", {"json": {"conversation_id": "c1", "after": when}}),
        ("POST", "/v1/purges/preview", {"json": {"conversation_id": "c1", "before": when}}),
        (
            "POST",
            "/v1/purges/confirm",
            {"json": {"scope": {"conversation_id": "c1", "before": when}, "scope_digest": digest, **WHO}},
        ),
        ("GET", "/v1/purges", {"params": {"since": when}}),
        ("GET", "/v1/purges", {"params": {"until": when}}),
    ]


@pytest.mark.parametrize("when", OUTSIDE)
def test_a_time_outside_the_range_is_a_400_and_writes_nothing(pk: Pk, client: TestClient, when: str) -> None:
    before = counts(pk)
    failures = []
    for method, url, arguments in requests_with(when):
        response = client.request(method, url, **arguments)
        if response.status_code != 400 or response.json().get("error") != "validation_error":
            failures.append(f"{method} {url} {arguments}: {response.status_code} {response.text[:200]}")
    assert failures == []
    assert counts(pk) == before


def test_the_ends_of_the_range_are_taken(pk: Pk, client: TestClient) -> None:
    for event_id, when in (("e-last", LATEST), ("e-first", "0002-01-01T00:00:00Z")):
        event = {"author": "bob", "event_id": event_id, "occurred_at": when}
        ok(client.post("/v1/conversations/c1/events", json=event))
    preview = ok(client.post("/v1/authors/erasure-preview", json={"author": "bob"}))
    assert preview["totals"]["events"] == 2
    erasure = {"author": "bob", "scope_digest": preview["scope_digest"], **WHO}
    assert client.post("/v1/authors/erase", json=erasure).status_code == 202
    assert [e["id"] for e in ok(client.get("/v1/conversations/c1/events"))["events"]] == ["e1"]


def test_an_event_stored_at_datetime_max_makes_the_erasure_preview_a_400_not_a_500(pk: Pk, client: TestClient) -> None:
    with pk.db.write() as conn:  # as a version without the range stored it
        latest = dt.datetime.max.replace(tzinfo=dt.UTC)
        conn.execute(update(events).where(events.c.id == "e1").values(occurred_at=latest))
    before = counts(pk)
    body = refused(client.post("/v1/authors/erasure-preview", json={"author": "ada"}), 400, "validation_error")
    assert "by its id" in body["detail"]
    assert counts(pk) == before


def test_the_range_is_the_commands_range() -> None:
    assert validation.LATEST_MOMENT.isoformat().replace("+00:00", "Z") == LATEST
