"""The benchmark scripts still run, at a tiny size, and their own checks pass. Nothing here
looks at a timing: a benchmark's figures come from ``make bench`` at full size. What this
catches is a script that no longer runs against the code (a changed signature, a seed that
breaks a trigger), and, through the cleanup script's checks after each run, a purge that
does not complete at volume: every purge ``complete``, bodies NULL and placements gone, the
exclusive blobs ``deleted`` with their files gone, the shared ones ``present`` with theirs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.databases import POSTGRES_ADMIN_URL

ROOT = Path(__file__).resolve().parents[2]


def run_script(script: str, *args: str, tmp_path: Path, timeout: float = 100) -> dict[str, object]:
    env = {**os.environ, "PK_BENCH_POSTGRES_URL": POSTGRES_ADMIN_URL, "PURGEKEEPER_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    figures: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


@pytest.mark.parametrize("unlink_threads", ["1", "4"])
def test_the_cleanup_benchmark_runs_and_its_checks_pass(tmp_path: Path, unlink_threads: str) -> None:
    figures = run_script(
        "cleanup.py",
        *("--scale", "0.02", "--conversations", "40", "--runs", "1", "--per-run", "4"),
        *("--unlink-threads", unlink_threads, "--statements", "40", "--dir"),
        str(tmp_path),
        tmp_path=tmp_path,
    )
    # --statements: the four timed purges' steps of each kind, and what they sent (the
    # warm-up's steps are not counted); the bodies NULL the bodies, the attachments mark blobs
    profile = figures["statements"]
    assert isinstance(profile, dict) and sorted(profile) == ["attachments", "bodies"]
    for kind, statement in (("bodies", "UPDATE events SET body"), ("attachments", "UPDATE blobs SET state")):
        assert profile[kind]["steps"] == 4
        assert 0 < profile[kind]["statement_ms_per_step"] < profile[kind]["ms_per_step"]
        assert any(entry["statement"].startswith(statement) for entry in profile[kind]["top"]), kind
    assert figures["checks_ok"] is True
    assert figures["unlink_threads"] == int(unlink_threads)
    # both unlink baselines ran (their files are gone: the checks), and both ratios are reported
    for name in ("files_ratio", "files_safe_ratio", "baseline_files_per_s", "baseline_safe_files_per_s"):
        assert isinstance(figures[name], float) and figures[name] > 0, name
    # 4 conversations of 20 events, 4 attachments each: 2 exclusive blobs unlinked, 2 shared kept
    assert (figures["files_per_run"], figures["retained_per_run"]) == (4 * 2, 4 * 2)
    # per event a NULLed body and a deleted placement; per attachment a NULLed name
    assert figures["rows_per_run"] == 4 * (20 * 2 + 4)


def test_the_acceptance_benchmark_runs_and_its_ledger_check_passes(tmp_path: Path) -> None:
    figures = run_script(
        "acceptance.py",
        "--runs",
        "1",
        "--threads",
        "2",
        "--per-thread",
        "2",
        "--large-events",
        "500",
        tmp_path=tmp_path,
    )
    assert figures["ledger_ok"] is True


def test_the_scale_benchmark_runs_and_its_ledger_and_copy_agree(tmp_path: Path) -> None:
    """Two tiny ledgers: seeded with COPY, copied straight, merged 1,000 rows behind; the
    script's own check walks the ledger and its copy after the measurements."""
    figures = run_script(
        "scale.py",
        *("--sizes", "200,400", "--repeat", "1", "--merge-large", "300", "--tiny"),
        tmp_path=tmp_path,
        timeout=240,
    )
    assert (figures["checks_ok"], figures["sizes"]) == (True, [200, 400])


def test_the_erasure_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    figures = run_script("erasure.py", "--repeat", "1", "--events", "300", "--conversations", "3", tmp_path=tmp_path)
    for name in ("accept_ratio", "bodies_ratio", "read_50_ratio", "read_1000_ratio"):
        assert isinstance(figures[name], float) and figures[name] > 0, name


def test_the_retention_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    """Its own checks: every due policy's turn writes no row, each large and small run is
    accepted, and both read databases hold the same readable events."""
    figures = run_script(
        "retention.py", "--repeat", "1", "--policies", "30", "--events", "200", tmp_path=tmp_path, timeout=240
    )
    for name in ("tick_ratio", "accept_ratio", "read_ratio", "due_turn_per_policy_ms"):
        assert isinstance(figures[name], float) and figures[name] > 0, name


def test_the_receipts_benchmark_runs_and_its_receipts_verify(tmp_path: Path) -> None:
    """Acceptances signed and not, two tiny ledgers bulk-loaded through the signed copy: a
    receipt from each verifies, and the log's bytes per row are about one hash."""
    figures = run_script("receipts.py", "--tiny", tmp_path=tmp_path, timeout=240)
    assert figures["checks_ok"] is True and figures["rows"] == [300, 600]
    per_row = figures["log_bytes_per_row"]
    assert isinstance(per_row, list) and all(30 < value < 40 for value in per_row)


def test_the_receipts_benchmark_with_a_local_witness_runs_and_its_receipts_carry_the_cosignature(
    tmp_path: Path,
) -> None:
    """The signed side with ``purgectl witness serve`` beside it: the newest receipt verifies
    with the witness's key and a quorum of one (``checks_ok``)."""
    figures = run_script("receipts.py", "--tiny", "--witness", "--throughput-only", tmp_path=tmp_path, timeout=240)
    assert figures["checks_ok"] is True
    assert isinstance(figures["witnessed_throughput_ratio"], float) and figures["witnessed_throughput_ratio"] > 0
