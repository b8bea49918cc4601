"""Clean stops (issue 34, item 4): every long-running process stops the same way whichever way
its SIGTERM comes: to its main process only, to its whole process group (honcho on Ctrl+C,
``kill -TERM -- -PGID``), or to each of its processes on its own (systemd's default
``KillMode=control-group``, ``docker stop``, a Kubernetes pod's deletion).

Each stop is caught with a step in flight (a conversation purge of two batches whose first
is held mid-way by a slow statement, or a batch hung for good by the ``bodies.batch=hang``
failpoint), and then the database is asked: the batch in flight committed, or was abandoned
and rolled back; the step is due again at once, its lease cleared and its attempt given
back; every process that beat is ``stopped``, never dead; and the process exited with 0
within the documented bound. A stopped step is then finished by a new worker.

Real processes, each the leader of its own group (``start_new_session=True``), on a fresh
PostgreSQL database and a ``redis-server`` of the test's own (tests/faults/conftest.py).
"""

from __future__ import annotations

import configparser
import dataclasses
import datetime as dt
import os
import re
import shlex
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import purgekeeper
from purgekeeper.schema.states import PurgeKind
from purgekeeper.workers import cleanup, runner
from purgekeeper.workers.shutdown import STOP_BOUND
from tests.helpers.processes import (
    BIN,
    QUEUE,
    REPO,
    SCHEDULER_READY,
    WORKER_READY,
    Processes,
    free_port,
    open_transactions,
    seed_conversation,
    wait_until,
)
from tests.helpers.steps import POLICY
from tests.helpers.stopping import (
    WAYS,
    bodies_left,
    ended,
    leader_lease_left,
    process_rows,
    sigint,
    sigterm,
    sleeping_sessions,
    slow_first_batch,
    step_row,
)

Pk = purgekeeper.Purgekeeper
BATCH = 2000  # the worker's batch size (purgekeeper.workers.cleanup.DEFAULT_BATCH_SIZE)
EVENTS = BATCH + 500  # two batches
# How long after the bound a test still waits before it calls a stop hung: process start-up
# and reaping on a loaded machine, never a promise of the code.
SLACK_S = 10.0
WAIT_EXIT_S = STOP_BOUND.total_seconds() + SLACK_S
HONCHO_KILL_AFTER_S = 5.0  # honcho sends SIGKILL this long after its SIGTERMs
UNITS = REPO / "deploy" / "systemd"


# -- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture
def embedded(fault_env: dict[str, str], tmp_path: Path, redis_client: redis.Redis) -> Iterator[Processes]:
    """Processes without a broker URL: ``purgectl serve`` runs its in-process worker and scheduler."""
    log_dir = tmp_path / "embedded-logs"
    log_dir.mkdir()
    env = {name: value for name, value in fault_env.items() if name != "PURGEKEEPER_BROKER_URL"}
    procs = Processes(env, log_dir)
    try:
        yield procs
    finally:
        procs.close()


def purge_mid_batch(pk: Pk, conversation_id: str = "c1") -> tuple[str, str]:
    """A conversation of two batches purged, its first batch made slow; returns the purge's
    id and its bodies step's."""
    seed_conversation(pk, conversation_id, EVENTS)
    slow_first_batch(pk, conversation_id)
    purge_id = pk.purge_conversation(conversation_id, actor="op", reason="clean stop").purge_id
    [bodies] = [step for step in pk.status(purge_id).steps if step.kind == "bodies"]
    return purge_id, bodies.id


def wait_mid_batch(pk: Pk, step_id: str) -> None:
    """The step claimed and its first batch inside its slow statement."""
    wait_until(lambda: step_row(pk, step_id).status == "running", "the step to be claimed")
    wait_until(lambda: sleeping_sessions(pk) >= 1, "the first batch to be inside its slow statement")


def assert_given_back(pk: Pk, step_id: str, *, removed_at_least: int) -> None:
    """Due again at once: waiting (not running), its lease cleared, its attempt given back."""
    row = step_row(pk, step_id)
    assert (row.status, row.attempts, row.lease_owner, row.lease_expires_at) == ("pending", 0, None, None), row
    assert row.next_attempt_at <= row.updated_at
    assert row.removed >= removed_at_least


