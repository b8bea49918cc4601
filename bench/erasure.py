"""Author erasure benchmark (issue 13), on PostgreSQL (``make bench``).

One scratch database is seeded directly (raw SQL, the schema's triggers off while loading:
``session_replication_role = replica``), then ``VACUUM ANALYZE``:

- per repeat, a *large* author with ``--events`` events (default 100,000) spread over
  ``--conversations`` conversations of their own (default 1,000), and a *small* author with
  10 events in one conversation;
- per repeat, two more large authors: one erased and cleaned by the library, the other the
  baseline of the bodies figure.

Measured (medians of ``--repeat`` runs):

1. **acceptance latency**: ``erase_author`` of a large author against that of a small one,
   in turns (large, small, large, ...); each preview is made before, outside the timing.
2. **body removal rows/s**: the bodies step of a large author's erasure (``runner.run_step``:
   it tombstones the events and NULLs bodies, admission payloads, run outputs, derivative
   payloads and attachment names, ``DEFAULT_BATCH_SIZE`` events to a committed batch) against
   a plain ``UPDATE events SET body = NULL WHERE id = ANY(batch)`` of another large author's
   events, the same batch size, each batch committed, the ids read beforehand.
3. **read_conversation with 10,000 erased authors**: two more scratch databases with the same
   rows: conversations of 50 and 1,000 events by authors nobody erased, and 10,000 authors
   with one event each elsewhere; one of them also holds those 10,000 authors' erasures.
   Reads in turns, one database then the other.

Targets (issue 13): acceptance at 100,000 events <= 1.5x at 10; bodies >= 0.5x the plain
UPDATE; reads with 10,000 erased authors <= 1.1x with none. ``--strict`` exits 1 when one is
missed. The server is ``PK_BENCH_POSTGRES_URL``. The last line printed is the figures as JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from scale import handle, settle, timed
from scratch import ScratchDatabase, shown_url

from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.schema import migrate
from purgekeeper.schema.db import Database
from purgekeeper.workers import cleanup, runner

DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
SMALL_EVENTS = 10
ERASED_AUTHORS = 10_000
READ_SIZES = (50, 1_000)
WARM_READS = 10
POLICY = runner.Policy(lease=dt.timedelta(minutes=10))


@contextmanager
def scratch_database(server_url: str, tag: str) -> Iterator[str]:
    with ScratchDatabase(server_url, f"pk_erasure_{os.getpid()}_{tag}") as scratch:
        database = Database(scratch.url)
        try:
            migrate.upgrade(database)
        finally:
            database.dispose()
        yield scratch.url


# -- seeding (raw SQL, triggers off) ------------------------------------------------------------


def seed_author(conn: psycopg.Connection[Any], author: str, events: int, conversations: int) -> None:
    """``events`` events by ``author``, one minute apart, round-robin over ``conversations``
    conversations named after the author."""
    conn.execute(
        "INSERT INTO conversations (id, kind, state, version) "
        "SELECT %(a)s || '-c' || n, 'conversation', 'active', 1 FROM generate_series(0, %(c)s - 1) n",
        {"a": author, "c": conversations},
    )
    conn.execute(
        "INSERT INTO events (id, author, occurred_at, body) "
        "SELECT %(a)s || '-e' || n, %(a)s, %(t0)s + n * interval '1 minute', 'body ' || n "
        "FROM generate_series(0, %(n)s - 1) n",
        {"a": author, "n": events, "t0": T0},
    )
    conn.execute(
        "INSERT INTO placements (event_id, conversation_id) "
        "SELECT %(a)s || '-e' || n, %(a)s || '-c' || (n %% %(c)s) FROM generate_series(0, %(n)s - 1) n",
        {"a": author, "n": events, "c": conversations},
    )


def seed_erased_authors(conn: psycopg.Connection[Any], count: int, *, erased: bool) -> None:
    """``count`` authors, each with one event in a conversation of their own; ``erased``
    also writes their erasures (the only difference between the two read databases)."""
    seed_author(conn, "gone", count, count)
    conn.execute("UPDATE events SET author = 'gone-' || substr(id, 7) WHERE author = 'gone'")  # gone-e<n> by gone-<n>
    if erased:
        conn.execute(
            "INSERT INTO author_erasures (author, purge_id, window_end, close_author) "
            "SELECT 'gone-' || n, md5('gone' || n), now(), true FROM generate_series(0, %(n)s - 1) n",
            {"n": count},
        )


def loading(url: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(url, autocommit=True)
    conn.execute("SET session_replication_role = replica")
    return conn


# -- 1. acceptance ------------------------------------------------------------------------------


def erase_timed(pk: Purgekeeper, author: str) -> float:
    digest = pk.preview_author_erasure(author).scope_digest
    return timed(lambda: pk.erase_author(author, scope_digest=digest, actor="bench", reason="erasure benchmark"))


def acceptance(pk: Purgekeeper, repeat: int) -> dict[str, float]:
    erase_timed(pk, "warm-small")  # plans cached, pages in
    large, small = [], []
    for n in range(repeat):
        large.append(erase_timed(pk, f"large-{n}"))
        small.append(erase_timed(pk, f"small-{n}"))
    return {
        "accept_large_ms": statistics.median(large) * 1000,
        "accept_small_ms": statistics.median(small) * 1000,
    }


# -- 2. body removal ----------------------------------------------------------------------------


def bodies_step(pk: Purgekeeper, author: str) -> float:
    digest = pk.preview_author_erasure(author).scope_digest
    purge_id = pk.erase_author(author, scope_digest=digest, actor="bench", reason="bodies benchmark").purge_id
    [step] = [s for s in pk.status(purge_id).steps if s.kind == "bodies"]
    spent = timed(lambda: runner.run_step(pk.step_context(), step.id, policy=POLICY))
    done = [s.status for s in pk.status(purge_id).steps if s.kind == "bodies"]
    assert done == ["done"], pk.status(purge_id)
    return spent


def plain_update(url: str, author: str, batch: int) -> float:
    with psycopg.connect(url) as conn:
        ids = [
            row[0]
            for row in conn.execute("SELECT id FROM events WHERE author = %s ORDER BY occurred_at, id", (author,))
        ]
        conn.commit()
        begin = time.perf_counter()
        for start in range(0, len(ids), batch):
            conn.execute("UPDATE events SET body = NULL WHERE id = ANY(%s)", (ids[start : start + batch],))
            conn.commit()
        return time.perf_counter() - begin


def removal(pk: Purgekeeper, url: str, repeat: int, events: int) -> dict[str, float]:
    library, plain = [], []
    for n in range(repeat):
        library.append(events / bodies_step(pk, f"clean-{n}"))
        plain.append(events / plain_update(url, f"plain-{n}", cleanup.DEFAULT_BATCH_SIZE))
    return {"bodies_rows_per_s": statistics.median(library), "plain_update_rows_per_s": statistics.median(plain)}


# -- 3. reads with erased authors ---------------------------------------------------------------


def seed_reads(url: str, *, erased: bool) -> None:
    with loading(url) as conn:
        for size in READ_SIZES:
            seed_author(conn, f"reader{size}", size, 1)  # one conversation: reader<size>-c0
        seed_erased_authors(conn, ERASED_AUTHORS, erased=erased)
    settle(url)


def reads(server_url: str, root: Path, repeat: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    with scratch_database(server_url, "none") as none_url, scratch_database(server_url, "many") as many_url:
        seed_reads(none_url, erased=False)
        seed_reads(many_url, erased=True)
        with handle(none_url, root / "none") as without, handle(many_url, root / "many") as with_many:
            for size in READ_SIZES:
                conversation = f"reader{size}-c0"
                assert len(without.read_conversation(conversation)) == len(with_many.read_conversation(conversation))
                for _ in range(WARM_READS):
                    without.read_conversation(conversation)
                    with_many.read_conversation(conversation)
                pairs = [
                    (
                        timed(lambda c=conversation: without.read_conversation(c)),
                        timed(lambda c=conversation: with_many.read_conversation(c)),
                    )
                    for _ in range(repeat * 20)
                ]
                figures[f"read_{size}_ms"] = statistics.median(p[0] for p in pairs) * 1000
                figures[f"read_{size}_erased_ms"] = statistics.median(p[1] for p in pairs) * 1000
    return figures


# -- the run ------------------------------------------------------------------------------------


TARGETS: dict[str, Callable[[dict[str, float]], bool]] = {
    "acceptance at 100,000 events <= 1.5x at 10": lambda r: r["accept_ratio"] <= 1.5,
    "bodies step >= 0.5x a plain batched UPDATE": lambda r: r["bodies_ratio"] >= 0.5,
    "read_conversation with 10,000 erased authors <= 1.1x none": lambda r: all(
        r[f"read_{size}_ratio"] <= 1.1 for size in READ_SIZES
    ),
}


def measure(server_url: str, root: Path, repeat: int, events: int, conversations: int) -> dict[str, float]:
    with scratch_database(server_url, "main") as url:
        with loading(url) as conn:
            seed_author(conn, "warm-small", SMALL_EVENTS, 1)
            for n in range(repeat):
                seed_author(conn, f"large-{n}", events, conversations)
                seed_author(conn, f"small-{n}", SMALL_EVENTS, 1)
                seed_author(conn, f"clean-{n}", events, conversations)
                seed_author(conn, f"plain-{n}", events, conversations)
        settle(url)
        with handle(url, root / "main") as pk:
            figures = acceptance(pk, repeat)
            figures |= removal(pk, url, repeat, events)
    figures |= reads(server_url, root, repeat)
    figures["accept_ratio"] = figures["accept_large_ms"] / figures["accept_small_ms"]
    figures["bodies_ratio"] = figures["bodies_rows_per_s"] / figures["plain_update_rows_per_s"]
    for size in READ_SIZES:
        figures[f"read_{size}_ratio"] = figures[f"read_{size}_erased_ms"] / figures[f"read_{size}_ms"]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--events", type=int, default=100_000, help="events of each large author")
    parser.add_argument("--conversations", type=int, default=1_000, help="conversations of each large author")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    server_url = os.environ.get("PK_BENCH_POSTGRES_URL", DEFAULT_SERVER_URL)
    print(
        f"server {shown_url(server_url)}; {args.events} events over {args.conversations} conversations", file=sys.stderr
    )
    with tempfile.TemporaryDirectory(prefix="pk-erasure-") as directory:
        figures = measure(server_url, Path(directory), args.repeat, args.events, args.conversations)
    met = {name: check(figures) for name, check in TARGETS.items()}
    print(
        f"acceptance: {figures['accept_large_ms']:.1f} ms at {args.events} events, "
        f"{figures['accept_small_ms']:.1f} ms at {SMALL_EVENTS}: {figures['accept_ratio']:.2f}x"
    )
    print(
        f"bodies: {figures['bodies_rows_per_s']:.0f} rows/s, plain UPDATE {figures['plain_update_rows_per_s']:.0f}"
        f" rows/s: {figures['bodies_ratio']:.2f}x"
    )
    for size in READ_SIZES:
        print(
            f"read {size}: {figures[f'read_{size}_ms']:.2f} ms, with {ERASED_AUTHORS} erased authors "
            f"{figures[f'read_{size}_erased_ms']:.2f} ms: {figures[f'read_{size}_ratio']:.2f}x"
        )
    for name, ok in met.items():
        print(f"  {'met' if ok else 'MISSED'}: {name}")
    print(json.dumps({**figures, "targets_met": all(met.values())}))
    return 1 if args.strict and not all(met.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
