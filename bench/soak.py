"""Soak benchmark (issue 37, item 6): minutes of mixed load on PostgreSQL and a Redis of its
own, with the Procfile's worker group and scheduler, once without faults and once with them.

Each phase (``--phases nofaults,faults``) runs for ``--minutes`` (default 8; ``--seconds``
for short runs) on a fresh scratch database and a fresh data directory, with:

- a ``redis-server`` of the script's own on a free port (never the shared one);
- the worker group ``python -m purgekeeper.commands.worker --processes 2 --threads 2
  --queues purgekeeper-cleanup`` (the Procfile's worker, without its metrics fork) and
  ``purgectl scheduler``, with the environment pointing them at that database and Redis.
  The script is their process manager, as honcho or systemd would be: a worker group or a
  scheduler that exits is started again, and the time that takes is reported;
- a handle with the broker URL in this process (it accepts and wakes; it cleans nothing),
  driven by ``--ingest-threads`` (4) threads that ingest 200-byte events into conversations of
  their own, ``--conversations-per-thread`` (4) at a time, one event in
  ``--attachment-every`` (10) with a 4 KiB attachment of its own (CAS and real files in turn);
  2 purge threads, one purging a whole conversation and one a content purge (the events of one
  author, read from a conversation that has grown) every ``--purge-every`` (1.5) seconds;
  and 1 reader (none with ``--no-reader``), reading live and recently purged conversations in
  a loop and checking that nothing was read whose purge's acceptance had returned before the
  read began.

The faults phase adds, at staggered times: a SIGSTOP of one worker process for
``--stop-seconds`` (20) then SIGCONT, at 15% of the phase; a kill -9 of one worker process (a
child of the group's main process) every ``--kill-every`` (45) seconds from 30%; a Redis
restart on the same port (``--redis-down``, 2 s down) at 50%; a kill -9 of the scheduler at
70%. A fault waits for the one before it, and one that needs a worker process for the group
killed last to be started again. The restarts are reported: the kill to the exit the manager
saw (dramatiq's main process stops the whole group when one of its processes dies), and the
exit to ready.

At the end of a phase the load stops, every purge is waited for (at most
``--settle-seconds``), and the invariants are checked: no read after acceptance, no body or
attachment name left of purged content, no file left of a deleted blob and no blob of purged
content left undeleted, no purge stuck or incomplete. Per phase: events ingested, purges,
acceptance to complete (the ledger row's ``accepted_at`` to ``purge_completions
.completed_at``, the database clock) p50 and p99, and the ingest rate of each minute. Target:
p50 with faults at most 3x p50 without (``--strict`` exits 1 when it is missed or a check
fails).

``--profile`` samples where the time goes, every 0.5 s: CPU seconds (``/proc/<pid>/stat``) of
the worker processes, the scheduler, Redis, this script's threads by role and the scratch
database's PostgreSQL backends by ``application_name``; the machine's CPU (``/proc/stat``);
the statements PostgreSQL was running (``pg_stat_activity``, the seconds each kind was seen
active, by what it waited on, ``CPU`` when nothing; ``pg_stat_statements`` is not assumed), the tables' reads and writes
(``pg_stat_user_tables``); and the cleanup's CPU per second of step attempts against what
``PURGEKEEPER_CLEANUP_YIELD`` promises (a batch run while others are busy is followed by a
pause of yield x its time: a step thread is in its batches at most 1/(1+yield) of the time).

The server is ``PK_BENCH_POSTGRES_URL``; the scratch databases are dropped, the processes and
Redis stopped, also on failure or SIGTERM. The last line printed is the figures as JSON.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as dt
import json
import os
import random
import re
import shlex
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
from broker_mode import SCHEDULER_READY, WORKER_READY, Roots, Started, free_port, process_env, procfile_lines, start
from scratch import ScratchDatabase, shown_url

import purgekeeper
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.settings import CLEANUP_YIELD, Settings
from purgekeeper.schema import migrate
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import Conflict, Fenced, NotFound
from purgekeeper.workers.children import living_children

DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
PHASES = ("nofaults", "faults")
QUEUE = "purgekeeper-cleanup"
BODY_BYTES = 200
FILE_BYTES = 4096
AUTHORS = 5
MIN_EVENTS_TO_PURGE = 20
MAX_CONTENT_PURGE_EVENTS = 500
RECENT_PURGES = 50  # the reader reads these purged conversations too
READ_PURGED_SHARE = 0.3
SAMPLE_S = 0.5
READY_WAIT_S = 120.0
TARGET_RATIO = 3.0
ACCEPTED_RACES = (Fenced, Conflict, NotFound)  # a purge meeting the load: refused, nothing written


# -- the processes and their manager -------------------------------------------------------------


class Supervised:
    """One process the script manages: started again whenever it exits, until ``close``.
    ``generation`` counts its starts; ``ready`` is set while its current start is ready."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path, ready: tuple[str, int]) -> None:
        self.name, self.argv, self.env, self.logs, self.marker = name, argv, env, logs, ready
        self.generation = 0
        self.ready = threading.Event()
        self.current: Started | None = None
        self.restarts: list[dict[str, float]] = []  # per restart: exit seen -> ready, and kill -> exit seen
        self.killed_at: float | None = None  # set by a fault that kills it (or one of its processes)
        self.lock = threading.Lock()

    def start(self) -> None:
        with self.lock:
            self.generation += 1
            self.current = start(f"{self.name}-{self.generation}", self.argv, self.env, self.logs)
        wait_ready(self.current, *self.marker)
        self.ready.set()

    def pid(self) -> int:
        assert self.current is not None
        return self.current.popen.pid

    def exited(self) -> bool:
        return self.current is not None and self.current.popen.poll() is not None

    def restart(self) -> None:
        seen = time.monotonic()
        self.ready.clear()
        self.start()
        restart = {"generation": self.generation, "restart_s": round(time.monotonic() - seen, 2)}
        if self.killed_at is not None:
            restart["kill_to_exit_s"] = round(seen - self.killed_at, 2)
            self.killed_at = None
        self.restarts.append(restart)

    def wait_started_after(self, generation: int, timeout: float = READY_WAIT_S) -> None:
        deadline = time.monotonic() + timeout
        while self.generation <= generation or not self.ready.is_set():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} was not started again within {timeout:g} s")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()


