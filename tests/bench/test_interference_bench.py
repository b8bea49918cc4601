"""The interference benchmark still runs, at a tiny size, and its checks pass: the purge it
cleans under the foreground load completes and leaves no body or placement behind. Nothing
here looks at a timing (its figures come from ``make bench`` at full size)."""

from __future__ import annotations

from pathlib import Path

from tests.bench.test_bench_scripts import run_script


def test_the_interference_benchmark_runs_and_its_checks_pass(tmp_path: Path) -> None:
    figures = run_script(
        "interference.py",
        *("--scale", "0.001", "--runs", "1", "--threads", "2", "--min-phase-seconds", "0.2"),
        tmp_path=tmp_path,
        timeout=60,
    )
    assert figures["checks_ok"] is True
    assert (figures["runs"], figures["threads"], figures["events_per_purge"]) == (1, 2, 1_000)
    for figure in ("ingest_p99_ratio", "read_p99_ratio", "acceptance_to_complete_s"):
        assert isinstance(figures[figure], float)
