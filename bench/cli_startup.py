"""How long purgectl takes to answer, against a baseline commit, in the same run (issue 26,
item 7): ``purgectl --help``, ``status`` of a purge and ``list`` on an initialised SQLite
database holding three conversation purges, each run as a whole process (its wall time, and its CPU time: user plus
system, steadier on a shared machine), and the import time of ``purgekeeper.commands.cli`` as ``python -X
importtime`` reports it.

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
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
SEEDED = 3  # conversation purges in each database, so that `status` and `list` show real rows


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
    """The caller's environment without its purgekeeper settings, and without
    ``PYTHONDONTWRITEBYTECODE``: both trees run as an installed ``purgectl`` does, from their
    modules' cached bytecode (which the seeding writes), not compiling every module again."""
    dropped = ("PYTHONDONTWRITEBYTECODE",)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PURGEKEEPER_") and k not in dropped}
    return {**env, "PYTHONPATH": str(tree), "PURGEKEEPER_DATA_DIR": str(data_dir)}


def cli_module(tree: Path) -> str:
    """The CLI's module in ``tree``: a baseline from before the one import name has it at the top."""
    return "purgekeeper.commands.cli" if (tree / "purgekeeper").is_dir() else "commands.cli"


def seed(env: dict[str, str], tree: Path) -> dict[str, list[str]]:
    """Initialise the tree's database and accept ``SEEDED`` purges of absent conversations;
    the commands to time: ``--help``, ``status`` of the first purge, and ``list``."""

    def purgectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", cli_module(tree), *args], env=env, cwd=tree, capture_output=True,
                              text=True, check=False)  # fmt: skip

    purgectl("init").check_returncode()
    purge_ids = []
    for n in range(SEEDED):
        asked = ["purge-conversation", f"bench-{n}", "--actor", "bench", "--reason", "start-up", "--json"]
        done = purgectl(*asked)
        if done.returncode != 0:  # this tree refuses an unknown id without --reserve-absent (issue 26)
            done = purgectl(*asked, "--reserve-absent")
        done.check_returncode()
        purge_ids.append(json.loads(done.stdout)["purge_id"])
    return {"help": ["--help"], "status": ["status", purge_ids[0]], "list": ["list"]}


def whole_process(env: dict[str, str], tree: Path, args: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one ``purgectl`` process. The CPU time is
    the steadier figure on a shared machine: another process's load stretches the wall time."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run([sys.executable, "-m", cli_module(tree), *args], env=env, cwd=tree, capture_output=True, check=False)
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def import_time(env: dict[str, str], tree: Path) -> float:
    """Seconds for ``import purgekeeper.commands.cli``: the cumulative figure of its line in -X importtime."""
    module = cli_module(tree)
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], env=env, cwd=tree,
                          capture_output=True, text=True, check=True)  # fmt: skip
    line = next(line for line in done.stderr.splitlines() if re.search(rf"\|\s*{re.escape(module)}$", line))
    return int(line.split("|")[1]) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="The commit to compare with (e.g. the landed code).")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with worktree(args.baseline) as baseline, tempfile.TemporaryDirectory(prefix="pk-cli-") as scratch:
        trees = {"this": REPOSITORY, "baseline": baseline}
        envs = {name: environment(tree, Path(scratch) / name) for name, tree in trees.items()}
        commands = {name: seed(envs[name], tree) for name, tree in trees.items()}
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
        for run in range(args.runs):
            order = list(trees) if run % 2 == 0 else list(reversed(trees))
            for name in order:
                tree, env = trees[name], envs[name]
                samples[name].setdefault("import", []).append(import_time(env, tree))
                for figure, command in commands[name].items():
                    wall, cpu = whole_process(env, tree, command)
                    samples[name].setdefault(figure, []).append(wall)
                    samples[name].setdefault(f"{figure} cpu", []).append(cpu)
    medians = {name: {figure: statistics.median(values) for figure, values in figures.items()}
               for name, figures in samples.items()}  # fmt: skip
    for figure in medians["this"]:
        this, base = medians["this"][figure], medians["baseline"][figure]
        print(f"{figure:7} this {this * 1000:7.0f} ms   baseline {base * 1000:7.0f} ms   ratio {this / base:.2f}")
    ratios = {figure: medians["this"][figure] / medians["baseline"][figure] for figure in medians["this"]}
    print(json.dumps({"baseline": args.baseline, "runs": args.runs, "medians_s": medians, "ratios": ratios}))


if __name__ == "__main__":
    main()
