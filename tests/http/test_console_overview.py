"""The console's overview on SQLite and PostgreSQL: filters by status and kind, cursor paging
through older purges, the refresh and its pause, bad queries, and relative times read from the
database clock."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator

import pytest
from sqlalchemy import bindparam, text

import purgekeeper
from purgekeeper.commands.web import times
from purgekeeper.schema.tables import UtcDateTime
from tests.helpers.console import (
    WHO,
    Element,
    TestClient,
    app_of,
    incomplete_purge,
    page,
    parse,
    purge_new_event,
    section,
    sign_in,
    stall,
)

Pk = purgekeeper.Purgekeeper


@pytest.fixture
def client(pk: Pk) -> Iterator[TestClient]:
    with app_of(pk, page_size=2) as test_client:
        sign_in(test_client)
        yield test_client


def listed(html: str, name: str = "recent") -> list[str]:
    """The purge ids of a section's table, in order."""
    return [row.attrs["id"].removeprefix("purge-") for row in section(html, name).find_all("tr", cls="purge")]


def test_filters_narrow_the_list_by_status_and_kind_and_drop_the_attention_section(pk: Pk, client: TestClient) -> None:
    failed = incomplete_purge(pk, "c-failed", message="the disk said no")
    waiting = purge_new_event(pk, "c-waiting")
    pk.create_conversation("c-whole")
    whole = pk.purge_conversation("c-whole", **WHO).purge_id

    incomplete = page(client, status="incomplete")
    assert listed(incomplete) == [failed] and not parse(incomplete).has_id("attention")
    assert parse(incomplete).find("section", id="recent").find("h2").text == "Purges, status incomplete"
    assert listed(page(client, kind="conversation")) == [whole]
    assert listed(page(client, status="accepted", kind="content")) == [waiting]
    assert listed(page(client, status="complete", kind="content")) == []
    assert "No purges match." in section(page(client, status="complete"), "recent").text

    form = parse(page(client, status="incomplete", kind="content")).find("form", id="filters")
    assert form.attrs["method"] == "get" and form.attrs["action"] == "/status"
    chosen = {
        select.attrs["name"]: [
            option.attrs["value"] for option in select.find_all("option") if "selected" in option.attrs
        ]
        for select in form.find_all("select")
    }
    assert chosen == {"status": ["incomplete"], "kind": ["content"]}
    kinds = [option.attrs["value"] for option in form.find("select", name="kind").find_all("option")]
    assert kinds[0] == "" and {"content", "conversation", "retention_run", "hold"} <= set(kinds)
    assert parse(page(client, status="incomplete")).by_id("clear-filters").attrs["href"] == "/status"


def test_older_purges_are_one_cursor_link_away_and_keep_the_filters(pk: Pk, client: TestClient) -> None:
    made = [purge_new_event(pk, f"c-{n}") for n in range(5)]
    newest_first = made[::-1]
    first = page(client, kind="content")
    assert listed(first) == newest_first[:2]
    older = parse(first).by_id("older").attrs["href"]
    assert older.startswith("/status?kind=content&after=")
    second = client.get(older).text
    assert listed(second) == newest_first[2:4]
    assert parse(second).by_id("newest").attrs["href"] == "/status?kind=content"
    third = client.get(parse(second).by_id("older").attrs["href"]).text
    assert listed(third) == newest_first[4:]
    assert not parse(third).has_id("older")


def test_the_unfiltered_first_page_pages_on_past_what_needs_attention(pk: Pk, client: TestClient) -> None:
    failed = incomplete_purge(pk, "c-failed", message="the disk said no")
    rest = [purge_new_event(pk, f"c-{n}") for n in range(3)]
    first = page(client)
    assert listed(first, "attention") == [failed]
    assert listed(first) == rest[::-1][:2]
    second = client.get(parse(first).by_id("older").attrs["href"]).text
    assert listed(second) == [rest[0], failed]  # a later page lists everything, marked


BAD_QUERIES = [
    ({"status": "stalled"}, "status must be one of"),
    ({"kind": "<b>nope</b>"}, "kind must be one of"),
    ({"after": "x"}, "after must be a positive ledger seq"),
    ({"after": "0"}, "after must be a positive ledger seq"),
]


