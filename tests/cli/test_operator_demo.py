"""What an operator met on the demo (issue 34, item 7), run as an operator runs ``purgectl``: a
subprocess configured through the environment (``test_purgectl``'s runner).

- ``status`` takes the start of an id, as the console's search does: one purge whose id begins
  with it is that purge; several are a validation_error (exit 2) naming them; none is
  not_found (exit 1).
- ``list --status retrying`` lists the purges with a step waiting for its next attempt after a
  failed one; ``list`` and ``status`` show the step as retrying, with when that attempt is.
- ``status`` says where to act on a failed unlink: the root, its setting, and the file's path
  below it (never an attachment's name), once, as the console's page of the purge does.
- ``retention run`` takes ``--actor`` and ``--reason``: the run's ledger row and the policy
  record them, and ``retention list`` and ``list`` show them.

The database-facing layers are tested on both backends (tests/integration/); the runs here
that need no second backend are on SQLite, as in ``test_purgectl``.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from collections.abc import Callable

import pytest

import purgekeeper
from tests.helpers import rows
from tests.helpers.console import HOSTILE, incomplete_purge, retrying_purge
from tests.helpers.purgectl import WHO, Purgectl, concurrently
from tests.helpers.retention import ago, held_back_by_a_stuck_run, set_policy

Pk = purgekeeper.Purgekeeper
BY = {"actor": WHO[1], "reason": WHO[3]}
OPERATOR = ("--actor", "grace@example.org", "--reason", "the hold on c2 was released (LEGAL-7)")


def shared_prefix(purge_ids: list[str]) -> tuple[str, list[str]]:
    """A first character that two or more of the ids begin with, and those ids."""
    by_first: dict[str, list[str]] = defaultdict(list)
    for purge_id in purge_ids:
        by_first[purge_id[0]].append(purge_id)
    first, ids = max(by_first.items(), key=lambda item: len(item[1]))
    assert len(ids) >= 2
    return first, ids


def line_of(text: str, start: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(start))


# -- status by the start of an id ----------------------------------------------------------------------


@pytest.mark.sqlite_only
def test_status_takes_the_start_of_an_id_and_names_the_purges_it_could_mean(pk: Pk, purgectl: Purgectl) -> None:
    pk.create_conversation("c1")
    held = [pk.place_hold(f"h{i}", conversation_ids=["c1"], **BY) for i in range(17)]  # 16 hex digits: two begin alike
    purge_ids = [acceptance.purge_id for acceptance in held]
    first, alike = shared_prefix(purge_ids)
    unique = next(p for p in purge_ids if sum(q.startswith(p[:6]) for q in purge_ids) == 1)
    whole, start, ambiguous, unknown, shown = concurrently(
        lambda: purgectl.json("status", unique),
        lambda: purgectl.json("status", unique[:6]),
        lambda: purgectl.error(2, "validation_error", "status", first),
        lambda: purgectl.error(1, "not_found", "status", "zz"),
        lambda: purgectl.text("status", first, code=2),
    )
    assert whole == start and start["purge_id"] == unique
    assert all(purge_id in ambiguous["detail"] for purge_id in alike), ambiguous["detail"]
    assert f"{len(alike)} purges begin with {first}" in ambiguous["detail"]
    assert "zz" in unknown["detail"]
    assert shown.stdout == "" and "validation_error" in shown.stderr and alike[0] in shown.stderr


# -- retrying ------------------------------------------------------------------------------------------


@pytest.mark.sqlite_only
def test_list_status_retrying_shows_the_steps_waiting_for_their_next_attempt(pk: Pk, purgectl: Purgectl) -> None:
    retrying = retrying_purge(pk, "c1", message="the disk said no")
    incomplete = incomplete_purge(pk, "c2", message="the disk said no")
    pk.purge_conversation("c3", **BY)
    [step] = [s for s in pk.status(retrying).steps if s.kind == "attachments"]
    at = step.next_attempt_at.strftime("%Y-%m-%dT%H:%M:%S")
    listed, shown, everything, status = concurrently(
        lambda: purgectl.json("list", "--status", "retrying"),
        lambda: purgectl.text("list", "--status", "retrying").stdout,
        lambda: purgectl.text("list").stdout,
        lambda: purgectl.text("status", retrying).stdout,
    )
    assert [p["purge_id"] for p in listed["purges"]] == [retrying]
    assert [s["status"] for s in listed["purges"][0]["steps"] if s["kind"] == "attachments"] == ["retrying"]
    assert incomplete not in shown
    row = line_of(shown, retrying)
    assert "retrying" in row and at in row, shown
    assert "next attempt" in line_of(everything, "purge ")
    assert at in line_of(everything, retrying) and at not in line_of(everything, incomplete)
    assert re.search(rf"status +cleaning: attachments retrying, next attempt {at}", status), status
    assert re.search(rf"attachments +retrying +1/5 .*{at}", status), status


# -- where to act ---------------------------------------------------------------------------------------


@pytest.mark.sqlite_only
def test_status_says_where_to_act_on_a_failed_unlink_once(pk: Pk, purgectl: Purgectl) -> None:
    purge_id = incomplete_purge(pk, "c1", message=HOSTILE)
    [blob_id] = [row.blob_id for row in rows(pk, "SELECT blob_id FROM attachments")]
    place = f"files/{blob_id[:2]}/{blob_id}"
    found, shown = concurrently(
        lambda: purgectl.json("status", purge_id[:8]),
        lambda: purgectl.text("status", purge_id).stdout,
    )
    [where] = found["where_to_act"]
    assert (where["root"], where["setting"], where["directory"], where["complete"]) == (
        "file root",
        "PURGEKEEPER_FILE_ROOT",
        "files",
        True,
    )
    assert f"{where['directory']}/{where['path']}" == place and where["blob_id"] == blob_id
    assert shown.count(place) == 1, shown
    assert f"where to act: attachments: the file root (PURGEKEEPER_FILE_ROOT), {place}" in shown
    assert f"then: purgectl retry {purge_id} --actor WHO --reason WHY" in shown
    assert "doc.txt" not in shown and str(pk.settings.file_root) not in shown


@pytest.mark.sqlite_only
def test_a_purge_without_failures_has_nowhere_to_act(pk: Pk, purgectl: Purgectl) -> None:
    pk.create_conversation("c1")
    purge_id = pk.purge_conversation("c1", **BY).purge_id
    found, shown = concurrently(
        lambda: purgectl.json("status", purge_id),
        lambda: purgectl.text("status", purge_id).stdout,
    )
    assert found["where_to_act"] == [] and "where to act" not in shown


# -- retention run --actor --reason -------------------------------------------------------------------


def seed_held(pk: Pk) -> None:
    """c1's ``old`` and c2's ``old2`` (40 days); a hold keeps c2 out of the first run."""
    for conversation, event_id in (("c1", "old"), ("c2", "old2")):
        pk.create_conversation(conversation)
        pk.ingest_event(conversation, author="ada", body=event_id, event_id=event_id, occurred_at=ago(40))
    pk.place_hold("h2", conversation_ids=["c2"], actor="counsel@example.com", reason="litigation")


def test_retention_run_records_who_and_why_where_runs_are_listed(pk: Pk, purgectl: Purgectl) -> None:
    seed_held(pk)
    set_policy(pk, "p-all", days=30)
    [first] = pk.run_retention()  # the scheduler's turn
    assert first.purge_id is not None
    pk.release_hold("h2", actor="counsel@example.com", reason="settled")
    ran = purgectl.json("retention", "run", "p-all", *OPERATOR)
    assert ran["purge_id"] is not None and ran["error"] is None
    listed, shown, runs, status = concurrently(
        lambda: purgectl.json("retention", "list"),
        lambda: purgectl.text("retention", "list").stdout,
        lambda: purgectl.text("list", "--kind", "retention_run").stdout,
        lambda: purgectl.json("status", ran["purge_id"]),
    )
    [policy] = listed["policies"]
    assert (policy["policy_id"], policy["last_purge_id"]) == ("p-all", ran["purge_id"])
    assert (policy["last_run_by"], policy["last_run_reason"]) == (OPERATOR[1], OPERATOR[3])
    assert policy["deferral"] is None
    assert "last run by" in line_of(shown, "policy ") and f"{OPERATOR[1]}: {OPERATOR[3]}" in line_of(shown, "p-all")
    assert OPERATOR[1] in line_of(runs, ran["purge_id"])
    assert "purgekeeper-scheduler" in line_of(runs, first.purge_id)
    assert (status["actor"], status["reason"]) == (OPERATOR[1], OPERATOR[3])


@pytest.mark.sqlite_only
def test_retention_run_needs_an_actor_and_a_reason(pk: Pk, purgectl: Purgectl) -> None:
    set_policy(pk, "p-all", days=30)
    nameless, blank = concurrently(
        lambda: purgectl.error(2, "validation_error", "retention", "run", "p-all"),
        lambda: purgectl.error(2, "validation_error", "retention", "run", "p-all", "--actor", " ", "--reason", "r"),
    )
    assert "--actor" in nameless["detail"] and "actor" in blank["detail"]
    [policy] = pk.retention.list_standing()
    assert policy.last_run_by is None and policy.policy.last_run is None


@pytest.mark.sqlite_only
def test_retention_list_shows_what_agent_runs_hold_back(short_turns_pk: Pk, purgectl: Purgectl) -> None:
    pk = short_turns_pk
    held_back_by_a_stuck_run(pk)
    pk.run_retention()
    listed, shown = concurrently(
        lambda: purgectl.json("retention", "list"),
        lambda: purgectl.text("retention", "list").stdout,
    )
    [policy] = listed["policies"]
    assert policy["deferral"]["events"] == 1 and policy["deferral"]["run_ids"] == ["r-stuck"]
    assert policy["deferral"]["since"].endswith("Z")
    assert "held back by agent runs r-stuck (1 event) since " in line_of(shown, "p-all"), shown


@pytest.fixture
def short_turns_pk(open_pk: Callable[..., Pk]) -> Pk:
    """A handle whose policy is due again a millisecond after each turn."""
    return open_pk(retention_interval=dt.timedelta(milliseconds=1))