def assert_all_stopped(pk: Pk, roles: set[str]) -> None:
    rows = process_rows(pk)
    assert {role for role, _, _ in rows} == roles, rows
    assert {state for _, _, state in rows} == {"stopped"}, rows


def assert_leader_lease_given_up(pk: Pk) -> None:
    left = leader_lease_left(pk)
    assert left is not None and left <= 0, left


def assert_clean_exit(code: int, took: float, log: str) -> None:
    assert code == 0, f"exit code {code}\n{log}"
    assert took < WAIT_EXIT_S, f"took {took:.1f}s"
    assert "Killing worker process" not in log, log
    assert "did not stop within" not in log, log


def finish_with_a_new_worker(pk: Pk, processes: Processes, purge_id: str, step_id: str) -> None:
    """A new worker finishes the step in one attempt: its lease is long, so that on a loaded
    machine its own first batch (the slow one again, 1 s asleep and then 2,000 rows, when the
    stopped batch rolled back) does not outlast the fault tests' 2 s lease and count a second
    attempt, which once failed this check under a soak's load; what is checked is that the
    stopped attempt was given back."""
    worker = processes.worker(env={"PURGEKEEPER_STEP_LEASE": "30"})
    scheduler = processes.scheduler()
    status = pk.wait(purge_id, 60)
    assert status.status == "complete", (status.steps, worker.tail(), scheduler.tail())
    assert step_row(pk, step_id).attempts == 1  # the stopped attempt was given back
    outcomes = [a.outcome for a in pk.purge_detail(purge_id).attempts if a.step_id == step_id]
    assert outcomes == ["stopped", "done"], outcomes


# -- the worker process (the dramatiq CLI: a main process and its worker processes) ----------


@pytest.mark.parametrize("way", WAYS)
def test_a_worker_stopped_mid_batch_commits_the_batch_and_gives_the_step_back(
    pk: Pk, processes: Processes, way: str
) -> None:
    purge_id, step_id = purge_mid_batch(pk)
    worker = processes.worker(worker_processes=2)
    wait_mid_batch(pk, step_id)

    code, took = ended(worker, sigterm(worker, way), timeout=WAIT_EXIT_S)

    assert_clean_exit(code, took, worker.output())
    assert_given_back(pk, step_id, removed_at_least=BATCH)
    assert bodies_left(pk, "c1") == EVENTS - BATCH  # the batch in flight committed; the next never began
    assert open_transactions(pk) == 0
    assert_all_stopped(pk, {"worker"})
    finish_with_a_new_worker(pk, processes, purge_id, step_id)


def test_honcho_s_ctrl_c_stops_the_procfile_s_worker_and_scheduler_cleanly(pk: Pk, processes: Processes) -> None:
    """``make procfile``'s honcho, on Ctrl+C (SIGINT to honcho): it sends SIGTERM to each
    process's group and SIGKILL 5 s later. The worker's batch in flight commits, its step is
    given back, and both processes are shown stopped, the scheduler's leader lease given up."""
    worker = ["python", "-m", "purgekeeper.commands.worker", "--processes", "2", "--threads", "2", "--queues", QUEUE]
    lines = {"worker": [sys.executable, *worker[1:]], "scheduler": [str(BIN / "purgectl"), "scheduler"]}
    purge_id, step_id = purge_mid_batch(pk)
    honcho = processes.honcho(lines, ready={"worker": WORKER_READY, "scheduler": SCHEDULER_READY})
    wait_mid_batch(pk, step_id)

    code, took = ended(honcho, sigint(honcho), timeout=WAIT_EXIT_S)

    output = honcho.output()
    assert "SIGKILL" not in output and "Killing" not in output, output
    assert took < HONCHO_KILL_AFTER_S + SLACK_S, output
    assert_given_back(pk, step_id, removed_at_least=BATCH)
    assert bodies_left(pk, "c1") == EVENTS - BATCH
    assert_all_stopped(pk, {"worker", "scheduler"})
    assert_leader_lease_given_up(pk)
    assert code == 130, output  # honcho's own answer to SIGINT (128 + 2), once every process ended
    finish_with_a_new_worker(pk, processes, purge_id, step_id)


