"""``make bench`` keeps each run (``bench/record.py``) and ``bench/compare.py`` lists what moved
(issue 27, item 7). No timing is asserted: a toy script prints fixed figures, and the record
and the comparison are checked for what they say about them.

What was tried: a script that prints progress lines and a final JSON object (recorded, with
its commit and load); one that fails or prints no JSON (nothing recorded, the exit code
kept); two records whose figures moved by 5%, 20% and appeared or vanished (only the moves
over 10% and the changes of shape are listed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def record(tmp_path: Path, script: str, results: Path) -> subprocess.CompletedProcess[str]:
    toy = tmp_path / "toy.py"
    toy.write_text(script, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(BENCH / "record.py"), "--results", str(results), str(toy), "--size", "3"],
        cwd=BENCH, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def compare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), *args], cwd=BENCH, capture_output=True, text=True, timeout=60
    )


TOY = """import json, sys
print("warming up")
print(json.dumps({"run": 1, "rows_per_s": 10}))
print(json.dumps({"args": sys.argv[1:], "ratio": 0.8, "met": True, "runs": [{"rows_per_s": 100}]}))
"""


def test_a_run_is_recorded_with_its_figures_commit_and_load(tmp_path: Path) -> None:
    done = record(tmp_path, TOY, tmp_path / "results")
    assert done.returncode == 0, done.stderr
    assert "warming up" in done.stdout  # the script's output passes through
    [path] = (tmp_path / "results").glob("*.json")
    kept = json.loads(path.read_text())
    assert kept["figures"] == {"args": ["--size", "3"], "ratio": 0.8, "met": True, "runs": [{"rows_per_s": 100}]}
    assert kept["lines"] == [{"run": 1, "rows_per_s": 10}]
    assert kept["args"] == ["--size", "3"] and len(kept["commit"]) == 40
    assert len(kept["load_before"]) == 3 and kept["cpus"] >= 1


def test_a_failed_or_silent_run_records_nothing(tmp_path: Path) -> None:
    failed = record(tmp_path, "import sys\nprint('{\"ratio\": 1}')\nsys.exit(3)\n", tmp_path / "results")
    silent = record(tmp_path, "print('no figures')\n", tmp_path / "results")
    assert (failed.returncode, silent.returncode) == (3, 1)
    assert not (tmp_path / "results").exists()


def _write(path: Path, figures: dict[str, object]) -> Path:
    path.write_text(
        json.dumps({"script": "toy", "commit": "a" * 40, "load_before": [0.5, 0.4, 0.3], "figures": figures})
    )
    return path


def test_compare_lists_only_what_moved_by_more_than_ten_percent(tmp_path: Path) -> None:
    old = _write(tmp_path / "20261201T000000Z-toy.json", {"a": 100, "b": {"c": 100}, "gone": 1, "met": True})
    new = _write(tmp_path / "20261202T000000Z-toy.json", {"a": 105, "b": {"c": 120}, "fresh": 2, "met": False})
    explicit = compare(str(old), str(new))
    newest = compare("--results", str(tmp_path))
    for done in (explicit, newest):
        assert done.returncode == 0, done.stderr
        assert "b.c: 100 -> 120 (+20%)" in done.stdout
        assert "gone: 1 -> (gone)" in done.stdout and "fresh: (new) -> 2" in done.stdout
        assert "  a:" not in done.stdout and "met" not in done.stdout
        assert "3 figure(s) moved" in done.stdout
    assert "  a: 100 -> 105 (+5%)" in compare(str(old), str(new), "--threshold", "0.01").stdout


def test_compare_with_nothing_to_compare_says_so(tmp_path: Path) -> None:
    done = compare("--results", str(tmp_path))
    assert done.returncode == 2 and "nothing to compare" in done.stderr
