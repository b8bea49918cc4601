"""Interference benchmark: what a big purge's cleanup costs the foreground, on PostgreSQL (issue 27, item 3).

The data (seeded once, untimed, with ``INSERT ... SELECT ... FROM generate_series``, so the
schema's triggers fire): ``--runs`` big conversations of 1,000,000 x ``--scale`` events each
(default ``--scale 0.1``: 100,000 events, what seeds and cleans in a few minutes on a 2-core
machine; ``--scale 1`` is the 1M-event purge, ``--scale 0.2`` 200k), each event with a
200-byte body and one placement.

Each run has two phases of foreground load, in turns (run 1 cleanup then idle, run 2 idle
then cleanup, ...), so that a drifting neighbour weighs on both:

- ``cleanup``: ``purge_conversation`` of one big conversation, then its bodies and
  attachments steps run by ``purgekeeper.workers.runner.run_step`` in a thread of this process with the
  handle's own ``StepContext`` (the default batch size and yield: what the embedded worker
  runs), as ``bench/cleanup.py`` drives them. The phase lasts from the acceptance to the end
  of the last step: the *time from acceptance to complete*.
- ``idle``: the same load, no cleanup, for as long as the run's cleanup phase lasted (the
  previous run's, when idle comes first), at least ``--min-phase-seconds``.

The load: ``--threads`` (default 8) threads, each ingesting 200-byte events
(``ingest_event``) into a conversation of its own and reading it back through the library's
fenced read (``read_conversation``), one after the other; after 50 events a thread moves to
a fresh conversation (created untimed), so the reads stay the same size in both phases. Each
call's latency is recorded; a phase reports p50 and p99 of ingest and of read.

``--yield-share`` and ``--batch-size`` set the cleanup's ``StepContext.yield_share`` and
``batch_size`` (default: the library's); ``--yield-share 0`` measures the cleanup that never
yields.

Figures: per run, each phase's p50 and p99 and the cleanup/idle ratio of each; then the
median of the runs (each ratio is taken within a run). Target: p99 of ingest and of read
with cleanup running at most 1.5x idle. After each run, untimed: the purge is ``complete``
and its conversation holds no body or placement. ``--strict`` exits 1 when the target is
missed or a check fails.

The server is ``PK_BENCH_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``);
the script creates ``pk_interference_<pid>`` there and drops it at the end, also on failure
or SIGTERM.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
from scratch import ScratchDatabase, open_under, shown_url

from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.schema import migrate
from purgekeeper.schema.db import Database
from purgekeeper.workers import runner

DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
FULL_EVENTS = 1_000_000  # x --scale: events of each purged conversation
DEFAULT_SCALE = 0.1
THREADS = 8
RUNS = 3
BODY_BYTES = 200
EVENTS_PER_LOAD_CONVERSATION = 50
SEED_CHUNK = 100_000  # events per INSERT ... SELECT and transaction
MIN_PHASE_S = 5.0
TARGET_P99_RATIO = 1.5
MAX_LOAD_ERRORS = 50  # per phase

SEED_EVENTS = """
INSERT INTO events (id, author, occurred_at, body)
SELECT %(c)s || '-e' || lpad(n::text, 7, '0'), 'author-' || (n %% 7),
       timestamptz '2026-01-01 00:00:00+00' + n * interval '1 second', repeat('x', %(body)s::int)
  FROM generate_series(%(lo)s::int, %(hi)s::int - 1) AS n
"""
SEED_PLACEMENTS = """
INSERT INTO placements (event_id, conversation_id)
SELECT %(c)s || '-e' || lpad(n::text, 7, '0'), %(c)s FROM generate_series(%(lo)s::int, %(hi)s::int - 1) AS n
"""


def big_conversation(run: int) -> str:
    return f"big-{run}"


def seed(url: str, runs: int, events: int) -> None:
    print(f"seeding (untimed): {runs} conversations of {events:,} events ...", flush=True)
    started = time.perf_counter()
    with psycopg.connect(url) as conn:
        for run in range(runs):
            conversation = big_conversation(run)
            conn.execute("INSERT INTO conversations (id) VALUES (%s)", (conversation,))
            for statement in (SEED_EVENTS, SEED_PLACEMENTS):
                for lo in range(0, events, SEED_CHUNK):
                    params = {"c": conversation, "lo": lo, "hi": min(lo + SEED_CHUNK, events), "body": BODY_BYTES}
                    conn.execute(statement, params)
                    conn.commit()
    settle(url)
    print(f"  seeded, VACUUM ANALYZE and CHECKPOINT in {time.perf_counter() - started:.1f} s", flush=True)


def settle(url: str) -> None:
    """Untimed, before each run: the dead rows of the run before are gone and no checkpoint
    falls inside a run (as autovacuum and the checkpointer would do between bursts)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        try:
            conn.execute("CHECKPOINT")
        except psycopg.Error as exc:  # not a superuser
            print(f"  (CHECKPOINT skipped: {exc})")


