"""The retention and legal-hold routes of the HTTP API on SQLite and PostgreSQL: each route's
success, the operator token, bad input (400, and nothing written), unknown ids (404), and the
conflicts (409: another policy for the scope, a legal hold refusing a purge with its
``hold_ids``). The app, its client and the response checks are ``test_http_api``'s."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

import purgekeeper
from purgekeeper.commands.http.app import OPERATOR_TAG
from tests.helpers import scalar, settle
from tests.helpers.http import AS_HOST, AS_OPERATOR, WHO, TestClient, accepted, make_client, ok, refused

Pk = purgekeeper.Purgekeeper
DAY = 86_400
ROUTES = {
    ("POST", "/v1/retention/preview"): "preview_retention",
    ("PUT", "/v1/retention/{policy_id}"): "set_retention",
    ("POST", "/v1/retention/{policy_id}/remove"): "remove_retention",
    ("GET", "/v1/retention"): "list_retention",
    ("POST", "/v1/retention/{policy_id}/run"): "run_retention_policy",
    ("PUT", "/v1/holds/{hold_id}"): "place_hold",
    ("POST", "/v1/holds/{hold_id}/release"): "release_hold",
    ("GET", "/v1/holds"): "list_holds",
}


@pytest.fixture
def operator(pk: Pk) -> Iterator[TestClient]:
    with make_client(pk) as client:
        client.headers.update(AS_OPERATOR)
        yield client


def ago(days: float) -> dt.datetime:
    return dt.datetime.now(dt.UTC) - dt.timedelta(days=days)


@pytest.fixture
def seeded(pk: Pk) -> Pk:
    """c1: ada's ``old`` (40 days ago) and ``fresh`` (1 day ago); c2: bob's ``old2`` (40 days)."""
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    pk.ingest_event("c1", author="ada", body="old", event_id="old", occurred_at=ago(40))
    pk.ingest_event("c1", author="ada", body="fresh", event_id="fresh", occurred_at=ago(1))
    pk.ingest_event("c2", author="bob", body="old2", event_id="old2", occurred_at=ago(40))
    return pk


def ledger_rows(pk: Pk) -> int:
    return int(scalar(pk, "SELECT count(*) FROM purge_ledger"))


def set_policy(client: TestClient, policy_id: str, days: int, conversation_id: str | None = None) -> Any:
    definition = {"max_age_seconds": days * DAY, "conversation_id": conversation_id}
    digest = ok(client.post("/v1/retention/preview", json=definition))["scope_digest"]
    return client.put(f"/v1/retention/{policy_id}", json={**definition, "scope_digest": digest, **WHO})


# -- the routes ----------------------------------------------------------------------------------------


def test_the_routes_are_operator_routes_with_their_command_s_operation_id(operator: TestClient) -> None:
    document = operator.get("/openapi.json").json()
    declared = {
        (method.upper(), path): (operation["operationId"], operation["tags"])
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if path.startswith(("/v1/retention", "/v1/holds"))
    }
    assert declared == {route: (operation_id, [OPERATOR_TAG]) for route, operation_id in ROUTES.items()}
    conflict = document["components"]["schemas"]["ErrorOut"]["properties"]
    assert "hold_ids" in conflict  # a LegalHold's 409 names the holds


def test_a_policy_is_previewed_set_listed_run_and_removed(operator: TestClient, seeded: Pk) -> None:
    pk = seeded
    definition = {"max_age_seconds": 30 * DAY, "conversation_id": None}
    preview = ok(operator.post("/v1/retention/preview", json=definition))
    assert (preview["events"], preview["conversations"], preview["max_age"]) == (2, 2, 30 * DAY)
    assert preview["conversation_id"] is None and preview["disclosures"] and preview["held"] == 0
    of_c1 = ok(operator.post("/v1/retention/preview", json={"max_age_seconds": 30 * DAY, "conversation_id": "c1"}))
    assert [(c["conversation_id"], c["events"]) for c in of_c1["by_conversation"]] == [("c1", 1)]

    setting = {**definition, "scope_digest": preview["scope_digest"], **WHO}
    set_row = accepted(operator.put("/v1/retention/p-all", json=setting, headers={"X-Request-Id": "req-r1"}))
    assert (set_row["outcome"], set_row["disclosures"]) == ("accepted", [])
    assert accepted(operator.put("/v1/retention/p-all", json=setting)) == {**set_row, "outcome": "already_purged"}
    [policy] = ok(operator.get("/v1/retention"))["policies"]
    assert (policy["policy_id"], policy["conversation_id"], policy["max_age"]) == ("p-all", None, 30 * DAY)
    assert (policy["purge_id"], policy["set_by"], policy["last_purge_id"]) == (set_row["purge_id"], WHO["actor"], None)

    [run] = pk.run_retention()
    assert run.purge_id is not None
    settle(pk, run.purge_id)
    status = ok(operator.get(f"/v1/purges/{run.purge_id}"))
    assert (status["label"], status["policy_id"], status["status"]) == (
        "retention purge (policy p-all)",
        "p-all",
        "complete",
    )
    bodies = next(s for s in status["steps"] if s["kind"] == "bodies")
    assert (bodies["progress"]["removed"], bodies["progress"]["held"]) == (2, 0)
    assert ok(operator.get("/v1/purges"))["purges"][0]["label"] == "retention purge (policy p-all)"
    assert ok(operator.get("/v1/retention"))["policies"][0]["last_purge_id"] == run.purge_id
    assert [e["id"] for e in ok(operator.get("/v1/conversations/c1/events"))["events"]] == ["fresh"]

    again = ok(operator.post("/v1/retention/p-all/run"))  # run now: nothing new since its cutoff
    assert (again["policy_id"], again["purge_id"], again["error"]) == ("p-all", None, None)
    turn = {"actor": "grace@example.org", "reason": "after the release (LEGAL-7)"}
    taken = ok(operator.post("/v1/retention/p-all/run", json=turn))  # an operator's turn, recorded
    assert (taken["policy_id"], taken["purge_id"]) == ("p-all", None)
    standing = pk.retention.list_standing()[0]
    assert (standing.last_run_by, standing.last_run_reason) == (turn["actor"], turn["reason"])
    alone = refused(operator.post("/v1/retention/p-all/run", json={"actor": "grace"}), 400, "validation_error")
    assert "reason" in alone["detail"]

    removed = accepted(operator.post("/v1/retention/p-all/remove", json=WHO))
    assert removed["outcome"] == "accepted"
    assert ok(operator.get("/v1/retention")) == {"policies": []}
    assert accepted(operator.post("/v1/retention/p-all/remove", json=WHO)) == {**removed, "outcome": "already_purged"}
    assert pk.status(set_row["purge_id"]).label == "retention policy p-all set"


def test_a_hold_is_placed_refuses_a_purge_with_its_ids_is_listed_and_released(operator: TestClient, seeded: Pk) -> None:
    pk = seeded
    pk.purge_conversation("c2", **WHO)  # before the hold: not undone, and the acceptance says so
    placing = {"conversation_ids": ["c1", "c2"], "authors": ["bob"], **WHO}
    placed = accepted(operator.put("/v1/holds/h1", json=placing))
    assert placed["outcome"] == "accepted"
    assert placed["disclosures"][0].startswith("A legal hold does not undo a purge")
    assert any("c2" in d for d in placed["disclosures"]), placed["disclosures"]
    again = accepted(operator.put("/v1/holds/h1", json=placing))
    assert (again["outcome"], again["purge_id"]) == ("already_purged", placed["purge_id"])

    body = refused(operator.post("/v1/conversations/c1/purge", json=WHO, headers=AS_HOST), 409, "legal_hold")
    assert body["hold_ids"] == ["h1"] and "h1" in body["detail"]
    [held] = ok(operator.get("/v1/holds"))["holds"]
    assert (held["hold_id"], held["conversation_ids"], held["authors"]) == ("h1", ["c1", "c2"], ["bob"])
    assert (held["purge_id"], held["placed_by"], held["release_purge_id"]) == (placed["purge_id"], WHO["actor"], None)

    released = accepted(operator.post("/v1/holds/h1/release", json=WHO))
    assert released["outcome"] == "accepted"
    assert ok(operator.get("/v1/holds")) == {"holds": []}
    assert ok(operator.get("/v1/holds", params={"include_released": "false"})) == {"holds": []}
    [gone] = ok(operator.get("/v1/holds", params={"include_released": "true"}))["holds"]
    assert (gone["hold_id"], gone["release_purge_id"]) == ("h1", released["purge_id"])
    refused(operator.put("/v1/holds/h1", json=placing), 409, "id_reserved")  # a hold id is never reused
    assert accepted(operator.post("/v1/conversations/c1/purge", json=WHO))["outcome"] == "accepted"


# -- errors ---------------------------------------------------------------------------------------------


def test_unknown_policies_and_holds_are_404(operator: TestClient) -> None:
    assert "p-none" in refused(operator.post("/v1/retention/p-none/remove", json=WHO), 404, "not_found")["detail"]
    assert "h-none" in refused(operator.post("/v1/holds/h-none/release", json=WHO), 404, "not_found")["detail"]
    assert "p-none" in refused(operator.post("/v1/retention/p-none/run"), 404, "not_found")["detail"]
    definition = {"max_age_seconds": DAY, "conversation_id": "c-none"}
    refused(operator.post("/v1/retention/preview", json=definition), 404, "not_found")


def test_a_second_policy_for_a_scope_and_a_stale_digest_are_409(operator: TestClient, seeded: Pk) -> None:
    accepted(set_policy(operator, "p-all", days=30))
    before = ledger_rows(seeded)
    body = refused(set_policy(operator, "p-two", days=7), 409, "policy_conflict")
    assert "p-all" in body["detail"]
    weekly = ok(operator.post("/v1/retention/preview", json={"max_age_seconds": 7 * DAY}))["scope_digest"]
    stale = {"max_age_seconds": 8 * DAY, "scope_digest": weekly, **WHO}  # the digest of another definition
    refused(operator.put("/v1/retention/p-all", json=stale), 409, "stale_confirmation")
    assert ledger_rows(seeded) == before
    assert [(p.policy_id, p.max_age) for p in seeded.list_retention()] == [("p-all", dt.timedelta(days=30))]


BAD_INPUT: list[tuple[str, str, str, Any]] = [
    ("max age zero", "POST", "/v1/retention/preview", {"max_age_seconds": 0}),
    ("negative max age", "POST", "/v1/retention/preview", {"max_age_seconds": -DAY}),
    ("max age over 100 years", "POST", "/v1/retention/preview", {"max_age_seconds": 36_500 * DAY + 1}),
    ("max age not a number", "POST", "/v1/retention/preview", {"max_age_seconds": "thirty days"}),
    ("fractional max age", "POST", "/v1/retention/preview", {"max_age_seconds": 1.5}),
    ("no max age", "POST", "/v1/retention/preview", {"conversation_id": "c1"}),
    ("bad conversation id", "POST", "/v1/retention/preview", {"max_age_seconds": DAY, "conversation_id": "c 1"}),
    ("unknown field", "POST", "/v1/retention/preview", {"max_age_seconds": DAY, "max_age": "30d"}),
    ("digest not hex", "PUT", "/v1/retention/p1", {"max_age_seconds": DAY, "scope_digest": "x" * 64, **WHO}),
    ("no digest", "PUT", "/v1/retention/p1", {"max_age_seconds": DAY, **WHO}),
    ("bad policy id", "PUT", "/v1/retention/-p1", {"max_age_seconds": DAY, "scope_digest": "0" * 64, **WHO}),
    ("blank removal reason", "POST", "/v1/retention/p1/remove", {"actor": "a", "reason": " "}),
    ("removal without an actor", "POST", "/v1/retention/p1/remove", {"reason": "r"}),
    ("a hold of nothing", "PUT", "/v1/holds/h1", {**WHO}),
    ("authors not a list", "PUT", "/v1/holds/h1", {"authors": "bob", **WHO}),
    ("blank author", "PUT", "/v1/holds/h1", {"authors": ["  "], **WHO}),
    ("bad conversation id in a hold", "PUT", "/v1/holds/h1", {"conversation_ids": ["c/1"], **WHO}),
    ("too many conversations", "PUT", "/v1/holds/h1", {"conversation_ids": ["c1"] * 1001, **WHO}),
    ("release without a reason", "POST", "/v1/holds/h1/release", {"actor": "a"}),
]


def test_bad_input_is_a_400_and_writes_nothing(operator: TestClient, seeded: Pk) -> None:
    accepted(operator.put("/v1/holds/h1", json={"authors": ["bob"], **WHO}))
    before = ledger_rows(seeded)
    failures = []
    for name, method, url, body in BAD_INPUT:
        response = operator.request(method, url, json=body)
        if response.status_code != 400 or response.json().get("error") != "validation_error":
            failures.append(f"{name}: {response.status_code} {response.text[:200]}")
    for query in ("maybe", "2", ""):
        response = operator.get("/v1/holds", params={"include_released": query})
        if response.status_code != 400:
            failures.append(f"include_released={query!r}: {response.status_code}")
    assert failures == []
    assert ledger_rows(seeded) == before
    assert seeded.list_retention() == [] and [h.hold_id for h in seeded.list_holds()] == ["h1"]


# -- the operator token -------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), sorted(ROUTES))
def test_the_host_token_is_refused_and_nothing_is_written(pk: Pk, method: str, path: str) -> None:
    url = path.replace("{policy_id}", "p1").replace("{hold_id}", "h1")
    body = {"max_age_seconds": DAY, "conversation_ids": ["c1"], **WHO}
    with make_client(pk) as client:
        refused(client.request(method, url, json=body, headers=AS_HOST), 401, "unauthorized")
        assert ledger_rows(pk) == 0
        assert client.request(method, url, json=body, headers=AS_OPERATOR).status_code != 401
