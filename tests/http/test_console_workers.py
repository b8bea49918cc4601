"""The console's workers view on SQLite and PostgreSQL: each live lease owner with the steps it
holds (real claims that never finish), linked to their purges, with the lease expiry told
relative to the database clock; an owner's name is text, never markup."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import commands
from tests.helpers.console import TestClient, app_of, claim, page, parse, purge_new_event, sign_in

Pk = commands.Purgekeeper


@pytest.fixture
def client(pk: Pk) -> Iterator[TestClient]:
    with app_of(pk) as test_client:
        assert sign_in(test_client).status_code == 303
        yield test_client


def test_without_leases_the_view_says_no_worker_holds_one(client: TestClient) -> None:
    html = page(client, "/status/workers")
    assert parse(html).by_id("no-workers").text == "No worker holds a lease now."
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
