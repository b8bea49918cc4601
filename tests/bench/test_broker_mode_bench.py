"""bench/broker_mode.py still runs, at a tiny size: the same purge embedded and through a Redis
of its own with the Procfile's worker and scheduler, each completed on both sides, and its
profile taken from the steps' attempts. No timing is looked at (``make bench`` measures)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.bench.test_bench_scripts import run_script
from tests.helpers.databases import service_missing

PHASES = {"to_bodies", "bodies", "to_attachments", "attachments", "to_complete"}


def test_the_broker_mode_benchmark_completes_the_purge_on_both_sides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("redis-server") is None:
        service_missing("redis-server", FileNotFoundError("no redis-server on PATH"))
    monkeypatch.setenv("WORKER_PROCESSES", "1")  # the Procfile's own knob: one worker process is enough here
    figures = run_script(
        "broker_mode.py",
        *("--runs", "1", "--events", "100", "--attachment-every", "10", "--dir", str(tmp_path)),
        tmp_path=tmp_path,
        timeout=120,
    )
    assert (figures["events"], figures["attachments"], figures["runs"]) == (100, 10, 1)
    assert len(figures["embedded_s"]) == len(figures["broker_s"]) == 1  # type: ignore[arg-type]
    phases = figures["phases"]
    assert isinstance(phases, dict)
    assert set(phases) == {"embedded", "broker"}
    assert all(set(side) == PHASES for side in phases.values())
    assert isinstance(figures["target_met"], bool)
