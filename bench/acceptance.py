"""Acceptance benchmark of purge confirmation on PostgreSQL (``make bench``).

What it measures, in each of ``--runs`` runs (default 3), on fresh data every run:

(a) ``purgekeeper``: ``confirm_purge`` of 10-event content purges (``EventScope(event_ids=...)``)
    from 8 threads (``--threads``), 25 each (``--per-thread``). The previews are made beforehand
    and are not timed; only the ``confirm_purge`` call is. Each thread purges disjoint events of
    its own conversation, so the threads contend only on the ledger head, as every acceptance
    does. Confirmations/s is the count over the window from the threads' common start to the
    last call's end; p50/p95 are of the per-call latencies (under that contention).
(b) ``baseline``, in the same run: as many fresh 10-event groups, from 8 threads, each a plain
    psycopg transaction on a dedicated connection, of the same shape as the library's (12
    statements): lock the events' conversations FOR UPDATE in id order (one statement), lock
    the events FOR UPDATE with their fence flags, the report reads (placements,
    admissions with their runs, non-terminal runs, attachments, derivatives with their
    sources) as plain SELECTs and a SHA-256 over what they return, insert the 10 event and 10
    provider-event fences, insert the cleanup step, bump the conversation version, lock the
    ledger head FOR UPDATE with the database clock, compute the row hash, insert the ledger
    row (the database's chain trigger moves the head, for both sides), commit. Both sides
    append to the same hash chain, which is verified at the end.
    Then, for information, the same on 1 thread per side (latency without contention).
(c) The acceptance latency of ``purge_conversation`` on a 10-event conversation and on a
    100,000-event one (one of each per run, single-threaded, nothing else running).

Both sides run against the same scratch database, with the server's ``synchronous_commit``
and READ COMMITTED; the library is opened with ``workers="none"``, so no cleanup runs during
the measurement. The data are seeded with ``INSERT ... SELECT ... FROM generate_series`` (the
schema's triggers fire), then ``VACUUM ANALYZE`` and ``CHECKPOINT`` run; an untimed ``VACUUM
ANALYZE`` also precedes each run, so the planner knows the tombstones of the runs before (as
autovacuum would in a live database). The side that goes first alternates between runs.

Figures are reported per run, then as the median of the runs; each ratio is taken within a run
(both sides from the same run) and the median of those ratios is reported.

Targets: throughput >= 0.5x the baseline; p50 latency (8 threads) <= 2x the baseline; the
100,000-event over the 10-event ``purge_conversation`` latency <= 1.5. ``--strict`` exits 1 when
one is missed; otherwise the exit status reports only errors.

The server is ``PK_BENCH_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``);
the script creates ``pk_bench_<pid>`` there and drops it at the end, also on failure or SIGTERM.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import hashlib
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
from scratch import ScratchDatabase, open_under, shown_url

import purgekeeper
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.schema import migrate
from purgekeeper.schema.db import Database

DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
GROUP_SIZE = 10
LARGE_EVENTS = 100_000
SMALL_EVENTS = 10
SEED_CHUNK = 2_000  # placements per transaction for the large conversations
WARMUP_GROUPS_PER_THREAD = 2
ACTIVE_RUN_STATUSES = ("queued", "running", "waiting")
TARGET_THROUGHPUT_RATIO = 0.5
TARGET_P50_RATIO = 2.0
TARGET_SIZE_RATIO = 1.5
GENESIS_HASH = "0" * 64


# -- seeding ------------------------------------------------------------------------------------


def event_ids_of(conversation_id: str, count: int) -> list[str]:
    """The ids that :func:`seed_conversations` gives the events of a conversation."""
    return [f"{conversation_id}-e{n:06d}" for n in range(count)]


def seed_conversations(conn: psycopg.Connection[Any], conversation_ids: Sequence[str], events_each: int) -> None:
    """Conversations, then their events, then the placements, in one transaction."""
    ids = list(conversation_ids)
    conn.execute("INSERT INTO conversations (id) SELECT unnest(%s::text[])", (ids,))
    conn.execute(
        """
        INSERT INTO events (id, provider_event_id, author, occurred_at, body)
        SELECT c || '-e' || lpad(n::text, 6, '0'), 'prov:' || c || '-e' || lpad(n::text, 6, '0'),
               'author-' || (n %% 7), timestamptz '2026-01-01 00:00:00+00' + n * interval '1 second',
               repeat('x', 200)
          FROM unnest(%s::text[]) AS c, generate_series(0, %s - 1) AS n
        """,
        (ids, events_each),
    )
    conn.execute(
        """
        INSERT INTO placements (event_id, conversation_id)
        SELECT c || '-e' || lpad(n::text, 6, '0'), c
          FROM unnest(%s::text[]) AS c, generate_series(0, %s - 1) AS n
        """,
        (ids, events_each),
    )
    conn.commit()


def seed_large_conversation(url: str, conversation_id: str, events_count: int) -> float:
    """One large conversation; its placements go in in chunks of ``SEED_CHUNK`` per transaction
    (each placement's trigger bumps the conversation's version; see the closing note)."""
    started = time.perf_counter()
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO conversations (id) VALUES (%s)", (conversation_id,))
        conn.execute(
            """
            INSERT INTO events (id, provider_event_id, author, occurred_at, body)
            SELECT %s || '-e' || lpad(n::text, 6, '0'), 'prov:' || %s || '-e' || lpad(n::text, 6, '0'),
                   'author-' || (n %% 7), timestamptz '2026-01-01 00:00:00+00' + n * interval '1 second',
                   repeat('x', 200)
              FROM generate_series(0, %s - 1) AS n
            """,
            (conversation_id, conversation_id, events_count),
        )
        conn.commit()
        for low in range(0, events_count, SEED_CHUNK):
            high = min(low + SEED_CHUNK, events_count) - 1
            conn.execute(
                """
                INSERT INTO placements (event_id, conversation_id)
                SELECT %s || '-e' || lpad(n::text, 6, '0'), %s FROM generate_series(%s::int, %s::int) AS n
                """,
                (conversation_id, conversation_id, low, high),
            )
            conn.commit()
    return time.perf_counter() - started


# -- the baseline: one plain psycopg transaction of the same shape --------------------------------


def _canonical_json(value: Any) -> str:
    def default(item: Any) -> str:
        if isinstance(item, dt.datetime):
            return item.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        raise TypeError(type(item).__name__)

    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=default)


BASELINE_READS = (
    # their placements
    """SELECT event_id, conversation_id FROM placements
        WHERE event_id = ANY(%(events)s) ORDER BY event_id, conversation_id""",
    # the admissions, each with its run
    """SELECT a.id, a.event_id, a.run_id, r.conversation_id, r.bot_id, r.status, r.output IS NOT NULL
         FROM admissions a JOIN runs r ON r.id = a.run_id
        WHERE a.event_id = ANY(%(events)s) ORDER BY a.id""",
    # the non-terminal runs in the events' conversations
    """SELECT id, conversation_id, bot_id, status, output IS NOT NULL FROM runs
        WHERE conversation_id = ANY(%(conversations)s) AND status = ANY(%(active)s) ORDER BY id""",
    # the attachments
    """SELECT a.id, a.event_id, a.blob_id, a.binding, a.name, b.size
         FROM attachments a JOIN blobs b ON b.id = a.blob_id
        WHERE a.event_id = ANY(%(events)s) ORDER BY a.id""",
    # the derivatives with a selected source, with all their sources
    """SELECT d.id, d.conversation_id, d.kind, s.event_id
         FROM derivatives d JOIN derivative_sources s ON s.derivative_id = d.id
        WHERE d.id IN (SELECT derivative_id FROM derivative_sources WHERE event_id = ANY(%(events)s))
        ORDER BY d.id, s.event_id""",
)
# the events, locked, with their fence flags
BASELINE_LOCK_EVENTS = """SELECT e.id, e.provider_event_id, e.author, e.occurred_at, f.id IS NOT NULL
                            FROM events e LEFT JOIN tombstones f ON f.kind = 'event' AND f.id = e.id
                           WHERE e.id = ANY(%s) ORDER BY e.id FOR UPDATE OF e"""


def baseline_confirm(conn: psycopg.Connection[Any], event_ids: Sequence[str]) -> int:
    """Accept one content purge by hand; returns the ledger seq. The caller's connection is
    not in autocommit, so the first statement opens the transaction."""
    events = sorted(event_ids)
    try:
        conversations = [
            row[0]
            for row in conn.execute(
                "SELECT id FROM conversations WHERE id IN (SELECT conversation_id FROM placements"
                " WHERE event_id = ANY(%s)) ORDER BY id FOR UPDATE",
                (events,),
            )
        ]
        event_rows = conn.execute(BASELINE_LOCK_EVENTS, (events,)).fetchall()
        params = {"events": events, "conversations": conversations, "active": list(ACTIVE_RUN_STATUSES)}
        report: list[list[Any]] = [event_rows, *(conn.execute(query, params).fetchall() for query in BASELINE_READS)]
        if len(event_rows) != len(events) or any(row[4] for row in event_rows) or report[3]:
            raise RuntimeError(f"baseline group {events[0]}: unexpected state (missing, fenced or active runs)")
        digest = hashlib.sha256(repr(report).encode()).hexdigest()
        fresh = [row[0] for row in event_rows]
        provider_ids = sorted(row[1] for row in event_rows if row[1])

        purge_id = uuid.uuid4().hex
        kinds = ["event"] * len(fresh) + ["provider_event"] * len(provider_ids)
        conn.execute(
            "INSERT INTO tombstones (kind, id, purge_id) SELECT unnest(%s::text[]), unnest(%s::text[]), %s",
            (kinds, fresh + provider_ids, purge_id),
        )
        conn.execute(
            "INSERT INTO cleanup_steps (id, purge_id, kind, max_attempts) VALUES (%s, %s, 'bodies', 5)",
            (uuid.uuid4().hex, purge_id),
        )
        conn.execute(
            "UPDATE conversations SET version = version + 1 WHERE id = ANY(%s) AND state = 'active'",
            (conversations,),
        )
        head = conn.execute(
            "SELECT seq, head_hash, clock_timestamp() FROM ledger_head WHERE id = 1 FOR UPDATE"
        ).fetchone()
        if head is None:
            raise RuntimeError("no ledger head")
        seq, prev_hash, accepted_at = head
        selectors = {
            "event_ids": fresh,
            "provider_event_ids": provider_ids,
            "already_fenced": [],
            "request": {"scope": {"event_ids": events}},
        }
        fields: dict[str, Any] = {
            "seq": seq + 1,
            "purge_id": purge_id,
            "kind": "content",
            "selectors": selectors,
            "scope_digest": digest,
            "actor": "bench",
            "reason": "bench",
            "request_id": uuid.uuid4().hex,
            "idempotency_key": None,
            "origin": "bench-baseline",
            "accepted_at": accepted_at,
        }
        row_hash = hashlib.sha256((prev_hash + _canonical_json(fields)).encode()).hexdigest()
        conn.execute(
            """INSERT INTO purge_ledger (seq, purge_id, kind, selectors, scope_digest, actor, reason, request_id,
                                         idempotency_key, origin, accepted_at, prev_hash, row_hash)
               VALUES (%(seq)s, %(purge_id)s, %(kind)s, %(selectors)s, %(scope_digest)s, %(actor)s, %(reason)s,
                       %(request_id)s, %(idempotency_key)s, %(origin)s, %(accepted_at)s, %(prev)s, %(hash)s)""",
            {**fields, "selectors": _canonical_json(selectors), "prev": prev_hash, "hash": row_hash},
        )
        # the database's chain trigger moves the head, as it does for the library
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return int(seq) + 1


# -- timed phases -------------------------------------------------------------------------------


@dataclass
class Phase:
    """One timed phase: calls from several threads, timed each and over the whole window."""

    count: int
    window_s: float
    latencies_s: list[float] = field(repr=False)

    @property
    def per_second(self) -> float:
        return self.count / self.window_s

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_s) * 1000

    @property
    def p95_ms(self) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[max(0, -(-95 * len(ordered) // 100) - 1)] * 1000  # nearest rank


def run_phase(jobs: Sequence[Sequence[Callable[[], object]]]) -> Phase:
    """Run ``jobs[i]`` in thread ``i``, all released together; time each call and the window
    from the release to the end of the last call."""
    started: list[float] = []
    barrier = threading.Barrier(len(jobs), action=lambda: started.append(time.perf_counter()))
    ends = [0.0] * len(jobs)
    latencies: list[list[float]] = [[] for _ in jobs]

    def worker(index: int) -> None:
        barrier.wait(timeout=60)
        for job in jobs[index]:
            begin = time.perf_counter()
            job()
            latencies[index].append(time.perf_counter() - begin)
        ends[index] = time.perf_counter()

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = [pool.submit(worker, i) for i in range(len(jobs))]
        for future in futures:
            future.result()
    flat = [value for per_thread in latencies for value in per_thread]
    return Phase(count=len(flat), window_s=max(ends) - started[0], latencies_s=flat)


def chunks(ids: Sequence[str], size: int) -> list[list[str]]:
    return [list(ids[i : i + size]) for i in range(0, len(ids), size)]


@dataclass
class Bench:
    pk: Purgekeeper
    baseline_conns: list[psycopg.Connection[Any]]
    threads: int
    per_thread: int

    def product_jobs(self, conversations: Sequence[str], groups_each: int) -> list[list[Callable[[], object]]]:
        """Preview every group now (untimed); the jobs then only confirm."""
        jobs: list[list[Callable[[], object]]] = []
        for conversation_id in conversations:
            thread_jobs: list[Callable[[], object]] = []
            for group in chunks(event_ids_of(conversation_id, groups_each * GROUP_SIZE), GROUP_SIZE):
                scope = purgekeeper.EventScope(event_ids=tuple(group))
                digest = self.pk.preview_purge(scope).scope_digest
                thread_jobs.append(self._confirm_job(scope, digest))
            jobs.append(thread_jobs)
        return jobs

    def _confirm_job(self, scope: purgekeeper.EventScope, digest: str) -> Callable[[], object]:
        def job() -> object:
            acceptance = self.pk.confirm_purge(scope, scope_digest=digest, actor="bench", reason="bench")
            if acceptance.outcome != "accepted":
                raise RuntimeError(f"confirm_purge gave {acceptance.outcome!r}")
            return acceptance

        return job

    def baseline_jobs(self, conversations: Sequence[str], groups_each: int) -> list[list[Callable[[], object]]]:
        jobs: list[list[Callable[[], object]]] = []
        for conn, conversation_id in zip(self.baseline_conns[: len(conversations)], conversations, strict=True):
            groups = chunks(event_ids_of(conversation_id, groups_each * GROUP_SIZE), GROUP_SIZE)
            jobs.append([_bind(baseline_confirm, conn, group) for group in groups])
        return jobs

    def purge_conversation_ms(self, conversation_id: str) -> float:
        begin = time.perf_counter()
        acceptance = self.pk.purge_conversation(conversation_id, actor="bench", reason="bench")
        elapsed = time.perf_counter() - begin
        if acceptance.outcome != "accepted":
            raise RuntimeError(f"purge_conversation({conversation_id}) gave {acceptance.outcome!r}")
        return elapsed * 1000


def _bind(
    function: Callable[[psycopg.Connection[Any], Sequence[str]], int], conn: psycopg.Connection[Any], group: list[str]
) -> Callable[[], object]:
    return lambda: function(conn, group)


# -- the run ------------------------------------------------------------------------------------


@dataclass
class RunResult:
    product: Phase
    baseline: Phase
    product_single: Phase
    baseline_single: Phase
    order: str
    small_ms: float
    large_ms: float

    @property
    def throughput_ratio(self) -> float:
        return self.product.per_second / self.baseline.per_second

    @property
    def p50_ratio(self) -> float:
        return self.product.p50_ms / self.baseline.p50_ms

    @property
    def single_p50_ratio(self) -> float:
        return self.product_single.p50_ms / self.baseline_single.p50_ms

    @property
    def size_ratio(self) -> float:
        return self.large_ms / self.small_ms


def thread_conversations(tag: str, threads: int) -> list[str]:
    return [f"{tag}-t{t}" for t in range(threads)]


def seed_all(url: str, runs: int, threads: int, per_thread: int, large_events: int) -> None:
    print("seeding (untimed) ...", flush=True)
    started = time.perf_counter()
    with psycopg.connect(url) as conn:
        for tag in ("warm-a", "warm-b"):
            seed_conversations(conn, thread_conversations(tag, threads), WARMUP_GROUPS_PER_THREAD * GROUP_SIZE)
        for run in range(runs):
            for side in ("a", "b"):
                seed_conversations(conn, thread_conversations(f"{side}{run}", threads), per_thread * GROUP_SIZE)
                seed_conversations(conn, [f"single-{side}{run}"], per_thread * GROUP_SIZE)
        seed_conversations(conn, ["small-warm", *(f"small-r{run}" for run in range(runs))], SMALL_EVENTS)
    print(f"  content-purge groups and 10-event conversations: {time.perf_counter() - started:.1f} s", flush=True)
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(runs, 2)) as pool:
        list(pool.map(lambda run: seed_large_conversation(url, f"large-r{run}", large_events), range(runs)))
    print(
        f"  {runs} conversations of {large_events:,} events: {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        try:
            conn.execute("CHECKPOINT")
        except psycopg.Error as exc:  # not a superuser: the timings may include a checkpoint
            print(f"  (CHECKPOINT skipped: {exc})")
        sizes = conn.execute(
            "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM placements), "
            "(SELECT count(*) FROM placements WHERE conversation_id = 'large-r0')"
        ).fetchone()
    assert sizes is not None
    print(f"  VACUUM ANALYZE + CHECKPOINT: {time.perf_counter() - started:.1f} s", flush=True)
    print(f"  database: {sizes[0]:,} events, {sizes[1]:,} placements; large-r0 holds {sizes[2]:,}", flush=True)


def vacuum_analyze(url: str) -> None:
    """Untimed, before each run: the planner sees the tombstones and ledger rows of the runs
    before (as autovacuum would in a live database), and the dead head versions are gone."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def run_once(bench: Bench, run: int) -> RunResult:
    product_jobs = bench.product_jobs(thread_conversations(f"a{run}", bench.threads), bench.per_thread)
    baseline_jobs = bench.baseline_jobs(thread_conversations(f"b{run}", bench.threads), bench.per_thread)
    product_single_jobs = bench.product_jobs([f"single-a{run}"], bench.per_thread)
    baseline_single_jobs = bench.baseline_jobs([f"single-b{run}"], bench.per_thread)
    if run % 2 == 0:
        order = "purgekeeper first"
        product = run_phase(product_jobs)
        baseline = run_phase(baseline_jobs)
        product_single = run_phase(product_single_jobs)
        baseline_single = run_phase(baseline_single_jobs)
    else:
        order = "baseline first"
        baseline = run_phase(baseline_jobs)
        product = run_phase(product_jobs)
        baseline_single = run_phase(baseline_single_jobs)
        product_single = run_phase(product_single_jobs)
    if run % 2 == 0:
        small = bench.purge_conversation_ms(f"small-r{run}")
        large = bench.purge_conversation_ms(f"large-r{run}")
    else:
        large = bench.purge_conversation_ms(f"large-r{run}")
        small = bench.purge_conversation_ms(f"small-r{run}")
    return RunResult(product, baseline, product_single, baseline_single, order, small_ms=small, large_ms=large)


