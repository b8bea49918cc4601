"""The HTTP API's contract on SQLite and PostgreSQL: every endpoint's success, the bearer
tokens, bad input (400, and nothing written), docs/design.md's error table, the body caps, the
checkpoint download and merge upload, the demo world, and the server's access rules.
No response ever carries a traceback: every response passes through ``no_traceback``."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, text
from starlette.applications import Starlette
from starlette.routing import Mount

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.commands.http.app import MAX_JSON_DEPTH, MAX_WAIT_SECONDS, OPERATOR_TAG, create_app
from purgekeeper.commands.http.server import DEMO_BOT, DEMO_PURGED_EVENT, LOOPBACK, resolve_access, seed_demo
from purgekeeper.commands.settings import Settings
from purgekeeper.commands.web.auth import TOKEN_FILE_NAME, Tokens
from purgekeeper.schema import ledger
from purgekeeper.schema.tables import metadata
from tests.helpers.http import (
    AS_HOST,
    AS_OPERATOR,
    BODY_CAP,
    ENDPOINTS,
    HOST,
    OPERATOR,
    TOKENS,
    UPLOAD_CAP,
    WHO,
    TestClient,
    World,
    accepted,
    b64,
    make_client,
    ok,
    refused,
    snapshot,
)

Pk = purgekeeper.Purgekeeper


def git_repository(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True, capture_output=True)
    return path


@pytest.fixture
def world(pk: Pk, roots: dict[str, Path]) -> World:
    repository = git_repository(roots["memory_root"] / "b1")
    pk.register_bot("b1", name="Helper", memory_path=repository)
    pk.create_conversation("c1", bot_id="b1")
    pk.create_conversation("ch1", kind="channel")
    event = pk.ingest_event(
        "c1",
        author="ada",
        body="hello",
        event_id="e1",
        provider_event_id="p1",
        attachments=[NewAttachment.cas(b"cas bytes", name="a.txt"), NewAttachment.file(b"file bytes", name="b.txt")],
    )
    pk.start_run("c1", bot_id="b1", run_id="r1")
    pk.start_run("c1", bot_id="b1", run_id="r-done")
    pk.finish_run("r-done", status="succeeded", output={"text": "done"})
    return World(pk, roots["memory_root"], repository, tuple(a.id for a in event.attachments))


# -- the surface --------------------------------------------------------------------------------


def test_openapi_lists_every_command_once_with_bearer_security(client: TestClient) -> None:
    document = client.get("/openapi.json", headers={"Authorization": ""}).json()
    commands = {path: item for path, item in document["paths"].items() if path.startswith("/v1/")}  # not the probes
    served = {(method.upper(), path) for path, item in commands.items() for method in item}
    assert served == set(ENDPOINTS)
    schemes = document["components"]["securitySchemes"]
    assert [s["scheme"] for s in schemes.values()] == ["bearer"]
    for path, item in commands.items():
        for method, operation in item.items():
            assert operation.get("security"), f"{method} {path} declares no security"
    operators = {
        (method.upper(), path)
        for path, item in commands.items()
        for method, operation in item.items()
        if OPERATOR_TAG in operation["tags"]
    }
    assert operators == {key for key, who in ENDPOINTS.items() if who == "operator"}


def test_status_page_and_metrics_are_served(client: TestClient) -> None:
    """The two web routers are included (and authenticate on their own)."""
    assert client.get("/metrics", headers={"Authorization": ""}).status_code == 401
    assert client.get("/metrics", headers=AS_OPERATOR).status_code == 200
    assert client.get("/status", headers={"Authorization": ""}).status_code == 401
    assert client.get("/status", headers=AS_OPERATOR).status_code == 200


# -- every endpoint succeeds ----------------------------------------------------------------------


def test_content_endpoints(client: TestClient, roots: dict[str, Path]) -> None:
    repository = git_repository(roots["memory_root"] / "bot-1")
    bot = ok(client.post("/v1/bots", json={"bot_id": "bot-1", "name": "Helper", "memory_path": str(repository)}))
    assert bot["memory_path"] == str(repository) and bot["marker_id"]
    created = ok(client.post("/v1/conversations", json={"conversation_id": "c-1", "bot_id": "bot-1"}))
    assert created["version"] == 1 and created["state"] == "active"
    ok(client.post("/v1/conversations", json={"conversation_id": "ch-1", "kind": "channel"}))
    event = ok(
        client.post(
            "/v1/conversations/c-1/events",
            json={
                "author": "ada",
                "body": "hello",
                "provider_event_id": "slack:1",
                "occurred_at": "2024-05-01T12:00:00+02:00",
                "attachments": [
                    {"kind": "cas", "name": "a.txt", "data_base64": b64(b"cas bytes")},
                    {"kind": "file", "name": "b.txt", "data_base64": b64(b"file bytes")},
                ],
            },
        )
    )
    assert event["occurred_at"] == "2024-05-01T10:00:00Z"
    cas, real = event["attachments"]
    forward = {
        "author": "bob",
        "body": "fwd",
        "attachments": [{"kind": "reuse", "name": "f.txt", "blob_id": real["blob_id"]}],
    }
    reused = ok(client.post("/v1/conversations/ch-1/events", json=forward))
    assert reused["attachments"][0]["blob_id"] == real["blob_id"]
    again = ok(
        client.post("/v1/conversations/c-1/events", json={"author": "ada", "body": "x", "provider_event_id": "slack:1"})
    )
    assert again["id"] == event["id"], "a duplicate delivery returns the event already ingested"

    placement = ok(client.post("/v1/conversations/ch-1/placements", json={"event_id": event["id"]}))
    assert placement == {"event_id": event["id"], "conversation_id": "ch-1"}
    derivative = ok(
        client.post(
            "/v1/conversations/c-1/derivatives",
            json={"kind": "summary", "payload": {"text": "greeting"}, "source_event_ids": [event["id"]]},
        )
    )
    assert derivative["source_event_ids"] == [event["id"]]
    run = ok(client.post("/v1/runs", json={"conversation_id": "c-1", "bot_id": "bot-1", "run_id": "run-1"}))
    assert run["status"] == "running"
    admission = ok(client.post("/v1/runs/run-1/admissions", json={"event_id": event["id"], "payload": ["hello"]}))
    assert admission["payload"] == ["hello"]
    finished = ok(client.post("/v1/runs/run-1/finish", json={"status": "succeeded", "output": {"text": "hi"}}))
    assert finished["status"] == "succeeded" and finished["output"] == {"text": "hi"}

    assert ok(client.get("/v1/conversations/c-1"))["id"] == "c-1"
    catalog = ok(client.get("/v1/conversations"))["conversations"]
    assert [c["id"] for c in catalog] == ["c-1", "ch-1"]
    events = ok(client.get("/v1/conversations/ch-1/events"))["events"]
    assert {e["id"] for e in events} == {event["id"], reused["id"]}
    for attachment, data in ((cas, b"cas bytes"), (real, b"file bytes")):
        download = client.get(f"/v1/attachments/{attachment['id']}")
        assert download.status_code == 200 and download.content == data
        assert download.headers["content-type"] == "application/octet-stream"


def test_purge_endpoints(client: TestClient, world: World) -> None:
    preview = ok(client.post("/v1/purges/preview", json={"event_ids": ["e1"]}))
    assert [e["id"] for e in preview["events"]] == ["e1"]
    assert {a["id"] for a in preview["exclusive_attachments"]} == set(world.attachment_ids)
    assert preview["disclosures"]
    confirmation = {"scope": {"event_ids": ["e1"]}, "scope_digest": preview["scope_digest"], **WHO}
    refused(client.post("/v1/purges/confirm", json=confirmation), 409, "active_runs")
    world.pk.finish_run("r1", status="cancelled")
    preview = ok(client.post("/v1/purges/preview", json={"event_ids": ["e1"]}))
    confirmation = {**confirmation, "scope_digest": preview["scope_digest"], "idempotency_key": "k-1"}
    acceptance = accepted(client.post("/v1/purges/confirm", json=confirmation, headers={"X-Request-Id": "req-1"}))
    assert acceptance["outcome"] == "accepted" and acceptance["ledger_seq"] == 1
    assert accepted(client.post("/v1/purges/confirm", json=confirmation)) == acceptance, "the same key replays"
    with world.pk.db.read() as conn:
        entry = ledger.entry_by_purge_id(conn, acceptance["purge_id"])
    assert entry is not None and (entry.request_id, entry.origin, entry.actor) == ("req-1", "http", WHO["actor"])
    assert ok(client.get("/v1/conversations/c1/events"))["events"] == []

    by_time = {"conversation_id": "c1", "after": "2000-01-01T00:00:00Z", "before": "2999-01-01T00:00:00+01:00"}
    world.pk.ingest_event("c1", author="bob", body="later", event_id="e2")
    assert [e["id"] for e in ok(client.post("/v1/purges/preview", json=by_time))["events"]] == ["e1", "e2"]
    by_author = ok(client.post("/v1/purges/preview", json={"conversation_id": "c1", "author": "bob"}))
    assert [e["id"] for e in by_author["events"]] == ["e2"]

    channel = accepted(client.post("/v1/channels/ch1/delete", json=WHO))
    assert channel["outcome"] == "accepted"
    version = world.pk.get_conversation("c1").version  # type: ignore[union-attr]
    purge = accepted(client.post("/v1/conversations/c1/purge", json={**WHO, "expected_version": version}))
    assert purge["outcome"] == "accepted"
    repeat = accepted(client.post("/v1/conversations/c1/purge", json={**WHO, "expected_version": version}))
    assert repeat == {**purge, "outcome": "already_purged"}

    bot = ok(client.get("/v1/bots/b1/deletion-preview"))
    assert bot["memory"]["erasable"] is True, bot
    deletion = {**WHO, "erase_memory": True, "reviewed_repository": bot["memory"]["identity"]}
    assert accepted(client.post("/v1/bots/b1/delete", json=deletion))["outcome"] == "accepted"

    listed = ok(client.get("/v1/purges"))
    assert [p["kind"] for p in listed["purges"]] == ["bot", "conversation", "channel", "content"]
    assert listed["next_after"] is None
    status = ok(client.get(f"/v1/purges/{acceptance['purge_id']}"))
    assert status["kind"] == "content" and status["status"] == "accepted"
    assert {s["kind"] for s in status["steps"]} == {"bodies", "attachments"}
    waited = ok(client.get(f"/v1/purges/{acceptance['purge_id']}/wait", params={"timeout": 0.05}))
    assert waited["status"] == "accepted", "no worker runs here: the wait times out with the status"


def test_author_erasure_endpoints(client: TestClient, world: World) -> None:
    window = {"author": "ada"}
    world.pk.admit("e1", "r1", payload={"text": "hello"})
    preview = ok(client.post("/v1/authors/erasure-preview", json=window))
    assert preview["totals"]["events"] == 1 and preview["totals"]["exclusive_attachments"] == 2
    assert preview["blocking_runs"] == ["r1"]
    assert preview["conversations"] == [{"conversation_id": "c1", "events": 1}]
    erasure = {**window, "scope_digest": preview["scope_digest"], **WHO}
    refused(client.post("/v1/authors/erase", json=erasure), 409, "active_runs")  # r1 admitted e1 and still runs
    world.pk.finish_run("r1", status="cancelled")
    erasure["scope_digest"] = ok(client.post("/v1/authors/erasure-preview", json=window))["scope_digest"]
    refused(client.post("/v1/authors/erase", json={**erasure, "close_author": "yes"}), 400, "validation_error")
    refused(
        client.post("/v1/authors/erase", json={**erasure, "before": "2026-01-01T00:00:00"}), 400, "validation_error"
    )
    erased = accepted(client.post("/v1/authors/erase", json=erasure))
    assert erased["outcome"] == "accepted"
    assert ok(client.get(f"/v1/purges/{erased['purge_id']}"))["kind"] == "author"
    assert ok(client.get("/v1/conversations/c1/events"))["events"] == []
    late = {"author": "ada", "body": "again"}
    refused(client.post("/v1/conversations/c1/events", json=late), 410, "author_erased")
    again = ok(client.post("/v1/authors/erasure-preview", json=window))
    repeat = accepted(client.post("/v1/authors/erase", json={**erasure, "scope_digest": again["scope_digest"]}))
    assert repeat == {**erased, "outcome": "already_purged"}


def test_list_purges_pages_with_the_cursor(client: TestClient, world: World) -> None:
    for n in range(5):
        world.pk.purge_conversation(f"gone-{n}", **WHO)
    seen: list[int] = []
    after: int | None = None
    while True:
        page = ok(client.get("/v1/purges", params={"limit": 2} | ({"after": after} if after else {})))
        seen += [p["ledger_seq"] for p in page["purges"]]
        after = page["next_after"]
        if after is None:
            break
    assert seen == [5, 4, 3, 2, 1]
    assert ok(client.get("/v1/purges", params={"status": "complete"}))["purges"] != []
    assert ok(client.get("/v1/purges", params={"status": "incomplete"}))["purges"] == []


def test_operator_endpoints(client: TestClient, world: World) -> None:
    world.pk.finish_run("r1", status="failed")
    accepted = world.pk.purge_conversation("c1", **WHO)
    incomplete = text("UPDATE cleanup_steps SET status = 'incomplete' WHERE purge_id = :p")
    world.pk.db.transact(lambda conn: conn.execute(incomplete, {"p": accepted.purge_id}))
    client.headers.update(AS_OPERATOR)
    retried = ok(client.post(f"/v1/purges/{accepted.purge_id}/retry", json=WHO))
    assert {s["status"] for s in retried["steps"]} == {"pending"}
    assert ok(client.post("/v1/resume"))["resent"] >= 0
    report = ok(client.get("/v1/ledger/verify"))
    assert report["ok"] is True and report["rows"] == 1 and report["problems"] == []

    download = client.get("/v1/ledger/checkpoint")
    assert download.status_code == 200
    assert download.headers["content-type"] == "application/x-ndjson"
    filename = re.search(r'filename="([^"]+)"', download.headers["content-disposition"])
    assert filename and filename.group(1) == f"{world.pk.database_key}-{1:012d}.jsonl"
    header, *rows = [json.loads(line) for line in download.content.splitlines()]
    assert (header["format"], header["version"]) == ("purgekeeper-ledger-checkpoint", 2)
    assert header["head"] == {"seq": 1, "hash": report["head_hash"]}
    assert [row["purge_id"] for row in rows] == [accepted.purge_id]
    assert not any(name.startswith("purgekeeper-checkpoint-") for name in os.listdir(tempfile.gettempdir()))

    merged = ok(
        client.post("/v1/ledger/merge", files=[("files", ("mine.jsonl", download.content, "application/x-ndjson"))])
    )
    assert merged["files"] == ["mine.jsonl"]
    assert merged["appended"] == [] and merged["already_known"] == 1
    assert merged["sources"] == [world.pk.database_key]


def test_merge_upload_of_another_database_s_file_needs_the_form_field(client: TestClient, tmp_path: Path) -> None:
    """Issue 11, case 13: refused (400) unless ``from_other_database=true`` is sent."""
    with purgekeeper.open(
        f"sqlite:///{tmp_path / 'other.db'}", checkpoint_dir=tmp_path / "other", workers="none"
    ) as other:
        other.purge_conversation("c-there", **WHO)
        upload = [("files", ("other.json", other.checkpoint_ledger(tmp_path / "o.json").path.read_bytes(), "x"))]
        other_id = other.database_key
    body = refused(client.post("/v1/ledger/merge", files=upload, headers=AS_OPERATOR), 400, "validation_error")
    assert "another database" in body["detail"] and str(tmp_path) not in body["detail"]
    merged = ok(
        client.post("/v1/ledger/merge", files=upload, data={"from_other_database": "true"}, headers=AS_OPERATOR)
    )
    assert merged["sources"] == [other_id] and len(merged["appended"]) == 1


# -- tokens ---------------------------------------------------------------------------------------


def _url(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", path)


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token", f"Basic {HOST}", "Bearer", f"bearer  {HOST}x"])
def test_every_endpoint_needs_a_valid_token(pk: Pk, world: World, authorization: str | None) -> None:
    before = snapshot(world)
    headers = {"Authorization": authorization} if authorization else {}
    with make_client(pk) as client:
        for method, path in sorted(ENDPOINTS):
            response = client.request(method, _url(path), headers=headers, json={"conversation_id": "new"})
            body = refused(response, 401, "unauthorized")
            assert response.headers["www-authenticate"] == "Bearer"
            assert HOST not in json.dumps(body) and OPERATOR not in json.dumps(body)
    assert snapshot(world) == before


@pytest.mark.parametrize("mounted", ["root_path", "Mount"])
def test_every_endpoint_needs_a_valid_token_under_a_path_prefix_too(pk: Pk, world: World, mounted: str) -> None:
    """Behind a proxy the app runs under a prefix: uvicorn's ``--root-path`` or a Starlette
    ``Mount`` puts it into the request's path. Tried: every endpoint at ``/pk/v1/...`` with no
    token, and the operator endpoints with the host token."""
    app = create_app(pk, tokens=TOKENS, max_body_bytes=BODY_CAP, max_upload_bytes=UPLOAD_CAP)
    outer = app if mounted == "root_path" else Starlette(routes=[Mount("/pk", app=app)])
    before = snapshot(world)
    with TestClient(outer, root_path="/pk" if mounted == "root_path" else "") as client:
        for method, path in sorted(ENDPOINTS):
            response = client.request(method, "/pk" + _url(path), json={"conversation_id": "new"})
            refused(response, 401, "unauthorized")
            if ENDPOINTS[(method, path)] == "operator":
                response = client.request(method, "/pk" + _url(path), headers=AS_HOST, json={})
                refused(response, 401, "unauthorized")
        assert client.get("/pk/v1/purges", headers=AS_HOST).status_code == 200  # the prefix routes at all
    assert snapshot(world) == before


@pytest.mark.parametrize(("method", "path"), sorted(k for k, who in ENDPOINTS.items() if who == "operator"))
def test_operator_endpoints_refuse_the_host_token_when_an_operator_token_is_set(
    client: TestClient, method: str, path: str
) -> None:
    refused(client.request(method, _url(path), headers=AS_HOST), 401, "unauthorized")
    assert client.request(method, _url(path), headers=AS_OPERATOR).status_code != 401


def test_without_an_operator_token_the_host_token_opens_everything(pk: Pk) -> None:
    with make_client(pk, Tokens(api=HOST)) as client:
        assert ok(client.get("/v1/ledger/verify", headers=AS_HOST))["ok"] is True
        refused(client.get("/v1/ledger/verify", headers=AS_OPERATOR), 401, "unauthorized")


def test_the_operator_token_also_opens_host_endpoints(client: TestClient) -> None:
    ok(client.post("/v1/conversations", json={"conversation_id": "c-op"}, headers=AS_OPERATOR))


def test_a_token_is_checked_before_the_body_is_read(client: TestClient) -> None:
    """No size, parse or validation error tells an unauthenticated caller anything."""
    big = {"conversation_id": "x" * (BODY_CAP * 2)}
    refused(client.post("/v1/conversations", json=big, headers={"Authorization": ""}), 401, "unauthorized")
    broken = {"Authorization": "", "Content-Type": "application/json"}
    refused(client.post("/v1/conversations", content=b"{", headers=broken), 401, "unauthorized")


# -- bad input: 400 and nothing written ---------------------------------------------------------------

DEEP: Any = "leaf"
for _ in range(MAX_JSON_DEPTH + 1):
    DEEP = [DEEP]
EVENT = {"author": "ada", "body": "x"}
CAS = {"kind": "cas", "name": "a.txt", "data_base64": b64(b"fresh bytes")}


def event_with(**changes: Any) -> dict[str, Any]:
    return {**EVENT, **changes}


BAD_INPUT: list[tuple[str, str, str, dict[str, Any]]] = [
    ("unknown field", "POST", "/v1/conversations", {"json": {"conversation_id": "c2", "colour": "red"}}),
    ("missing field", "POST", "/v1/conversations", {"json": {}}),
    ("id of the wrong type", "POST", "/v1/conversations", {"json": {"conversation_id": 5}}),
    ("id with a bad character", "POST", "/v1/conversations", {"json": {"conversation_id": "c 2"}}),
    ("id starting with a dot", "POST", "/v1/conversations", {"json": {"conversation_id": ".."}}),
    ("id too long", "POST", "/v1/conversations", {"json": {"conversation_id": "x" * 201}}),
    ("unknown kind", "POST", "/v1/conversations", {"json": {"conversation_id": "c2", "kind": "room"}}),
    ("a list body", "POST", "/v1/conversations", {"json": ["c2"]}),
    ("not JSON", "POST", "/v1/conversations", {"content": b"{", "headers": {"Content-Type": "application/json"}}),
    ("body of the wrong type", "POST", "/v1/conversations/c1/events", {"json": event_with(body=5)}),
    ("empty body", "POST", "/v1/conversations/c1/events", {"json": event_with(body="")}),
    ("blank author", "POST", "/v1/conversations/c1/events", {"json": event_with(author="   ")}),
    ("NUL in the body", "POST", "/v1/conversations/c1/events", {"json": event_with(body="a\x00b")}),
    ("naive time", "POST", "/v1/conversations/c1/events", {"json": event_with(occurred_at="2024-01-01T00:00:00")}),
    (
        "time out of range in UTC",
        "POST",
        "/v1/conversations/c1/events",
        {"json": event_with(occurred_at="0001-01-01T00:00:00+01:00")},
    ),
    ("bad event id", "POST", "/v1/conversations/c1/events", {"json": event_with(event_id="e/1")}),
    (
        "bad base64",
        "POST",
        "/v1/conversations/c1/events",
        {"json": event_with(attachments=[{**CAS, "data_base64": "!!!!"}])},
    ),
    (
        "unknown attachment kind",
        "POST",
        "/v1/conversations/c1/events",
        {"json": event_with(attachments=[{**CAS, "kind": "url"}])},
    ),
    (
        "path in an attachment name, after a good attachment",
        "POST",
        "/v1/conversations/c1/events",
        {"json": event_with(attachments=[CAS, {**CAS, "kind": "file", "name": "../etc/passwd"}])},
    ),
    ("too many attachments", "POST", "/v1/conversations/c1/events", {"json": event_with(attachments=[CAS] * 33)}),
    (
        "unknown binding",
        "POST",
        "/v1/conversations/c1/events",
        {"json": event_with(attachments=[{"kind": "reuse", "name": "a", "blob_id": "b", "binding": "copy"}])},
    ),
    ("empty event id", "POST", "/v1/conversations/c1/placements", {"json": {"event_id": ""}}),
    ("empty derivative kind", "POST", "/v1/conversations/c1/derivatives", {"json": {"kind": "", "payload": 1}}),
    ("empty payload", "POST", "/v1/conversations/c1/derivatives", {"json": {"kind": "k", "payload": {}}}),
    ("payload nested too deep", "POST", "/v1/conversations/c1/derivatives", {"json": {"kind": "k", "payload": DEEP}}),
    (
        "too many sources",
        "POST",
        "/v1/conversations/c1/derivatives",
        {"json": {"kind": "k", "payload": 1, "source_event_ids": ["e1"] * 1001}},
    ),
    ("run without a bot", "POST", "/v1/runs", {"json": {"conversation_id": "c1"}}),
    ("non-terminal finish", "POST", "/v1/runs/r1/finish", {"json": {"status": "running"}}),
    ("output nested too deep", "POST", "/v1/runs/r1/finish", {"json": {"status": "failed", "output": DEEP}}),
    ("null payload", "POST", "/v1/runs/r1/admissions", {"json": {"event_id": "e1", "payload": None}}),
    ("relative memory path", "POST", "/v1/bots", {"json": {"bot_id": "b2", "name": "n", "memory_path": "b1"}}),
    (
        "memory path outside the roots",
        "POST",
        "/v1/bots",
        {"json": {"bot_id": "b2", "name": "n", "memory_path": "/etc"}},
    ),
    ("empty scope", "POST", "/v1/purges/preview", {"json": {"event_ids": []}}),
    ("two kinds of scope", "POST", "/v1/purges/preview", {"json": {"event_ids": ["e1"], "conversation_id": "c1"}}),
    (
        "after not before before",
        "POST",
        "/v1/purges/preview",
        {"json": {"conversation_id": "c1", "after": "2024-02-01T00:00:00Z", "before": "2024-01-01T00:00:00Z"}},
    ),
    (
        "digest not hex",
        "POST",
        "/v1/purges/confirm",
        {"json": {"scope": {"event_ids": ["e1"]}, "scope_digest": "x" * 64, **WHO}},
    ),
    (
        "blank actor",
        "POST",
        "/v1/purges/confirm",
        {"json": {"scope": {"event_ids": ["e1"]}, "scope_digest": "0" * 64, "actor": " ", "reason": "r"}},
    ),
    ("reason too long", "POST", "/v1/conversations/c1/purge", {"json": {"actor": "a", "reason": "r" * 1001}}),
    ("version zero", "POST", "/v1/conversations/c1/purge", {"json": {**WHO, "expected_version": 0}}),
    ("version not a number", "POST", "/v1/conversations/c1/purge", {"json": {**WHO, "expected_version": "one"}}),
    ("version too large", "POST", "/v1/conversations/c1/purge", {"json": {**WHO, "expected_version": 2**64}}),
    ("a conversation is not a channel", "POST", "/v1/channels/c1/delete", {"json": WHO}),
    ("erase_memory not a boolean", "POST", "/v1/bots/b1/delete", {"json": {**WHO, "erase_memory": "yes"}}),
    ("erasure without a reviewed repository", "POST", "/v1/bots/b1/delete", {"json": {**WHO, "erase_memory": True}}),
    ("bad id in the path", "GET", "/v1/conversations/-c1", {}),
    ("limit zero", "GET", "/v1/purges?limit=0", {}),
    ("limit too large", "GET", "/v1/purges?limit=1001", {}),
    ("limit not a number", "GET", "/v1/purges?limit=ten", {}),
    ("cursor zero", "GET", "/v1/purges?after=0", {}),
    ("cursor beyond 64 bits", "GET", f"/v1/purges?after={2**63}", {}),
    ("unknown status", "GET", "/v1/purges?status=lost", {}),
    ("negative timeout", "GET", "/v1/purges/p1/wait?timeout=-1", {}),
    ("NaN timeout", "GET", "/v1/purges/p1/wait?timeout=nan", {}),
    ("infinite timeout", "GET", "/v1/purges/p1/wait?timeout=inf", {}),
    (
        "blank retry reason",
        "POST",
        "/v1/purges/p1/retry",
        {"json": {"actor": "a", "reason": " "}, "headers": AS_OPERATOR},
    ),
    ("merge without files", "POST", "/v1/ledger/merge", {"headers": AS_OPERATOR}),
    (
        "merge of a file that is not a checkpoint",
        "POST",
        "/v1/ledger/merge",
        {"files": [("files", ("x.json", b'{"format": "nope"}', "application/json"))], "headers": AS_OPERATOR},
    ),
]


def test_bad_input_is_a_400_and_writes_nothing(client: TestClient, world: World) -> None:
    """Every case runs against the same world (one per backend, for speed); each must leave
    every table and root exactly as it was."""
    world.pk.purge_conversation("gone", **WHO)  # a ledger row, for the operator cases to leave alone
    failures = []
    for name, method, url, request_args in BAD_INPUT:
        before = snapshot(world)
        response = client.request(method, url, **request_args)
        body = response.json()
        if response.status_code != 400 or body.get("error") != "validation_error":
            failures.append(f"{name}: {response.status_code} {response.text[:200]}")
        elif not isinstance(body.get("detail"), str) or not 0 < len(body["detail"]) <= 500:
            failures.append(f"{name}: detail {body.get('detail')!r}")
        elif snapshot(world) != before:
            failures.append(f"{name}: something was written")
    assert failures == []


def test_validation_messages_name_the_field_not_the_input(client: TestClient) -> None:
    secret = "s3cret-" * 40
    body = refused(client.post("/v1/conversations", json={"conversation_id": secret}), 400, "validation_error")
    assert "conversation_id" in body["detail"] and "s3cret" not in body["detail"]


# -- docs/design.md's error table -----------------------------------------------------------------------


def test_not_found_is_404(client: TestClient, world: World) -> None:
    refused(client.get("/v1/purges/p-unknown"), 404, "not_found")
    refused(client.get("/v1/conversations/c-unknown"), 404, "not_found")
    refused(client.get("/v1/conversations/c-unknown/events"), 404, "not_found")
    refused(client.post("/v1/conversations/c-unknown/events", json=EVENT), 404, "not_found")
    refused(client.get("/v1/attachments/a-unknown"), 404, "not_found")
    refused(client.get("/v1/bots/b-unknown/deletion-preview"), 404, "not_found")
    refused(client.get("/v1/no-such-endpoint"), 404, "not_found")
    refused(client.delete("/v1/conversations"), 405, "method_not_allowed")


def test_conflicts_are_409(client: TestClient, world: World) -> None:
    pk = world.pk
    body = refused(client.post("/v1/conversations/c1/purge", json=WHO), 409, "active_runs")
    assert body["run_ids"] == ["r1"]
    pk.finish_run("r1", status="succeeded")

    scope = {"conversation_id": "c1"}
    digest = ok(client.post("/v1/purges/preview", json=scope))["scope_digest"]
    pk.ingest_event("c1", author="bob", body="meanwhile", event_id="e-new")
    confirmation = {"scope": scope, "scope_digest": digest, **WHO}
    body = refused(client.post("/v1/purges/confirm", json=confirmation), 409, "stale_confirmation")
    assert "e-new" in body["detail"]

    version = pk.get_conversation("c1").version  # type: ignore[union-attr]
    stale = {**WHO, "expected_version": version - 1}
    refused(client.post("/v1/conversations/c1/purge", json=stale), 409, "version_conflict")

    preview = pk.preview_purge(EventScope(event_ids=("e1",)))
    keyed = {"scope": {"event_ids": ["e1"]}, "scope_digest": preview.scope_digest, **WHO, "idempotency_key": "k"}
    accepted(client.post("/v1/purges/confirm", json=keyed))
    reused_key = {**WHO, "idempotency_key": "k"}
    refused(client.post("/v1/conversations/c1/purge", json=reused_key), 409, "idempotency_conflict")

    accepted(client.post("/v1/conversations/c1/purge", json=WHO))
    refused(client.post("/v1/conversations", json={"conversation_id": "c1"}), 409, "id_reserved")


def test_memory_erasure_unavailable_is_409_with_its_reason(client: TestClient, world: World) -> None:
    world.pk.finish_run("r1", status="succeeded")
    identity = ok(client.get("/v1/bots/b1/deletion-preview"))["memory"]["identity"]
    wrong = {**WHO, "erase_memory": True, "reviewed_repository": {**identity, "marker_id": "not-the-marker"}}
    body = refused(client.post("/v1/bots/b1/delete", json=wrong), 409, "memory_erasure_unavailable")
    assert body["reason"] == "identity_changed"
    assert world.repository.is_dir()


def test_fences_are_410(client: TestClient, world: World) -> None:
    pk = world.pk
    pk.finish_run("r1", status="succeeded")
    preview = pk.preview_purge(EventScope(event_ids=("e1",)))
    pk.confirm_purge(preview.scope, scope_digest=preview.scope_digest, **WHO)
    for attachment_id in world.attachment_ids:
        refused(client.get(f"/v1/attachments/{attachment_id}"), 410, "content_purged")
    refused(client.post("/v1/conversations/ch1/placements", json={"event_id": "e1"}), 410, "content_purged")
    refused(client.post("/v1/conversations/c1/events", json=event_with(provider_event_id="p1")), 410, "content_purged")

    pk.delete_channel("ch1", **WHO)
    refused(client.post("/v1/conversations/ch1/events", json=EVENT), 410, "conversation_deleted")
    assert ok(client.get("/v1/conversations/ch1"))["id"] == "ch1", "a deleted channel's history stays readable"

    pk.purge_conversation("c1", **WHO)
    refused(client.get("/v1/conversations/c1"), 410, "conversation_purged")
    refused(client.get("/v1/conversations/c1/events"), 410, "conversation_purged")
    refused(client.post("/v1/conversations/c1/events", json=EVENT), 410, "conversation_purged")
    assert "c1" not in [c["id"] for c in ok(client.get("/v1/conversations"))["conversations"]]
    pk.create_conversation("c3")
    pk.delete_bot("b1", **WHO)
    refused(client.post("/v1/runs", json={"conversation_id": "c3", "bot_id": "b1"}), 410, "bot_deleted")


def test_an_absent_purged_id_reads_as_purged(client: TestClient) -> None:
    accepted(client.post("/v1/conversations/never-made/purge", json=WHO))
    refused(client.get("/v1/conversations/never-made"), 410, "conversation_purged")


def test_unavailable_messaging_is_503_with_bounded_diagnostics(
    client: TestClient, pk: Pk, monkeypatch: pytest.MonkeyPatch
) -> None:
    def closed() -> list[Any]:
        raise purgekeeper.MessagingUnavailable(
            "the ledger is behind its checkpoint", diagnostics=["row 3 missing"] * 50
        )

    monkeypatch.setattr(pk, "list_conversations", closed)
    body = refused(client.get("/v1/conversations"), 503, "messaging_unavailable")
    assert body["diagnostics"] == ["row 3 missing"] * purgekeeper.MessagingUnavailable.MAX_DIAGNOSTICS


def test_a_bug_is_a_500_without_the_traceback(
    pk: Pk, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> list[Any]:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(pk, "list_conversations", broken)
    with make_client(pk, raise_server_exceptions=False) as client, caplog.at_level(logging.ERROR):
        response = client.get("/v1/conversations", headers=AS_HOST)
    assert response.status_code == 500
    assert response.json() == {"error": "internal_error", "detail": "internal error"}
    assert "secret internals" not in response.text
    assert any(record.exc_info and "secret internals" in str(record.exc_info[1]) for record in caplog.records)


# -- caps ---------------------------------------------------------------------------------------------


def test_a_body_over_the_cap_is_413_and_writes_nothing(client: TestClient, world: World) -> None:
    before = snapshot(world)
    big = event_with(attachments=[{**CAS, "data_base64": b64(b"x" * BODY_CAP)}])
    refused(client.post("/v1/conversations/c1/events", json=big), 413, "payload_too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the gate counts what arrives
        yield b'{"author": "ada", "body": "'
        for _ in range(BODY_CAP // 1024 + 1):
            yield b"x" * 1024
        yield b'"}'

    chunked = client.post("/v1/conversations/c1/events", content=chunks(), headers={"Content-Type": "application/json"})
    refused(chunked, 413, "payload_too_large")
    assert snapshot(world) == before


def test_a_body_just_under_the_cap_is_accepted(client: TestClient, world: World) -> None:
    data = b"y" * (BODY_CAP // 2)
    event = ok(
        client.post("/v1/conversations/c1/events", json=event_with(attachments=[{**CAS, "data_base64": b64(data)}]))
    )
    assert client.get(f"/v1/attachments/{event['attachments'][0]['id']}").content == data


def test_merge_uploads_have_their_own_cap(client: TestClient) -> None:
    files = [("files", ("big.json", b"x" * (UPLOAD_CAP + 1), "application/json"))]
    refused(client.post("/v1/ledger/merge", files=files, headers=AS_OPERATOR), 413, "payload_too_large")
    files = [("files", ("small.json", b"x" * (BODY_CAP + 1), "application/json"))]
    refused(client.post("/v1/ledger/merge", files=files, headers=AS_OPERATOR), 400, "validation_error")


def test_wait_is_capped(client: TestClient, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    accepted = world.pk.purge_conversation("gone", **WHO)
    asked: list[float] = []
    real_wait = world.pk.wait
    monkeypatch.setattr(world.pk, "wait", lambda purge_id, timeout: asked.append(timeout) or real_wait(purge_id, 0))
    ok(client.get(f"/v1/purges/{accepted.purge_id}/wait", params={"timeout": 3600}))
    assert asked == [MAX_WAIT_SECONDS]


# -- the demo world and the server -------------------------------------------------------------------


def test_seed_demo_twice(pk: Pk) -> None:
    first = seed_demo(pk, pk.settings)
    rows = _counts(pk)
    second = seed_demo(pk, pk.settings)
    assert second == first and first["purge_id"]
    assert _counts(pk) == rows
    assert (
        rows["purge_ledger"] == 3 and rows["conversations"] == 2 and rows["bots"] == 1
    )  # complete, retrying, incomplete
    events = {e.id for c in pk.list_conversations() for e in pk.read_conversation(c.id)}
    assert DEMO_PURGED_EVENT not in events and len(events) == 3
    memory = pk.preview_bot_deletion(DEMO_BOT).memory
    assert memory.erasable, memory
    assert pk.status(first["purge_id"]).kind == "content"


def test_seed_demo_after_the_demo_conversation_was_purged(pk: Pk) -> None:
    seed_demo(pk, pk.settings)
    pk.purge_conversation("demo-welcome", **WHO)
    summary = seed_demo(pk, pk.settings)
    assert summary["conversations"] == 1
    assert pk.get_conversation("demo-welcome") is None


def test_seed_demo_refuses_a_database_in_use(pk: Pk) -> None:
    """``serve --demo`` against a production database would leave demonstration purges in its
    ledger for good (one incomplete, alerting): a conversation that is not the demo's means
    the database is in use, and nothing is written."""
    pk.create_conversation("customer-1")
    before = _counts(pk)
    with pytest.raises(purgekeeper.ValidationError, match="in use"):
        seed_demo(pk, pk.settings)
    assert _counts(pk) == before


def _counts(pk: Pk) -> dict[str, int]:
    with pk.db.read() as conn:
        return {t.name: len(conn.execute(select(t)).all()) for t in metadata.sorted_tables}


def test_a_generated_token_binds_to_loopback_only(tmp_path: Path) -> None:
    settings = Settings.from_env({"PURGEKEEPER_DATA_DIR": str(tmp_path / "data")})
    notes: list[str] = []
    tokens, host = resolve_access(settings, "0.0.0.0", notes.append)
    assert host == LOOPBACK
    token_file = tmp_path / "data" / TOKEN_FILE_NAME
    assert token_file.read_text().strip() == tokens.api and tokens.operator is None
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert any("0.0.0.0" in note and LOOPBACK in note for note in notes)
    assert not any(tokens.api in note for note in notes), "the token is never printed"
    again, _ = resolve_access(settings, None, notes.append)
    assert again == tokens


def test_a_configured_token_binds_where_asked(tmp_path: Path) -> None:
    environ = {
        "PURGEKEEPER_DATA_DIR": str(tmp_path),
        "PURGEKEEPER_API_TOKEN": HOST,
        "PURGEKEEPER_OPERATOR_TOKEN": OPERATOR,
    }
    tokens, host = resolve_access(Settings.from_env(environ), "0.0.0.0", lambda _: None)
    assert (tokens, host) == (TOKENS, "0.0.0.0")
    assert not (tmp_path / TOKEN_FILE_NAME).exists()


@pytest.mark.sqlite_only
def test_serve_seeds_serves_and_stops_on_sigterm(tmp_path: Path, backend: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PURGEKEEPER_DATA_DIR": str(tmp_path / "data")}
    script = (
        "from purgekeeper.commands.http.server import serve; from purgekeeper.commands.settings import Settings; "
        f"serve(Settings.from_env(), host='0.0.0.0', port={port}, demo=True); print('closed')"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        token = _serving_token(tmp_path / "data" / TOKEN_FILE_NAME, port)
        headers = {"Authorization": f"Bearer {token}"}
        catalog = httpx.get(f"http://127.0.0.1:{port}/v1/conversations", headers=headers).json()
        assert [c["id"] for c in catalog["conversations"]] == ["demo-announcements", "demo-welcome"]
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0, output
    assert "closed" in output and "Traceback" not in output
    assert f"http://127.0.0.1:{port}/" in output


def _serving_token(token_file: Path, port: int) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            token = token_file.read_text().strip()
            httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=1).raise_for_status()
            return token
        except (OSError, httpx.HTTPError):
            time.sleep(0.1)
    raise AssertionError("the server did not start")


# -- the Python API refuses what the HTTP layer also guards against ------------------------------------


def test_python_api_refuses_a_time_out_of_range_with_a_validation_error(pk: Pk) -> None:
    pk.create_conversation("c1")
    with pytest.raises(purgekeeper.ValidationError):
        pk.ingest_event("c1", author="ada", body="x", occurred_at=_out_of_range_time())


def test_python_api_scope_refuses_a_time_out_of_range(pk: Pk) -> None:
    with pytest.raises(purgekeeper.ValidationError):
        EventScope(conversation_id="c1", after=_out_of_range_time())


def test_python_api_list_purges_refuses_a_cursor_beyond_64_bits(pk: Pk) -> None:
    with pytest.raises(purgekeeper.ValidationError):
        pk.list_purges(after=2**63)


def test_python_api_refuses_deeply_nested_payloads(pk: Pk) -> None:
    pk.create_conversation("c1")
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(purgekeeper.ValidationError):
        pk.add_derivative("c1", kind="k", payload=deep)


def test_python_api_wait_refuses_a_nan_timeout(pk: Pk, monkeypatch: pytest.MonkeyPatch) -> None:
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="x")
    accepted = pk.purge_conversation("c1", **WHO)  # steps that no worker runs here
    polls: list[None] = []
    real_status = pk.status

    def counted(purge_id: str) -> Any:
        polls.append(None)
        if len(polls) > 100:
            raise RuntimeError("wait(nan) is still polling")
        return real_status(purge_id)

    monkeypatch.setattr(pk, "status", counted)
    monkeypatch.setattr("purgekeeper.commands.operations.WAIT_POLL_S", 0.0)
    with pytest.raises(purgekeeper.ValidationError):
        pk.wait(accepted.purge_id, float("nan"))


def _out_of_range_time() -> dt.datetime:
    return dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))