def test_a_bad_query_is_a_400_page_that_says_why(client: TestClient) -> None:
    for query, said in BAD_QUERIES:
        response = client.get("/status", params=query)
        assert response.status_code == 400 and response.headers["content-type"].startswith("text/html"), query
        problem = parse(response.text).by_id("problem").text
        assert problem.startswith("validation_error: ") and said in problem
        assert "<b>" not in response.text and 'http-equiv="refresh"' not in response.text


def test_the_refresh_can_be_paused_and_resumed_and_the_pause_survives_filtering(pk: Pk, client: TestClient) -> None:
    purge_new_event(pk, "c1")
    running = page(client, status="accepted")
    assert '<meta http-equiv="refresh" content="5">' in running
    toggle = parse(running).by_id("refresh-toggle")
    assert toggle.text == "Pause refresh" and toggle.attrs["href"] == "/status?status=accepted&refresh=off"

    paused = client.get(toggle.attrs["href"]).text
    assert 'http-equiv="refresh"' not in paused
    assert parse(paused).by_id("refresh-state").text == "Refresh paused."
    resume = parse(paused).by_id("refresh-toggle")
    assert resume.text == "Resume refresh" and resume.attrs["href"] == "/status?status=accepted"
    form = parse(paused).find("form", id="filters")
    assert form.find("input", name="refresh").attrs == {"type": "hidden", "name": "refresh", "value": "off"}
    assert 'http-equiv="refresh"' in client.get(resume.attrs["href"]).text


def test_times_are_relative_to_the_database_clock_with_the_utc_time_in_the_title(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c1")
    stall(pk, purge_id)
    accepted_at = pk.status(purge_id).accepted_at
    row = parse(page(client)).by_id(f"purge-{purge_id}")
    accepted = row.find("td", cls="age").find("time")
    assert accepted.attrs["title"] == accepted_at.strftime("%Y-%m-%dT%H:%M:%SZ") == accepted.attrs["datetime"]
    assert accepted.text == "now" or accepted.text.endswith(" s ago")
    due = next_attempt(client, purge_id)
    assert due.attrs["title"] == "2000-01-01T00:00:00Z" and re.fullmatch(r"overdue by \d+ d", due.text), due.text

    later = pk.database_now() + dt.timedelta(minutes=90)
    statement = text("UPDATE cleanup_steps SET next_attempt_at = :later").bindparams(
        bindparam("later", type_=UtcDateTime())
    )
    with pk.db.write() as conn:
        conn.execute(statement, {"later": later})
    ahead = next_attempt(client, purge_id)
    assert ahead.text == "in 1 h" and ahead.attrs["title"] == times.utc(later)


def next_attempt(client: TestClient, purge_id: str) -> Element:
    """The bodies step's next attempt, on the purge's page."""
    step = parse(page(client, f"/status/purges/{purge_id}")).find("tr", cls="step", data_kind="bodies")
    return step.find("td", cls="next-attempt").find("time")


def test_the_search_box_opens_one_purge_lists_several_and_says_when_none(pk: Pk, client: TestClient) -> None:
    """Issue 26: a purge id, its first characters, or a conversation id."""
    first = purge_new_event(pk, "c-found")
    pk.place_hold("h-1", conversation_ids=["c-found"], **WHO)
    hold = pk.list_holds()[0].purge_id
    form = parse(page(client)).find("form", id="search")
    assert form.attrs["method"] == "get" and form.attrs["action"] == "/status/search"

    for typed in (first, first[:6], f"  {first[:6]} "):
        opened = client.get("/status/search", params={"q": typed}, follow_redirects=False)
        assert (opened.status_code, opened.headers["location"]) == (303, f"/status/purges/{first}"), typed
    several = page(client, "/status/search", q="c-found")
    assert listed(several, "results") == [hold, first]  # newest first
    assert parse(several).by_id("search-query").attrs["value"] == "c-found"
    none = parse(page(client, "/status/search", q="zz-nothing")).by_id("nothing-found").text
    assert none.startswith("No purge id begins with zz-nothing, and no purge names a conversation, ")
    bad = client.get("/status/search", params={"q": "<b>" * 67})  # no id, and too long for an actor
    assert bad.status_code == 400 and "<b>" not in bad.text
    assert parse(bad.text).by_id("problem").text.startswith("validation_error: search is longer than 200")
    assert client.get("/status/search", params={"q": ""}, follow_redirects=False).headers["location"] == "/status"
