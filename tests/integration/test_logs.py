"""Every process logs in the one format: real ``python -m purgekeeper.commands.worker`` (the dramatiq CLI,
its main process and its worker process), ``purgectl scheduler``, ``purgectl serve`` and a
one-shot ``purgectl`` command, on PostgreSQL and the test's own Redis (the processes of
``tests/faults``), with ``PURGEKEEPER_LOG_FORMAT=json`` and ``PURGEKEEPER_LOG_LEVEL=INFO``.

Each process's stderr is read apart from its stdout (which carries the CLI's result and
``serve``'s banner), after the process stopped: every line is one JSON object with time,
level, logger and message; the step lines name their purge and step kind; a purge that ends
incomplete has an ERROR line naming it; and alembic's INFO lines are gone. (And, in this
process on both backends, the ERROR of a step whose last attempt's worker died.)
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.workers import broker, runner
from tests.helpers import POLICY
from tests.helpers.cleanup import break_blob_file, claim_as, expire_lease, set_max_attempts
from tests.helpers.processes import QUEUE, REPO, WAIT_S, WORKER_READY, Proc, Processes, free_port, wait_until

Pk = purgekeeper.Purgekeeper
WHO = {"actor": "ops@example.org", "reason": "the user asked"}
FIELDS = {"time", "level", "logger", "message", "process"}
JSON_LOGS = {"PURGEKEEPER_LOG_FORMAT": "json", "PURGEKEEPER_LOG_LEVEL": "INFO"}


class SplitProcesses(Processes):
    """The processes of ``tests/faults``, with stdout written apart: the log is stderr."""

    def _start(self, name: str, argv: list[str], extra_env: dict[str, str]) -> Proc:
        log = self.log_dir / f"{len(self.started):02d}-{name}.stderr"
        with log.open("wb") as err, log.with_suffix(".stdout").open("wb") as out:
            popen = subprocess.Popen(
                argv,
                cwd=REPO,
                env={**self.env, **extra_env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        proc = Proc(name, popen, log)
        self.started.append(proc)
        return proc

    def launched_worker(self) -> Proc:
        """``python -m purgekeeper.commands.worker``: the dramatiq CLI with purgekeeper's log format in
        its main process too."""
        argv = [
            sys.executable,
            "-m",
            "purgekeeper.commands.worker",
            "--processes",
            "1",
            "--threads",
            "2",
            "--queues",
            QUEUE,
        ]
        return self._wait_ready(self._start("worker", argv, {}), WORKER_READY)

    def stop(self, proc: Proc) -> str:
        """SIGTERM to the group's leader (dramatiq passes it on), wait for the exit; its stderr."""
        proc.popen.send_signal(signal.SIGTERM)
        proc.popen.wait(timeout=WAIT_S)
        return proc.output()


@pytest.fixture
def processes(fault_env: dict[str, str], tmp_path: Path) -> Iterator[SplitProcesses]:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    procs = SplitProcesses({**fault_env, **JSON_LOGS}, log_dir)
    try:
        yield procs
    finally:
        procs.close()


def json_lines(output: str) -> list[dict[str, Any]]:
    """Every line, parsed: each must be one JSON object with the common fields, and none of
    alembic's INFO lines."""
    lines = []
    for line in output.splitlines():
        try:
            parsed = json.loads(line)
        except json.JSONDecodeError:
            raise AssertionError(f"not a JSON line: {line!r}\n{output}") from None
        assert isinstance(parsed, dict) and FIELDS <= parsed.keys(), line
        lines.append(parsed)
    assert lines, "nothing was logged"
    assert not [line for line in lines if line["logger"].startswith("alembic") and line["level"] == "INFO"]
    return lines


def about(lines: list[dict[str, Any]], message: str) -> list[dict[str, Any]]:
    return [line for line in lines if line["message"].startswith(message)]


def purge_with_a_file(pk: Pk, conversation_id: str, *, broken: bool = False) -> str:
    """A content purge of an event with a managed file (a bodies and an attachments step);
    ``broken``: its file is a non-empty directory, so the attachments step always fails."""
    pk.create_conversation(conversation_id)
    attachments = [NewAttachment.file(b"bytes", name="a.txt")]
    event = pk.ingest_event(conversation_id, author="ada", body="gone", attachments=attachments)
    if broken:
        break_blob_file(pk, event.attachments[0].blob_id)
    scope = EventScope(event_ids=(event.id,))
    return pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO).purge_id


def step_kinds(pk: Pk, purge_id: str) -> dict[str, str]:
    return {step.id: step.kind for step in pk.status(purge_id).steps}


def finished(pk: Pk, *purge_ids: str) -> bool:
    return all(pk.status(purge_id).status in ("complete", "incomplete") for purge_id in purge_ids)


