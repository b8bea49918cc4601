"""bench/soak.py still runs, for a few seconds a phase: the load against the Procfile's worker
group and scheduler and a Redis of its own, without faults and with them (a worker process
killed and replaced by its group's main process, one stopped, Redis restarted, the scheduler
killed and started again by the script),
and its invariants hold after each phase: nothing read after its purge's acceptance, no body,
name, placement or file left of purged content, no purge left unfinished. No timing is looked at
(the figures come from runs of minutes)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.bench.test_bench_scripts import run_script
from tests.helpers.databases import service_missing

SHORT = ("--seconds", "10", "--sweep-seconds", "1", "--kill-every", "5", "--stop-seconds", "2", "--redis-down", "0.5")


def test_the_soak_benchmark_runs_both_phases_and_its_invariants_hold(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        service_missing("redis-server", FileNotFoundError("no redis-server on PATH"))
    figures = run_script(
        "soak.py", *SHORT, "--settle-seconds", "60", "--dir", str(tmp_path), tmp_path=tmp_path, timeout=120
    )
    assert figures["checks_ok"] is True
    phases = figures["phases"]
    assert isinstance(phases, dict) and set(phases) == {"nofaults", "faults"}
    for name, phase in phases.items():
        assert phase["events"] > 0 and phase["purges"] > 0, name
        assert phase["completed"] == phase["purges"], name  # every purge accepted here completed
        assert set(phase["checks"].values()) == {0}, (name, phase["checks"])
    faults = [fault["fault"] for fault in phases["faults"]["faults"]]
    assert {"kill_worker", "stop_worker", "restart_redis", "kill_scheduler"} <= set(faults), faults
    kills = [fault for fault in phases["faults"]["faults"] if fault["fault"] == "kill_worker"]
    assert kills and all(fault["replaced_s"] > 0 for fault in kills), kills  # replaced within the group
    assert phases["faults"]["restarts"]["worker"] == []  # the group itself never stopped
    assert len(phases["faults"]["restarts"]["scheduler"]) == 1
    assert isinstance(figures["p50_ratio"], float)