def wait_ready(process: Started, marker: str, count: int) -> None:
    deadline = time.monotonic() + READY_WAIT_S
    while process.output().count(marker) < count:
        if process.popen.poll() is not None or time.monotonic() > deadline:
            tail = "\n".join(process.output().splitlines()[-30:])
            raise RuntimeError(
                f"{process.name} did not print {marker!r} x{count} (exit {process.popen.poll()}):\n{tail}"
            )
        time.sleep(0.05)


class Manager(threading.Thread):
    """What honcho or systemd does: every 0.2 s, start again what exited."""

    def __init__(self, processes: list[Supervised]) -> None:
        super().__init__(name="soak-manager", daemon=True)
        self.processes = processes
        self.closing = threading.Event()
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.closing.wait(0.2):
            for process in self.processes:
                if process.exited() and not self.closing.is_set():
                    try:
                        process.restart()
                    except RuntimeError as exc:
                        self.failures.append(str(exc))

    def close(self) -> None:
        self.closing.set()
        if self.ident is not None:
            self.join()
        for process in reversed(self.processes):
            process.stop()


class Redis:
    """A ``redis-server`` of the script's own, on one port for its whole life (restarts too)."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.port, self.starts = directory, free_port(), 0
        directory.mkdir(parents=True, exist_ok=True)
        self.server: Started | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.starts += 1
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory)]
        argv += ["--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction"]
        self.server = start(f"redis-{self.starts}", argv, dict(os.environ), self.directory)
        wait_ready(self.server, "Ready to accept connections", 1)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def restart(self, down_s: float) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()


def worker_argv(processes: int, threads: int) -> list[str]:
    return [sys.executable, "-m", "purgekeeper.commands.worker", "--processes", str(processes),
            "--threads", str(threads), "--queues", QUEUE]  # fmt: skip


@contextlib.contextmanager
def service(env: dict[str, str], logs: Path, processes: int, threads: int) -> Iterator[dict[str, Supervised]]:
    worker = Supervised("worker", worker_argv(processes, threads), env, logs, (WORKER_READY, processes))
    scheduler_argv = shlex.split(procfile_lines()["scheduler"])
    scheduler = Supervised("scheduler", scheduler_argv, env, logs, (SCHEDULER_READY, 1))
    manager = Manager([worker, scheduler])
    try:
        worker.start()
        scheduler.start()
        manager.start()  # after both are ready: a start that fails is not started again
        yield {"worker": worker, "scheduler": scheduler}
    finally:
        manager.close()
    if manager.failures:
        raise RuntimeError("; ".join(manager.failures))


# -- the load ---------------------------------------------------------------------------------------


@dataclass
class Registry:
    """What the threads share: the live conversations (owner thread, events ingested), the
    purges whose acceptance has returned (monotonic time), and the tallies."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    live: dict[str, list[int]] = field(default_factory=dict)  # id -> [owner, events]
    purged_conversations: dict[str, float] = field(default_factory=dict)
    purged_events: dict[str, float] = field(default_factory=dict)
    recent: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=RECENT_PURGES))
    ingested_at: list[float] = field(default_factory=list)
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    errors: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def add(self, conversation_id: str, owner: int) -> None:
        with self.lock:
            self.live[conversation_id] = [owner, 0]

    def mine(self, owner: int) -> list[str]:
        with self.lock:
            return [c for c, (o, _) in self.live.items() if o == owner]

    def ingested(self, conversation_id: str) -> None:
        with self.lock:
            self.ingested_at.append(time.monotonic())
            if conversation_id in self.live:
                self.live[conversation_id][1] += 1

    def grown(self, rng: random.Random, *, take: bool) -> str | None:
        """A live conversation of at least ``MIN_EVENTS_TO_PURGE`` events (``take``: no longer live)."""
        with self.lock:
            grown = sorted(c for c, (_, events) in self.live.items() if events >= MIN_EVENTS_TO_PURGE)
            chosen = rng.choice(grown) if grown else None
            if chosen is not None and take:
                del self.live[chosen]
            return chosen

    def conversation_purged(self, conversation_id: str) -> None:
        with self.lock:
            self.purged_conversations[conversation_id] = time.monotonic()
            self.recent.append(conversation_id)

    def events_purged(self, conversation_id: str, event_ids: list[str]) -> None:
        with self.lock:
            now = time.monotonic()
            self.purged_events.update((event_id, now) for event_id in event_ids)
            self.recent.append(conversation_id)

    def to_read(self, rng: random.Random) -> str | None:
        with self.lock:
            if self.recent and rng.random() < READ_PURGED_SHARE:
                return rng.choice(self.recent)
            return rng.choice(list(self.live)) if self.live else None

    def check_read(self, conversation_id: str, event_ids: list[str], began: float) -> None:
        """Nothing read whose purge's acceptance returned before the read began."""
        with self.lock:
            if event_ids and self.purged_conversations.get(conversation_id, began) < began:
                self.violations.append(f"read {len(event_ids)} events of purged conversation {conversation_id}")
            late = [e for e in event_ids if self.purged_events.get(e, began) < began]
        if late:
            with self.lock:
                self.violations.append(f"read {len(late)} purged events of {conversation_id}: {late[:3]}")

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1


