"""Scale benchmark of the ledger outside the database and of the hot paths (issue 12), on
PostgreSQL (``make bench``).

For each ledger size (``--sizes``, default 10,000, 100,000 and 1,000,000 rows) a scratch
database is seeded directly, never through ``confirm_purge``: the ledger rows are built in
Python (content purges of one event id each, chained as the library chains them) and loaded
with COPY, with one event tombstone per row (so the 1,000,000-row database holds 1,000,000
event tombstones) and one ``done`` cleanup step per row; the copy outside the database is
written straight from the same rows (``LedgerCopy.append``). Then ``VACUUM ANALYZE``.

Measured at each size (medians of ``--repeat`` calls unless said):

- ``open``: ``purgekeeper.open()`` and ``close()`` of a handle (workers none);
- ``copy append``: what an acceptance spends writing its row outside (``Acceptor.copy_out``, timed
  inside ``purge_conversation`` of an absent id);
- ``gate check``: ``Gate.require_open`` per content call, in one read transaction;
- ``verify``: ``verify_ledger()``, the whole chain (once; it follows the ledger by design);
- ``merge 1000``: a restore that is 1,000 rows behind its copy (the copy gets 1,000 more rows
  the database never saw), merged with ``merge_ledger(<checkpoint dir>)`` (once per size);
- ``sweep``: ``purgekeeper.workers.scheduler.sweep`` with every step ``done`` (one per ledger row),
  against a sweep of a database with no step at all;
- the read and write paths against raw SQL in the same database (psycopg, one transaction
  each, the same statements' shape): ``read_conversation`` of 50 and of 10,000 events
  (raw: the events joined to their placements minus the purged conversations, event
  tombstones and author erasures, and their attachments), ``ingest_event`` (raw: the event and its placement in
  one transaction, the schema's triggers firing; the library seals the body under a key of its own and checks the
  gate, and sends the event, its placement and the head read as one statement), and ``preview_purge`` +
  ``confirm_purge`` of 1,000 selected events of a 20,000-event conversation (ten pairs at most)
  against ``acceptance.baseline_confirm`` of 1,000 other events of it (the same locks, report reads,
  tombstones and ledger row).

A library call and its raw SQL are timed in turns (library, raw, library, ...), after ten
warm-up calls of each (past psycopg's prepare threshold), so that a slow disk or a busy
neighbour weighs on both alike; each load ends with ``VACUUM ANALYZE`` and ``CHECKPOINT``.

Then merge linearity on the smallest size: merges of 1,000 missing rows (``--repeat`` times)
against one merge of 100,000, per row. And the read ratios on SQLite (the embedded default),
against the same statements through ``sqlite3``.

Targets (issue 12): ``open`` at the largest size <= 1.2x the smallest; the merge per row of
100,000 <= 1.2x that of 1,000; reads <= 1.5x raw on PostgreSQL and <= 2x on SQLite; ingest
<= 1.2x and preview+confirm <= 1.3x (issue 37; they were 2x); none of these ratios more than
10% higher at 1,000,000 tombstones than at 10,000 (the absolute figures are printed too); a
sweep over 1,000,000 done steps <= 1.2x one over none (the acceptance bench is ``bench/acceptance.py``). ``--strict``
exits 1 when one is missed. The server is ``PK_BENCH_POSTGRES_URL``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
from acceptance import baseline_confirm, event_ids_of, seed_conversations
from scratch import ScratchDatabase, open_under, shown_url

import purgekeeper
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.schema import ledger, migrate
from purgekeeper.schema.db import Database
from purgekeeper.storage import ledger_copy
from purgekeeper.workers import scheduler

DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
ACCEPTED_AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
COPY_BATCH = ledger_copy.SEGMENT_ROWS
MERGE_SMALL, MERGE_LARGE = 1_000, 100_000
PURGE_EVENTS, PURGE_CONVERSATION_EVENTS = 1_000, 20_000
READ_LABELS = (50, 10_000)  # the figures are named after these
READ_SIZES = list(READ_LABELS)  # the events seeded (``--tiny`` makes them fewer)
GATE_CALLS = 2_000

LEDGER_COLUMNS = (*ledger.HASHED_FIELDS, "prev_hash", "row_hash")


# -- the seeded ledger ----------------------------------------------------------------------------


class Chain:
    """Ledger rows built as the library builds them: content purges of one event id each."""

    def __init__(self, database_id: str) -> None:
        self.head = ledger.Head(0, ledger.GENESIS_HASH, database_id, ACCEPTED_AT)

    def rows(self, count: int, tag: str) -> Iterator[ledger.LedgerEntry]:
        for _ in range(count):
            seq = self.head.seq + 1
            entry = ledger.next_entry(
                self.head,
                purge_id=uuid.uuid4().hex,
                kind="content",
                selectors={"event_ids": [f"{tag}-{seq}"], "provider_event_ids": [], "already_fenced": []},
                scope_digest="0" * 64,
                actor="bench",
                reason="seeded",
                request_id=None,
                idempotency_key=None,
                origin="bench-seed",
                accepted_at=ACCEPTED_AT + dt.timedelta(microseconds=seq),
            )
            self.head = ledger.following(self.head, entry)
            yield entry


def seed_ledger(url: str, copy: ledger_copy.LedgerCopy, chain: Chain, count: int) -> float:
    """COPY ``count`` rows, their tombstones and done steps into the database (triggers off
    for the load: ``session_replication_role = replica``; the head is set once at the end),
    and append the same rows to the copy. Returns the seconds it took."""
    started = time.perf_counter()
    with psycopg.connect(url) as conn:
        conn.execute("SET session_replication_role = replica")
        with conn.cursor() as cur:
            batch: list[ledger.LedgerEntry] = []
            with cur.copy(f"COPY purge_ledger ({', '.join(LEDGER_COLUMNS)}) FROM STDIN") as rows:
                for entry in chain.rows(count, "gone"):
                    fields = {**entry.hashed_fields(), "selectors": ledger.canonical_json(entry.selectors)}
                    rows.write_row([*(fields[name] for name in ledger.HASHED_FIELDS), entry.prev_hash, entry.row_hash])
                    batch.append(entry)
                    if len(batch) == COPY_BATCH:
                        copy.append(batch)
                        batch = []
            if batch:
                copy.append(batch)
            cur.execute(
                "INSERT INTO tombstones (kind, id, purge_id) "
                "SELECT 'event', selectors::jsonb->'event_ids'->>0, purge_id FROM purge_ledger "
                "WHERE origin = 'bench-seed'"
            )
            cur.execute(
                "INSERT INTO cleanup_steps (id, purge_id, kind, status, max_attempts) "
                "SELECT md5(purge_id), purge_id, 'bodies', 'done', 5 FROM purge_ledger WHERE origin = 'bench-seed'"
            )
            cur.execute(
                "UPDATE ledger_head SET seq = %s, head_hash = %s WHERE id = 1", (chain.head.seq, chain.head.head_hash)
            )
        conn.commit()
    settle(url)
    return time.perf_counter() - started


def settle(url: str) -> None:
    """``VACUUM ANALYZE`` and ``CHECKPOINT`` after a load: the planner knows the data, and no
    writing out of the load's dirty pages runs under the measurements."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")


