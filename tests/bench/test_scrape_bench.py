"""bench/scrape.py still runs, at a tiny size: both databases seeded with their retention runs
through the schema's triggers, scraped in turns, and the statements and rows of a scrape
counted. No timing is looked at (``make bench`` measures); what is checked is that a scrape
runs the same statements with many runs as with few."""

from __future__ import annotations

from pathlib import Path

from tests.bench.test_bench_scripts import run_script


def test_the_scrape_benchmark_runs_and_a_scrape_runs_the_same_statements(tmp_path: Path) -> None:
    figures = run_script(
        "scrape.py", *("--runs", "1", "--repeat", "2", "--few", "2", "--many", "200"), tmp_path=tmp_path, timeout=60
    )
    assert (figures["runs_few"], figures["runs_many"]) == (2, 200)
    assert figures["statements_few"] == figures["statements_many"]
    assert isinstance(figures["rows_read_many"], int) and isinstance(figures["target_met"], bool)
