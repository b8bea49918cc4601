"""Every figure that moved by more than 10% between two runs of a benchmark (``make bench``
records them in ``bench/results/``, see ``record.py``).

    ../.venv/bin/python compare.py                  # each script's newest run against the one before
    ../.venv/bin/python compare.py OLD.json NEW.json
    ../.venv/bin/python compare.py --threshold 0.05

A figure is a number in a run's final JSON object, named by its path (``attachments.ratio``,
``runs.2.rows_per_s``); flags (true/false) and strings are not figures. A figure is listed
when ``|new / old - 1|`` exceeds the threshold, or when it is in one run and not the other.
The commits and load averages of both runs are printed with them: a move on a busy machine is
weaker evidence than one on a quiet machine. Exit 0 whether or not anything moved (this
reports; it does not judge), 2 when there is nothing to compare.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from record import RESULTS

THRESHOLD = 0.10


def figures(value: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """The numbers in ``value``, each with its dotted path."""
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield prefix, float(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from figures(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from figures(item, f"{prefix}.{index}" if prefix else str(index))


def moved(old: dict[str, Any], new: dict[str, Any], threshold: float) -> list[str]:
    """One line per figure that moved by more than ``threshold``, or that only one run has."""
    before, after = dict(figures(old["figures"])), dict(figures(new["figures"]))
    lines = []
    for name in sorted(before.keys() | after.keys()):
        if name not in after:
            lines.append(f"  {name}: {before[name]:g} -> (gone)")
        elif name not in before:
            lines.append(f"  {name}: (new) -> {after[name]:g}")
        elif before[name] == 0:
            if after[name] != 0:
                lines.append(f"  {name}: 0 -> {after[name]:g}")
        elif abs(after[name] / before[name] - 1) > threshold:
            change = (after[name] / before[name] - 1) * 100
            lines.append(f"  {name}: {before[name]:g} -> {after[name]:g} ({change:+.0f}%)")
    return lines


def describe(record: dict[str, Any], path: Path) -> str:
    load = ", ".join(f"{x:.2f}" for x in record.get("load_before", ()))
    changed = " (with changes)" if record.get("tree_changed") else ""
    return f"{path.name}: commit {str(record.get('commit', '?'))[:10]}{changed}, load before {load}"


def latest_pairs(results: Path) -> list[tuple[Path, Path]]:
    """Each script's two newest records (the names sort by time)."""
    by_script: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(results.glob("*.json")):
        by_script[path.stem.split("-", 1)[1]].append(path)
    return [(paths[-2], paths[-1]) for _, paths in sorted(by_script.items()) if len(paths) >= 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", type=Path, help="Two records, older first (default: see above).")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--threshold", type=float, default=THRESHOLD, help="The relative move to report (0.10).")
    options = parser.parse_args()
    if options.runs and len(options.runs) != 2:
        parser.error("give two records, or none")
    pairs = [tuple(options.runs)] if options.runs else latest_pairs(options.results)
    if not pairs:
        print(f"nothing to compare: no script has two records in {options.results}", file=sys.stderr)
        sys.exit(2)
    for old_path, new_path in pairs:
        old, new = (json.loads(path.read_text(encoding="utf-8")) for path in (old_path, new_path))
        lines = moved(old, new, options.threshold)
        print(f"{new.get('script', new_path.stem)}: {len(lines)} figure(s) moved by more than {options.threshold:.0%}")
        print(f"  before {describe(old, old_path)}\n  after  {describe(new, new_path)}")
        print("\n".join(lines) if lines else "  (none)")


if __name__ == "__main__":
    main()
