"""Runs one benchmark script and keeps what it printed, with where and when it ran
(``make bench`` runs every script through this).

    ../.venv/bin/python record.py cleanup.py --runs 3

The script's output passes through unchanged. Every line of it that is a JSON object is kept;
the last one is the run's figures (each script ends with one). The record goes to
``bench/results/<UTC time>-<script>.json`` (``--results`` moves it; commit the records the
manual's performance page should show: ``performance.py`` writes it from them) with the
commit (and whether the tree had changes), the arguments, the machine's CPU count and its
load average before and after, so that ``compare.py`` can say what moved, and a reader can
say whether the machine was quiet.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=BENCH, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def json_objects(lines: list[str]) -> list[dict[str, Any]]:
    found = []
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def run(script: str, args: list[str], results: Path) -> tuple[int, Path | None]:
    started = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()
    process = subprocess.Popen([sys.executable, str(BENCH / script), *args], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        sys.stdout.write(line)
        lines.append(line.strip())
    status = process.wait()
    objects = json_objects(lines)
    if status != 0 or not objects:
        print(f"record.py: {script} exited {status} with {len(objects)} JSON lines; nothing recorded", file=sys.stderr)
        return status or 1, None
    record = {
        "script": Path(script).stem,
        "args": args,
        "commit": git("rev-parse", "HEAD"),
        "tree_changed": bool(git("status", "--porcelain", "--untracked-files=no")),
        "started": started.isoformat(),
        "seconds": round((dt.datetime.now(dt.UTC) - started).total_seconds(), 1),
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "lines": objects[:-1],
        "figures": objects[-1],
    }
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{started.strftime('%Y%m%dT%H%M%SZ')}-{record['script']}.json"
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"record.py: recorded {path}", file=sys.stderr)
    return 0, path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS, help="Where the records go (bench/results).")
    parser.add_argument("script", help="A script in bench/, e.g. cleanup.py.")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="The script's own arguments.")
    options = parser.parse_args()
    status, _ = run(options.script, options.args, options.results)
    sys.exit(status)


if __name__ == "__main__":
    main()