class Load:
    """The ingest, purge and reader threads, until ``stop`` is set."""

    def __init__(self, pk: Purgekeeper, registry: Registry, options: argparse.Namespace, phase: str) -> None:
        self.pk, self.registry, self.options, self.phase = pk, registry, options, phase
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.ingest, args=(n,), name=f"ingest-{n}", daemon=True)
                        for n in range(options.ingest_threads)]  # fmt: skip
        self.threads.append(threading.Thread(target=self.purge_conversations, name="purge-conversations", daemon=True))
        self.threads.append(threading.Thread(target=self.purge_content, name="purge-content", daemon=True))
        if options.reader:
            self.threads.append(threading.Thread(target=self.read, name="reader", daemon=True))

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def guarded(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The call's result; a refusal of a race (a fence, a stale preview) is counted, any
        other failure kept (the threads go on: the load stays the same)."""
        try:
            return call(*args, **kwargs)
        except ACCEPTED_RACES as exc:
            self.registry.count(f"{what} refused: {type(exc).__name__}")
        except Exception as exc:
            with self.registry.lock:
                self.registry.errors.append(f"{what}: {type(exc).__name__}: {exc}"[:300])
            self.stop.wait(0.2)  # a failing service: do not spin
        return None

    def ingest(self, index: int) -> None:
        rng, made, opened = random.Random(index), 0, 0
        while not self.stop.is_set():
            mine = self.registry.mine(index)
            if len(mine) < self.options.conversations_per_thread:
                opened += 1
                conversation_id = f"{self.phase}-t{index}-c{opened}"
                if self.guarded("create", self.pk.create_conversation, conversation_id) is not None:
                    self.registry.add(conversation_id, index)
                continue
            conversation_id = rng.choice(mine)
            made += 1
            event = self.guarded("ingest", self.pk.ingest_event, conversation_id, **self.new_event(index, made))
            if event is not None:
                self.registry.ingested(conversation_id)

    def new_event(self, index: int, made: int) -> dict[str, Any]:
        body = f"t{index}-e{made}-".ljust(BODY_BYTES, "x")
        attachments = []
        if made % self.options.attachment_every == 0:
            data = (f"{self.phase}-{index}-{made}-" * (FILE_BYTES // 16 + 1)).encode()[:FILE_BYTES]
            kind = (
                purgekeeper.NewAttachment.cas
                if made % (2 * self.options.attachment_every)
                else purgekeeper.NewAttachment.file
            )
            attachments.append(kind(data, name=f"a-{made}.bin"))
        return {"author": f"author-{made % AUTHORS}", "body": body, "attachments": attachments}

    def purge_conversations(self) -> None:
        rng = random.Random("conversations")
        while not self.stop.wait(self.options.purge_every):
            conversation_id = self.registry.grown(rng, take=True)
            if conversation_id is None:
                continue
            purge = self.guarded(
                "conversation purge", self.pk.purge_conversation, conversation_id, actor="soak", reason="soak"
            )
            if purge is not None:
                self.registry.conversation_purged(conversation_id)
                self.registry.count("conversation purges")

    def purge_content(self) -> None:
        rng = random.Random("content")
        while not self.stop.wait(self.options.purge_every):
            conversation_id = self.registry.grown(rng, take=False)
            if conversation_id is None:
                continue
            events = self.guarded("content read", self.pk.read_conversation, conversation_id)
            author = f"author-{rng.randrange(AUTHORS)}"
            ids = [e.id for e in events or () if e.author == author][:MAX_CONTENT_PURGE_EVENTS]
            if not ids:
                continue
            if self.guarded("content purge", self.confirm, ids) is not None:
                self.registry.events_purged(conversation_id, ids)
                self.registry.count("content purges")

    def confirm(self, event_ids: list[str]) -> Any:
        scope = purgekeeper.EventScope(event_ids=tuple(event_ids))
        preview = self.pk.preview_purge(scope)
        return self.pk.confirm_purge(scope, scope_digest=preview.scope_digest, actor="soak", reason="soak")

    def read(self) -> None:
        rng = random.Random("reader")
        while not self.stop.is_set():
            conversation_id = self.registry.to_read(rng)
            if conversation_id is None:
                self.stop.wait(0.05)
                continue
            began = time.monotonic()
            events = self.guarded("read", self.pk.read_conversation, conversation_id)
            if events is not None:
                self.registry.check_read(conversation_id, [e.id for e in events], began)
                self.registry.count("reads")


# -- the faults -------------------------------------------------------------------------------------


class Faults(threading.Thread):
    """The faults phase's plan, one fault at a time (each waits for the one before to end)."""

    def __init__(self, processes: dict[str, Supervised], redis: Redis, options: argparse.Namespace, seconds: float):
        super().__init__(name="soak-faults", daemon=True)
        self.processes, self.redis, self.options = processes, redis, options
        self.plan = plan(seconds, options.kill_every)
        self.done = threading.Event()
        self.log: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self.rng = random.Random("faults")

    def run(self) -> None:
        began = time.monotonic()
        for at, fault in self.plan:
            if self.done.wait(max(0.0, began + at - time.monotonic())):
                return
            started = time.monotonic()
            try:
                detail = getattr(self, fault)()
            except Exception as exc:  # a fault that could not be made: say so, go on
                self.failures.append(f"{fault}: {type(exc).__name__}: {exc}")
                continue
            self.log.append({"fault": fault, "at_s": round(started - began, 1),
                             "took_s": round(time.monotonic() - started, 2), **detail})  # fmt: skip
            print(f"    fault at {started - began:5.1f} s: {fault} {detail}", flush=True)

    def worker_process(self) -> int:
        """A living worker process of the group, once the group is ready."""
        worker = self.processes["worker"]
        if not worker.ready.wait(READY_WAIT_S):
            raise RuntimeError(f"the worker group was not ready within {READY_WAIT_S:g} s")
        children = sorted(living_children(worker.pid()))
        if not children:
            raise RuntimeError("the worker group has no living worker process")
        return self.rng.choice(children)

    def kill_worker(self) -> dict[str, Any]:
        """The group's main process starts another worker process in its place (the time to
        the new one's ready line is ``replaced_s``); were the whole group to stop instead (a
        bare ``dramatiq`` main process), the manager starts it again and this waits for that."""
        worker = self.processes["worker"]
        victim = self.worker_process()
        generation, current = worker.generation, worker.current
        assert current is not None
        ready_lines = current.output().count(WORKER_READY)
        killed = worker.killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        while current.output().count(WORKER_READY) <= ready_lines:
            if worker.generation > generation or current.popen.poll() is not None:
                worker.wait_started_after(generation)
                return {"pid": victim, "group_restarted": True}
            if time.monotonic() - killed > READY_WAIT_S:
                raise RuntimeError(f"no worker process took {victim}'s place within {READY_WAIT_S:g} s")
            time.sleep(0.05)
        worker.killed_at = None
        return {"pid": victim, "replaced_s": round(time.monotonic() - killed, 2)}

    def stop_worker(self) -> dict[str, Any]:
        victim = self.worker_process()
        os.kill(victim, signal.SIGSTOP)
        try:
            self.done.wait(self.options.stop_seconds)
        finally:
            os.kill(victim, signal.SIGCONT)
        return {"pid": victim}

    def restart_redis(self) -> dict[str, Any]:
        self.redis.restart(self.options.redis_down)
        return {"port": self.redis.port}

    def kill_scheduler(self) -> dict[str, Any]:
        """The manager starts it again; it leads once the dead one's leader lease runs out."""
        pid = self.processes["scheduler"].pid()
        self.processes["scheduler"].killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        return {"pid": pid}

    def close(self) -> None:
        self.done.set()
        self.join()


def plan(seconds: float, kill_every: float) -> list[tuple[float, str]]:
    """The stop at 15% of the phase, kills every ``kill_every`` from 30%, Redis at 50% and the
    scheduler at 70%; none in the last 10%."""
    faults = [(seconds * 0.15, "stop_worker"), (seconds * 0.5, "restart_redis"), (seconds * 0.7, "kill_scheduler")]
    at = seconds * 0.3
    while at < seconds * 0.9:
        faults.append((at, "kill_worker"))
        at += kill_every
    return sorted(faults)


# -- the profile ------------------------------------------------------------------------------------

ACTIVITY = """SELECT pid, coalesce(application_name, ''), state, coalesce(query, ''),
                     coalesce(wait_event_type || ':' || wait_event, 'CPU')
                FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"""
TEXT_CHARS = 400  # of a statement's text, for the most active ones
STATEMENT = re.compile(r"^\s*(\w+)\b.*?\b(?:FROM|INTO|UPDATE)\s+\"?(\w+)", re.IGNORECASE | re.DOTALL)
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(stat: Path) -> float | None:
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def machine_ticks() -> tuple[int, int]:
    """(busy, all) clock ticks of every CPU since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def statement_kind(query: str) -> str:
    found = STATEMENT.match(query)
    return f"{found[1].upper()} {found[2]}" if found else " ".join(query.split()[:2])[:40]


class Profiler(threading.Thread):
    """Samples every ``SAMPLE_S`` the CPU seconds of each process and thread by role (a
    process's last sample stands for it once it is gone), and the statements PostgreSQL runs."""

    def __init__(self, url: str, processes: dict[str, Supervised], redis: Redis) -> None:
        super().__init__(name="soak-profiler", daemon=True)
        self.url, self.processes, self.redis = url, processes, redis
        self.done = threading.Event()
        self.cpu: dict[tuple[str, int], list[float]] = {}  # (role, pid or tid) -> [first, last]
        self.active: collections.defaultdict[str, float] = collections.defaultdict(float)
        self.texts: collections.defaultdict[str, float] = collections.defaultdict(float)  # by statement text
        self.machine_start = machine_ticks()
        self.machine_end = self.machine_start
        self.began = time.monotonic()
        self.seconds = 0.0

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            first = True
            while not self.done.wait(0 if first else SAMPLE_S):
                self.sample(conn, baseline=first)
                first = False
            self.sample(conn, baseline=False)
        self.machine_end, self.seconds = machine_ticks(), time.monotonic() - self.began

    def note(self, role: str, key: int, stat: Path, baseline: bool) -> None:
        value = cpu_seconds(stat)
        if value is not None:
            # a process first seen after the start began meanwhile: all its CPU is the phase's
            self.cpu.setdefault((role, key), [value if baseline else 0.0, value])[1] = value

    def sample(self, conn: psycopg.Connection[Any], *, baseline: bool) -> None:
        for name, process in self.processes.items():
            if process.current is None:
                continue
            main = process.pid()
            self.note(f"{name} main" if name == "worker" else name, main, Path(f"/proc/{main}/stat"), baseline)
            for child in living_children(main) if name == "worker" else ():
                self.note("worker processes", child, Path(f"/proc/{child}/stat"), baseline)
        if self.redis.server is not None:
            self.note("redis", self.redis.server.popen.pid, Path(f"/proc/{self.redis.server.popen.pid}/stat"), baseline)
        for thread in threading.enumerate():
            if thread.native_id is not None:
                role, tid = f"bench {thread.name.split('-')[0]}", thread.native_id
                self.note(role, tid, Path(f"/proc/self/task/{tid}/stat"), baseline)
        for pid, application, state, query, waiting in conn.execute(ACTIVITY):
            self.note(f"postgres {application or '?'}", pid, Path(f"/proc/{pid}/stat"), False)
            if state == "active":  # running or waiting (a lock, the WAL flush): which, in brackets
                self.active[f"{application}: {statement_kind(query)} [{waiting}]"] += SAMPLE_S
                self.texts[f"{application}: {' '.join(query.split())[:TEXT_CHARS]}"] += SAMPLE_S

    def close(self) -> None:
        self.done.set()
        self.join()

    def by_role(self) -> dict[str, float]:
        roles: collections.defaultdict[str, float] = collections.defaultdict(float)
        for (role, _), (first, last) in self.cpu.items():
            roles[role] += last - first
        return {role: round(seconds, 1) for role, seconds in sorted(roles.items(), key=lambda r: -r[1])}

    def machine(self) -> dict[str, float]:
        busy = self.machine_end[0] - self.machine_start[0]
        total = self.machine_end[1] - self.machine_start[1]
        return {
            "busy_cpu_s": round(busy / CLK_TCK, 1),
            "cpu_s": round(total / CLK_TCK, 1),
            "busy_share": round(busy / total, 3),
        }


TABLES = """SELECT relname, seq_scan, seq_tup_read, coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0),
                   n_tup_ins, n_tup_upd, n_tup_del, n_live_tup, n_dead_tup
              FROM pg_stat_user_tables ORDER BY seq_tup_read + coalesce(idx_tup_fetch, 0) DESC LIMIT 8"""
TABLE_COLUMNS = ("seq_scan", "seq_tup_read", "idx_scan", "idx_tup_fetch", "ins", "upd", "del", "live", "dead")
ATTEMPT_SECONDS = """SELECT kind, count(*), coalesce(sum(extract(epoch FROM finished_at - started_at)), 0)
                       FROM step_attempts WHERE finished_at IS NOT NULL GROUP BY kind"""


def profile(profiler: Profiler, url: str, yield_share: float) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        tables = {row[0]: dict(zip(TABLE_COLUMNS, row[1:], strict=True)) for row in conn.execute(TABLES)}
        attempts = {kind: (n, float(s)) for kind, n, s in conn.execute(ATTEMPT_SECONDS)}
    cpu = profiler.by_role()
    cleanup_cpu = cpu.get("worker processes", 0.0) + cpu.get("postgres purgekeeper-worker", 0.0)
    attempt_s = sum(s for _, s in attempts.values())
    machine = profiler.machine()
    return {
        "cpu_s_by_role": cpu,
        "machine": machine,
        "postgres_active_s": dict(sorted(profiler.active.items(), key=lambda s: -s[1])[:15]),
        "postgres_active_texts_s": dict(sorted(profiler.texts.items(), key=lambda s: -s[1])[:6]),
        "tables": tables,
        "step_attempts": {kind: {"attempts": n, "seconds": round(s, 1)} for kind, (n, s) in attempts.items()},
        "cleanup_cpu_s": round(cleanup_cpu, 1),
        "cleanup_share_of_machine": round(cleanup_cpu / machine["cpu_s"], 3) if machine["cpu_s"] else None,
        "cleanup_share_of_busy": round(cleanup_cpu / machine["busy_cpu_s"], 3) if machine["busy_cpu_s"] else None,
        "cleanup_cpu_per_attempt_s": round(cleanup_cpu / attempt_s, 3) if attempt_s else None,
        "yield_share": yield_share,
        "yield_promise_per_step_thread": round(1 / (1 + yield_share), 3),
    }


def print_profile(name: str, found: dict[str, Any]) -> None:
    machine = found["machine"]
    print(f"\n  profile of {name}: machine {machine['busy_cpu_s']} of {machine['cpu_s']} CPU s busy "
          f"({100 * machine['busy_share']:.0f}%, other users' load included)")  # fmt: skip
    print("    CPU seconds by role: " + ", ".join(f"{role} {s}" for role, s in found["cpu_s_by_role"].items()))
    print("    PostgreSQL, seconds seen active by statement:")
    for statement, seconds in found["postgres_active_s"].items():
        print(f"      {seconds:7.1f}  {statement}")
    print("    PostgreSQL, the most active statements' texts:")
    for statement, seconds in found["postgres_active_texts_s"].items():
        print(f"      {seconds:7.1f}  {statement}")
    print("    tables (reads and writes): " + "; ".join(
        f"{t} seq {v['seq_tup_read']:,} idx {v['idx_tup_fetch']:,} ins {v['ins']:,} upd {v['upd']:,}"
        for t, v in found["tables"].items()))  # fmt: skip
    share = 100 * (found["cleanup_share_of_busy"] or 0)
    print(f"    cleanup: {found['cleanup_cpu_s']} CPU s ({share:.0f}% of the busy CPU), "
          f"{found['cleanup_cpu_per_attempt_s']} CPU s per second of step attempts; the yield "
          f"({found['yield_share']:g}) promises at most {found['yield_promise_per_step_thread']} "
          "a step thread")  # fmt: skip


# -- the checks and figures -------------------------------------------------------------------------

PURGE_KINDS = "('content', 'conversation')"
UNFINISHED = f"""SELECT count(*) FROM purge_ledger l WHERE l.kind IN {PURGE_KINDS}
                   AND NOT EXISTS (SELECT 1 FROM purge_completions c WHERE c.purge_id = l.purge_id)"""
PURGED_EVENT = """(EXISTS (SELECT 1 FROM tombstones t WHERE t.kind = 'event' AND t.id = {e})
                   OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                                   WHERE p.event_id = {e} AND c.state <> 'purged'))"""
CHECKS = {
    "purges_unfinished": UNFINISHED,
    "steps_not_done": "SELECT count(*) FROM cleanup_steps WHERE status <> 'done'",
    "bodies_left": f"SELECT count(*) FROM events e WHERE e.body IS NOT NULL AND {PURGED_EVENT.format(e='e.id')}",
    "names_left": f"""SELECT count(*) FROM attachments a
                        WHERE a.name IS NOT NULL AND {PURGED_EVENT.format(e="a.event_id")}""",
    "placements_left": """SELECT count(*) FROM placements p JOIN conversations c ON c.id = p.conversation_id
                            WHERE c.state = 'purged'""",
    "blobs_not_deleted": f"""SELECT count(*) FROM blobs b WHERE b.state <> 'deleted' AND NOT EXISTS (
                               SELECT 1 FROM attachments a WHERE a.blob_id = b.id
                                  AND NOT {PURGED_EVENT.format(e="a.event_id")})""",
}
TIMES = f"""SELECT l.accepted_at, c.completed_at FROM purge_ledger l
              JOIN purge_completions c ON c.purge_id = l.purge_id WHERE l.kind IN {PURGE_KINDS}"""


def settle(url: str, seconds: float) -> float:
    """Wait for every purge to complete (at most ``seconds``); how long it took."""
    began = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        while (conn.execute(UNFINISHED).fetchone() or (0,))[0] and time.monotonic() - began < seconds:
            time.sleep(0.5)
    return time.monotonic() - began


def check(url: str, roots: Roots, registry: Registry) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        found = {name: int((conn.execute(query).fetchone() or (0,))[0]) for name, query in CHECKS.items()}
        deleted = conn.execute("SELECT kind, path FROM blobs WHERE state = 'deleted'").fetchall()
    root = {"cas": roots.blob_root, "file": roots.file_root}
    found["files_left"] = sum((root[kind] / path).exists() for kind, path in deleted)
    found["reads_after_acceptance"] = len(registry.violations)
    return found


def as_time(value: Any) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))