# -- the foreground load --------------------------------------------------------------------------


@dataclass
class Latencies:
    ingest: list[float] = field(default_factory=list)
    read: list[float] = field(default_factory=list)

    def extend(self, other: Latencies) -> None:
        self.ingest.extend(other.ingest)
        self.read.extend(other.read)


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class Load:
    """``threads`` threads of ingest-then-read until ``stop`` is set; each thread's
    conversations are ``load-<phase>-<thread>-<n>``."""

    def __init__(self, pk: Purgekeeper, threads: int, phase: str) -> None:
        self.pk, self.phase = pk, phase
        self.stop = threading.Event()
        self.latencies = [Latencies() for _ in range(threads)]
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self.work, args=(t,), daemon=True) for t in range(threads)]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def work(self, index: int) -> None:
        mine, made, conversation = self.latencies[index], 0, ""
        while not self.stop.is_set():
            try:
                if made % EVENTS_PER_LOAD_CONVERSATION == 0:
                    conversation = f"load-{self.phase}-{index}-{made // EVENTS_PER_LOAD_CONVERSATION}"
                    self.pk.create_conversation(conversation)
                body = "y" * BODY_BYTES
                mine.ingest.append(timed(self.pk.ingest_event, conversation, author=f"user-{index}", body=body))
                made += 1
                mine.read.append(timed(self.pk.read_conversation, conversation))
            except Exception as exc:  # a failed check, and the thread goes on: the load stays the same
                self.errors.append(f"load thread {index}: {type(exc).__name__}: {exc}")
                if len(self.errors) >= MAX_LOAD_ERRORS:  # failing for good (a closed gate): stop
                    return

    def collected(self) -> Latencies:
        merged = Latencies()
        for latencies in self.latencies:
            merged.extend(latencies)
        return merged


def timed(call: Callable[..., object], *args: Any, **kwargs: Any) -> float:
    begin = time.perf_counter()
    call(*args, **kwargs)
    return time.perf_counter() - begin


# -- one run ----------------------------------------------------------------------------------------


@dataclass
class Phase:
    latencies: Latencies
    seconds: float

    def figures(self) -> dict[str, float]:
        return {
            "ingest_p50_ms": 1000 * percentile(self.latencies.ingest, 0.50),
            "ingest_p99_ms": 1000 * percentile(self.latencies.ingest, 0.99),
            "read_p50_ms": 1000 * percentile(self.latencies.read, 0.50),
            "read_p99_ms": 1000 * percentile(self.latencies.read, 0.99),
        }


@dataclass
class RunResult:
    idle: Phase
    cleanup: Phase
    order: str
    removed: int

    def ratio(self, figure: str) -> float:
        return self.cleanup.figures()[figure] / self.idle.figures()[figure]