# -- timing ----------------------------------------------------------------------------------------


def timed(call: Callable[[], object]) -> float:
    begin = time.perf_counter()
    call()
    return time.perf_counter() - begin


WARM_CALLS = 10  # past psycopg's prepare threshold (5): both sides run prepared statements


def paired_ms(library: Callable[[], object], raw: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Medians of the library's call and of its raw SQL, taken in turns (library, raw,
    library, ...) so that a disk or a neighbour slowing down weighs on both alike."""
    for _ in range(WARM_CALLS):
        library()
        raw()
    pairs = [(timed(library), timed(raw)) for _ in range(repeat)]
    return statistics.median(p[0] for p in pairs) * 1000, statistics.median(p[1] for p in pairs) * 1000


def median_ms(call: Callable[[], object], repeat: int) -> float:
    for _ in range(WARM_CALLS):  # plans cached and prepared, pages in memory
        call()
    return statistics.median(timed(call) for _ in range(repeat)) * 1000


@contextmanager
def handle(url: str, root: Path) -> Iterator[Purgekeeper]:
    pk = open_under(url, root)
    try:
        yield pk
    finally:
        pk.close()


def open_and_close(url: str, root: Path) -> None:
    with handle(url, root):
        pass


# -- raw SQL, the baselines -----------------------------------------------------------------------

RAW_READ_EVENTS = """
SELECT e.* FROM events e JOIN placements p ON p.event_id = e.id JOIN conversations c ON c.id = p.conversation_id
 WHERE p.conversation_id = %(c)s AND c.state <> 'purged'
   AND NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.kind = 'conversation' AND t.id = c.id)
   AND NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.kind = 'event' AND t.id = e.id)
   AND NOT EXISTS (SELECT 1 FROM author_erasures a WHERE a.author = e.author AND a.window_end > e.occurred_at)
 ORDER BY e.occurred_at, e.id
