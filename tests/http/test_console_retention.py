"""The console's retention section (issue 34, item 7), on SQLite and PostgreSQL: each standing
policy's last turn (who took it and why) and, when non-terminal agent runs hold it back, which
runs, how many events and for how long; the summary gives the oldest deferral's age and marks
one past a day. The overview's status filter offers ``retrying`` as ``purgectl list`` does."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import bindparam, text

import purgekeeper
from purgekeeper.schema.tables import UtcDateTime
from tests.helpers.console import (
    TestClient,
    app_of,
    incomplete_purge,
    page,
    parse,
    retrying_purge,
    section,
    sign_in,
)
from tests.helpers.retention import held_back_by_a_stuck_run

Pk = purgekeeper.Purgekeeper
SET_DEFERRED_SINCE = text("UPDATE retention_policies SET deferred_since = :since").bindparams(
    bindparam("since", type_=UtcDateTime())
)


@pytest.fixture
def short_turns(open_pk: Callable[..., Pk]) -> Pk:
    """A handle whose policy is due again a millisecond after each turn."""
    return open_pk(retention_interval=dt.timedelta(milliseconds=1))


@pytest.fixture
def client(short_turns: Pk) -> Iterator[TestClient]:
    with app_of(short_turns) as test_client:
        sign_in(test_client)
        yield test_client


def test_a_policy_shows_its_last_turn_and_what_agent_runs_hold_back(short_turns: Pk, client: TestClient) -> None:
    pk = short_turns
    held_back_by_a_stuck_run(pk)
    pk.run_retention_policy("p-all", actor="Grace Oncall", reason="after the release (LEGAL-7)")

    shown = parse(page(client))
    row = shown.find("tr", cls="policy", data_policy="p-all")
    assert row.find("td", cls="last-run-by").text == "Grace Oncall: after the release (LEGAL-7)"
    held = row.find("td", cls="held-back")
    assert held.text.startswith("by agent runs r-stuck (1 event) for ") and "late" not in held.attrs.get("class", "")
    assert shown.by_id("retention-oldest-deferral").text.startswith("held back for ")

    with pk.db.write() as conn:  # the deferral began a day and two hours ago
        conn.execute(SET_DEFERRED_SINCE, {"since": pk.database_now() - dt.timedelta(days=1, hours=2)})
    late = parse(page(client))
    held = late.find("tr", cls="policy", data_policy="p-all").find("td", cls="held-back")
    assert held.text == "by agent runs r-stuck (1 event) for 1 d 2 h" and "late" in held.attrs["class"].split()
    oldest = late.by_id("retention-oldest-deferral")
    assert oldest.text == "held back for 1 d 2 h" and "late" in oldest.attrs["class"].split()

    pk.finish_run("r-stuck", status="cancelled")
    [outcome] = pk.run_retention()
    assert outcome.purge_id is not None
    settled = parse(page(client))
    assert settled.find("tr", cls="policy", data_policy="p-all").find("td", cls="held-back").text == ""
    assert settled.by_id("retention-oldest-deferral").text == "none"
    by = settled.find("tr", cls="policy", data_policy="p-all").find("td", cls="last-run-by").text
    assert by == "purgekeeper-scheduler: its turn was due"


def test_the_status_filter_offers_retrying(short_turns: Pk, client: TestClient) -> None:
    pk = short_turns
    retrying = retrying_purge(pk, "c1", message="the disk said no")
    incomplete_purge(pk, "c2", message="the disk said no")
    form = parse(page(client)).find("form", id="filters")
    statuses = [option.attrs["value"] for option in form.find("select", name="status").find_all("option")]
    assert statuses == ["", "accepted", "cleaning", "complete", "incomplete", "retrying"]
    html = page(client, status="retrying")
    rows = section(html, "recent").find_all("tr", cls="purge")
    assert [row.attrs["id"] for row in rows] == [f"purge-{retrying}"]
    assert parse(html).find("section", id="recent").find("h2").text == "Purges, status retrying"
