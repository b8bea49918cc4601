"""The worker group's main process restarts a worker process that dies, alone
(``purgekeeper.workers.supervisor``). Tried with the Procfile's worker (``python -m
purgekeeper.commands.worker --processes 2``), PostgreSQL and Redis:

- a kill -9 of one worker process: the main process and the other worker process go on (same
  pids), another process takes the dead one's place, and the group still cleans;
- a SIGSTOP then kill -9 of a process inside a batch, with a 300 s lease: its step is released
  and finished by the group's other processes, with no other worker and within 60 s;
- a worker process that cannot start (the database is not migrated): the group stops with its
  exit code instead of restarting it for ever;
- a SIGTERM to the whole process group, or to the main process alone, after a restart: every
  process stops cleanly, none is restarted;
- six deaths by signals within a minute (one a real-time signal): the sixth stops the group.

dramatiq's own main process stopped the whole group at the first of these (the first test
fails on the commit before the supervisor: the main process exits)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import purgekeeper
from purgekeeper.workers.children import living_children
from purgekeeper.workers.supervisor import _Restarts
from tests.helpers.processes import QUEUE, REPO, Proc, Processes, seed_conversation, wait_until

Pk = purgekeeper.Purgekeeper
REPLACED = "exited unexpectedly (killed by SIGKILL); starting another"


def _group(processes: Processes, failpoints: str = "") -> tuple[Proc, set[int]]:
    worker = processes.worker(failpoints, worker_processes=2)
    children = living_children(worker.pid)  # both ready: no forks without a metrics port
    assert len(children) == 2, children
    return worker, children


def _kill_and_replace(worker: Proc, victim: int, others: set[int], signum: int = signal.SIGKILL) -> int:
    """Kills ``victim`` with ``signum`` and waits for the process that takes its place, ready;
    returns its pid."""
    ready_before = worker.output().count("Worker process is ready")
    os.kill(victim, signum)

    def replacement() -> int | None:
        assert worker.alive(), worker.tail()
        new = living_children(worker.pid) - others - {victim}
        if len(new) == 1 and worker.output().count("Worker process is ready") > ready_before:
            return new.pop()
        return None

    try:
        found = wait_until(replacement, "a process in the dead one's place", timeout=30)
    except AssertionError:
        raise AssertionError(worker.tail(40)) from None
    assert found is not None
    return found


def test_a_killed_worker_process_is_restarted_alone(pk: Pk, processes: Processes) -> None:
    worker, children = _group(processes)
    victim, survivor = sorted(children)
    fresh = _kill_and_replace(worker, victim, {survivor})
    assert living_children(worker.pid) == {survivor, fresh}
    assert REPLACED in worker.output()

    processes.scheduler()
    seed_conversation(pk, "c1", 30)
    purge_id = pk.purge_conversation("c1", actor="op", reason="after a restart").purge_id
    assert pk.wait(purge_id, 60).status == "complete", worker.tail()


def _bodies_step(pk: Pk, purge_id: str) -> tuple[str, int, str | None]:
    from sqlalchemy import text

    with pk.db.read() as conn:
        row = conn.execute(
            text("SELECT status, attempts, lease_owner FROM cleanup_steps WHERE purge_id = :p AND kind = 'bodies'"),
            {"p": purge_id},
        ).one()
    return row.status, row.attempts, row.lease_owner


def test_the_step_of_a_process_killed_in_its_batch_is_taken_again_by_the_group(pk: Pk, processes: Processes) -> None:
    """Every process of the group hangs inside its bodies batch (a failpoint), the lease is
    300 s, and no other worker runs: the step can only be claimed again because the main
    process released it and the group still has processes to take it."""
    processes.env = {**processes.env, "PURGEKEEPER_STEP_LEASE": "300"}
    worker, children = _group(processes, "bodies.batch=hang")
    processes.scheduler()
    seed_conversation(pk, "c1", 50)
    purge_id = pk.purge_conversation("c1", actor="op", reason="killed in a batch").purge_id

    def held() -> int | None:
        status, attempts, owner = _bodies_step(pk, purge_id)
        return int(owner.split(":")[1]) if status == "running" and attempts == 1 and owner else None

    holder = wait_until(held, "a worker process inside the step's batch")
    assert holder in children
    os.kill(holder, signal.SIGKILL)

    def taken_again() -> int | None:
        status, attempts, owner = _bodies_step(pk, purge_id)
        return int(owner.split(":")[1]) if status == "running" and attempts == 2 and owner else None

    try:
        again = wait_until(taken_again, "the step claimed again within the group", timeout=60)
    except AssertionError:
        raise AssertionError(worker.tail(40)) from None
    assert again != holder and again in living_children(worker.pid)
    assert f"worker process {holder} exited holding 1 step(s)" in worker.output()
    assert REPLACED in worker.output()


def test_a_worker_process_that_cannot_start_stops_the_group(processes: Processes, tmp_path: object) -> None:
    unmigrated = f"sqlite:///{tmp_path}/empty.db"
    argv = [sys.executable, "-m", "purgekeeper.commands.worker", "--processes", "2", "--threads", "1"]
    env = {**processes.env, "PURGEKEEPER_DATABASE_URL": unmigrated}
    done = subprocess.run(
        [*argv, "--queues", QUEUE], cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode > 0, done.stderr[-3000:]
    assert "starting another" not in done.stderr
    assert "stopping the group" in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("to", ["the process group", "the main process only"])
def test_a_sigterm_after_a_restart_stops_every_process_cleanly(processes: Processes, to: str) -> None:
    """killpg (docker stop, honcho) and the main process alone (systemd's KillMode=mixed): the
    restarted process stops too, cleanly, and nothing is started again."""
    worker, children = _group(processes)
    victim, survivor = sorted(children)
    fresh = _kill_and_replace(worker, victim, {survivor})

    if to == "the process group":
        os.killpg(worker.pid, signal.SIGTERM)
    else:
        os.kill(worker.pid, signal.SIGTERM)
    assert worker.popen.wait(timeout=30) == 0, worker.tail(40)
    output = worker.output()
    assert output.count("starting another") == 1, output
    assert "Killing worker process" not in output, output
    assert not {survivor, fresh} & living_children(worker.pid)


def test_a_crash_loop_stops_the_group(processes: Processes) -> None:
    """Six deaths by a signal within the minute, one of them by a real-time signal (which has
    no name): five are restarted, the sixth stops the group with a failure's exit code."""
    worker, children = _group(processes)
    others = set(children)
    signals = [signal.SIGKILL, signal.SIGRTMIN + 1, signal.SIGKILL, signal.SIGSEGV, signal.SIGKILL]
    for number in signals:
        victim = min(others)
        others.discard(victim)
        others.add(_kill_and_replace(worker, victim, others, number))
    os.kill(min(others), signal.SIGKILL)
    assert worker.popen.wait(timeout=30) == 1, worker.tail(40)
    output = worker.output()
    assert output.count("starting another") == 5, output
    assert f"killed by signal {int(signal.SIGRTMIN) + 1}" in output, output
    assert "more than 5 restarts in 60 s; stopping the group" in output, output


def test_restarts_are_counted_in_their_window() -> None:
    restarts = _Restarts(limit=2, window_s=60.0)
    assert restarts.allow() and restarts.allow()
    assert not restarts.allow()  # a third within the minute: a crash loop
    restarts.times[0] -= 61.0  # the first fell out of the window
    assert restarts.allow()