"""
RAW_READ_ATTACHMENTS = """
SELECT a.*, b.size FROM attachments a JOIN placements p ON p.event_id = a.event_id JOIN blobs b ON b.id = a.blob_id
 WHERE p.conversation_id = %(c)s AND b.state = 'present' ORDER BY a.event_id, a.position
"""


def raw_read(conn: psycopg.Connection[Any], conversation_id: str) -> int:
    with conn.transaction():
        rows = conn.execute(RAW_READ_EVENTS, {"c": conversation_id}).fetchall()
        conn.execute(RAW_READ_ATTACHMENTS, {"c": conversation_id}).fetchall()
    return len(rows)


def raw_ingest(conn: psycopg.Connection[Any], conversation_id: str, event_id: str) -> None:
    with conn.transaction():
        conn.execute(
            "INSERT INTO events (id, author, occurred_at, body) VALUES (%s, 'ada', now(), 'x')",
            (event_id,),
        )
        conn.execute("INSERT INTO placements (event_id, conversation_id) VALUES (%s, %s)", (event_id, conversation_id))


class Counter:
    def __init__(self, prefix: str) -> None:
        self.prefix, self.n = prefix, 0

    def __call__(self) -> str:
        self.n += 1
        return f"{self.prefix}-{self.n}"


# -- one size ---------------------------------------------------------------------------------------


def measure_size(server_url: str, size: int, repeat: int, root: Path) -> dict[str, Any]:
    scratch = ScratchDatabase(server_url, f"pk_scale_{os.getpid()}_{size}")
    with scratch:
        database = Database(scratch.url)
        try:
            migrate.upgrade(database)
            with database.read() as conn:
                database_id = ledger.read_head(conn).database_id
        finally:
            database.dispose()
        copy = ledger_copy.LedgerCopy(root / "ledger", database_id)
        chain = Chain(database_id)
        seeded = seed_ledger(scratch.url, copy, chain, size)
        with psycopg.connect(scratch.url) as conn:
            seed_conversations(conn, ["r50"], READ_SIZES[0])
            seed_conversations(conn, ["r10k"], READ_SIZES[1])
            seed_conversations(conn, ["purge"], PURGE_CONVERSATION_EVENTS)
            seed_conversations(conn, ["ingest"], 1)
        settle(scratch.url)
        print(f"  {size:,} rows seeded in {seeded:.1f} s", flush=True)

        figures: dict[str, Any] = {"rows": size, "seed_s": round(seeded, 1)}
        figures["open_ms"] = median_ms(lambda: open_and_close(scratch.url, root), repeat)
        with handle(scratch.url, root) as pk, psycopg.connect(scratch.url, autocommit=True) as raw:
            figures.update(copy_append_ms(pk, repeat))
            with pk.db.read() as conn:
                started = time.perf_counter()
                for _ in range(GATE_CALLS):
                    pk.gate.require_open(conn)
                figures["gate_check_us"] = (time.perf_counter() - started) / GATE_CALLS * 1e6
            figures["verify_s"] = timed(pk.verify_ledger)
            figures["sweep_ms"] = median_ms(lambda: scheduler.sweep(pk.db, lambda ids: None), repeat)
            for events, conversation in zip(READ_LABELS, ("r50", "r10k"), strict=True):
                calls = repeat * (20 if events < 1000 else 1)
                figures[f"read_{events}_ms"], figures[f"read_{events}_raw_ms"] = paired_ms(
                    lambda c=conversation: pk.read_conversation(c), lambda c=conversation: raw_read(raw, c), calls
                )
            library_id, raw_id = Counter("ingest-lib"), Counter("ingest-raw")
            figures["ingest_ms"], figures["ingest_raw_ms"] = paired_ms(
                lambda: pk.ingest_event("ingest", author="ada", body="x", event_id=library_id()),
                lambda: raw_ingest(raw, "ingest", raw_id()),
                repeat * 20,
            )
            figures.update(preview_confirm(pk, scratch.url, repeat))
            figures["merge_1000_s"] = merge_missing(pk, copy, chain, MERGE_SMALL)
            figures["checks_ok"] = self_check(pk)
        return figures


def self_check(pk: Purgekeeper) -> bool:
    """After the measurements: the ledger verifies, its copy verifies and ends at the same
    row, and the gate is open (the seeded chain, the acceptances and the merge agree)."""
    report = pk.verify_ledger()
    seq, row_hash, problems = pk.copy.verify()
    fine = report.ok and not problems and (seq, row_hash) == (report.rows, report.head_hash)
    if not fine:
        print(f"  CHECK FAILED: ledger {report.problems[:3]}, copy {problems[:3]} at seq {seq}", flush=True)
    return fine and pk.messaging_status().open


def copy_append_ms(pk: Purgekeeper, repeat: int) -> dict[str, float]:
    """Acceptances of absent conversation ids, and the time of their outside copy alone."""
    spent: list[float] = []
    copy_out = pk.acceptance.copy_out

    def timed_copy(acceptance: purgekeeper.Acceptance) -> None:
        begin = time.perf_counter()
        copy_out(acceptance)
        spent.append(time.perf_counter() - begin)

    pk.acceptance.copy_out = timed_copy  # type: ignore[method-assign]
    name = Counter(f"absent-{uuid.uuid4().hex[:6]}")
    try:
        accept_ms = median_ms(lambda: pk.purge_conversation(name(), actor="bench", reason="bench"), repeat * 5)
    finally:
        del pk.acceptance.copy_out  # the instance's wrapper goes: the method again
    return {"accept_ms": accept_ms, "copy_append_ms": statistics.median(spent[1:]) * 1000}


def preview_confirm(pk: Purgekeeper, url: str, repeat: int) -> dict[str, float]:
    """Preview + confirm of 1,000 selected events against the raw transaction of the same
    shape, alternating, each on events of its own (the 10,000-event conversation)."""
    ids = event_ids_of("purge", PURGE_CONVERSATION_EVENTS)
    groups = [ids[start : start + PURGE_EVENTS] for start in range(0, len(ids), PURGE_EVENTS)]
    library, raw = [], []
    with psycopg.connect(url) as conn:
        for index, group in enumerate(groups[: 2 * min(2 * repeat, len(groups) // 2)]):
            if index % 2 == 0:
                scope = purgekeeper.EventScope(event_ids=group)

                def both(scope: purgekeeper.EventScope = scope) -> None:
                    digest = pk.preview_purge(scope).scope_digest
                    pk.confirm_purge(scope, scope_digest=digest, actor="bench", reason="bench")

                library.append(timed(both))
            else:
                raw.append(timed(lambda group=group: baseline_confirm(conn, group)))
    return {
        "preview_confirm_ms": statistics.median(library) * 1000,
        "preview_confirm_raw_ms": statistics.median(raw) * 1000,
    }


def merge_missing(pk: Purgekeeper, copy: ledger_copy.LedgerCopy, chain: Chain, missing: int) -> float:
    """The database ``missing`` rows behind its copy (rows only the copy holds, as after a
    restore of an older backup), merged from the checkpoint directory; returns the seconds."""
    ledger_copy.catch_up(pk.db, copy)  # the raw baselines' rows, which no acceptance of the library copied
    with pk.db.read() as conn:
        chain.head = ledger.read_head(conn)
    rows = list(chain.rows(missing, f"missing-{uuid.uuid4().hex[:6]}"))
    for start in range(0, len(rows), COPY_BATCH):
        copy.append(rows[start : start + COPY_BATCH])
    began = time.perf_counter()
    report = pk.merge_ledger(pk.settings.checkpoint_dir)
    elapsed = time.perf_counter() - began
    if len(report.appended) != missing or report.verbatim != missing or not report.gate.open:
        raise RuntimeError(f"the merge appended {len(report.appended)} of {missing} rows; gate {report.gate}")
    return elapsed


# -- merge linearity and SQLite ------------------------------------------------------------------------


def merge_linearity(server_url: str, repeat: int, root: Path, large: int) -> dict[str, float]:
    scratch = ScratchDatabase(server_url, f"pk_scale_{os.getpid()}_merge")
    with scratch, handle(scratch.url, root) as pk:
        sweep_none = median_ms(lambda: scheduler.sweep(pk.db, lambda ids: None), repeat)  # no step at all
        chain = Chain(pk.database_key)
        small = [merge_missing(pk, pk.copy, chain, MERGE_SMALL) for _ in range(repeat)]
        spent = merge_missing(pk, pk.copy, chain, large)
    per_small = statistics.median(small) / MERGE_SMALL
    per_large = spent / large
    return {
        "sweep_none_ms": sweep_none,
        "merge_1000_per_row_us": per_small * 1e6,
        "merge_large_rows": large,
        "merge_large_per_row_us": per_large * 1e6,
        "merge_per_row_ratio": per_large / per_small,
    }


def sqlite_reads(repeat: int, root: Path) -> dict[str, float]:
    path = root / "sqlite" / "pk.db"
    path.parent.mkdir(parents=True)
    figures: dict[str, float] = {}
    with handle(f"sqlite:///{path}", root / "sqlite") as pk:
        with pk.db.write() as conn:
            for events, conversation in zip(READ_SIZES, ("r50", "r10k"), strict=True):
                conn.exec_driver_sql("INSERT INTO conversations (id) VALUES (?)", (conversation,))
                rows = [
                    (f"{conversation}-e{n:06d}", "ada", f"2026-01-01 00:00:{n % 60:02d}.{n:06d}", "x" * 200)
                    for n in range(events)
                ]
                conn.exec_driver_sql("INSERT INTO events (id, author, occurred_at, body) VALUES (?, ?, ?, ?)", rows)
                conn.exec_driver_sql(
                    "INSERT INTO placements (event_id, conversation_id) VALUES (?, ?)",
                    [(row[0], conversation) for row in rows],
                )
        raw = sqlite3.connect(path)
        try:
            for events, conversation in zip(READ_LABELS, ("r50", "r10k"), strict=True):
                figures[f"sqlite_read_{events}_ms"], figures[f"sqlite_read_{events}_raw_ms"] = paired_ms(
                    lambda c=conversation: pk.read_conversation(c),
                    lambda c=conversation: sqlite_raw_read(raw, c),
                    repeat * (20 if events < 1000 else 3),
                )
        finally:
            raw.close()
    return figures


def sqlite_raw_read(conn: sqlite3.Connection, conversation_id: str) -> int:
    to_sqlite = {"%(c)s": "?"}
    events_sql, attachments_sql = RAW_READ_EVENTS, RAW_READ_ATTACHMENTS
    for old, new in to_sqlite.items():
        events_sql, attachments_sql = events_sql.replace(old, new), attachments_sql.replace(old, new)
    conn.execute("BEGIN")
    try:
        rows = conn.execute(events_sql, (conversation_id,)).fetchall()
        conn.execute(attachments_sql, (conversation_id,)).fetchall()
    finally:
        conn.execute("COMMIT")
    return len(rows)


# -- report -------------------------------------------------------------------------------------------


def ratios(sizes: list[dict[str, Any]], extra: dict[str, float]) -> dict[str, Any]:
    first, last = sizes[0], sizes[-1]
    out: dict[str, Any] = {
        "open_ratio": last["open_ms"] / first["open_ms"],
        "sweep_all_done_over_none": last["sweep_ms"] / extra["sweep_none_ms"],
        "merge_per_row_ratio": extra["merge_per_row_ratio"],
        "sqlite_read_50_ratio": extra["sqlite_read_50_ms"] / extra["sqlite_read_50_raw_ms"],
        "sqlite_read_10000_ratio": extra["sqlite_read_10000_ms"] / extra["sqlite_read_10000_raw_ms"],
    }
    for figures in sizes:
        tag = f"{figures['rows']}"
        for name in ("read_50", "read_10000", "ingest", "preview_confirm"):
            out[f"{name}_ratio@{tag}"] = figures[f"{name}_ms"] / figures[f"{name}_raw_ms"]
    for name in (
        "read_50_ms",
        "read_10000_ms",
        "ingest_ms",
        "preview_confirm_ms",
        "gate_check_us",
        "copy_append_ms",
        "sweep_ms",
    ):
        out[f"{name}_rise"] = last[name] / first[name] - 1
    for name in ("read_50", "read_10000", "ingest", "preview_confirm"):
        out[f"{name}_ratio_rise"] = out[f"{name}_ratio@{last['rows']}"] / out[f"{name}_ratio@{first['rows']}"] - 1
    return out


TARGETS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "open at the largest size <= 1.2x the smallest": lambda r: r["open_ratio"] <= 1.2,
    "merge per row, 100,000 <= 1.2x 1,000": lambda r: r["merge_per_row_ratio"] <= 1.2,
    "read_conversation <= 1.5x raw (PostgreSQL)": lambda r: all(
        v <= 1.5 for k, v in r.items() if k.startswith(("read_50_ratio", "read_10000_ratio"))
    ),
    "read_conversation <= 2x raw (SQLite)": lambda r: (
        r["sqlite_read_50_ratio"] <= 2 and r["sqlite_read_10000_ratio"] <= 2
    ),
    "ingest_event <= 1.2x raw": lambda r: all(v <= 1.2 for k, v in r.items() if k.startswith("ingest_ratio")),
    "preview + confirm of 1,000 <= 1.3x raw": lambda r: all(
        v <= 1.3 for k, v in r.items() if k.startswith("preview_confirm_ratio")
    ),
    "reads, ingest, preview+confirm against raw rise <= 10% at the largest size": lambda r: all(
        r[f"{name}_ratio_rise"] <= 0.10 for name in ("read_50", "read_10000", "ingest", "preview_confirm")
    ),
    "a sweep with every step done (the largest size) <= 1.2x one with no step": lambda r: (
        r["sweep_all_done_over_none"] <= 1.2
    ),
}


def print_table(sizes: list[dict[str, Any]]) -> None:
    columns = [
        ("open", "open_ms", "{:.0f} ms"),
        ("copy append", "copy_append_ms", "{:.2f} ms"),
        ("gate check", "gate_check_us", "{:.0f} us"),
        ("verify", "verify_s", "{:.1f} s"),
        ("merge 1,000", "merge_1000_s", "{:.2f} s"),
        ("sweep (all done)", "sweep_ms", "{:.2f} ms"),
        ("read 50 / raw", ("read_50_ms", "read_50_raw_ms"), "{:.2f} / {:.2f} ms"),
        ("read 10k / raw", ("read_10000_ms", "read_10000_raw_ms"), "{:.1f} / {:.1f} ms"),
        ("ingest / raw", ("ingest_ms", "ingest_raw_ms"), "{:.2f} / {:.2f} ms"),
        ("preview+confirm 1,000 / raw", ("preview_confirm_ms", "preview_confirm_raw_ms"), "{:.0f} / {:.0f} ms"),
    ]
    print("| ledger rows | " + " | ".join(title for title, _key, _fmt in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for figures in sizes:
        cells = []
        for _title, key, fmt in columns:
            values = [figures[k] for k in key] if isinstance(key, tuple) else [figures[key]]
            cells.append(fmt.format(*values))
        print(f"| {figures['rows']:,} | " + " | ".join(cells) + " |")


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(143)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", type=lambda text: [int(n) for n in text.split(",")], default=list(DEFAULT_SIZES))
    parser.add_argument("--repeat", type=int, default=5, help="calls per median")
    parser.add_argument("--merge-large", type=int, default=MERGE_LARGE, help="missing rows of the large merge")
    parser.add_argument("--tiny", action="store_true", help="seed a few hundred events, not tens of thousands")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    if args.tiny:  # a smoke run (tests/bench): every part runs, on a few hundred rows
        global MERGE_SMALL, PURGE_EVENTS, PURGE_CONVERSATION_EVENTS
        READ_SIZES[:] = [50, 300]
        MERGE_SMALL, PURGE_EVENTS, PURGE_CONVERSATION_EVENTS = 100, 50, 1_000
    signal.signal(signal.SIGTERM, _terminate)
    server_url = os.environ.get("PK_BENCH_POSTGRES_URL", DEFAULT_SERVER_URL)
    print(
        f"purgekeeper scale benchmark: PostgreSQL at {shown_url(server_url)}; sizes {args.sizes}; {os.cpu_count()} CPUs"
    )
    sizes = []
    with tempfile.TemporaryDirectory(prefix="pk-scale-") as tmp:
        os.environ["PURGEKEEPER_DATA_DIR"] = str(Path(tmp) / "data")
        for size in args.sizes:
            root = Path(tmp) / f"size-{size}"
            sizes.append(measure_size(server_url, size, args.repeat, root))
            print(json.dumps(sizes[-1], sort_keys=True), flush=True)
        extra = merge_linearity(server_url, args.repeat, Path(tmp) / "merge", args.merge_large)
        extra.update(sqlite_reads(args.repeat, Path(tmp)))
        print(json.dumps(extra, sort_keys=True), flush=True)
    print()
    print_table(sizes)
    found = ratios(sizes, extra)
    print()
    print(json.dumps({k: round(v, 3) for k, v in found.items()}, sort_keys=True))
    met = True
    for name, check in TARGETS.items():
        ok = check(found)
        met = met and ok
        print(f"  {'met   ' if ok else 'MISSED'} {name}")
    checks_ok = all(figures["checks_ok"] for figures in sizes)
    print(json.dumps({"met": met, "checks_ok": checks_ok, "sizes": [f["rows"] for f in sizes]}))
    return 1 if not checks_ok or (args.strict and not met) else 0


if __name__ == "__main__":
    sys.exit(main())
