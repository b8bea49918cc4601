"""What a ``/metrics`` scrape costs with few and with many retention runs (issue 27, item 6),
on PostgreSQL.

Two scratch databases differ only in the number of retention runs they hold: ``--few``
(default 10) and ``--many`` (default 100,000). A run is what an accepted and cleaned
retention run leaves: its ``retention_run`` row in the purge ledger and its two ``done``
cleanup steps (``bodies``, which expired 10 events and found 1 held, and ``attachments``).
They are seeded with ``INSERT ... SELECT ... generate_series``, the schema's triggers firing
(the ledger's chain and head triggers check each row against the one before; the rows' hashes
are stand-ins, so the handles' background audits are stopped: the scrape reads the audit's
state, it never walks the chain), then ``VACUUM ANALYZE``.

A scrape is the whole ``/metrics`` exposition of a handle (``generate_latest`` of
``purgekeeper.commands.web.metrics.registry_for``: its read transaction, every statement, the rendering),
timed in turns (few, many, few, ...) after ``WARM`` untimed scrapes of each, ``--repeat``
pairs a run, medians of ``--runs`` runs (each the median of its pairs). Beside the time: the
statements one scrape runs, and the rows its statements read (the scan nodes' actual rows
of each statement, returned or dropped by a filter, run again under ``EXPLAIN (ANALYZE, FORMAT
JSON)`` with its parameters).

Target (issue 27, item 6): a scrape with ``--many`` runs <= 1.2x one with ``--few``.
``--strict`` exits 1 when it is missed. The server is ``PK_BENCH_POSTGRES_URL``; the
scratch databases are dropped at the end. The last line printed is the figures as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
from prometheus_client import generate_latest
from scratch import ScratchDatabase, open_under, shown_url
from sqlalchemy import event

from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.web import metrics
from purgekeeper.schema import migrate
from purgekeeper.schema.db import Database

DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
SIDES = ("few", "many")
WARM = 10
TARGET_RATIO = 1.2
EXPIRED_EACH, HELD_EACH = 10, 1

SEED_LEDGER = """
INSERT INTO purge_ledger (seq, purge_id, kind, selectors, scope_digest, actor, reason, accepted_at,
                          prev_hash, row_hash)
SELECT h.seq + n, md5('run:' || n), 'retention_run', '{"policy_id":"bench"}', md5('scope:' || n), 'bench',
       'scrape benchmark', now(),
       CASE WHEN n = 1 THEN h.head_hash ELSE encode(sha256(convert_to('run:' || (n - 1), 'UTF8')), 'hex') END,
       encode(sha256(convert_to('run:' || n, 'UTF8')), 'hex')
  FROM ledger_head AS h, generate_series(1, %(runs)s) AS n
"""
SEED_STEPS = """
INSERT INTO cleanup_steps (id, purge_id, kind, status, attempts, max_attempts, removed, held)
SELECT md5('step:' || n || ':' || k), md5('run:' || n), k, 'done', 1, 5,
       CASE WHEN k = 'bodies' THEN %(expired)s ELSE 0 END, CASE WHEN k = 'bodies' THEN %(held)s ELSE 0 END
  FROM generate_series(1, %(runs)s) AS n, unnest(ARRAY['bodies', 'attachments']) AS k
"""


def seed(url: str, runs: int) -> None:
    with psycopg.connect(url) as conn:
        conn.execute(SEED_LEDGER, {"runs": runs})
        conn.execute(SEED_STEPS, {"runs": runs, "expired": EXPIRED_EACH, "held": HELD_EACH})
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


@contextlib.contextmanager
def handle(url: str, root: Path) -> Iterator[Purgekeeper]:
    pk = open_under(url, root)
    pk.gate.stop_audit()  # the seeded hashes are stand-ins; a scrape reads the audit's state only
    try:
        yield pk
    finally:
        pk.close()


def scrape(pk: Purgekeeper) -> bytes:
    return generate_latest(metrics.registry_for(pk))


def timed(pk: Purgekeeper) -> float:
    begin = time.perf_counter()
    scrape(pk)
    return time.perf_counter() - begin


# -- statements and rows ------------------------------------------------------------------------


def statements_of_a_scrape(pk: Purgekeeper) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        seen.append((statement, parameters))

    event.listen(pk.db.engine, "before_cursor_execute", record)
    try:
        scrape(pk)
    finally:
        event.remove(pk.db.engine, "before_cursor_execute", record)
    return [(s, p) for s, p in seen if s.lstrip().upper().startswith(("SELECT", "WITH"))]


def rows_read(pk: Purgekeeper, statements: list[tuple[str, Any]]) -> int:
    """The rows the scan nodes of the statements read, run again under EXPLAIN ANALYZE."""
    total = 0
    with pk.db.engine.connect() as conn:
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        for statement, parameters in statements:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters)
            total += _scanned(cursor.fetchone()[0][0]["Plan"])
        conn.rollback()
    return total


def _scanned(plan: dict[str, Any]) -> int:
    """The rows a plan's scans read: those they returned and those their filters dropped."""
    own = 0
    if "Scan" in plan["Node Type"]:
        kept = (
            plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0) + plan.get("Rows Removed by Index Recheck", 0)
        )
        own = int(kept * plan["Actual Loops"])
    return own + sum(_scanned(child) for child in plan.get("Plans", []))


