"""Broker mode against embedded mode (issue 27, item 5), on PostgreSQL and a Redis of its own.

The same purge on both sides: ``purge_conversation`` of a conversation of ``--events`` events
(default 10,000; 200-byte bodies), every ``--attachment-every``-th of them (default 20th) with
an attachment of its own (4 KiB on disk, CAS and real files alternately), seeded untimed with
``INSERT ... SELECT ... generate_series`` (the schema's triggers firing). Each side has a
scratch database of its own, seeded alike, with a fresh conversation per run:

- **embedded**: ``purgekeeper.open(workers="auto")`` without a broker URL: the in-process
  dramatiq worker (StubBroker, threads) and scheduler.
- **broker**: a ``redis-server`` of the script's own on a free port, and the ``worker`` and
  ``scheduler`` processes started by the Procfile's own command lines (``sh -c``, from the
  repository, its defaults: 2 worker processes of 4 threads), with the environment pointing
  them at that database and Redis; the purge is accepted by a handle with the broker URL,
  which wakes the steps through Redis and runs nothing itself.

Both sides stay up for the whole run, with the defaults (a 5 s sweep). A run purges one
conversation on each side, the side that goes first alternating, after one untimed warm-up
purge per side. The figure is the time from acceptance to complete on the database clock:
the ledger row's ``accepted_at`` to the purge's ``purge_completions.completed_at`` (the
commit of its last step), and beside it the wall time from the call to the completion seen
by a 10 ms poll. The profile splits it on the same clock with the steps' attempts
(``step_attempts``): acceptance to the bodies step's claim, the bodies step, its finish to
the attachments step's claim, the attachments step, and its finish to complete.

Target (issue 27, item 5): broker <= 1.2x embedded (median of the per-run ratios of
``--runs``, default 3). ``--strict`` exits 1 when it is missed. The server is
``PK_BENCH_POSTGRES_URL``; the scratch databases are dropped at the end, the processes and
Redis stopped. The last line printed is the figures as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import itertools
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
from scratch import ScratchDatabase, shown_url

import purgekeeper
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.settings import Settings
from purgekeeper.schema import migrate
from purgekeeper.schema.db import Database

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
SIDES = ("embedded", "broker")
BODY_BYTES = 200
FILE_BYTES = 4096
POLL_S = 0.01
WAIT_S = 120.0
TARGET_RATIO = 1.2
WORKER_READY = "Worker process is ready"
SCHEDULER_READY = "sweeping every"
PHASES = ("to_bodies", "bodies", "to_attachments", "attachments", "to_complete")


# -- seeding ------------------------------------------------------------------------------------

SEED = [
    "INSERT INTO conversations (id) VALUES (%(c)s)",
    """INSERT INTO events (id, author, occurred_at, body)
       SELECT %(c)s || '-e' || n, 'author-' || (n %% 7),
              timestamptz '2026-01-01 00:00:00+00' + n * interval '1 second', repeat('x', %(body)s)
         FROM generate_series(0, %(events)s - 1) AS n""",
    """INSERT INTO placements (event_id, conversation_id)
       SELECT %(c)s || '-e' || n, %(c)s FROM generate_series(0, %(events)s - 1) AS n""",
    """INSERT INTO blobs (id, kind, sha256, size, path)
       SELECT b.id, b.kind, b.sha, %(file_bytes)s,
              CASE WHEN b.kind = 'cas'
                   THEN substr(b.sha, 1, 2) || '/' || substr(b.sha, 3, 2) || '/' || b.sha || '-' || b.id
                   ELSE substr(b.id, 1, 2) || '/' || substr(b.id, 3, 2) || '/' || b.id END
         FROM (SELECT o.id, o.kind,
                      encode(sha256(convert_to(left(repeat(o.id, %(file_bytes)s / 32 + 1), %(file_bytes)s),
                                               'UTF8')), 'hex') AS sha
                 FROM (SELECT md5('blob:' || %(c)s || ':' || n) AS id,
                              CASE WHEN n %% 2 = 0 THEN 'cas' ELSE 'file' END AS kind
                         FROM generate_series(0, %(events)s - 1, %(every)s) AS n) AS o) AS b""",
    """INSERT INTO attachments (id, event_id, blob_id, binding, name)
       SELECT md5('attachment:' || %(c)s || ':' || n), %(c)s || '-e' || n, md5('blob:' || %(c)s || ':' || n),
              CASE WHEN n %% 2 = 0 THEN 'legacy_cas' ELSE 'real_file' END, 'attachment-' || n || '.bin'
         FROM generate_series(0, %(events)s - 1, %(every)s) AS n""",
]


@dataclass(frozen=True)
class Roots:
    data_dir: Path

    @property
    def blob_root(self) -> Path:
        return self.data_dir / "blobs"

    @property
    def file_root(self) -> Path:
        return self.data_dir / "files"


def seed(url: str, roots: Roots, conversations: list[str], events: int, every: int) -> int:
    """The conversations, their events and attachments, and the attachments' files on disk."""
    files = 0
    with psycopg.connect(url) as conn:
        for conversation_id in conversations:
            params = {"c": conversation_id, "events": events, "every": every}
            for statement in SEED:
                conn.execute(statement, {**params, "body": BODY_BYTES, "file_bytes": FILE_BYTES})
        conn.commit()
        for blob_id, kind, path in conn.execute("SELECT id, kind, path FROM blobs"):
            target = (roots.blob_root if kind == "cas" else roots.file_root) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((blob_id * (FILE_BYTES // 32 + 1))[:FILE_BYTES].encode())
            files += 1
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return files


# -- the broker side's processes ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def procfile_lines() -> dict[str, str]:
    """The Procfile's command lines, by process name."""
    lines = (ROOT / "Procfile").read_text(encoding="utf-8").splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line and not line.startswith("#"))


@dataclass
class Started:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for(self, marker: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while marker not in self.output():
            if self.popen.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(self.output().splitlines()[-30:])
                raise RuntimeError(f"{self.name} did not print {marker!r} (exit {self.popen.poll()}):\n{tail}")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM to its process group (the dramatiq CLI forks), then SIGKILL what is left."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=30)


def start(name: str, argv: list[str], env: dict[str, str], logs: Path) -> Started:
    log = logs / f"{name}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    return Started(name, popen, log)


@contextlib.contextmanager
def redis_server(directory: Path) -> Iterator[str]:
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)]
    argv += ["--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction"]
    server = start("redis", argv, dict(os.environ), directory)
    try:
        server.wait_for("Ready to accept connections")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.stop()


@contextlib.contextmanager
def procfile_processes(env: dict[str, str], logs: Path) -> Iterator[list[Started]]:
    """The Procfile's worker and scheduler, as it starts them."""
    lines = procfile_lines()
    started: list[Started] = []
    try:
        for name, marker in (("worker", WORKER_READY), ("scheduler", SCHEDULER_READY)):
            started.append(start(name, ["sh", "-c", lines[name].strip()], env, logs))
            started[-1].wait_for(marker)
        yield started
    finally:
        for process in reversed(started):
            process.stop()


def process_env(url: str, broker_url: str | None, roots: Roots) -> dict[str, str]:
    """The environment of a side's processes and handle: its database and data directory, and
    Redis on the broker side."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("PURGEKEEPER_")}
    env = {**kept, "PURGEKEEPER_DATABASE_URL": url, "PURGEKEEPER_DATA_DIR": str(roots.data_dir)}
    if broker_url is not None:
        env["PURGEKEEPER_BROKER_URL"] = broker_url
        env["PURGEKEEPER_WORKER_METRICS_PORT"] = str(free_port())  # not the Procfile's 9191: others may hold it
    return env


# -- a run --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    side: str
    total_s: float  # accepted_at to completed_at, the database clock
    wall_s: float  # the call to the completion seen by the poll
    phases: dict[str, float]


def purge_timed(pk: Purgekeeper, url: str, conversation_id: str) -> Timing:
    begin = time.perf_counter()
    acceptance = pk.purge_conversation(conversation_id, actor="bench", reason="broker mode benchmark")
    if acceptance.outcome != "accepted":
        raise RuntimeError(f"purge_conversation({conversation_id}) gave {acceptance.outcome!r}")
    with psycopg.connect(url, autocommit=True) as conn:
        deadline = time.monotonic() + WAIT_S
        query = "SELECT completed_at FROM purge_completions WHERE purge_id = %s"
        while conn.execute(query, (acceptance.purge_id,)).fetchone() is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"purge {acceptance.purge_id} did not complete within {WAIT_S:g} s")
            time.sleep(POLL_S)
        wall = time.perf_counter() - begin
        total, phases = profile(conn, acceptance.purge_id)
    return Timing("", total, wall, phases)


def profile(conn: psycopg.Connection[Any], purge_id: str) -> tuple[float, dict[str, float]]:
    """Acceptance to complete, and its phases, from the timestamps the database wrote."""
    accepted = conn.execute("SELECT accepted_at FROM purge_ledger WHERE purge_id = %s", (purge_id,)).fetchone()
    completed = conn.execute("SELECT completed_at FROM purge_completions WHERE purge_id = %s", (purge_id,)).fetchone()
    attempts = {
        kind: (started, finished)
        for kind, started, finished in conn.execute(
            "SELECT kind, min(started_at), max(finished_at) FROM step_attempts WHERE purge_id = %s GROUP BY kind",
            (purge_id,),
        )
    }
    assert accepted is not None and completed is not None, purge_id
    marks = [accepted[0], *attempts["bodies"], *attempts["attachments"], completed[0]]
    marks = [_as_time(mark) for mark in marks]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(marks)]
    return (marks[-1] - marks[0]).total_seconds(), dict(zip(PHASES, gaps, strict=True))


def _as_time(value: Any) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))


# -- the bench ----------------------------------------------------------------------------------


@dataclass
class Bench:
    urls: dict[str, str]
    handles: dict[str, Purgekeeper]

    def run(self, side: str, conversation_id: str) -> Timing:
        timing = purge_timed(self.handles[side], self.urls[side], conversation_id)
        return Timing(side, timing.total_s, timing.wall_s, timing.phases)


def conversation(side: str, run: int) -> str:
    return f"{side}-{run}"


def measure(bench: Bench, runs: int) -> list[dict[str, Timing]]:
    for side in SIDES:
        print(f"  warm-up {side}: {bench.run(side, conversation(side, -1)).total_s:.3f} s", flush=True)
    results = []
    for run in range(runs):
        order = SIDES if run % 2 == 0 else tuple(reversed(SIDES))
        timings = {side: bench.run(side, conversation(side, run)) for side in order}
        results.append(timings)
        print(
            f"  run {run + 1} ({order[0]} first): embedded {timings['embedded'].total_s:.3f} s, "
            f"broker {timings['broker'].total_s:.3f} s",
            flush=True,
        )
    return results


def report(results: list[dict[str, Timing]], events: int, files: int) -> dict[str, Any]:
    def median(side: str, value: str) -> float:
        return statistics.median(getattr(r[side], value) for r in results)

    ratios = [r["broker"].total_s / r["embedded"].total_s for r in results]
    wall_ratios = [r["broker"].wall_s / r["embedded"].wall_s for r in results]
    print(f"\nacceptance to complete of a conversation of {events:,} events and {files:,} attachments")
    print(f"{'run':>4} {'embedded s':>11} {'broker s':>9} {'ratio':>6}   {'wall emb':>8} {'wall brk':>8}")
    for n, r in enumerate(results, 1):
        print(
            f"{n:>4} {r['embedded'].total_s:>11.3f} {r['broker'].total_s:>9.3f} {ratios[n - 1]:>6.2f}   "
            f"{r['embedded'].wall_s:>8.3f} {r['broker'].wall_s:>8.3f}"
        )
    print("\nwhere the time went (medians, s; the database clock)")
    print(f"{'phase':<16} {'embedded':>9} {'broker':>9}")
    phases = {
        side: {phase: statistics.median(r[side].phases[phase] for r in results) for phase in PHASES} for side in SIDES
    }
    for phase in PHASES:
        print(f"{phase:<16} {phases['embedded'][phase]:>9.3f} {phases['broker'][phase]:>9.3f}")
    ratio = statistics.median(ratios)
    met = ratio <= TARGET_RATIO
    print(f"\nbroker / embedded: {ratio:.2f}x (median of the runs' ratios); target <= {TARGET_RATIO}x: "
          f"{'met' if met else 'MISSED'}")  # fmt: skip
    return {
        "events": events,
        "attachments": files,
        "runs": len(results),
        "embedded_s": [r["embedded"].total_s for r in results],
        "broker_s": [r["broker"].total_s for r in results],
        "embedded_median_s": median("embedded", "total_s"),
        "broker_median_s": median("broker", "total_s"),
        "ratios": ratios,
        "ratio": ratio,
        "wall_ratio": statistics.median(wall_ratios),
        "phases": phases,
        "target_met": met,
    }


@contextlib.contextmanager
def opened_sides(envs: dict[str, dict[str, str]]) -> Iterator[dict[str, Purgekeeper]]:
    """A handle per side, on the settings its processes read (its database, data directory
    and, on the broker side, Redis: the handle then wakes the steps through it)."""
    handles: dict[str, Purgekeeper] = {}
    try:
        for side in SIDES:
            handles[side] = purgekeeper.open(settings=Settings.from_env(envs[side]), workers="auto")
        yield handles
    finally:
        for pk in handles.values():
            pk.close()


def bench(server_url: str, directory: Path, runs: int, events: int, every: int) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        urls, roots, files = {}, {}, 0
        for side in SIDES:
            scratch = stack.enter_context(ScratchDatabase(server_url, f"pk_broker_mode_{os.getpid()}_{side}"))
            urls[side], roots[side] = scratch.url, Roots(directory / side)
            database = Database(scratch.url)
            try:
                migrate.upgrade(database)
            finally:
                database.dispose()
            files = seed(urls[side], roots[side], [conversation(side, n) for n in range(-1, runs)], events, every)
        print(f"  seeded: {runs + 1} conversations of {events:,} events a side", flush=True)
        broker_url = stack.enter_context(redis_server(directory))
        envs = {side: process_env(urls[side], broker_url if side == "broker" else None, roots[side]) for side in SIDES}
        stack.enter_context(procfile_processes(envs["broker"], directory))
        handles = stack.enter_context(opened_sides(envs))
        results = measure(Bench(urls, handles), runs)
    return report(results, events, files // (runs + 1))


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds the with blocks: processes stopped, databases dropped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--events", type=int, default=10_000, help="events of each purged conversation")
    parser.add_argument("--attachment-every", type=int, default=20, help="one event in this many has an attachment")
    parser.add_argument("--dir", type=Path, default=None, help="where the data directories go (a temporary one)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target is missed")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    server_url = os.environ.get("PK_BENCH_POSTGRES_URL", DEFAULT_SERVER_URL)
    print(f"server {shown_url(server_url)}; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    print(f"Procfile worker: {shlex.join(['sh', '-c', procfile_lines()['worker'].strip()])}", flush=True)
    with tempfile.TemporaryDirectory(prefix="pk-broker-mode-", dir=args.dir) as directory:
        figures = bench(server_url, Path(directory), args.runs, args.events, args.attachment_every)
    print(json.dumps(figures))
    return 1 if args.strict and not figures["target_met"] else 0


if __name__ == "__main__":
    sys.exit(main())
