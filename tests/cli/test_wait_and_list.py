"""``purgectl wait --fail-on-incomplete`` and ``purgectl list``'s filters, run as an operator
runs them (a subprocess configured through the environment, ``test_purgectl``'s runner).

``wait`` exits 5 with the flag when the purge ended incomplete, after printing its status; 0
when it ended complete, when it timed out, and without the flag. It waits through
``pk.wait`` (checked in-process, on both backends). ``list`` filters as ``GET /v1/purges``
does, and its next-page hint repeats the filters. The subprocess runs are on SQLite, as in
``test_purgectl`` (the CLI passes the URL through; the filters are tested on both backends
through the API)."""

from __future__ import annotations

import time
from typing import Any

import pytest

import purgekeeper
from purgekeeper.commands import surface
from purgekeeper.commands.cli import operate
from tests.helpers import settle
from tests.helpers.purgectl import Purgectl, concurrently, make_incomplete, purge_events, seed

Pk = purgekeeper.Purgekeeper
WHO = {"actor": "ops@example.org", "reason": "the user asked"}


# -- wait -----------------------------------------------------------------------------------------------


@pytest.mark.sqlite_only
def test_wait_fails_on_an_incomplete_purge_only_when_asked(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    incomplete, complete, untouched = (purge_events(pk, event_id) for event_id in ("e1", "e2", "e3"))
    make_incomplete(pk, incomplete)
    settle(pk, complete)
    flagged, plain, done, timed_out, shown = concurrently(
        lambda: purgectl.json("wait", incomplete, "--fail-on-incomplete", code=operate.EXIT_INCOMPLETE),
        lambda: purgectl.json("wait", incomplete),
        lambda: purgectl.json("wait", complete, "--fail-on-incomplete"),
        lambda: purgectl.json("wait", untouched, "--fail-on-incomplete", "--timeout", "0.2"),
        lambda: purgectl.text("wait", incomplete, "--fail-on-incomplete", code=operate.EXIT_INCOMPLETE),
    )
    assert (flagged["purge_id"], flagged["status"], flagged["timed_out"]) == (incomplete, "incomplete", False)
    assert plain == flagged, "the same document, exit 0 without the flag"
    assert (done["status"], done["timed_out"]) == ("complete", False)
    assert (timed_out["status"], timed_out["timed_out"]) == ("accepted", True)
    assert "the purge ended incomplete" in shown.stdout and incomplete in shown.stdout


def test_the_wait_polls_through_pk_wait(pk: Pk, monkeypatch: pytest.MonkeyPatch) -> None:
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="x", event_id="e1")
    purge_id = purge_events(pk, "e1")
    calls: list[tuple[str, float]] = []
    real_wait = pk.wait

    def wait(purge: str, timeout: float, *, on_progress: Any = None) -> Any:
        calls.append((purge, timeout))
        return real_wait(purge, timeout, on_progress=on_progress)

    monkeypatch.setattr(pk, "wait", wait)
    seen: list[str] = []
    final, timed_out = operate.poll_until_finished(pk, purge_id, 0.1, on_status=lambda s: seen.append(s.status))
    assert calls == [(purge_id, 0.1)]
    assert (final.status, timed_out, seen) == ("accepted", True, ["accepted"]), "each change once"
    settle(pk, purge_id)
    final, timed_out = operate.poll_until_finished(pk, purge_id, 5, on_status=lambda s: seen.append(s.status))
    assert (final.status, timed_out, seen[-1]) == ("complete", False, "complete")


# -- list -----------------------------------------------------------------------------------------------


@pytest.mark.sqlite_only
def test_list_filters_by_kind_conversation_and_time(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    pk.create_conversation("c2")
    content = purge_events(pk, "e1")
    time.sleep(0.002)  # a distinct accepted_at each, even at the millisecond
    c2 = pk.purge_conversation("c2", **WHO).purge_id
    time.sleep(0.002)
    c1 = pk.purge_conversation("c1", **WHO).purge_id
    middle = commands_time(pk, c2)

    def ids(*args: str) -> list[str]:
        return [p["purge_id"] for p in purgectl.json("list", *args)["purges"]]

    by_kind, by_conversation, since, until, together, shown = concurrently(
        lambda: ids("--kind", "conversation"),
        lambda: ids("--conversation", "c1"),
        lambda: ids("--since", middle),
        lambda: ids("--until", middle),
        lambda: ids("--kind", "content", "--conversation", "c1", "--since", "2000-01-01T00:00:00+02:00"),
        lambda: (
            purgectl.text("list", "--conversation", "c1", "--since", "2000-01-01T00:00+02:00", "--limit", "1").stdout
        ),
    )
    assert by_kind == [c1, c2]
    assert by_conversation == [c1, content]
    assert (since, until) == ([c1, c2], [content])
    assert together == [content]
    assert c1 in shown
    assert "purgectl list --conversation c1 --since 1999-12-31T22:00:00Z --limit 1 --after" in shown


@pytest.mark.sqlite_only
def test_list_refuses_bad_filters_with_exit_2(pk: Pk, purgectl: Purgectl) -> None:
    refusals = purgectl.errors(
        2,
        "validation_error",
        ("list", "--since", "2024-05-01T12:00:00"),  # no timezone
        ("list", "--until", "soon"),
        ("list", "--kind", "everything"),
        ("list", "--conversation", "c 1"),
    )
    assert "timezone" in refusals[0]["detail"]


def commands_time(pk: Pk, purge_id: str) -> str:
    """The purge's acceptance time, as the CLI prints and reads times."""
    return str(surface.plain(pk.status(purge_id).accepted_at))
