"""``purgectl retention`` and ``purgectl hold`` as an operator runs them: a subprocess
configured only through the environment, as in ``test_purgectl``, whose ``Purgectl`` runner
this module uses. Content is seeded through the Python API; a retention run is the scheduler's
turn (``pk.run_retention()``) and its cleanup is carried out by the test (``settle``).

The round trips (a policy from preview to removal, a hold from placement to release, with the
LegalHold refusal in between) run on both backends; bad input and conflicts on SQLite only, as
in ``test_purgectl`` (the CLI passes the URL through; the layers below are tested on both).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import click
import pytest
from click.testing import CliRunner

import purgekeeper
from purgekeeper.commands import cli
from purgekeeper.commands.cli import options
from tests.helpers import settle
from tests.helpers.purgectl import WHO, Purgectl, concurrently, written
from tests.helpers.retention import ago, set_policy

Pk = purgekeeper.Purgekeeper
DAY = dt.timedelta(days=1)
THIRTY_DAYS = 30 * 86_400


def seed(pk: Pk) -> None:
    """c1: ada's ``old`` (40 days ago) and ``fresh`` (1 day ago); c2: bob's ``old2`` (40 days)."""
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    pk.ingest_event("c1", author="ada", body="old", event_id="old", occurred_at=ago(40))
    pk.ingest_event("c1", author="ada", body="fresh", event_id="fresh", occurred_at=ago(1))
    pk.ingest_event("c2", author="bob", body="old2", event_id="old2", occurred_at=ago(40))


def step(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(s for s in status["steps"] if s["kind"] == kind)


# -- retention policies ---------------------------------------------------------------------------------


def test_a_policy_is_previewed_set_listed_run_and_removed(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    preview, shown = concurrently(
        lambda: purgectl.json("retention", "preview", "--max-age", "30d"),
        lambda: purgectl.text("retention", "preview", "--max-age", "30d", "--conversation", "c1").stdout,
    )
    assert (preview["conversation_id"], preview["max_age"]) == (None, THIRTY_DAYS)
    assert (preview["events"], preview["placements"], preview["conversations"]) == (2, 2, 2)
    assert preview["disclosures"] and len(preview["scope_digest"]) == 64
    of_c1 = pk.preview_retention(max_age=30 * DAY, conversation_id="c1").scope_digest  # a digest of the definition
    for fact in (
        r"scope +conversation c1\n",
        r"max age +30d \(2592000 s\)\n",
        r"expires now +1 event, from 1 placement in 1 conversation\n",
    ):
        assert re.search(fact, shown), (fact, shown)
    assert (
        f"to confirm: purgectl retention set POLICY_ID --max-age 30d --conversation c1 --digest {of_c1} "
        "--actor WHO --reason WHY"
    ) in shown

    set_args = ("retention", "set", "p-all", "--max-age", "30d", "--digest", preview["scope_digest"], *WHO)
    accepted = purgectl.json(*set_args)
    assert (accepted["outcome"], accepted["disclosures"]) == ("accepted", [])
    listed, shown_list, again = concurrently(
        lambda: purgectl.json("retention", "list"),
        lambda: purgectl.text("retention", "list").stdout,
        lambda: purgectl.text(*set_args).stdout,
    )
    [policy] = listed["policies"]
    assert (policy["policy_id"], policy["conversation_id"], policy["max_age"]) == ("p-all", None, THIRTY_DAYS)
    assert (policy["purge_id"], policy["set_by"], policy["last_purge_id"]) == (accepted["purge_id"], WHO[1], None)
    assert shown_list.splitlines()[1].split()[:5] == ["p-all", "every", "conversation", "30d", "-"]
    assert again.startswith(f"already in force: retention policy p-all set (purge {accepted['purge_id']}, ")

    [run] = pk.run_retention()
    assert run.purge_id is not None
    settle(pk, run.purge_id)
    status, shown_status, page, after_run = concurrently(
        lambda: purgectl.json("status", run.purge_id),
        lambda: purgectl.text("status", run.purge_id).stdout,
        lambda: purgectl.text("list").stdout,
        lambda: purgectl.json("retention", "list"),
    )
    assert (status["label"], status["policy_id"], status["kind"]) == (
        "retention purge (policy p-all)",
        "p-all",
        "retention_run",
    )
    assert status["status"] == "complete" and step(status, "bodies")["progress"]["removed"] == 2
    assert re.search(r"what +retention purge \(policy p-all\)\n", shown_status), shown_status
    assert re.search(rf"{run.purge_id} +retention purge \(policy p-all\) +complete", page), page
    assert after_run["policies"][0]["last_purge_id"] == run.purge_id
    assert [e.id for e in pk.read_conversation("c1")] == ["fresh"] and pk.read_conversation("c2") == []

    removed = purgectl.json("retention", "remove", "p-all", *WHO)
    assert removed["outcome"] == "accepted"
    empty, empty_text, removed_again, unknown = concurrently(
        lambda: purgectl.json("retention", "list"),
        lambda: purgectl.text("retention", "list").stdout,
        lambda: purgectl.text("retention", "remove", "p-all", *WHO).stdout,
        lambda: purgectl.error(1, "not_found", "retention", "remove", "p-none", *WHO),
    )
    assert empty == {"policies": []} and empty_text == "no retention policies\n"
    assert removed_again.startswith(f"already in force: retention policy p-all removed (purge {removed['purge_id']}")
    assert "p-none" in unknown["detail"]


@pytest.mark.sqlite_only
def test_a_second_policy_for_a_scope_and_a_digest_of_another_definition_exit_3(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    set_policy(pk, "p-all", days=30)
    weekly = pk.preview_retention(max_age=7 * DAY).scope_digest
    conflict, stale = concurrently(
        lambda: purgectl.error(
            3, "policy_conflict", "retention", "set", "p-two", "--max-age", "7d", "--digest", weekly, *WHO
        ),
        lambda: purgectl.error(
            3, "stale_confirmation", "retention", "set", "p-all", "--max-age", "8d", "--digest", weekly, *WHO
        ),
    )
    assert "p-all" in conflict["detail"] and "preview_retention" in stale["detail"]
    assert [(p.policy_id, p.max_age) for p in pk.list_retention()] == [("p-all", 30 * DAY)]
    changed = purgectl.text("retention", "set", "p-all", "--max-age", "1w", "--digest", weekly, *WHO).stdout
    assert changed.startswith("accepted: retention policy p-all set (purge ")
    assert "the scheduler runs it at its next sweep" in changed
    assert [p.max_age for p in pk.list_retention()] == [7 * DAY]


@pytest.mark.sqlite_only
def test_a_bad_duration_or_input_exits_2_and_writes_nothing(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    refused = purgectl.errors(
        2,
        "validation_error",
        ("retention", "preview", "--max-age", "30 days"),
        ("retention", "preview", "--max-age", "1y"),
        ("retention", "preview", "--max-age", "-5d"),
        ("retention", "preview", "--max-age", "0"),  # parsed, then refused: more than zero
        ("retention", "preview", "--max-age", "5300w"),  # more than 100 years
        ("retention", "preview"),  # no --max-age: a usage error, still one JSON document
        ("retention", "set", "p1", "--max-age", "30d", "--digest", "not-a-digest", *WHO),
        ("hold", "place", "h1", *WHO),  # covers nothing
        ("hold", "place", "h1", "--conversation", "c 1", *WHO),
    )
    assert all("is not a duration" in r["detail"] for r in refused[:3]), refused[:3]
    assert all("more than zero" in r["detail"] for r in refused[3:5]), refused[3:5]
    assert written(pk) == (0, 0, 0)
    assert pk.list_retention() == [] and pk.list_holds() == []

    usage = purgectl.text("retention", "preview", "--max-age", "soon", code=2)
    assert usage.stdout == "" and "Usage:" in usage.stderr
    assert "'soon' is not a duration: a number of seconds (90, 0.5), or numbers with a unit" in usage.stderr


DURATIONS = [
    ("45", 45, "45s"),
    ("45s", 45, "45s"),
    ("90m", 5400, "90m"),
    ("120m", 7200, "2h"),
    ("12h", 43_200, "12h"),
    ("30d", THIRTY_DAYS, "30d"),
    ("14d", 14 * 86_400, "2w"),
    ("2w", 14 * 86_400, "2w"),
]


@pytest.mark.parametrize(("given", "seconds", "shown"), DURATIONS)
def test_durations_read_and_print_back(given: str, seconds: int, shown: str) -> None:
    duration = options.Duration().convert(given, None, None)
    assert duration == dt.timedelta(seconds=seconds)
    assert options.duration_text(duration) == shown
    assert options.Duration().convert(shown, None, None) == duration


@pytest.mark.parametrize("given", ["", "d", "30 d", "30D", "1,5h", "+3d", "4h3d", "\u0663d", "9" * 13, "P30D"])
def test_anything_else_is_not_a_duration(given: str) -> None:
    with pytest.raises(click.BadParameter, match="is not a duration"):
        options.Duration().convert(given, None, None)


def test_help_lists_the_retention_and_hold_commands() -> None:
    runner = CliRunner()  # in-process: no database is touched
    retention = runner.invoke(cli.main, ["retention", "--help"]).output
    holds = runner.invoke(cli.main, ["hold", "--help"]).output
    assert all(name in retention for name in ("preview", "set", "remove", "list"))
    assert all(name in holds for name in ("place", "release", "list"))
    assert "legal hold" in runner.invoke(cli.main, ["--help"]).output


# -- legal holds -------------------------------------------------------------------------------------------


def test_a_hold_is_placed_refuses_a_purge_is_listed_and_released(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    pk.purge_conversation("c2", actor="ops@example.org", reason="before the hold")
    held = ("--conversation", "c1", "--conversation", "c2", "--author", "bob")
    placed = purgectl.json("hold", "place", "h1", *held, *WHO)
    assert placed["outcome"] == "accepted"
    assert any("c2" in d for d in placed["disclosures"]), placed["disclosures"]  # purged before: not held
    shown_placed = purgectl.text("hold", "place", "h2", "--author", "cy", *WHO).stdout
    assert shown_placed.startswith("accepted: legal hold h2 placed (purge ")
    assert "\n\ndisclosures:\n  - A legal hold does not undo a purge" in shown_placed

    refused, refused_text, listed, shown = concurrently(
        lambda: purgectl.error(3, "legal_hold", "purge-conversation", "c1", *WHO),
        lambda: purgectl.text("purge-conversation", "c1", *WHO, code=3),
        lambda: purgectl.json("hold", "list"),
        lambda: purgectl.text("hold", "list").stdout,
    )
    assert refused["hold_ids"] == ["h1"]
    assert "(legal_hold)" in refused_text.stderr and "hold_ids: h1\n" in refused_text.stderr
    assert [(h["hold_id"], h["conversation_ids"], h["authors"]) for h in listed["holds"]] == [
        ("h1", ["c1", "c2"], ["bob"]),
        ("h2", [], ["cy"]),
    ]
    assert listed["holds"][0]["placed_by"] == WHO[1] and listed["holds"][0]["purge_id"] == placed["purge_id"]
    assert shown.splitlines()[0].split() == ["hold", "conversations", "authors", "placed", "at", "placed", "by"]
    first = shown.splitlines()[1]
    assert first.startswith("h1 ") and "2: c1, c2" in first and "1: bob" in first and WHO[1] in first

    released = purgectl.json("hold", "release", "h1", *WHO)
    assert released["outcome"] == "accepted"
    in_force, everything, shown_all, unknown, reused = concurrently(
        lambda: purgectl.json("hold", "list"),
        lambda: purgectl.json("hold", "list", "--all"),
        lambda: purgectl.text("hold", "list", "--all").stdout,
        lambda: purgectl.error(1, "not_found", "hold", "release", "h-none", *WHO),
        lambda: purgectl.error(3, "id_reserved", "hold", "place", "h1", "--conversation", "c1", *WHO),
    )
    assert [h["hold_id"] for h in in_force["holds"]] == ["h2"]
    assert [(h["hold_id"], h["release_purge_id"]) for h in everything["holds"]] == [
        ("h1", released["purge_id"]),
        ("h2", None),
    ]
    assert "released by" in shown_all and WHO[1] in shown_all
    assert "h-none" in unknown["detail"] and "h1" in reused["detail"]
    assert purgectl.json("purge-conversation", "c1", *WHO)["outcome"] == "accepted"  # nothing holds c1 now


def test_a_retention_run_keeps_what_a_hold_covers_and_status_shows_it_held(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    pk.place_hold("h-bob", authors=["bob"], actor="counsel@example.com", reason="litigation")
    set_policy(pk, "p-all", days=30)
    [run] = pk.run_retention()
    assert run.purge_id is not None
    settle(pk, run.purge_id)
    status, shown = concurrently(
        lambda: purgectl.json("status", run.purge_id),
        lambda: purgectl.text("status", run.purge_id).stdout,
    )
    progress = step(status, "bodies")["progress"]
    assert (progress["removed"], progress["held"]) == (1, 1)  # ada's old event expired, bob's held
    lines = shown.splitlines()
    header = next(line for line in lines if line.startswith("step "))
    bodies = next(line for line in lines if line.startswith("bodies "))
    assert header.split()[:6] == ["step", "status", "attempts", "removed", "retained", "held"]
    assert bodies.split()[:6] == ["bodies", "done", "1/5", "1", "0", "1"]
    assert [e.body for e in pk.read_conversation("c2")] == ["old2"]


def test_retention_run_takes_a_policy_s_turn_now_once_per_cutoff(pk: Pk, purgectl: Purgectl) -> None:
    """Issue 26: after a hold's release, ``purgectl retention run POLICY`` takes the policy's
    turn now rather than in an hour. Tried: the turn that expires what the hold kept, the
    same command again (nothing new), and an unknown policy (not_found, exit 1)."""
    seed(pk)
    pk.place_hold("h-bob", authors=["bob"], actor="counsel@example.com", reason="litigation")
    set_policy(pk, "p-all", days=30)
    [first] = pk.run_retention()
    assert first.purge_id is not None and [e.body for e in pk.read_conversation("c2")] == ["old2"]
    pk.release_hold("h-bob", actor="counsel@example.com", reason="settled")
    ran = purgectl.text("retention", "run", "p-all", *WHO).stdout
    run_id = re.search(r"run (\w+) accepted", ran)
    assert run_id is not None, ran
    assert f"purgectl wait {run_id.group(1)}" in ran and pk.read_conversation("c2") == []
    again = purgectl.json("retention", "run", "p-all", *WHO)
    assert (again["policy_id"], again["purge_id"], again["error"]) == ("p-all", None, None)
    unknown = purgectl.run("retention", "run", "p-none", *WHO)
    assert unknown.returncode == 1 and "not_found" in unknown.stderr
