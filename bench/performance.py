"""The manual's performance page, written from the records in ``bench/results/`` (``make
docs`` builds it through ``docs/hooks.py``; ``record.py`` writes the records).

    ../.venv/bin/python performance.py > performance.md

Every figure on the page comes from a record, with the command that measured it and the
date it ran. A record that ``record.py`` wrote shows its numbers as the script printed them;
a record may also carry, beside what ``record.py`` writes:

- ``headline``: the figures a reader compares, each ``{"figure", "purgekeeper", "baseline",
  "ratio", "target"}`` (text, as measured against the baseline in the same run);
- ``notes``: what the run showed, in a paragraph;
- ``machine``: where it ran;
- ``transcribed``: where figures recorded by hand were taken from (the runs before
  ``record.py`` kept them), in place of a commit.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from compare import figures
from record import RESULTS

HEADLINE = ("figure", "purgekeeper", "baseline", "ratio", "target")
MAX_FIGURES = 40  # a record without a headline shows at most this many of its numbers

INTRO = """\
# Performance

This page is written from the records in `bench/results/` each time the manual is built.
`make bench` runs every script in `bench/` on PostgreSQL (`PK_BENCH_POSTGRES_URL`, by default
`postgresql://postgres@127.0.0.1:5432/postgres`; each script creates and drops its own
scratch database) through `bench/record.py`, which keeps each run's figures in
`bench/results/` with the commit and the machine's load; `bench/compare.py` prints every
figure that moved by more than 10% since the run before. Commit the records that should
appear here.

Each figure is measured against its baseline in the same run, and is the median of 3 runs
unless its row says otherwise; the tests never assert on timings. The machines are small and
shared (2 cores): compare the ratios, and a day's rows with each other, rather than the
absolute figures.
"""


def command(record: dict[str, Any]) -> str:
    return " ".join([f"bench/{record['script']}.py", *record.get("args", [])])


def date(record: dict[str, Any]) -> str:
    return str(record["started"])[:10]


def cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
        *("| " + " | ".join(cell(value) for value in row) + " |" for row in rows),
    ]


def summary(records: list[dict[str, Any]]) -> list[str]:
    """Every headline figure of every record in one table, newest first."""
    rows = [
        (*(line[key] for key in HEADLINE), date(record), f"`{command(record)}`")
        for record in records
        for line in record.get("headline", [])
    ]
    return ["## The figures", "", *table((*HEADLINE, "date", "command"), rows), ""]


def provenance(record: dict[str, Any]) -> str:
    if record.get("transcribed"):
        where = f"recorded by hand: {record['transcribed']}"
    else:
        changed = " (with uncommitted changes)" if record.get("tree_changed") else ""
        where = f"commit `{str(record.get('commit'))[:10]}`{changed}, load {load_average(record)}"
    machine = f"{record['machine']}; " if record.get("machine") else ""
    return f"Ran {date(record)}: {machine}{where}."


def load_average(record: dict[str, Any]) -> str:
    before, after = record.get("load_before") or [], record.get("load_after") or []
    return f"{before[0]:.2f} before and {after[0]:.2f} after" if before and after else "not recorded"


def numbers(record: dict[str, Any]) -> list[str]:
    found = list(figures(record.get("figures", {})))
    shown = table(("figure", "value"), [(f"`{name}`", f"{value:g}") for name, value in found[:MAX_FIGURES]])
    more = ["", f"and {len(found) - MAX_FIGURES} more in the record."] if len(found) > MAX_FIGURES else []
    return [*shown, *more] if found else []


def detail(record: dict[str, Any], path_name: str) -> Iterator[str]:
    yield f"### `{command(record)}`, {date(record)}"
    yield ""
    yield f"{provenance(record)} The record: `bench/results/{path_name}`."
    yield ""
    headline = [tuple(line[key] for key in HEADLINE) for line in record.get("headline", [])]
    yield from table(HEADLINE, headline) if headline else numbers(record)
    yield ""
    if record.get("notes"):
        yield record["notes"]
        yield ""


def render(results: Path = RESULTS) -> str:
    """The page: every headline figure, then each script's runs, newest first (a record's file
    name starts with its time)."""
    paths = sorted(results.glob("*.json"), reverse=True)
    records = [json.loads(path.read_text(encoding="utf-8")) for path in paths]
    if not records:
        return INTRO + "\nNo run is recorded in `bench/results/` yet.\n"
    lines = [INTRO, *summary(records)]
    for script in sorted({record["script"] for record in records}):
        lines += [f"## `bench/{script}.py`", ""]
        for record, path in zip(records, paths, strict=True):
            if record["script"] == script:
                lines += detail(record, path.name)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS)
    print(render(parser.parse_args().results), end="")


if __name__ == "__main__":
    main()