def percentile(values: list[float], share: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else None


def completion_times(url: str) -> list[float]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [(as_time(done) - as_time(accepted)).total_seconds() for accepted, done in conn.execute(TIMES)]


def rates(times: list[float], began: float, ended: float, window: float = 60.0) -> list[float]:
    """Events per second in each ``window`` of the phase (the last one as long as it lasted)."""
    found = []
    start = began
    while start < ended - 1:
        end = min(start + window, ended)
        found.append(round(sum(start <= t < end for t in times) / (end - start), 1))
        start = end
    return found


# -- a phase ----------------------------------------------------------------------------------------


@dataclass
class PhaseResult:
    figures: dict[str, Any]
    problems: list[str]


def run_phase(name: str, server_url: str, directory: Path, options: argparse.Namespace) -> PhaseResult:
    seconds = options.seconds if options.seconds is not None else options.minutes * 60
    roots = Roots(directory / name)
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(ScratchDatabase(server_url, f"pk_soak_{os.getpid()}_{name}"))
        database = Database(scratch.url)
        try:
            migrate.upgrade(database)
        finally:
            database.dispose()
        redis = Redis(directory / name)
        redis.start()
        stack.callback(redis.stop)
        env = process_env(scratch.url, redis.url, roots)
        env.pop("PURGEKEEPER_WORKER_METRICS_PORT")  # the group's children are its worker processes only
        env.update(options.extra_env)
        logs = directory / f"{name}-logs"
        logs.mkdir()
        processes = stack.enter_context(service(env, logs, options.worker_processes, options.worker_threads))
        pk = purgekeeper.open(settings=Settings.from_env(env), workers="auto")
        stack.callback(pk.close)
        result = measure(name, pk, scratch.url, roots, processes, redis, options, seconds)
    return result


def measure(name: str, pk: Purgekeeper, url: str, roots: Roots, processes: dict[str, Supervised], redis: Redis,
            options: argparse.Namespace, seconds: float) -> PhaseResult:  # fmt: skip
    registry = Registry()
    profiler = Profiler(url, processes, redis) if options.profile else None
    faults = Faults(processes, redis, options, seconds) if name == "faults" else None
    print(f"\nphase {name}: {seconds:g} s of load", flush=True)
    began = time.monotonic()
    with Load(pk, registry, options, name):
        for thread in (profiler, faults):
            if thread is not None:
                thread.start()
        time.sleep(seconds)
        if faults is not None:
            faults.close()
    ended = time.monotonic()
    settled = settle(url, options.settle_seconds)
    if profiler is not None:
        profiler.close()
    found = check(url, roots, registry)
    times = completion_times(url)
    figures = phase_figures(registry, found, times, rates(registry.ingested_at, began, ended), settled, seconds)
    figures["restarts"] = {n: p.restarts for n, p in processes.items()}
    if faults is not None:
        figures["faults"] = faults.log
    if profiler is not None:
        figures["profile"] = profile(profiler, url, CLEANUP_YIELD)  # the processes' env sets none
    problems = [f"{name}: {check_name} = {value}" for check_name, value in found.items() if value]
    problems += [f"{name}: {v}" for v in registry.violations[:10]]
    problems += [f"{name}: fault {f}" for f in (faults.failures if faults else [])]
    return PhaseResult(figures, problems)


def phase_figures(registry: Registry, found: dict[str, int], times: list[float], per_minute: list[float],
                  settled: float, seconds: float) -> dict[str, Any]:  # fmt: skip
    counts = registry.counts
    return {
        "seconds": seconds,
        "events": len(registry.ingested_at),
        "purges": counts["conversation purges"] + counts["content purges"],
        "conversation_purges": counts["conversation purges"],
        "content_purges": counts["content purges"],
        "completed": len(times),
        "complete_p50_s": percentile(times, 0.5),
        "complete_p99_s": percentile(times, 0.99),
        "ingest_per_s_by_minute": per_minute,
        "reads": counts["reads"],
        "refused": {k: v for k, v in counts.items() if "refused" in k},
        "errors": len(registry.errors),
        "error_samples": registry.errors[:5],
        "settle_s": round(settled, 1),
        "checks": found,
    }


def print_phase(name: str, figures: dict[str, Any]) -> None:
    print(f"  {name}: {figures['events']:,} events, {figures['purges']} purges ({figures['conversation_purges']} "
          f"conversation, {figures['content_purges']} content), {figures['reads']:,} reads, "
          f"{figures['errors']} errors; settled in {figures['settle_s']} s")  # fmt: skip
    print(f"    acceptance to complete: p50 {fmt(figures['complete_p50_s'])} s, p99 {fmt(figures['complete_p99_s'])} s")
    print(f"    ingest events/s by minute: {figures['ingest_per_s_by_minute']}")
    print(f"    checks: {figures['checks']}")
    for process, restarts in figures["restarts"].items():
        if restarts:
            print(f"    {process} restarts (s): {restarts}")
    for sample in figures["error_samples"]:
        print(f"    error: {sample}")


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


# -- main -------------------------------------------------------------------------------------------


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds the with blocks: processes stopped, databases dropped


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="See the module docstring.")
    parser.add_argument("--minutes", type=float, default=8.0, help="load per phase (default 8)")
    parser.add_argument("--seconds", type=float, default=None, help="load per phase in seconds (overrides --minutes)")
    parser.add_argument("--phases", default=",".join(PHASES), help="nofaults,faults (either or both, in order)")
    parser.add_argument("--ingest-threads", type=int, default=4)
    parser.add_argument("--conversations-per-thread", type=int, default=4)
    parser.add_argument("--attachment-every", type=int, default=10)
    parser.add_argument(
        "--no-reader", dest="reader", action="store_false", help="no reader thread (what reads cost ingest)"
    )
    parser.add_argument("--purge-every", type=float, default=1.5, help="seconds between two purges of a purge thread")
    parser.add_argument("--worker-processes", type=int, default=2)
    parser.add_argument("--worker-threads", type=int, default=2)
    parser.add_argument("--kill-every", type=float, default=45.0, help="seconds between kill -9s of a worker process")
    parser.add_argument("--stop-seconds", type=float, default=20.0, help="how long a worker process is SIGSTOPped")
    parser.add_argument("--redis-down", type=float, default=2.0, help="seconds Redis stays down in its restart")
    parser.add_argument("--sweep-seconds", type=float, default=None, help="PURGEKEEPER_SWEEP_INTERVAL (default 5)")
    parser.add_argument("--settle-seconds", type=float, default=300.0, help="longest wait for the purges at the end")
    parser.add_argument("--profile", action="store_true", help="sample where the time goes, and print it")
    parser.add_argument("--dir", type=Path, default=None, help="where the data directories go (a temporary one)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a check fails or the target is missed")
    options = parser.parse_args(argv)
    options.phases = [p for p in options.phases.split(",") if p]
    if not options.phases or set(options.phases) - set(PHASES):
        parser.error(f"--phases takes {','.join(PHASES)}")
    options.extra_env = {"PURGEKEEPER_SWEEP_INTERVAL": f"{options.sweep_seconds:g}"} if options.sweep_seconds else {}
    return options