def warm_up(bench: Bench) -> None:
    """Untimed: fills the connection pools, the statement caches and psycopg's prepared statements."""
    run_phase(bench.product_jobs(thread_conversations("warm-a", bench.threads), WARMUP_GROUPS_PER_THREAD))
    run_phase(bench.baseline_jobs(thread_conversations("warm-b", bench.threads), WARMUP_GROUPS_PER_THREAD))
    bench.purge_conversation_ms("small-warm")


def profile(bench: Bench, url: str, confirmations: int) -> None:
    """Where a confirmation's time goes, one thread: cProfile's top functions by cumulative
    time, and the SQL statements each confirmation runs (counted by their first words)."""
    import collections
    import cProfile
    import pstats

    from sqlalchemy import event

    from purgekeeper.schema import driver

    conversation = "profile-c"
    with psycopg.connect(url) as conn:
        seed_conversations(conn, [conversation, conversation + "-b"], confirmations * GROUP_SIZE)
    statements: collections.Counter[str] = collections.Counter()

    seconds: collections.Counter[str] = collections.Counter()

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements[" ".join(statement.split()[:5])[:80]] += 1

    run = driver.DriverStatement._run

    def timed(self: driver.DriverStatement, conn: Any, params: Any) -> Any:  # the driver's statements
        began = time.perf_counter()
        try:
            return run(self, conn, params)
        finally:
            name = " ".join(str(self._compile(conn.dialect).sql).split()[:5])[:80]
            statements[name] += 1
            seconds[name] += time.perf_counter() - began

    jobs = bench.product_jobs([conversation], confirmations)[0]
    event.listen(bench.pk.db.engine, "before_cursor_execute", count)
    driver.DriverStatement._run = timed  # type: ignore[method-assign]
    try:
        started, cpu = time.perf_counter(), time.thread_time()
        for job in jobs:
            job()
        elapsed, cpu = time.perf_counter() - started, time.thread_time() - cpu
    finally:
        driver.DriverStatement._run = run  # type: ignore[method-assign]
    event.remove(bench.pk.db.engine, "before_cursor_execute", count)
    print(f"\nprofile: {confirmations} confirmations in {elapsed * 1000:.0f} ms, {cpu * 1000:.0f} ms of its CPU")
    print("statements per confirmation (ms each):")
    for statement, n in statements.most_common():
        print(f"  {n / confirmations:5.1f}  {seconds[statement] * 1000 / n:6.2f}  {statement}")
    profiler = cProfile.Profile()
    more = bench.product_jobs([conversation + "-b"], confirmations)[0]
    profiler.enable()
    for job in more:
        job()
    profiler.disable()
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(40)
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(25)


