"""The console's search box finds hold ids, policy ids and actors too (issue 34, item 7), on
SQLite and PostgreSQL: the rows that placed and released a legal hold; the rows that set,
removed and ran a retention policy; the purges an actor accepted, and those an operator
retried. A query that is no id (an operator's name with a space) searches the actors only; a
query no actor could be (too long) is a validation error. Each found purge is listed once,
newest first, and the page says which way each was found."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import purgekeeper
from tests.helpers.console import (
    TestClient,
    app_of,
    incomplete_purge,
    page,
    parse,
    purge_new_event,
    section,
    sign_in,
)
from tests.helpers.retention import ago, set_policy

Pk = purgekeeper.Purgekeeper
COUNSEL = {"actor": "counsel@example.com", "reason": "litigation"}
NAMED = "Grace Hopper"  # an operator's name: no id (it holds a space)


@pytest.fixture
def client(pk: Pk) -> Iterator[TestClient]:
    with app_of(pk) as test_client:
        sign_in(test_client)
        yield test_client


def listed(html: str) -> list[str]:
    return [row.attrs["id"].removeprefix("purge-") for row in section(html, "results").find_all("tr", cls="purge")]


def test_a_hold_id_finds_the_rows_that_placed_and_released_it(pk: Pk, client: TestClient) -> None:
    pk.create_conversation("c1")
    placed = pk.place_hold("h-case", conversation_ids=["c1"], **COUNSEL).purge_id
    pk.place_hold("h-other", conversation_ids=["c1"], **COUNSEL)
    released = pk.release_hold("h-case", actor="counsel@example.com", reason="settled").purge_id
    found = pk.find_purges("h-case")
    assert (found.by_hold, found.by_id, found.by_conversation) == ((released, placed), (), ())
    html = page(client, "/status/search", q="h-case")
    assert listed(html) == [released, placed]
    assert "2 of legal hold h-case" in parse(html).by_id("found").text


def test_a_policy_id_finds_the_rows_that_set_ran_and_removed_it(pk: Pk, client: TestClient) -> None:
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="old", event_id="old", occurred_at=ago(40))
    set_policy(pk, "p-thirty", days=30)
    [run] = pk.run_retention()
    assert run.purge_id is not None
    removed = pk.remove_retention("p-thirty", actor="dpo@example.com", reason="superseded").purge_id
    found = pk.find_purges("p-thirty")
    assert len(found.by_policy) == 3 and found.by_policy[:2] == (removed, run.purge_id)
    assert listed(page(client, "/status/search", q="p-thirty")) == list(found.by_policy)
    assert pk.find_purges("p-none").purge_ids == ()


def test_an_actor_finds_what_they_accepted_and_what_they_retried(pk: Pk, client: TestClient) -> None:
    retried = incomplete_purge(pk, "c1", message="the disk said no")
    pk.retry(retried, actor=NAMED, reason="freed the disk")
    pk.create_conversation("c2")
    accepted = pk.purge_conversation("c2", actor=NAMED, reason="the user asked").purge_id
    pk.create_conversation("c3")
    pk.purge_conversation("c3", actor="someone-else@example.org", reason="r")
    found = pk.find_purges(f"  {NAMED} ")
    assert (found.query, found.by_actor, found.by_id) == (NAMED, (accepted, retried), ())
    html = page(client, "/status/search", q=NAMED)
    assert listed(html) == [accepted, retried]
    assert f"2 accepted or retried by {NAMED}" in parse(html).by_id("found").text
    by_address = pk.find_purges("someone-else@example.org")  # an actor that is also an id
    assert len(by_address.by_actor) == 1 and by_address.by_conversation == ()


def test_each_purge_is_listed_once_and_nothing_found_names_every_way(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c-both")
    pk.place_hold("c-both", conversation_ids=["c-both"], **COUNSEL)  # a hold named as its conversation
    both = pk.find_purges("c-both")
    assert len(both.purge_ids) == 2 and purge_id in both.purge_ids
    none = parse(page(client, "/status/search", q="zz-nothing")).by_id("nothing-found").text
    assert none == (
        "No purge id begins with zz-nothing, and no purge names a conversation, a legal hold, a retention "
        "policy or an actor zz-nothing."
    )
    hostile = client.get("/status/search", params={"q": "<b>x"})
    assert hostile.status_code == 200 and "<b>x" not in hostile.text  # an actor's name, shown as text
    long = client.get("/status/search", params={"q": "x" * 201})
    assert long.status_code == 400 and "longer than 200" in parse(long.text).by_id("problem").text


def test_a_search_reads_a_bounded_number_of_rows(pk: Pk) -> None:
    """The limit holds for each way: a cut list says so."""
    pk.create_conversation("c1")
    for n in range(4):
        pk.place_hold(f"h{n}", conversation_ids=["c1"], actor="busy@example.org", reason="r")
    found = pk.find_purges("busy@example.org", limit=3)
    assert len(found.by_actor) == 3 and found.more