def summary(results: dict[str, PhaseResult]) -> dict[str, Any]:
    figures: dict[str, Any] = {"phases": {n: r.figures for n, r in results.items()}}
    base, faulted = (results.get(p) for p in PHASES)
    if base and faulted and base.figures["complete_p50_s"] and faulted.figures["complete_p50_s"] is not None:
        ratio = faulted.figures["complete_p50_s"] / base.figures["complete_p50_s"]
        figures.update(
            {"p50_ratio": round(ratio, 2), "target_ratio": TARGET_RATIO, "target_met": ratio <= TARGET_RATIO}
        )
        print(f"\np50 acceptance to complete, faults / no faults: {ratio:.2f}x; target <= {TARGET_RATIO:g}x: "
              f"{'met' if ratio <= TARGET_RATIO else 'MISSED'}")  # fmt: skip
    problems = [p for r in results.values() for p in r.problems]
    for problem in problems:
        print(f"CHECK FAILED: {problem}")
    figures["checks_ok"] = not problems
    return figures


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    signal.signal(signal.SIGTERM, _terminate)
    server_url = os.environ.get("PK_BENCH_POSTGRES_URL", DEFAULT_SERVER_URL)
    print(f"soak at {shown_url(server_url)}: phases {','.join(options.phases)}; {os.cpu_count()} CPUs; load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)  # fmt: skip
    results: dict[str, PhaseResult] = {}
    with tempfile.TemporaryDirectory(prefix="pk-soak-", dir=options.dir) as directory:
        for name in options.phases:
            results[name] = run_phase(name, server_url, Path(directory), options)
            print_phase(name, results[name].figures)
            if "profile" in results[name].figures:
                print_profile(name, results[name].figures["profile"])
    figures = summary(results)
    print(json.dumps(figures, default=str))
    return 1 if options.strict and not (figures["checks_ok"] and figures.get("target_met", True)) else 0


if __name__ == "__main__":
    sys.exit(main())