@dataclass
class Bench:
    pk: Purgekeeper
    url: str
    threads: int
    min_phase_s: float
    knobs: dict[str, Any] = field(default_factory=dict)  # StepContext fields the command line sets
    problems: list[str] = field(default_factory=list)

    def cleanup_phase(self, run: int) -> tuple[Phase, int]:
        """Accept the purge of the run's big conversation and run its steps in a thread while
        the load runs; the phase ends when the last step does."""
        conversation = big_conversation(run)
        ctx = dataclasses.replace(self.pk.step_context(), **self.knobs)
        with Load(self.pk, self.threads, f"c{run}") as load:
            begin = time.perf_counter()
            purge_id = self.pk.purge_conversation(conversation, actor="bench", reason="bench").purge_id
            cleaner = threading.Thread(target=self.clean, args=(ctx, purge_id), daemon=True)
            cleaner.start()
            cleaner.join()
            seconds = time.perf_counter() - begin
        self.problems.extend(load.errors)
        return Phase(load.collected(), seconds), self.check(run, purge_id)

    def clean(self, ctx: Any, purge_id: str) -> None:
        with psycopg.connect(self.url) as conn:
            steps = dict(conn.execute("SELECT kind, id FROM cleanup_steps WHERE purge_id = %s", (purge_id,)).fetchall())
        for kind in ("bodies", "attachments"):
            if kind in steps:
                outcome = runner.run_step(ctx, steps[kind], policy=runner.Policy())
                if outcome.status != "done":
                    self.problems.append(f"{kind} step of purge {purge_id} ended {outcome.status!r}")

    def idle_phase(self, run: int, seconds: float) -> Phase:
        with Load(self.pk, self.threads, f"i{run}") as load:
            begin = time.perf_counter()
            load.stop.wait(max(seconds, self.min_phase_s))
        elapsed = time.perf_counter() - begin
        self.problems.extend(load.errors)
        return Phase(load.collected(), elapsed)

    def check(self, run: int, purge_id: str) -> int:
        """Untimed: the purge is complete and its conversation holds no body or placement."""
        status = self.pk.status(purge_id).status
        if status != "complete":
            self.problems.append(f"run {run + 1}: purge {purge_id} is {status}")
        with psycopg.connect(self.url) as conn:
            left = conn.execute(
                """SELECT (SELECT count(*) FROM placements WHERE conversation_id = %(c)s),
                          (SELECT count(*) FROM events WHERE id LIKE %(c)s || '-e%%' AND body IS NOT NULL),
                          (SELECT removed FROM cleanup_steps WHERE purge_id = %(p)s AND kind = 'bodies')""",
                {"c": big_conversation(run), "p": purge_id},
            ).fetchone()
        assert left is not None
        if left[:2] != (0, 0):
            self.problems.append(f"run {run + 1}: placements and bodies left {left[:2]}")
        return int(left[2] or 0)

    def run_once(self, run: int, previous_cleanup_s: float) -> RunResult:
        if run % 2 == 0:
            cleanup, removed = self.cleanup_phase(run)
            idle = self.idle_phase(run, cleanup.seconds)
            return RunResult(idle, cleanup, "cleanup first", removed)
        idle = self.idle_phase(run, previous_cleanup_s)
        cleanup, removed = self.cleanup_phase(run)
        return RunResult(idle, cleanup, "idle first", removed)


# -- the report -----------------------------------------------------------------------------------

FIGURES = ("ingest_p50_ms", "ingest_p99_ms", "read_p50_ms", "read_p99_ms")


def report(results: list[RunResult], events: int, threads: int) -> dict[str, Any]:
    print()
    print(f"Per run: {threads} threads of ingest + fenced read; one purge of {events:,} events cleans meanwhile")
    print(
        f"{'run':>3}  {'order':<13}  {'phase':<7}  {'seconds':>7}  {'calls':>6}  "
        + "  ".join(f"{name:>13}" for name in FIGURES)
    )
    for index, result in enumerate(results, 1):
        for name, phase in (("idle", result.idle), ("cleanup", result.cleanup)):
            values = phase.figures()
            print(
                f"{index:>3}  {result.order:<13}  {name:<7}  {phase.seconds:>7.1f}  {len(phase.latencies.ingest):>6,}  "
                + "  ".join(f"{values[figure]:>13.1f}" for figure in FIGURES)
            )
    figures: dict[str, Any] = {}
    for figure in FIGURES:
        stem = figure.removesuffix("_ms")
        figures[f"{stem}_idle_ms"] = statistics.median(r.idle.figures()[figure] for r in results)
        figures[f"{stem}_cleanup_ms"] = statistics.median(r.cleanup.figures()[figure] for r in results)
        figures[f"{stem}_ratio"] = statistics.median(r.ratio(figure) for r in results)
        figures[f"{stem}_ratio_per_run"] = [round(r.ratio(figure), 3) for r in results]
    figures["acceptance_to_complete_s"] = statistics.median(r.cleanup.seconds for r in results)
    figures["acceptance_to_complete_s_per_run"] = [round(r.cleanup.seconds, 2) for r in results]
    figures["rows_per_s_under_load"] = statistics.median(r.removed / r.cleanup.seconds for r in results)
    figures["p99_ok"] = max(figures["ingest_p99_ratio"], figures["read_p99_ratio"]) <= TARGET_P99_RATIO
    print()
    print(f"Median of {len(results)} runs (each ratio is cleanup over idle within a run, then the median):")
    print(f"{'figure':<22}  {'idle ms':>8}  {'cleanup ms':>10}  {'ratio':>6}  target")
    for figure in FIGURES:
        stem = figure.removesuffix("_ms")
        target = f"<= {TARGET_P99_RATIO}" if "p99" in stem else ""
        print(
            f"{stem:<22}  {figures[f'{stem}_idle_ms']:>8.1f}  {figures[f'{stem}_cleanup_ms']:>10.1f}  "
            f"{figures[f'{stem}_ratio']:>6.2f}  {target}"
        )
    print(
        f"{'acceptance to complete':<22}  {figures['acceptance_to_complete_s']:>8.1f} s  "
        f"({figures['rows_per_s_under_load']:,.0f} rows/s under the load); p99 target "
        f"{'PASS' if figures['p99_ok'] else 'FAIL'}"
    )
    return figures