# -- the report ---------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(results: list[RunResult], threads: int, per_thread: int, large_events: int) -> dict[str, Any]:
    large = f"{large_events:,} events"
    print()
    print(
        f"Per run: 10-event content purges, {threads} threads x {per_thread} confirmations per side, "
        f"then 1 thread x {per_thread} per side:"
    )
    print(
        f"{'run':>3}  {'order':<17}  {'side':<11}  {'threads':>7}  {'confirm/s':>9}  {'p50 ms':>7}  {'p95 ms':>7}"
        f"  {'window s':>8}"
    )
    for index, result in enumerate(results, 1):
        phases = (
            ("purgekeeper", threads, result.product),
            ("baseline", threads, result.baseline),
            ("purgekeeper", 1, result.product_single),
            ("baseline", 1, result.baseline_single),
        )
        for side, count, phase in phases:
            print(
                f"{index:>3}  {result.order:<17}  {side:<11}  {count:>7}  {phase.per_second:>9.1f}"
                f"  {phase.p50_ms:>7.2f}  {phase.p95_ms:>7.2f}  {phase.window_s:>8.2f}"
            )
    print()
    print("purge_conversation acceptance latency, single-threaded (ms):")
    print(f"{'run':>3}  {'order':<17}  {'10 events':>9}  {large:>14}  {'ratio':>6}")
    for index, result in enumerate(results, 1):
        order = "10 events first" if index % 2 else f"{large_events:,} first"
        print(f"{index:>3}  {order:<17}  {result.small_ms:>9.2f}  {result.large_ms:>14.2f}  {result.size_ratio:>6.2f}")

    def median(values: list[float]) -> float:
        return statistics.median(values)

    figures: dict[str, Any] = {
        "throughput_ratio": median([r.throughput_ratio for r in results]),
        "p50_ratio": median([r.p50_ratio for r in results]),
        "size_ratio": median([r.size_ratio for r in results]),
        "purgekeeper_confirm_per_s": median([r.product.per_second for r in results]),
        "baseline_confirm_per_s": median([r.baseline.per_second for r in results]),
        "purgekeeper_p50_ms": median([r.product.p50_ms for r in results]),
        "baseline_p50_ms": median([r.baseline.p50_ms for r in results]),
        "purgekeeper_p95_ms": median([r.product.p95_ms for r in results]),
        "baseline_p95_ms": median([r.baseline.p95_ms for r in results]),
        "purgekeeper_p50_1_thread_ms": median([r.product_single.p50_ms for r in results]),
        "baseline_p50_1_thread_ms": median([r.baseline_single.p50_ms for r in results]),
        "p50_1_thread_ratio": median([r.single_p50_ratio for r in results]),
        "purge_conversation_10_events_ms": median([r.small_ms for r in results]),
        "purge_conversation_large_ms": median([r.large_ms for r in results]),
    }
    figures["large_conversation_events"] = large_events
    figures["throughput_ok"] = figures["throughput_ratio"] >= TARGET_THROUGHPUT_RATIO
    figures["p50_ok"] = figures["p50_ratio"] <= TARGET_P50_RATIO
    figures["size_ok"] = figures["size_ratio"] <= TARGET_SIZE_RATIO
    figures["runs"] = len(results)
    figures["threads"] = threads
    figures["confirmations_per_side_per_run"] = threads * per_thread

    rows = (
        (
            f"confirmations/s, {threads} threads: purgekeeper vs baseline",
            figures["purgekeeper_confirm_per_s"],
            figures["baseline_confirm_per_s"],
            f"{figures['throughput_ratio']:.2f}",
            f">= {TARGET_THROUGHPUT_RATIO}",
            verdict(figures["throughput_ok"]),
        ),
        (
            f"p50 latency ms, {threads} threads: purgekeeper vs baseline",
            figures["purgekeeper_p50_ms"],
            figures["baseline_p50_ms"],
            f"{figures['p50_ratio']:.2f}",
            f"<= {TARGET_P50_RATIO:g}",
            verdict(figures["p50_ok"]),
        ),
        (
            f"p95 latency ms, {threads} threads: purgekeeper vs baseline",
            figures["purgekeeper_p95_ms"],
            figures["baseline_p95_ms"],
            f"{figures['purgekeeper_p95_ms'] / figures['baseline_p95_ms']:.2f}",
            "-",
            "(informational)",
        ),
        (
            "p50 latency ms, 1 thread: purgekeeper vs baseline",
            figures["purgekeeper_p50_1_thread_ms"],
            figures["baseline_p50_1_thread_ms"],
            f"{figures['p50_1_thread_ratio']:.2f}",
            "-",
            "(informational)",
        ),
        (
            f"purge_conversation ms: {large} vs 10 events",
            figures["purge_conversation_large_ms"],
            figures["purge_conversation_10_events_ms"],
            f"{figures['size_ratio']:.2f}",
            f"<= {TARGET_SIZE_RATIO}",
            verdict(figures["size_ok"]),
        ),
    )
    print()
    print(f"Median of {len(results)} runs (each ratio is taken within a run, then the median of the ratios):")
    print(f"{'figure':<52}  {'value':>8}  {'versus':>8}  {'ratio':>6}  {'target':>7}  result")
    for label, value, versus, ratio, target, outcome in rows:
        print(f"{label:<52}  {value:>8.2f}  {versus:>8.2f}  {ratio:>6}  {target:>7}  {outcome}")
    return figures