def test_the_worker_logs_each_attempt_in_json_from_every_process_of_its_group(
    open_handle: Callable[..., Pk], processes: SplitProcesses
) -> None:
    pk = open_handle()  # its acceptances send the wake-ups to the test's Redis
    done = purge_with_a_file(pk, "c-done")
    failing = purge_with_a_file(pk, "c-failing", broken=True)
    with pk.db.write() as conn:  # before any worker runs: one attempt, then incomplete
        conn.execute(text("UPDATE cleanup_steps SET max_attempts = 1 WHERE purge_id = :p"), {"p": failing})
    worker = processes.launched_worker()
    wait_until(lambda: finished(pk, done, failing), "both purges to finish")
    assert (pk.status(done).status, pk.status(failing).status) == ("complete", "incomplete")
    lines = json_lines(processes.stop(worker))

    assert {line["process"] for line in lines} == {"worker"}
    assert about(lines, "Dramatiq") and about(lines, WORKER_READY)  # dramatiq's main process and its worker
    kinds = {**step_kinds(pk, done), **step_kinds(pk, failing)}
    claimed = about(lines, "step claimed")
    ended = [line for line in lines if "outcome" in line]  # "step finished", or the ERROR of an incomplete one
    for stepped in (claimed, ended):
        assert sorted((line["step_id"], line["step_kind"]) for line in stepped) == sorted(kinds.items())
        assert {line["purge_id"] for line in stepped} == {done, failing}
    assert {line["level"] for line in claimed} == {"INFO"} and {line["attempt"] for line in claimed} == {1}
    completed = [line for line in ended if line["outcome"] == "done"]
    assert len(completed) == 3 and {line["level"] for line in completed} == {"INFO"}  # all but the broken one
    assert all(line["message"].startswith("step finished: done") and line["duration_s"] >= 0 for line in completed)

    [error] = [line for line in lines if line["level"] == "ERROR"]
    assert error["message"].startswith(f"purge {failing} is incomplete: its attachments step failed on attempt 1 of 1")
    assert (error["purge_id"], error["step_kind"], error["outcome"]) == (failing, "attachments", "incomplete")
    assert error["error"].startswith("IsADirectoryError") and error["error"] in error["message"]


def test_the_scheduler_logs_the_wake_ups_it_sends(open_handle: Callable[..., Pk], processes: SplitProcesses) -> None:
    """Needs ``purgectl scheduler`` to configure the log format (``purgekeeper.commands.cli.process``)
    and to pass its database to ``broker.enqueue``."""
    pk = open_handle(enqueue=lambda step_ids: None)  # nothing sent at acceptance: the sweep sends them
    purge_id = purge_with_a_file(pk, "c1")
    kinds = step_kinds(pk, purge_id)
    scheduler = processes.scheduler()

    def all_sent() -> bool:
        return set(kinds) <= (broker.queued_steps(processes.env["PURGEKEEPER_BROKER_URL"], pk.database_key) or set())

    wait_until(all_sent, "the scheduler to send the due steps")  # its log lines are written by then
    lines = json_lines(processes.stop(scheduler))
    assert {line["process"] for line in lines} == {"scheduler"}
    sent = about(lines, "step sent")
    assert {(line["step_id"], line["step_kind"], line["purge_id"]) for line in sent} >= {
        (step_id, kind, purge_id) for step_id, kind in kinds.items()
    }
    assert {line["level"] for line in sent} == {"INFO"}


def test_the_api_logs_uvicorn_and_its_requests_in_json(processes: SplitProcesses) -> None:
    """Needs ``purgectl serve`` to configure the log format and uvicorn to keep none of its own
    (``purgekeeper.commands.http.server``)."""
    port = free_port()
    api = processes.serve(port)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=WAIT_S)  # no token: 401
    with refused.value as response:
        assert response.code == 401
    lines = json_lines(processes.stop(api))
    assert {line["process"] for line in lines} == {"api"}
    assert about(lines, "Uvicorn running on")
    [access] = [line for line in lines if line["logger"] == "uvicorn.access"]
    assert "GET /metrics HTTP/1.1" in access["message"] and "401" in access["message"]
    assert all("color_message" not in line for line in lines)


def test_a_one_shot_command_logs_on_stderr_in_json_and_prints_its_result_on_stdout(
    open_handle: Callable[..., Pk], processes: SplitProcesses
) -> None:
    """Needs ``purgectl``'s group to configure the log format (``purgekeeper.commands.cli.shared``) and the
    handle to pass its database to ``broker.enqueue`` (``purgekeeper.commands.handle``)."""
    pk = open_handle(enqueue=lambda step_ids: None)
    purge_id = purge_with_a_file(pk, "c1")
    kinds = step_kinds(pk, purge_id)
    resumed = processes.run_cli("resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"due_steps": 2, "sent": True}
    lines = json_lines(resumed.stderr)
    assert {line["process"] for line in lines} == {"cli"}
    sent = about(lines, "step sent")
    assert {(line["step_id"], line["step_kind"], line["purge_id"]) for line in sent} == {
        (step_id, kind, purge_id) for step_id, kind in kinds.items()
    }


def test_a_delivery_that_finds_the_last_attempt_dead_logs_the_purge_incomplete(
    pk: Pk, caplog: pytest.LogCaptureFixture
) -> None:
    purge_id = purge_with_a_file(pk, "c1")
    set_max_attempts(pk, purge_id, 1)
    step_id = next(step.id for step in pk.status(purge_id).steps if step.kind == "bodies")
    claim_as(pk, step_id, "dies-every-time")
    expire_lease(pk, step_id)
    with caplog.at_level(logging.INFO, logger="purgekeeper.workers.runner"):
        assert runner.run_step(pk.step_context(), step_id, policy=POLICY).status == "skipped"
    [error] = [record for record in caplog.records if record.levelno == logging.ERROR]
    assert error.getMessage().startswith(f"purge {purge_id} is incomplete: its bodies step's worker stopped")
    assert (error.purge_id, error.step_id, error.step_kind) == (purge_id, step_id, "bodies")  # type: ignore[attr-defined]
    assert pk.status(purge_id).status == "incomplete"