# -- main ---------------------------------------------------------------------------------------


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # run the finally blocks: the scratch database is dropped


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--scale", type=float, default=DEFAULT_SCALE, help=f"events per purge: {FULL_EVENTS:,} x scale")
    parser.add_argument("--threads", type=int, default=THREADS, help="foreground threads")
    parser.add_argument(
        "--yield-share",
        type=float,
        default=None,
        help="the cleanup's StepContext.yield_share (default: the library's, "
        "purgekeeper.workers.cleanup.DEFAULT_YIELD_SHARE; 0 never yields)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=None, help="the cleanup's batch size (default: the library's)"
    )
    parser.add_argument("--min-phase-seconds", type=float, default=MIN_PHASE_S, help="shortest idle phase")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target is missed or a check fails")
    args = parser.parse_args(argv)
    events = max(1, round(FULL_EVENTS * args.scale))
    signal.signal(signal.SIGTERM, _terminate)

    server_url = os.environ.get("PK_BENCH_POSTGRES_URL", DEFAULT_SERVER_URL)
    scratch = ScratchDatabase(server_url, f"pk_interference_{os.getpid()}")
    with scratch, tempfile.TemporaryDirectory(prefix="pk-bench-interference-") as tmp:
        root = Path(tmp).resolve()
        os.environ["PURGEKEEPER_DATA_DIR"] = str(root / "data")  # keep the default data dir out of $HOME
        database = Database(scratch.url)
        try:
            migrate.upgrade(database)
        finally:
            database.dispose()
        print(
            f"purgekeeper interference benchmark at {shown_url(scratch.admin_url)}: {args.runs} runs, "
            f"{args.threads} foreground threads, purges of {events:,} events; {os.cpu_count()} CPUs"
        )
        if args.scale != DEFAULT_SCALE:
            print(f"--scale {args.scale:g} (the default is {DEFAULT_SCALE:g})")
        seed(scratch.url, args.runs, events)
        pk = open_under(scratch.url, root)  # workers none: the steps run in this thread, as the embedded worker's would
        try:
            knobs = {"yield_share": args.yield_share, "batch_size": args.batch_size}
            bench = Bench(
                pk=pk,
                url=scratch.url,
                threads=args.threads,
                min_phase_s=args.min_phase_seconds,
                knobs={name: value for name, value in knobs.items() if value is not None},
            )
            results: list[RunResult] = []
            for run in range(args.runs):
                settle(scratch.url)
                load_before = os.getloadavg()[0]
                previous = results[-1].cleanup.seconds if results else args.min_phase_seconds
                results.append(bench.run_once(run, previous))
                print(
                    f"run {run + 1}/{args.runs} done ({results[-1].order}); 1-minute load average "
                    f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after",
                    flush=True,
                )
            figures = report(results, events, args.threads)
            used = dataclasses.replace(pk.step_context(), **bench.knobs)
            figures["batch_size"], figures["yield_share"] = used.batch_size, used.yield_share
        finally:
            pk.close()
    figures.update(
        {
            "checks_ok": not bench.problems,
            "runs": args.runs,
            "threads": args.threads,
            "events_per_purge": events,
        }
    )
    for problem in bench.problems:
        print(f"CHECK FAILED: {problem}")
    print(json.dumps(figures, sort_keys=True))
    return 1 if args.strict and not (figures["p99_ok"] and figures["checks_ok"]) else 0


if __name__ == "__main__":
    sys.exit(main())
