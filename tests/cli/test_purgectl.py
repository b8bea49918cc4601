"""``purgectl`` as an operator runs it: a subprocess configured only through the environment,
on SQLite and on PostgreSQL. Content is seeded through the Python API (``pk``, no in-process
worker); every ``--json`` run must print exactly one JSON document on stdout, also on error,
and exit with docs/design.md's code. Cleanup is run by the test (``runner.run_step``) when a
purge has to end; otherwise nobody works on it, which is what ``wait --timeout`` needs.

Each start of the interpreter costs about half a second, so the backend-neutral surface (the
round trip, a conversation purge, the ledger) runs on both backends, the rest on SQLite
(``sqlite_only``): the CLI passes the URL through and the layers below are tested on both.
Independent read-only runs go in parallel (``Purgectl.errors``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

import purgekeeper
from purgekeeper import EventScope
from purgekeeper.commands import cli
from purgekeeper.schema.db import redacted
from purgekeeper.workers import runner
from tests.helpers.purgectl import (
    POLICY,
    T0,
    WHO,
    Purgectl,
    concurrently,
    count,
    make_incomplete,
    purge_events,
    seed,
    written,
)

Pk = purgekeeper.Purgekeeper
Roots = dict[str, Path]


# -- content purges -------------------------------------------------------------------------------------


def test_preview_then_confirm_with_the_digest_the_preview_printed(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    ada, bob = ("--conversation", "c1", "--author", "ada"), ("--event", "e3")
    preview_ada, preview_bob = concurrently(
        lambda: purgectl.json("preview", *ada), lambda: purgectl.json("preview", *bob)
    )
    assert [e["id"] for e in preview_ada["events"]] == ["e1", "e2"]
    assert preview_ada["scope"]["author"] == "ada" and preview_ada["disclosures"]
    assert [(e["id"], e["placements"]) for e in preview_bob["events"]] == [("e3", ["c1"])]
    pk.ingest_event("c1", author="ada", body="late", event_id="e4")  # ada's scope changes under the reviewer

    stale, accepted = concurrently(
        lambda: purgectl.error(3, "stale_confirmation", "confirm", *ada, "--digest", preview_ada["scope_digest"], *WHO),
        lambda: purgectl.json("confirm", *bob, "--digest", preview_bob["scope_digest"], *WHO),
    )
    assert "e4" in stale["detail"]
    assert (accepted["outcome"], accepted["ledger_seq"]) == ("accepted", 1)
    assert written(pk) == (1, 1, 1)  # bob's purge: one ledger row, one fence, one step; nothing of ada's
    assert [e.id for e in pk.read_conversation("c1")] == ["e1", "e2", "e4"]
    assert [(s.kind, s.status) for s in pk.status(accepted["purge_id"]).steps] == [("bodies", "pending")]


@pytest.mark.sqlite_only
def test_a_time_window_selects_events_and_the_text_output_names_the_facts(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    window = ("--after", "2024-05-01T14:30:00+02:00", "--before", "2024-05-01T14:00:00Z")  # [12:30Z, 14:00Z)
    assert [e["id"] for e in purgectl.json("preview", "--conversation", "c1", *window)["events"]] == ["e2"]
    text_preview = purgectl.text("preview", "--event", "e3")
    digest = next(line.split()[-1] for line in text_preview.stdout.splitlines() if line.startswith("scope digest"))
    assert len(digest) == 64
    for fact in ("e3", "bob", "not erased:", f"purgectl confirm --event e3 --digest {digest}"):
        assert fact in text_preview.stdout

    confirmed = purgectl.text("confirm", "--event", "e3", "--digest", digest, *WHO).stdout
    assert confirmed.startswith("accepted: purge ")
    purge_id = confirmed.split()[2]
    shown = purgectl.text("status", purge_id).stdout
    for fact in (purge_id, "content", "ops@example.org", "the user asked", "bodies", "pending", "0/5"):
        assert fact in shown, shown


@pytest.mark.sqlite_only
def test_bad_input_exits_2_with_a_validation_error_and_writes_nothing(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    digest = pk.preview_purge(EventScope(event_ids=("e1",))).scope_digest
    purgectl.errors(
        2,
        "validation_error",
        ("confirm", "--event", "e1", "--digest", "not-a-digest", *WHO),
        ("confirm", "--event", "e1", "--digest", digest, "--actor", " ", "--reason", "why"),
        ("confirm", "--event", "e1", *WHO),  # no --digest: a usage error, still one JSON document
        ("preview", "--conversation", "c1", "--after", "2024-05-01T12:00:00"),  # no timezone
    )
    assert written(pk) == (0, 0, 0)
    assert [e.body for e in pk.read_conversation("c1")] == ["body of e1", "body of e2", "body of e3"]

    usage = purgectl.text("preview", "--after", "yesterday", code=2)
    assert usage.stdout == "" and "Usage:" in usage.stderr


@pytest.mark.sqlite_only
def test_an_unknown_id_exits_1_with_not_found_naming_the_database(pk: Pk, purgectl: Purgectl) -> None:
    refused, shown = concurrently(
        lambda: purgectl.error(1, "not_found", "status", "nope"),
        lambda: purgectl.text("status", "nope", code=1),
    )
    database = f"in the database {redacted(pk.settings.database_url)}"  # which one it looked in
    assert refused["detail"] == f"no purge nope {database}"
    assert shown.stdout == "" and f"error: no purge nope {database} (not_found)" in shown.stderr


def test_purging_a_conversation_twice_reports_already_purged(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    pk.create_conversation("c2")
    version = pk.get_conversation("c1").version  # type: ignore[union-attr]
    first = purgectl.json("purge-conversation", "c1", *WHO, "--expected-version", str(version))
    assert first["outcome"] == "accepted"
    second, _ = concurrently(
        lambda: purgectl.json("purge-conversation", "c1", *WHO, "--expected-version", str(version)),
        lambda: purgectl.error(3, "version_conflict", "purge-conversation", "c2", *WHO, "--expected-version", "7"),
    )
    assert (second["outcome"], second["purge_id"], second["ledger_seq"]) == ("already_purged", first["purge_id"], 1)
    assert pk.read_conversation("c1") == [] and pk.get_conversation("c1") is None
    with pytest.raises(purgekeeper.ConversationPurged):
        pk.ingest_event("c1", author="ada", body="again")
    assert count(pk, "purge_ledger") == 1


@pytest.mark.sqlite_only
def test_delete_channel_keeps_history_and_closes_ingress(pk: Pk, purgectl: Purgectl) -> None:
    pk.create_conversation("ch1", kind="channel")
    pk.ingest_event("ch1", author="ada", body="hello", event_id="e-ch")
    pk.create_conversation("c-plain")
    deleted, _ = concurrently(
        lambda: purgectl.json("delete-channel", "ch1", *WHO),
        lambda: purgectl.error(2, "validation_error", "delete-channel", "c-plain", *WHO),  # not a channel
    )
    assert deleted["outcome"] == "accepted"
    assert [e.body for e in pk.read_conversation("ch1")] == ["hello"]
    with pytest.raises(purgekeeper.ConversationDeleted):
        pk.ingest_event("ch1", author="ada", body="more")
    assert purgectl.json("delete-channel", "ch1", *WHO)["outcome"] == "already_purged"
    assert count(pk, "purge_ledger") == 1


@pytest.mark.sqlite_only
def test_delete_bot_erasing_its_reviewed_memory_repository(pk: Pk, purgectl: Purgectl, roots: Roots) -> None:
    repository = roots["memory_root"].resolve() / "helper"
    repository.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repository)], check=True, capture_output=True)
    (repository / "MEMORY.md").write_text("what the bot remembers\n")
    pk.register_bot("b1", name="Helper", memory_path=repository)

    preview, shown = concurrently(
        lambda: purgectl.json("preview-bot-deletion", "b1"),
        lambda: purgectl.text("preview-bot-deletion", "b1").stdout,
    )
    memory = preview["memory"]
    assert (memory["erasable"], memory["reason"], memory["path"]) == (True, None, str(repository))
    identity = memory["identity"]
    assert f"--reviewed-marker {identity['marker_id']}" in shown and str(repository) in shown

    erase = ("--erase-memory", "--reviewed-path", identity["path"])
    refused, _ = concurrently(
        lambda: purgectl.error(
            3, "memory_erasure_unavailable", "delete-bot", "b1", *WHO, *erase, "--reviewed-marker", "0"
        ),
        lambda: purgectl.error(2, "validation_error", "delete-bot", "b1", *WHO, "--erase-memory"),
    )
    assert refused["reason"] == "identity_changed"
    assert written(pk) == (0, 0, 0)

    accepted = purgectl.json("delete-bot", "b1", *WHO, *erase, "--reviewed-marker", identity["marker_id"])
    status = pk.status(accepted["purge_id"])
    assert [(s.kind, s.status) for s in status.steps] == [("memory", "pending")]
    assert repository.is_dir()  # acceptance removes nothing; the memory step does
    assert runner.run_step(pk.step_context(), status.steps[0].id, policy=POLICY).status == "done"
    assert not repository.exists()

    waited = purgectl.json("wait", accepted["purge_id"], "--timeout", "30")
    assert (waited["status"], waited["timed_out"], waited["kind"]) == ("complete", False, "bot")
    assert waited["steps"][0]["progress"]["removed"] == 1


@pytest.mark.sqlite_only
def test_erase_author_everywhere_from_the_preview_it_showed(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    pk.create_conversation("c2")
    pk.place_event("e1", "c2")
    before = (T0 + dt.timedelta(hours=1)).isoformat()
    preview, shown = concurrently(
        lambda: purgectl.json("preview-author-erasure", "ada", "--before", before),
        lambda: purgectl.text("preview-author-erasure", "ada", "--before", before).stdout,
    )
    assert (preview["totals"]["events"], preview["totals"]["placements"]) == (1, 2)
    assert f"purgectl erase-author ada --before {before} --digest {preview['scope_digest']}" in shown
    purgectl.error(3, "stale_confirmation", "erase-author", "ada", "--digest", preview["scope_digest"], *WHO)
    assert written(pk) == (0, 0, 0)  # the digest was of another window

    erase = ("erase-author", "ada", "--before", before, "--digest", preview["scope_digest"], "--keep-author-open")
    accepted = purgectl.json(*erase, *WHO)
    assert accepted["outcome"] == "accepted"
    assert [e.id for e in pk.read_conversation("c1")] == ["e2", "e3"]
    assert pk.read_conversation("c2") == []
    with pytest.raises(purgekeeper.AuthorErased):
        pk.ingest_event("c1", author="ada", body="backfill", occurred_at=T0)
    assert pk.ingest_event("c1", author="ada", body="still here", occurred_at=T0 + dt.timedelta(hours=5)).body
    waited = purgectl.json("status", accepted["purge_id"])
    assert waited["kind"] == "author"


# -- operating -----------------------------------------------------------------------------------------


@pytest.mark.sqlite_only
def test_list_pages_through_incomplete_purges_with_the_cursor(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    incomplete = [purge_events(pk, event_id) for event_id in ("e1", "e2", "e3")]
    for purge_id in incomplete:
        make_incomplete(pk, purge_id)
    pk.purge_conversation("c-absent", actor="ops@example.org", reason="reserve")  # complete, no steps

    first = purgectl.json("list", "--status", "incomplete", "--limit", "2")
    assert [p["purge_id"] for p in first["purges"]] == incomplete[:0:-1]  # newest first
    assert isinstance(first["next_after"], int)
    second = purgectl.json("list", "--status", "incomplete", "--limit", "2", "--after", str(first["next_after"]))
    assert [p["purge_id"] for p in second["purges"]] == incomplete[:1]
    assert second["next_after"] is None
    assert {p["status"] for p in first["purges"] + second["purges"]} == {"incomplete"}

    shown = purgectl.text("list", "--limit", "3").stdout
    assert all(purge_id in shown for purge_id in incomplete[1:])
    assert "next page: purgectl list --limit 3 --after" in shown


@pytest.mark.sqlite_only
def test_retry_rearms_an_incomplete_purge_and_resume_reports_what_is_due(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    purge_id = purge_events(pk, "e1")
    make_incomplete(pk, purge_id)
    rearmed = purgectl.json("retry", purge_id, "--actor", "oncall@example.org", "--reason", "disk freed")
    assert [(s["status"], s["attempts"]) for s in rearmed["steps"]] == [("pending", 0)]
    assert rearmed["status"] == "accepted"
    with pk.db.read() as conn:
        audit = conn.execute(text("SELECT action, actor, reason FROM purge_audit")).all()
    assert [tuple(a) for a in audit] == [("retry", "oncall@example.org", "disk freed")]
    _, resumed = concurrently(
        lambda: purgectl.error(3, "conflict", "retry", purge_id, *WHO),  # nothing is incomplete now
        lambda: purgectl.json("resume"),
    )
    assert resumed == {"due_steps": 1, "sent": False}  # only the re-armed step is due


@pytest.mark.sqlite_only
def test_wait_on_a_purge_nobody_works_on_returns_its_status_when_it_times_out(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    purge_id = purge_events(pk, "e1")
    waited = purgectl.json("wait", purge_id, "--timeout", "0.5")
    assert (waited["purge_id"], waited["status"], waited["timed_out"]) == (purge_id, "accepted", True)

    terminal = purgectl.with_env(TTY_COMPATIBLE="1", NO_COLOR="1", COLUMNS="200")  # as on a terminal
    shown = terminal.text("wait", purge_id, "--timeout", "0.2")
    assert purge_id in shown.stdout and "timed out; the purge is still accepted" in shown.stdout
    assert "bodies" in shown.stdout and "\x1b" not in shown.stdout
    assert "0/1 steps, 0 removed" in shown.stderr  # the progress bar is on stderr


# -- the ledger ----------------------------------------------------------------------------------------


def test_ledger_verify_and_checkpoint(pk: Pk, purgectl: Purgectl, tmp_path: Path) -> None:
    for conversation_id in ("c-a", "c-b"):
        pk.purge_conversation(conversation_id, actor="ops@example.org", reason="reserve")
    target = tmp_path / "backup" / "ledger.json"
    report, checkpointed = concurrently(
        lambda: purgectl.json("ledger", "verify"),
        lambda: purgectl.json("ledger", "checkpoint", "--out", str(target)),
    )
    assert (report["ok"], report["rows"], report["problems"]) == (True, 2, [])
    assert (checkpointed["path"], checkpointed["seq"]) == (str(target), 2)
    assert checkpointed["head_hash"] == report["head_hash"] == pk.verify_ledger().head_hash
    header, *rows = target.read_text("utf-8").splitlines()  # a version 2 export: a header, then the rows
    assert len(rows) == 2 and json.loads(header)["head"]["hash"] == report["head_hash"]
    copied = purgectl.json("ledger", "checkpoint")  # without --out: the copy, up to date
    assert (copied["path"], copied["seq"]) == (str(pk.copy.directory), 2)


@pytest.mark.sqlite_only
def test_ledger_verify_text_and_merge(pk: Pk, purgectl: Purgectl, tmp_path: Path) -> None:
    for conversation_id in ("c-a", "c-b"):
        pk.purge_conversation(conversation_id, actor="ops@example.org", reason="reserve")
    target = tmp_path / "ledger.json"
    pk.checkpoint_ledger(target)
    # one after the other: during a merge, `ledger verify` reports content closed (exit 4)
    shown = purgectl.text("ledger", "verify").stdout
    merged = purgectl.run("ledger", "merge", str(target), "--json")
    assert shown.startswith("ledger verifies: 2 rows, head hash ")
    assert merged.returncode == 0, (merged.stdout, merged.stderr)
    report = json.loads(merged.stdout)
    assert (report["appended"], report["already_known"]) == ([], 2)  # the database's own rows: a no-op
    assert count(pk, "purge_ledger") == 2


@pytest.mark.sqlite_only
def test_ledger_merge_of_another_database_s_file_needs_the_flag(pk: Pk, purgectl: Purgectl, tmp_path: Path) -> None:
    """A checkpoint written by another database (issue 11, case 13): exit 2 without
    ``--from-other-database``; with it, merged, and the report names its database."""
    with purgekeeper.open(
        f"sqlite:///{tmp_path / 'other.db'}", checkpoint_dir=tmp_path / "other", workers="none"
    ) as other:
        other.purge_conversation("c-there", actor="ops@example.org", reason="elsewhere")
        written = other.checkpoint_ledger(tmp_path / "other.json")
    refused = purgectl.error(2, "validation_error", "ledger", "merge", str(written.path))
    assert "another database" in refused["detail"] and "--from-other-database" in refused["detail"]
    report = purgectl.json("ledger", "merge", str(written.path), "--from-other-database")
    assert report["sources"] == [written.database_id] and len(report["appended"]) == 1
    assert count(pk, "purge_ledger") == 1


@pytest.mark.sqlite_only
def test_ledger_verify_reports_a_tampered_chain_with_exit_4(pk: Pk, purgectl: Purgectl) -> None:
    pk.purge_conversation("c-a", actor="ops@example.org", reason="reserve")
    with pk.db.engine.connect() as conn, conn.begin():  # an attacker with the database password
        conn.execute(text("DROP TRIGGER pk_purge_ledger_no_update"))
        conn.execute(text("UPDATE purge_ledger SET reason = 'nothing happened' WHERE seq = 1"))
    refused = purgectl.error(4, "messaging_unavailable", "ledger", "verify")
    assert any("seq 1" in problem for problem in refused["diagnostics"]), refused


def test_an_uninitialised_database_is_refused_and_init_creates_it(tmp_path: Path) -> None:
    env = {**os.environ, "PURGEKEEPER_DATA_DIR": str(tmp_path / "fresh")}
    purgectl = Purgectl(env)
    refused = purgectl.error(4, "schema_mismatch", "list")
    assert "purgectl init" in refused["detail"]
    assert not (tmp_path / "fresh" / "purgekeeper.db").exists()
    initialised = purgectl.json("init")
    assert (initialised["migrated"], initialised["previous_revision"]) == (True, None)
    assert (tmp_path / "fresh" / "purgekeeper.db").is_file()


def test_help_documents_the_exit_codes() -> None:
    shown = CliRunner().invoke(cli.main, ["--help"]).output  # in-process: no database is touched
    for line in ("1  NotFound", "2  ValidationError", "3  a conflict", "4  MessagingUnavailable", '"timed_out": true'):
        assert line in shown


# -- found while building the CLI ------------------------------------------------------------------------


@pytest.mark.parametrize("backend_name", ["sqlite", "postgresql"])
def test_opening_an_uninitialised_database_without_migrating_is_a_schema_mismatch(
    backend_name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend_name == "sqlite":
        url = f"sqlite:///{tmp_path / 'empty.db'}"
    else:
        from tests.helpers.databases import create_database, drop_database, postgres_url

        request.getfixturevalue("postgres_template")  # skips (or fails on CI) without PostgreSQL
        name = f"pk_empty_{os.getpid()}_{time.monotonic_ns()}"
        create_database(name)
        request.addfinalizer(lambda: drop_database(name))
        url = postgres_url(name)
    with pytest.raises(purgekeeper.SchemaMismatch):
        purgekeeper.open(url, workers="none", migrate_schema=False, blob_root=tmp_path / "b", file_root=tmp_path / "f")


@pytest.mark.sqlite_only
def test_ledger_verify_and_health_report_a_merge_under_way_with_exit_4(pk: Pk, purgectl: Purgectl) -> None:
    from purgekeeper.schema import ledger

    pk.purge_conversation("c-a", actor="ops@example.org", reason="reserve")
    purgectl = purgectl.with_env(PURGEKEEPER_SIGNING_KEY_FILE=str(pk.settings.signing_key_path))  # the log's key
    pk.db.transact(lambda conn: ledger.set_gate(conn, "a restore merge is under way (test)"))
    for command in (("ledger", "verify"), ("health",), ("health", "--quick")):
        refused = purgectl.error(4, "messaging_unavailable", *command)
        assert refused["diagnostics"] == ["a restore merge is under way (test)"], (command, refused)
    pk.db.transact(lambda conn: ledger.set_gate(conn, None))
    assert purgectl.text("health").stdout.startswith("ok: ")
    quick = purgectl.json("health", "--quick")
    assert (quick["ok"], quick["verified"], quick["ledger_rows"]) == (True, False, 1)


@pytest.mark.sqlite_only
def test_a_time_outside_the_accepted_range_exits_2_with_a_validation_error(pk: Pk, purgectl: Purgectl) -> None:
    """The range is the commands' (``validation.to_utc``): the CLI refuses what the Python API
    and HTTP refuse, with the same error, and nothing is written."""
    seed(pk)
    refusals = purgectl.errors(
        2,
        "validation_error",
        ("preview-author-erasure", "ada", "--before", "9999-12-31T23:59:59.999999+00:00"),
        ("erase-author", "ada", "--before", "0001-01-01T00:00:00Z", "--digest", "0" * 64, *WHO),
        ("preview", "--conversation", "c1", "--after", "9999-06-01T00:00:00Z"),
        ("list", "--since", "0001-01-01T00:00:00+00:00"),
    )
    assert all("9998-12-31T23:59:59.999999Z" in refused["detail"] for refused in refusals)
    assert written(pk) == (0, 0, 0)