# -- main ---------------------------------------------------------------------------------------


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # run the finally blocks: the scratch database is dropped


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--per-thread", type=int, default=25, help="confirmations per thread per side per run")
    parser.add_argument("--large-events", type=int, default=LARGE_EVENTS, help="events in the large conversation")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--profile",
        type=int,
        metavar="N",
        default=0,
        help="first profile N single-threaded confirmations (cProfile, and the statements each runs), then measure",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)

    server_url = os.environ.get("PK_BENCH_POSTGRES_URL", DEFAULT_SERVER_URL)
    scratch = ScratchDatabase(server_url, f"pk_bench_{os.getpid()}")
    with scratch, tempfile.TemporaryDirectory(prefix="pk-bench-") as tmp:
        root = Path(tmp)
        os.environ["PURGEKEEPER_DATA_DIR"] = str(root / "data")  # keep the default data dir out of $HOME
        database = Database(scratch.url)
        try:
            migrate.upgrade(database)
        finally:
            database.dispose()
        with psycopg.connect(scratch.url) as conn:
            server = conn.execute("SELECT split_part(version(), ' ', 2), current_setting('synchronous_commit')")
            version, synchronous_commit = server.fetchone() or ("?", "?")
        print(f"purgekeeper acceptance benchmark: PostgreSQL {version} at {shown_url(scratch.admin_url)}")
        print(
            f"scratch database {scratch.name}; synchronous_commit={synchronous_commit} (server default, both sides); "
            f"{args.runs} runs; {os.cpu_count()} CPUs"
        )
        seed_all(scratch.url, args.runs, args.threads, args.per_thread, args.large_events)

        pk = open_under(scratch.url, root)  # workers none: no cleanup runs during the measurement
        conns: list[psycopg.Connection[Any]] = []
        try:
            conns = [psycopg.connect(scratch.url) for _ in range(args.threads)]
            bench = Bench(pk=pk, baseline_conns=conns, threads=args.threads, per_thread=args.per_thread)
            warm_up(bench)
            if args.profile:
                profile(bench, scratch.url, args.profile)
            results = []
            for run in range(args.runs):
                started = time.perf_counter()
                vacuum_analyze(scratch.url)
                results.append(run_once(bench, run))
                print(
                    f"run {run + 1}/{args.runs} done ({time.perf_counter() - started:.1f} s, "
                    "untimed VACUUM ANALYZE and previews included)",
                    flush=True,
                )
            figures = report(results, args.threads, args.per_thread, args.large_events)
            check = pk.verify_ledger()
            print()
            print(
                f"ledger check after the runs: {'ok' if check.ok else 'BROKEN'}, {check.rows} rows "
                "(both sides append to the same hash chain)"
            )
            if not check.ok:
                print("\n".join(f"  {problem}" for problem in check.problems))
            figures["ledger_ok"] = check.ok
            print(json.dumps(figures, sort_keys=True))
        finally:
            for conn in conns:
                conn.close()
            pk.close()
    met = figures["throughput_ok"] and figures["p50_ok"] and figures["size_ok"] and figures["ledger_ok"]
    return 1 if args.strict and not met else 0


if __name__ == "__main__":
    sys.exit(main())
