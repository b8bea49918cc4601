"""purgectl's text output and option types (issue 26, item 7): durations with units in every
option that takes one, no Python reprs and right plurals in text output (``--json`` is
unchanged), and a finished step's old error marked as history in ``status``, as the console
marks it. Most of it is in-process (no database); the rest runs ``purgectl`` as in
``test_purgectl``."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import purgekeeper
from purgekeeper.commands import cli
from purgekeeper.commands.cli import options, render, render_policies
from purgekeeper.commands.cli.shared import DEFAULT_WAIT_S
from purgekeeper.commands.gate import GateState
from purgekeeper.commands.restore_commands import CopyRepair, MergeReport
from purgekeeper.commands.retention_records import RetentionPreview
from purgekeeper.schema.ledger import LedgerReport
from purgekeeper.storage import checkpoint
from tests.helpers.purgectl import Purgectl, purge_events, seed

Pk = purgekeeper.Purgekeeper
T0 = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)
REPR = re.compile(r"[\[{(]'|': |\(\)|\bTrue\b|\bFalse\b|\bNone\b|GateState|\w+=")

# -- durations -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        ("90", 90),
        ("0.5", 0.5),
        ("90s", 90),
        ("5m", 300),
        ("12h", 43_200),
        ("1d", 86_400),
        ("2w", 1_209_600),
        ("1h30m", 5400),
        ("1d12h", 129_600),
        ("2m30s", 150),
        ("1.5h", 5400),
        ("0.25s", 0.25),
    ],
)
def test_a_duration_is_seconds_or_numbers_with_units(given: str, seconds: float) -> None:
    assert options.Duration().convert(given, None, None) == dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("given", ["", "m", "soon", "5 m", "5M", "-5m", "+5m", "30m1h", "1h1h", "1h30", ".5", "5.m"])
def test_anything_else_is_a_usage_error_naming_the_accepted_forms(given: str) -> None:
    with pytest.raises(click.BadParameter, match=r"is not a duration: .*90s, 5m, 12h"):
        options.Duration().convert(given, None, None)


def test_wait_timeout_takes_a_duration_and_a_bad_one_exits_2() -> None:
    runner = CliRunner()  # in-process: a usage error is raised before any database is opened
    refused = runner.invoke(cli.main, ["wait", "some-purge", "--timeout", "soon"])
    assert refused.exit_code == 2
    assert "'soon' is not a duration" in refused.output and "5m" in refused.output
    shown = runner.invoke(cli.main, ["wait", "--help"]).output
    assert "--timeout DURATION" in shown and "5m" in shown


def test_every_option_that_takes_seconds_is_a_duration() -> None:
    """Walk the whole command tree: an option named like a duration has the Duration type."""
    found = []

    def walk(command: click.Command) -> None:
        for param in command.params:
            words = set((param.name or "").split("_"))
            if words & {"timeout", "interval", "lease", "age", "every", "seconds", "delay", "ttl"}:
                found.append((command.name, param.name))
                assert isinstance(param.type, options.Duration), (command.name, param.name, param.type)
        if isinstance(command, click.Group):
            for sub in command.commands.values():
                walk(sub)

    walk(cli.main)
    assert {("wait", "timeout"), ("preview", "max_age"), ("set", "max_age")} <= set(found)


@pytest.mark.sqlite_only
def test_wait_timeout_with_a_unit_waits_and_prints_the_status(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    purge_id = purge_events(pk, "e1")
    waited = purgectl.json("wait", purge_id, "--timeout", "0.3s")
    assert (waited["purge_id"], waited["timed_out"]) == (purge_id, True)
    refused = purgectl.error(2, "validation_error", "wait", purge_id, "--timeout", "5 minutes")
    assert "is not a duration" in refused["detail"]


def test_the_default_wait_is_unchanged() -> None:
    wait = cli.main.commands["wait"]
    timeout = next(p for p in wait.params if p.name == "timeout")
    assert timeout.type_cast_value(click.Context(wait), timeout.default) == dt.timedelta(seconds=DEFAULT_WAIT_S)


# -- no reprs, right plurals ------------------------------------------------------------------------


def gate(**changes: object) -> GateState:
    return GateState(**{"open": True, "ledger_rows": 1, "checkpoint": "ledger-copy", **changes})  # type: ignore[arg-type]


def test_ledger_merge_text_has_no_python_reprs() -> None:
    report = MergeReport(
        files=("a.json",),
        sources=("db-1",),
        appended=(),
        already_known=1,
        runs_abandoned=0,
        steps_rearmed=("s1", "s2"),
        deleted_files_removed=0,
        gate=gate(problems=("copy behind",), open=False, warnings=()),
    )
    shown = render.render_mapping(report)
    assert not REPR.search(shown), shown
    assert "a.json" in shown and "s1, s2" in shown and "copy behind" in shown
    assert re.search(r"open\s+no", shown), shown
    repaired = render.render_mapping(
        CopyRepair(copy="ledger-copy", seq=1, row_hash="ab", head_rebuilt=True, gate=gate())
    )
    assert not REPR.search(repaired), repaired
    assert re.search(r"head rebuilt\s+yes", repaired), repaired


@pytest.mark.parametrize(("rows", "word"), [(1, "1 row,"), (2, "2 rows,"), (0, "0 rows,")])
def test_row_counts_are_plural_only_when_more_than_one(rows: int, word: str) -> None:
    assert word in render.render_report(LedgerReport(ok=True, rows=rows, head_hash="h", problems=()))
    written = checkpoint.Checkpoint(Path("/tmp/x.json"), "db-1", rows, "h")
    assert word in render.render_checkpoint(written)


def test_retention_preview_counts_are_plural_only_when_more_than_one() -> None:
    preview = RetentionPreview(
        conversation_id=None,
        max_age=dt.timedelta(days=30),
        cutoff=T0,
        events=1,
        placements=1,
        conversations=1,
        kept_elsewhere=0,
        by_conversation=(),
        held=1,
        hold_ids=("h1",),
        governed_elsewhere=(),
        replaces=None,
        disclosures=(),
        scope_digest="d",
    )
    shown = render_policies.render_retention_preview(preview)
    assert "1 event, from 1 placement in 1 conversation" in shown, shown
    assert "1 event (holds h1)" in shown, shown
    assert not re.search(r"\b1 (events|placements|conversations)\b", shown), shown


@pytest.mark.sqlite_only
def test_resume_counts_its_steps_in_words(pk: Pk, purgectl: Purgectl) -> None:
    seed(pk)
    purge_events(pk, "e1")
    shown = purgectl.text("resume").stdout
    assert "(s)" not in shown and "1 step due" in shown, shown


@pytest.mark.sqlite_only
def test_an_error_s_extra_fields_are_text_not_reprs(pk: Pk, purgectl: Purgectl) -> None:
    from purgekeeper.schema import ledger

    pk.db.transact(lambda conn: ledger.set_gate(conn, "a restore merge is under way (test)"))
    refused = purgectl.text("ledger", "verify", code=4)
    assert "diagnostics: a restore merge is under way (test)" in refused.stderr, refused.stderr
    assert "['" not in refused.stderr
    pk.db.transact(lambda conn: ledger.set_gate(conn, None))


# -- a finished step's old error --------------------------------------------------------------------


def test_status_marks_a_done_step_s_old_error_as_history() -> None:
    progress = purgekeeper.StepProgress(removed=1, retained_shared=0, retained_reasons={}, remaining=0)

    def step(kind: str, status: str, error: str | None) -> purgekeeper.StepState:
        return purgekeeper.StepState(
            id=kind, kind=kind, status=status, attempts=2, max_attempts=5, last_error=error,
            next_attempt_at=T0, progress=progress,
        )  # fmt: skip

    status = purgekeeper.PurgeStatus(
        purge_id="p1",
        kind="purge_events",
        status="cleaning",
        stalled=False,
        ledger_seq=1,
        accepted_at=T0,
        actor="ops",
        reason="asked",
        steps=(step("bodies", "done", "OSError: disk full"), step("attachments", "retrying", "OSError: busy")),
    )
    shown = render.render_status(status)
    bodies = next(line for line in shown.splitlines() if line.startswith("bodies"))
    attachments = next(line for line in shown.splitlines() if line.startswith("attachments"))
    assert "before it was done: OSError: disk full" in bodies, shown
    assert attachments.endswith("OSError: busy") and "before it was done" not in attachments, shown


def test_workers_lists_every_process_with_its_state(pk: Pk, purgectl: Purgectl) -> None:
    """``purgectl workers``: the Workers view's processes in a table, dead and stopped ones
    flagged, and the same list under --json (issue 26, item 5)."""
    from purgekeeper.schema import heartbeats

    alive = heartbeats.ProcessIdentity("p-alive", "worker", "host-a", 101, ("purgekeeper-cleanup",), 4)
    gone = heartbeats.ProcessIdentity("p-stopped", "scheduler", "host-b", 202)
    for process in (alive, gone):
        pk.db.transact(lambda conn, p=process: heartbeats.beat(conn, p, holding=(), dead_after=dt.timedelta(minutes=5)))
    pk.db.transact(lambda conn: heartbeats.stop(conn, "p-stopped"))
    shown = purgectl.text("workers").stdout
    rows = {line.split()[1]: line for line in shown.splitlines()[1:] if line.strip()}
    assert (
        rows["worker"].split()[:2] == ["alive", "worker"]
        and "host-a" in rows["worker"]
        and "purgekeeper-cleanup" in rows["worker"]
    )
    assert rows["scheduler"].split()[:2] == ["stopped", "scheduler"]
    assert REPR.search(shown) is None, shown
    listed = purgectl.json("workers")
    assert {(w["host"], w["alive"]) for w in listed["workers"]} == {("host-a", True), ("host-b", False)}