def test_a_worker_stopped_inside_a_hung_batch_abandons_it_and_gives_the_step_back(pk: Pk, processes: Processes) -> None:
    hung = processes.worker("bodies.batch=hang")
    seed_conversation(pk, "c1", 10)
    purge_id = pk.purge_conversation("c1", actor="op", reason="clean stop").purge_id
    [step_id] = [step.id for step in pk.status(purge_id).steps if step.kind == "bodies"]
    wait_until(lambda: step_row(pk, step_id).status == "running", "the step to be claimed")
    wait_until(lambda: open_transactions(pk) >= 1, "the hung batch's open transaction")

    code, took = ended(hung, sigterm(hung, "group"), timeout=WAIT_EXIT_S)

    assert_clean_exit(code, took, hung.output())
    assert_given_back(pk, step_id, removed_at_least=0)
    assert bodies_left(pk, "c1") == 10  # the abandoned batch rolled back
    assert open_transactions(pk) == 0
    assert_all_stopped(pk, {"worker"})
    finish_with_a_new_worker(pk, processes, purge_id, step_id)


# -- purgectl serve (its in-process worker and scheduler) --------------------------------------


@pytest.mark.parametrize("way", WAYS)
def test_serve_stopped_mid_batch_ends_the_batch_whole_and_gives_the_step_back(
    pk: Pk, embedded: Processes, processes: Processes, way: str
) -> None:
    """The batch in flight commits, or, where it cannot within the grace, rolls back whole: in
    serve the in-process worker shares its process with the API and the scheduler, and on CI's
    two busy cores its batch (1 s asleep, then 2,000 rows) once missed the 2 s grace. Never half
    a batch, and never the next one."""
    api = embedded.serve(free_port())
    purge_id, step_id = purge_mid_batch(pk)  # the in-process scheduler's sweep wakes it
    wait_mid_batch(pk, step_id)

    code, took = ended(api, sigterm(api, way), timeout=WAIT_EXIT_S)

    assert_clean_exit(code, took, api.output())
    assert_given_back(pk, step_id, removed_at_least=0)
    committed = bodies_left(pk, "c1") == EVENTS - BATCH
    assert committed or bodies_left(pk, "c1") == EVENTS
    assert (step_row(pk, step_id).removed >= BATCH) is committed
    assert open_transactions(pk) == 0
    assert_all_stopped(pk, {"embedded"})
    assert_leader_lease_given_up(pk)
    finish_with_a_new_worker(pk, processes, purge_id, step_id)


# -- purgectl scheduler --------------------------------------------------------------------------


@pytest.mark.parametrize("way", WAYS)
def test_a_scheduler_gives_up_its_leader_lease_and_is_shown_stopped(pk: Pk, processes: Processes, way: str) -> None:
    scheduler = processes.scheduler()
    wait_until(lambda: (leader_lease_left(pk) or 0) > 0, "the scheduler to lead")

    code, took = ended(scheduler, sigterm(scheduler, way), timeout=WAIT_EXIT_S)

    assert_clean_exit(code, took, scheduler.output())
    assert_leader_lease_given_up(pk)
    assert_all_stopped(pk, {"scheduler"})


# -- the same wind-down in-process, on both backends ---------------------------------------------