# -- the bench ----------------------------------------------------------------------------------


def one_run(handles: dict[str, Purgekeeper], repeat: int, run: int) -> dict[str, float]:
    order = SIDES if run % 2 == 0 else tuple(reversed(SIDES))
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for _ in range(repeat):
        for side in order:
            times[side].append(timed(handles[side]))
    return {side: statistics.median(times[side]) for side in SIDES}


def measure(handles: dict[str, Purgekeeper], runs: int, repeat: int) -> list[dict[str, float]]:
    for _ in range(WARM):
        for side in SIDES:
            scrape(handles[side])
    results = []
    for run in range(runs):
        results.append(one_run(handles, repeat, run))
        few, many = results[-1]["few"], results[-1]["many"]
        print(f"  run {run + 1}: few {few * 1000:.2f} ms, many {many * 1000:.2f} ms, {many / few:.2f}x", flush=True)
    return results


def report(results: list[dict[str, float]], counts: dict[str, int], handles: dict[str, Purgekeeper]) -> dict[str, Any]:
    statements = {side: statements_of_a_scrape(handles[side]) for side in SIDES}
    read = {side: rows_read(handles[side], statements[side]) for side in SIDES}
    ms = {side: statistics.median(r[side] for r in results) * 1000 for side in SIDES}
    ratio = statistics.median(r["many"] / r["few"] for r in results)
    print(f"\n{'retention runs':>15} {'scrape ms':>10} {'statements':>11} {'rows read':>10}")
    for side in SIDES:
        print(f"{counts[side]:>15,} {ms[side]:>10.2f} {len(statements[side]):>11} {read[side]:>10,}")
    met = ratio <= TARGET_RATIO
    print(f"\nmany / few: {ratio:.2f}x (median of the runs' ratios); target <= {TARGET_RATIO}x: "
          f"{'met' if met else 'MISSED'}")  # fmt: skip
    return {
        "runs_few": counts["few"],
        "runs_many": counts["many"],
        "scrape_few_ms": ms["few"],
        "scrape_many_ms": ms["many"],
        "ratios": [r["many"] / r["few"] for r in results],
        "ratio": ratio,
        "statements_few": len(statements["few"]),
        "statements_many": len(statements["many"]),
        "rows_read_few": read["few"],
        "rows_read_many": read["many"],
        "target_met": met,
    }


def bench(server_url: str, directory: Path, counts: dict[str, int], runs: int, repeat: int) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        handles = {}
        for side in SIDES:
            scratch = stack.enter_context(ScratchDatabase(server_url, f"pk_scrape_{os.getpid()}_{side}"))
            database = Database(scratch.url)
            try:
                migrate.upgrade(database)
            finally:
                database.dispose()
            started = time.perf_counter()
            seed(scratch.url, counts[side])
            print(f"  seeded {counts[side]:,} runs in {time.perf_counter() - started:.1f} s", flush=True)
            handles[side] = stack.enter_context(handle(scratch.url, directory / side))
        results = measure(handles, runs, repeat)
        return report(results, counts, handles)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds the with blocks: the scratch databases are dropped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of --repeat pairs of scrapes")
    parser.add_argument("--repeat", type=int, default=30, help="pairs of scrapes a run")
    parser.add_argument("--few", type=int, default=10, help="retention runs of the small database")
    parser.add_argument("--many", type=int, default=100_000, help="retention runs of the large database")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target is missed")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    server_url = os.environ.get("PK_BENCH_POSTGRES_URL", DEFAULT_SERVER_URL)
    print(f"server {shown_url(server_url)}; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    with tempfile.TemporaryDirectory(prefix="pk-scrape-") as directory:
        figures = bench(server_url, Path(directory), {"few": args.few, "many": args.many}, args.runs, args.repeat)
    print(json.dumps(figures))
    return 1 if args.strict and not figures["target_met"] else 0


if __name__ == "__main__":
    sys.exit(main())
