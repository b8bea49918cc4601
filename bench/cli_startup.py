"""How long purgectl takes to answer, against a baseline commit, in the same run (issue 26,
item 7): ``purgectl --help``, ``status`` of an unknown purge and ``list`` on an initialised
SQLite database, each run as a whole process, and the import time of ``commands.cli`` as
``python -X importtime`` reports it.

    ../.venv/bin/python cli_startup.py --baseline 2680ac5 --runs 7

The baseline is checked out with ``git worktree`` into a temporary directory and run by the
same interpreter with ``PYTHONPATH`` pointing at it (ahead of the editable install). Each
figure is the median of ``--runs`` runs, the two trees alternating; the JSON line at the end
carries every figure and the ratios (this tree over the baseline).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
COMMANDS = {"help": ["--help"], "status": ["status", "no-such-purge"], "list": ["list"]}


@contextlib.contextmanager
def worktree(commit: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pk-baseline-") as scratch:
        path = Path(scratch) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(path), commit], cwd=REPOSITORY, check=True,
                       capture_output=True)  # fmt: skip
        try:
            yield path
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPOSITORY, check=False)


def environment(tree: Path, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PURGEKEEPER_")}
    return {**env, "PYTHONPATH": str(tree), "PURGEKEEPER_DATA_DIR": str(data_dir)}


def whole_process(env: dict[str, str], tree: Path, args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "commands.cli", *args], env=env, cwd=tree, capture_output=True, check=False)
    return time.perf_counter() - started


def import_time(env: dict[str, str], tree: Path) -> float:
    """Seconds for ``import commands.cli``: the cumulative figure of its line in -X importtime."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import commands.cli"], env=env, cwd=tree,
                          capture_output=True, text=True, check=True)  # fmt: skip
    line = next(line for line in done.stderr.splitlines() if re.search(r"\|\s*commands\.cli$", line))
    return int(line.split("|")[1]) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="The commit to compare with (e.g. the landed code).")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with worktree(args.baseline) as baseline, tempfile.TemporaryDirectory(prefix="pk-cli-") as scratch:
        trees = {"this": REPOSITORY, "baseline": baseline}
        envs = {name: environment(tree, Path(scratch) / name) for name, tree in trees.items()}
        for name, tree in trees.items():
            subprocess.run([sys.executable, "-m", "commands.cli", "init"], env=envs[name], cwd=tree, check=True,
                           capture_output=True)  # fmt: skip
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
        for run in range(args.runs):
            order = list(trees) if run % 2 == 0 else list(reversed(trees))
            for name in order:
                tree, env = trees[name], envs[name]
                samples[name].setdefault("import", []).append(import_time(env, tree))
                for figure, command in COMMANDS.items():
                    samples[name].setdefault(figure, []).append(whole_process(env, tree, command))
    medians = {name: {figure: statistics.median(values) for figure, values in figures.items()}
               for name, figures in samples.items()}  # fmt: skip
    for figure in medians["this"]:
        this, base = medians["this"][figure], medians["baseline"][figure]
        print(f"{figure:7} this {this * 1000:7.0f} ms   baseline {base * 1000:7.0f} ms   ratio {this / base:.2f}")
    ratios = {figure: medians["this"][figure] / medians["baseline"][figure] for figure in medians["this"]}
    print(json.dumps({"baseline": args.baseline, "runs": args.runs, "medians_s": medians, "ratios": ratios}))


if __name__ == "__main__":
    main()
