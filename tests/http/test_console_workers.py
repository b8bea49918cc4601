"""The console's workers view on SQLite and PostgreSQL: every process that sent a heartbeat (host,
pid, role, queues, threads, started, last seen, the steps it holds), idle ones included and
dead ones flagged, and a warning when no process runs steps; then each live lease owner with
the steps it holds (real claims that never finish), linked to their purges, with the lease
expiry told relative to the database clock; an owner's name is text, never markup."""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Iterator

import pytest

import purgekeeper
from purgekeeper.schema.states import WorkerRole
from tests.helpers.console import TestClient, app_of, claim, page, parse, purge_new_event, sign_in
from tests.helpers.heartbeats import heartbeat, seen_ago

Pk = purgekeeper.Purgekeeper


@pytest.fixture
def client(pk: Pk) -> Iterator[TestClient]:
    with app_of(pk) as test_client:
        assert sign_in(test_client).status_code == 303
        yield test_client


def test_without_leases_the_view_says_no_worker_holds_one(client: TestClient) -> None:
    html = page(client, "/status/workers")
    assert parse(html).by_id("no-workers").text == "No worker holds a lease now."
    assert parse(html).by_id("no-processes").text.startswith("No worker, scheduler or embedded process has sent")
    assert not parse(html).has_id("nobody-to-work")  # no process ever beat here: nothing to judge
    assert '<meta http-equiv="refresh" content="5">' in html
    toggle = parse(html).by_id("refresh-toggle")
    assert toggle.attrs["href"] == "/status/workers?refresh=off"
    assert 'http-equiv="refresh"' not in page(client, "/status/workers", refresh="off")


def test_each_lease_owner_is_listed_with_the_steps_it_holds(pk: Pk, client: TestClient) -> None:
    first = purge_new_event(pk, "c1", attachment=True)
    second = purge_new_event(pk, "c2")
    steps = {(purge_id, step.kind): step.id for purge_id in (first, second) for step in pk.status(purge_id).steps}
    claim(pk, steps[(first, "bodies")], "host-a:11:aa")
    claim(pk, steps[(second, "bodies")], "host-a:11:aa")  # one attempt may hold several steps
    claim(pk, steps[(first, "attachments")], "<b>host-b</b>:12:bb")

    html = page(client, "/status/workers")
    owners = {worker.attrs["data-owner"]: worker for worker in parse(html).find_all("article", cls="worker")}
    assert set(owners) == {"host-a:11:aa", "<b>host-b</b>:12:bb"}
    assert "<b>host-b</b>" not in html and "&lt;b&gt;host-b&lt;/b&gt;" in html
    held = {row.attrs["data-step"]: row for row in owners["host-a:11:aa"].find_all("tr", cls="held-step")}
    assert set(held) == {steps[(first, "bodies")], steps[(second, "bodies")]}
    row = held[steps[(second, "bodies")]]
    assert row.cells()[:3] == [second, "bodies", "1"]
    assert row.find("a").attrs["href"] == f"/status/purges/{second}"
    expires = row.find("time")
    assert expires.text in ("in 4 min", "in 5 min") and expires.attrs["title"].endswith("Z")
    assert owners["host-a:11:aa"].find("h3").text == "host-a:11:aa, holding 2 steps"
    assert owners["host-a:11:aa"].find("p", cls="lease-process").text.startswith("Held by no listed process")


def processes(html: str) -> dict[str, list[str]]:
    return {row.attrs["data-process"]: row.cells() for row in parse(html).find_all("tr", cls="process")}


def test_every_process_is_listed_idle_and_dead_ones_included(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c1")
    [bodies] = [step.id for step in pk.status(purge_id).steps]
    claim(pk, bodies, "host-a:11:aa")
    busy, idle = heartbeat(pk, holding=["host-a:11:aa"]), heartbeat(pk, threads=2)
    scheduler, dead, stopped = heartbeat(pk, WorkerRole.SCHEDULER), heartbeat(pk), heartbeat(pk, WorkerRole.EMBEDDED)
    for beats in (busy, idle, scheduler, dead, stopped):
        assert beats.beat()
    seen_ago(pk, dead.process.id, dt.timedelta(minutes=5))
    stopped.stop()

    html = page(client, "/status/workers")
    shown = processes(html)
    here, pid = socket.gethostname(), str(os.getpid())
    held = f"{purge_id} bodies, attempt 1"
    assert shown[busy.process.id] == ["alive", "worker", here, pid, "purgekeeper-cleanup", "4", "now", "now", held]
    assert shown[idle.process.id][5:] == ["2", "now", "now", "idle"]
    assert shown[scheduler.process.id][1:] == ["scheduler", here, pid, "none", "none", "now", "now", ""]
    assert shown[dead.process.id][0] == "DEAD" and shown[dead.process.id][6:] == [
        "5 min ago",
        "5 min ago, dead since 3 min ago",  # its last beat and 3 intervals of 30 s
        "",
    ]
    assert shown[stopped.process.id][0] == "stopped" and shown[stopped.process.id][7] == "stopped now"
    row = parse(html).find("tr", cls="process", data_process=busy.process.id)
    assert row.find("span", cls="holds").find("a").attrs["href"] == f"/status/purges/{purge_id}"
    assert parse(html).by_id("alive-counts").text == "Alive now: 2 workers, 1 scheduler, 0 embedded."
    assert not parse(html).has_id("nobody-to-work")
    lease = parse(html).find("article", cls="worker", data_owner="host-a:11:aa")
    assert lease.find("p", cls="lease-process").text == f"Run by the worker process {here} pid {pid}."


def test_with_no_live_worker_the_view_says_nobody_runs_steps(pk: Pk, client: TestClient) -> None:
    gone, scheduler = heartbeat(pk), heartbeat(pk, WorkerRole.SCHEDULER)
    gone.start()
    gone.stop()
    assert scheduler.beat()
    html = page(client, "/status/workers")
    assert parse(html).by_id("nobody-to-work").text.startswith("NO LIVE WORKER No process that runs cleanup steps")
    assert parse(html).by_id("alive-counts").text == "Alive now: 0 workers, 1 scheduler, 0 embedded."
