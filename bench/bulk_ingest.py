"""Bulk ingest (issue 37, item 4): ``ingest_events`` of a batch against a raw ``executemany``
of the same rows, on PostgreSQL (``make bench``; the server is ``PK_BENCH_POSTGRES_URL``).

A scratch database is migrated, and a handle opened on it (``workers="none"``). Each round
times, in turns (library, raw, library, ...) so that a busy neighbour or a slow disk weighs
on both alike, after ``--warm`` untimed rounds of each:

- **library**: ``pk.ingest_events(conversation, batch)`` of ``--batch`` new events (default
  1,000, the most a batch takes), each with a provider event id and a 200-character body:
  every event sealed under a key of its own, the gate checked, the fences checked by the
  triggers, in one transaction;
- **raw**: the same rows through psycopg, in one transaction: ``executemany`` of the events
  (their bodies as given, no key) and then of their placements, the schema's triggers firing.

Each side writes into a conversation of its own, new rows every round. Reported: the median
milliseconds of a batch on each side, the events per second, and ``bulk_over_raw``, the raw
batch's median time over the library's (its throughput against raw; the target is >= 0.5).
Then a check: every library event accepted, each side's rows all there. ``--strict`` exits 1
when the target is missed; ``--tiny`` (tests/bench) runs a few small rounds. The last line
printed is the figures as JSON (``record.py`` keeps it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
from scratch import ScratchDatabase, open_under, shown_url

from purgekeeper.commands.ingest_batch import IngestStatus, NewEvent
from purgekeeper.schema import migrate
from purgekeeper.schema.db import Database

DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
BATCH = 1_000
ROUNDS = 9
WARM = 2
BODY = "x" * 200
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
TARGET = 0.5  # bulk throughput over raw, at least

RAW_EVENTS = "INSERT INTO events (id, provider_event_id, author, occurred_at, body) VALUES (%s, %s, %s, %s, %s)"
RAW_PLACEMENTS = "INSERT INTO placements (event_id, conversation_id) VALUES (%s, %s)"


def batch_rows(tag: str, size: int) -> list[tuple[str, str, str, dt.datetime, str]]:
    """One batch's events: id, provider id, author, time, body."""
    return [
        (f"{tag}-{n}", f"prov:{tag}-{n}", f"author-{n % 7}", T0 + dt.timedelta(microseconds=n), BODY)
        for n in range(size)
    ]


def library_batch(pk: Any, conversation_id: str, rows: list[tuple[str, str, str, dt.datetime, str]]) -> int:
    given = [NewEvent(author=a, body=b, provider_event_id=p, event_id=i, occurred_at=t) for i, p, a, t, b in rows]
    results = pk.ingest_events(conversation_id, given)
    return sum(result.status == IngestStatus.ACCEPTED for result in results)


def raw_batch(conn: psycopg.Connection[Any], conversation_id: str, rows: list[tuple[Any, ...]]) -> int:
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(RAW_EVENTS, rows)
        cur.executemany(RAW_PLACEMENTS, [(row[0], conversation_id) for row in rows])
    return len(rows)


def timed(call: Any) -> tuple[float, int]:
    began = time.perf_counter()
    done = call()
    return time.perf_counter() - began, done


def measure(url: str, root: Path, size: int, rounds: int, warm: int) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO conversations (id) VALUES ('bulk-lib'), ('bulk-raw')")
        conn.commit()
    pk = open_under(url, root)
    library: list[float] = []
    raw: list[float] = []
    accepted = 0
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for n in range(warm + rounds):
                spent_lib, done = timed(lambda n=n: library_batch(pk, "bulk-lib", batch_rows(f"lib{n}", size)))
                spent_raw, _ = timed(lambda n=n: raw_batch(conn, "bulk-raw", batch_rows(f"raw{n}", size)))
                accepted += done
                if n >= warm:
                    library.append(spent_lib)
                    raw.append(spent_raw)
            stored = {
                side: conn.execute("SELECT count(*) FROM placements WHERE conversation_id = %s", (side,)).fetchone()
                for side in ("bulk-lib", "bulk-raw")
            }
    finally:
        pk.close()
    total = (warm + rounds) * size
    lib_ms, raw_ms = statistics.median(library) * 1000, statistics.median(raw) * 1000
    return {
        "batch": size,
        "rounds": rounds,
        "bulk_ms": round(lib_ms, 2),
        "raw_ms": round(raw_ms, 2),
        "bulk_events_per_s": round(size / lib_ms * 1000),
        "raw_events_per_s": round(size / raw_ms * 1000),
        "bulk_over_raw": round(raw_ms / lib_ms, 3),
        "bulk_over_raw_runs": [round(r / b, 3) for b, r in zip(library, raw, strict=True)],
        "checks_ok": accepted == total and all(row is not None and row[0] == total for row in stored.values()),
    }


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(143)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--batch", type=int, default=BATCH, help="events a batch")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="timed batches a side")
    parser.add_argument("--warm", type=int, default=WARM, help="untimed batches a side first")
    parser.add_argument("--tiny", action="store_true", help="a smoke run: a few small batches")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target is missed")
    args = parser.parse_args(argv)
    if args.tiny:
        args.batch, args.rounds, args.warm = 20, 2, 1
    signal.signal(signal.SIGTERM, _terminate)
    server_url = os.environ.get("PK_BENCH_POSTGRES_URL", DEFAULT_SERVER_URL)
    print(
        f"purgekeeper bulk ingest benchmark: PostgreSQL at {shown_url(server_url)}; batches of {args.batch}; "
        f"{args.rounds} rounds; {os.cpu_count()} CPUs",
        flush=True,
    )
    with (
        tempfile.TemporaryDirectory(prefix="pk-bulk-") as tmp,
        ScratchDatabase(server_url, f"pk_bulk_{os.getpid()}") as scratch,
    ):
        os.environ["PURGEKEEPER_DATA_DIR"] = str(Path(tmp) / "data")
        database = Database(scratch.url)
        try:
            migrate.upgrade(database)
        finally:
            database.dispose()
        figures = measure(scratch.url, Path(tmp), args.batch, args.rounds, args.warm)
    met = figures["bulk_over_raw"] >= TARGET
    print(
        f"| batch | ingest_events | raw executemany | bulk / raw |\n|---|---|---|---|\n"
        f"| {args.batch:,} | {figures['bulk_ms']:.1f} ms ({figures['bulk_events_per_s']:,}/s) "
        f"| {figures['raw_ms']:.1f} ms ({figures['raw_events_per_s']:,}/s) | {figures['bulk_over_raw']:.2f} |"
    )
    print(f"  {'met   ' if met else 'MISSED'} ingest_events >= {TARGET}x a raw executemany")
    print(json.dumps({**figures, "met": met}, sort_keys=True))
    return 1 if not figures["checks_ok"] or (args.strict and not met) else 0


if __name__ == "__main__":
    sys.exit(main())
