"""``bench/bulk_ingest.py`` still runs, at a tiny size, and its own checks pass (every library
event accepted, both sides' rows all there). Nothing here looks at a timing."""

from __future__ import annotations

from pathlib import Path

from tests.bench.test_bench_scripts import run_script


def test_the_bulk_ingest_benchmark_runs_and_its_checks_pass(tmp_path: Path) -> None:
    figures = run_script("bulk_ingest.py", "--tiny", tmp_path=tmp_path)
    assert figures["checks_ok"] is True
    assert figures["batch"] == 20 and figures["rounds"] == 2
    for name in ("bulk_ms", "raw_ms", "bulk_over_raw"):
        assert isinstance(figures[name], float) and figures[name] > 0, name
