"""``GET /v1/purges`` on SQLite and PostgreSQL: the filters (status, kind, the conversation a
purge concerns, acceptance time ``since <= accepted_at < until``), alone, together and
across pages; a naive or malformed time, an unknown kind or a bad id is a 400."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest

import purgekeeper
from purgekeeper import EventScope
from tests.helpers.console import retrying_purge
from tests.helpers.http import AS_OPERATOR, WHO, TestClient, ok, refused

Pk = purgekeeper.Purgekeeper


@pytest.fixture
def purges(pk: Pk) -> dict[str, Any]:
    """In order: a content purge in c1, the deletion of channel ch1, the purge of c1 and of
    c2. Each accepted after the one before (a distinct accepted_at, even at the
    millisecond)."""
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    pk.create_conversation("ch1", kind="channel")
    pk.ingest_event("c1", author="ada", body="hello", event_id="e1")
    scope = EventScope(event_ids=("e1",))
    accepted = {}
    for name, accept in (
        ("content", lambda: pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO)),
        ("channel", lambda: pk.delete_channel("ch1", **WHO)),
        ("c1", lambda: pk.purge_conversation("c1", **WHO)),
        ("c2", lambda: pk.purge_conversation("c2", **WHO)),
    ):
        accepted[name] = pk.status(accept().purge_id)
        time.sleep(0.002)
    times = [status.accepted_at for status in accepted.values()]
    assert times == sorted(set(times)), times
    return accepted


def listed(client: TestClient, headers: dict[str, str] | None = None, **params: Any) -> list[str]:
    return [p["purge_id"] for p in ok(client.get("/v1/purges", params=params, headers=headers))["purges"]]


def moment(status: Any) -> str:
    return status.accepted_at.isoformat()


def test_filters_alone_and_together(client: TestClient, purges: dict[str, Any]) -> None:
    content, channel, c1, c2 = (purges[name].purge_id for name in ("content", "channel", "c1", "c2"))
    assert listed(client) == [c2, c1, channel, content]
    assert listed(client, kind="content") == [content]
    assert listed(client, kind="conversation") == [c2, c1]
    assert listed(client, conversation_id="c1") == [c1, content]
    assert listed(client, conversation_id="ch1") == [channel]
    assert listed(client, conversation_id="c-none") == []
    assert listed(client, kind="conversation", conversation_id="c1") == [c1]
    assert listed(client, kind="channel", conversation_id="c1") == []
    assert listed(client, since=moment(purges["channel"])) == [c2, c1, channel]
    assert listed(client, until=moment(purges["channel"])) == [content]
    assert listed(client, since=moment(purges["channel"]), until=moment(purges["c2"])) == [c1, channel]
    newest_first = [c2, c1, channel, content]
    for status in ("accepted", "complete"):
        expected = [purge for purge in newest_first if client.get(f"/v1/purges/{purge}").json()["status"] == status]
        assert listed(client, status=status, since=moment(purges["content"])) == expected
    east = dt.timezone(dt.timedelta(hours=2))
    assert listed(client, since=purges["c1"].accepted_at.astimezone(east).isoformat()) == [c2, c1]


def test_filters_hold_across_pages(client: TestClient, purges: dict[str, Any]) -> None:
    first = ok(client.get("/v1/purges", params={"conversation_id": "c1", "limit": 1}))
    assert [p["purge_id"] for p in first["purges"]] == [purges["c1"].purge_id]
    params = {"conversation_id": "c1", "limit": 1, "after": first["next_after"]}
    second = ok(client.get("/v1/purges", params=params))
    assert [p["purge_id"] for p in second["purges"]] == [purges["content"].purge_id]
    assert second["next_after"] is None


@pytest.mark.parametrize(
    "params",
    [
        {"since": "2024-05-01T12:00:00"},  # naive
        {"until": "2024-05-01"},  # a date, no time or offset
        {"since": "yesterday"},
        {"until": "0001-01-01T00:00:00+01:00"},  # before year 1 once in UTC
        {"until": "0.5"},  # a number: Schemathesis found it taken as a Unix time (issue 26)
        {"since": "1700000000"},  # digits, the same
        {"kind": "everything"},
        {"status": "done"},
        {"conversation_id": "c 1"},
        {"limit": 0},
    ],
    ids=lambda params: "-".join(f"{k}={v}" for k, v in params.items()),
)
def test_bad_filters_are_a_400(client: TestClient, params: dict[str, Any]) -> None:
    body = refused(client.get("/v1/purges", params=params), 400, "validation_error")
    assert next(iter(params)) in body["detail"]


def test_a_host_does_not_see_the_operators_policy_and_hold_rows(pk: Pk, client: TestClient) -> None:
    """A hold's and a policy's actor and reason are an operator's words ("litigation Doe v.
    Corp"); the hold and retention routes are operator routes, so the purge list and status
    do not show those rows to the host token either. Tried: the list, filtered by kind and by
    a held conversation, and the status and wait of the hold's row, as host and as operator."""
    pk.create_conversation("c1")
    hold = pk.place_hold("h1", conversation_ids=["c1"], actor="legal@corp", reason="litigation Doe v. Corp").purge_id
    digest = pk.preview_retention(max_age=dt.timedelta(days=30)).scope_digest
    policy = pk.set_retention("p1", max_age=dt.timedelta(days=30), scope_digest=digest, **WHO).purge_id
    assert listed(client) == []
    assert listed(client, kind="hold") == [] and listed(client, conversation_id="c1") == []
    for path in (f"/v1/purges/{hold}", f"/v1/purges/{hold}/wait?timeout=0", f"/v1/purges/{policy}"):
        refused(client.get(path), 404, "not_found")
    as_operator = {"Authorization": AS_OPERATOR["Authorization"]}
    assert listed(client, headers=as_operator) == [policy, hold]
    held = ok(client.get(f"/v1/purges/{hold}", headers=as_operator))
    assert (held["actor"], held["reason"]) == ("legal@corp", "litigation Doe v. Corp")


def test_status_retrying_lists_the_purges_with_a_step_waiting_for_its_next_attempt(client: TestClient, pk: Pk) -> None:
    """As ``purgectl list --status retrying`` and the console's filter do (the route refused
    the value with a 400)."""
    pk.create_conversation("c-retry")
    waiting = retrying_purge(pk, "c-retry")
    pk.create_conversation("c-done")
    pk.purge_conversation("c-done", **WHO)
    assert listed(client, status="retrying") == [waiting]
    assert client.get(f"/v1/purges/{waiting}").json()["status"] == "cleaning"