def test_a_wind_down_ends_the_attempt_at_its_next_safe_point_and_gives_the_step_back(
    open_pk: Callable[..., Pk],
) -> None:
    """What a stopping worker process, ``serve`` and a host's ``close()`` do: the batch in
    flight commits, the next one never begins, and the step is due again with its attempt
    given back; a new attempt then finishes it."""
    pk = open_pk()
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="SECRET")
    purge_id = pk.purge_conversation("c1", actor="op", reason="clean stop").purge_id
    [step_id] = [step.id for step in pk.status(purge_id).steps if step.kind == "bodies"]
    inside, finish = threading.Event(), threading.Event()

    def two_batches(ctx: cleanup.StepContext, held: Any, entry: Any) -> cleanup.Ran:
        def first(conn: Any) -> dict[str, Any]:
            inside.set()
            finish.wait(10)
            return {"removed": 1}

        cleanup.run_batch(ctx, held, first)
        cleanup.run_batch(ctx, held, lambda conn: {"removed": 1, "done": True})
        return cleanup.Ran(finished=True)

    plain = pk.step_context()
    ctx = dataclasses.replace(plain, bodies={**plain.bodies, PurgeKind.CONVERSATION.value: two_batches})
    outcomes: list[runner.Outcome] = []
    attempt = threading.Thread(target=lambda: outcomes.append(runner.run_step(ctx, step_id, policy=POLICY)))
    attempt.start()
    assert inside.wait(10)
    winding = threading.Thread(target=lambda: outcomes.append(runner.wind_down(ctx, grace=dt.timedelta(seconds=10))))
    winding.start()
    wait_until(ctx.stopping.is_set, "the wind-down to begin")
    finish.set()
    attempt.join(10)
    winding.join(10)

    assert outcomes == [runner.Outcome("stopped"), 0]  # ended at the safe point; none abandoned
    row = step_row(pk, step_id)
    assert (row.status, row.attempts, row.lease_owner, row.lease_expires_at, row.removed) == (
        "pending",
        0,
        None,
        None,
        1,
    )
    assert runner.run_step(ctx, step_id, policy=POLICY).status == "skipped"  # no attempt begins once stopping
    assert runner.run_step(pk.step_context(), step_id, policy=POLICY).status == "done"
    outcomes_seen = [a.outcome for a in pk.purge_detail(purge_id).attempts if a.step_id == step_id]
    assert outcomes_seen == ["stopped", "done"]
    assert step_row(pk, step_id).attempts == 1


# -- the systemd units of deploy/systemd -----------------------------------------------------------


def unit(name: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd's keys are case-sensitive
    parser.read_string((UNITS / name).read_text())
    return parser


def procfile() -> dict[str, str]:
    lines = (REPO / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if ": " in line)


def resolved(command: str, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """A command line's words with ``${NAME:-default}`` and ``${NAME}`` replaced (from ``env``,
    else the default), its leading ``env NAME=value`` assignments taken apart."""

    def substitute(word: str) -> str:
        return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}", lambda m: env.get(m.group(1), m.group(2) or ""), word)

    words = [substitute(word) for word in shlex.split(command)]
    assigned: dict[str, str] = {}
    if words and words[0] == "env":
        words.pop(0)
        while words and re.fullmatch(r"\w+=.*", words[0]):
            name, _, value = words.pop(0).partition("=")
            assigned[name] = value
    return words, assigned


def unit_environment(parsed: configparser.RawConfigParser) -> dict[str, str]:
    lines = parsed.get("Service", "Environment", fallback="").splitlines()
    return dict(word.split("=", 1) for line in lines for word in shlex.split(line))


@pytest.mark.parametrize(
    ("process", "name"),
    [
        ("api", "purgekeeper-api.service"),
        ("worker", "purgekeeper-worker.service"),
        ("scheduler", "purgekeeper-scheduler.service"),
    ],
)
def test_the_systemd_units_run_the_procfile_s_commands_and_wait_out_the_stop_bound(process: str, name: str) -> None:
    parsed = unit(name)
    service = parsed["Service"]
    assert service["KillSignal"] == "SIGTERM"
    assert service["KillMode"] in ("mixed", "control-group")  # both stop cleanly (the tests above)
    assert service.get("SendSIGKILL", "yes") == "yes"
    timeout = service["TimeoutStopSec"]
    assert re.fullmatch(r"\d+s?", timeout), timeout
    assert int(timeout.rstrip("s")) >= STOP_BOUND.total_seconds() + 5  # the bound, and a margin to reap

    env = unit_environment(parsed)
    unit_words, unit_assigned = resolved(service["ExecStart"], env)
    procfile_words, procfile_assigned = resolved(procfile()[process], {})
    assert Path(unit_words[0]).parts[-3:] == Path(procfile_words[0]).parts[-3:]  # .venv/bin/<program>
    assert unit_words[1:] == procfile_words[1:]
    assert {**env, **unit_assigned}.items() >= procfile_assigned.items()


def test_stopping_md_states_the_bound_and_the_units_timeout() -> None:
    guide = (REPO / "docs" / "guides" / "stopping.md").read_text()
    bound = f"{STOP_BOUND.total_seconds():g} s"
    assert bound in guide, bound
    assert "TimeoutStopSec=" in guide
    assert os.path.basename(UNITS) in guide
