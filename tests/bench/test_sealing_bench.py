"""bench/sealing.py still runs, at a tiny size, on SQLite and PostgreSQL, and its own checks
pass: the sealed side wrote keyed rows, sealed bodies and a sealed blob file, the plain side
(sealing switched off in the script) keyed nothing, wrote the bytes as given and made no key,
and both read back the same bodies and bytes. Nothing here looks at a timing."""

from __future__ import annotations

from pathlib import Path

from tests.bench.test_bench_scripts import run_script
from tests.helpers.databases import POSTGRES_ADMIN_URL


def test_the_sealing_benchmark_runs_and_both_sides_did_what_it_says(tmp_path: Path) -> None:
    figures = run_script(
        "sealing.py", "--tiny", "--database-url", POSTGRES_ADMIN_URL, "--dir", str(tmp_path), tmp_path=tmp_path
    )
    assert figures["checks_ok"] is True
    for backend in ("sqlite", "postgresql"):
        found = figures[backend]
        assert isinstance(found, dict) and found["checks_ok"] is True, backend
        for operation in ("ingest", "read_50", "read_1000", "upload", "download"):
            assert found[operation]["ratio"] > 0, (backend, operation)
