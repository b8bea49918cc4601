"""Retention benchmark (issue 14), on PostgreSQL (``make bench``).

Scratch databases are seeded directly (raw SQL, the schema's triggers off while loading:
``session_replication_role = replica``), then ``VACUUM ANALYZE``. Each figure is compared with
its baseline in the same run, in turns (one side, then the other), as medians of ``--repeat``.

1. **A scheduler tick with 1,000 policies and nothing to expire** against a tick with none: two
   databases that differ only in ``retention_policies``: ``--policies`` conversations (default
   1,000) with a recent event each, and in one of them a standing policy per conversation,
   its last run up to date and its next turn due in an hour (what a tick between two turns
   meets). A tick is what the leading scheduler does every few seconds: the lease, the sweep
   of due steps, the retention turn of every due policy, the copy of the ledger
   (``Scheduler.tick`` with the handle's ``scheduler_duties``).
2. **The turns themselves**: the same 1,000 policies all due at once with nothing to expire
   (``run_retention()`` until none is due: taken together, a hundred to a transaction, no
   ledger row), per policy, and spread over the ticks of one interval at the defaults (an
   hour, a 5 s sweep): the tick with its share of the hourly turns against a tick with none
   (``tick_amortised_ratio``, reported beside the target).
3. **A run's acceptance** expiring ``--events`` events (default 100,000) against one expiring
   10: a conversation policy over a conversation of that many old events, and one over a
   conversation of 10; the turn's plan is made before, outside the timing, and the timing is
   the acceptance (``Acceptor.accept`` of the planned run: the fence, its exemptions, the steps, the
   ledger row and its copy).
4. **read_conversation of 1,000 events while a global run's fence stands** (its cleanup not
   run; it expires none of them) against none, in two databases with the same rows.

Targets (issue 14): the tick <= 1.2x; the acceptance at 100,000 events <= 1.5x at 10 (it does
not grow with what it expires); the read <= 1.1x. ``--strict`` exits 1 when one is missed.
The server is ``PK_BENCH_POSTGRES_URL``. The last line printed is the figures as JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from erasure import loading
from scale import handle, settle, timed
from scratch import ScratchDatabase, shown_url

from purgekeeper.commands import kinds
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.kinds.retention_run import Run
from purgekeeper.commands.retention_commands import SCHEDULER, _plan, _run_causal
from purgekeeper.schema import migrate
from purgekeeper.schema.db import Database
from purgekeeper.schema.ledger import utc_text
from purgekeeper.workers.scheduler import Scheduler

DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
SMALL_EVENTS = 10
READ_EVENTS = 1_000
WARM = 10
DEFAULT_INTERVAL = dt.timedelta(hours=1)
DEFAULT_SWEEP = dt.timedelta(seconds=5)


@contextmanager
def scratch_database(server_url: str, tag: str) -> Iterator[str]:
    with ScratchDatabase(server_url, f"pk_retention_{os.getpid()}_{tag}") as scratch:
        database = Database(scratch.url)
        try:
            migrate.upgrade(database)
        finally:
            database.dispose()
        yield scratch.url


# -- seeding (raw SQL, triggers off) ------------------------------------------------------------


def seed_conversations(conn: psycopg.Connection[Any], prefix: str, count: int, *, age: str, events: int = 1) -> None:
    """``count`` conversations ``<prefix>-<n>`` with ``events`` events each, ``age`` old."""
    conn.execute(
        "INSERT INTO conversations (id, kind, state, version) "
        "SELECT %(p)s || '-' || n, 'conversation', 'active', 1 FROM generate_series(0, %(c)s - 1) n",
        {"p": prefix, "c": count},
    )
    conn.execute(
        "INSERT INTO events (id, author, occurred_at, body) "
        "SELECT %(p)s || '-e' || n, 'ada', now() - %(age)s::interval, 'body ' || n "
        "FROM generate_series(0, %(n)s - 1) n",
        {"p": prefix, "n": count * events, "age": age},
    )
    conn.execute(
        "INSERT INTO placements (event_id, conversation_id) "
        "SELECT %(p)s || '-e' || n, %(p)s || '-' || (n %% %(c)s) FROM generate_series(0, %(n)s - 1) n",
        {"p": prefix, "c": count, "n": count * events},
    )


def seed_policies(conn: psycopg.Connection[Any], prefix: str, count: int, *, due: bool) -> None:
    """A standing 30-day policy over each ``<prefix>-<n>``, its window up to date."""
    conn.execute(
        "INSERT INTO retention_policies (policy_id, conversation_id, max_age_seconds, purge_id, next_run_at, "
        "expired_through, last_run_at, last_cutoff) "
        "SELECT 'p-' || %(p)s || '-' || n, %(p)s || '-' || n, 30 * 86400, md5(%(p)s || n), "
        "now() + CASE WHEN %(due)s THEN interval '-1 second' ELSE interval '1 hour' END, "
        "now() - interval '30 days', now(), now() - interval '30 days' FROM generate_series(0, %(c)s - 1) n",
        {"p": prefix, "c": count, "due": due},
    )


# -- 1. and 2. the scheduler --------------------------------------------------------------------


def ticks(quiet: Purgekeeper, busy: Purgekeeper, repeat: int) -> dict[str, float]:
    loops = [Scheduler(pk.db, lambda step_ids: None, after_sweep=pk.scheduler_duties) for pk in (quiet, busy)]
    for _ in range(WARM):
        for loop in loops:
            loop.tick()
    pairs = [(timed(loops[0].tick), timed(loops[1].tick)) for _ in range(repeat * 20)]
    for loop in loops:
        loop.release()
    return {
        "tick_none_ms": statistics.median(p[0] for p in pairs) * 1000,
        "tick_policies_ms": statistics.median(p[1] for p in pairs) * 1000,
    }


def due_turn(pk: Purgekeeper, url: str, policies: int) -> dict[str, float]:
    """Every policy due, nothing to expire: all their turns, timed."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE retention_policies SET next_run_at = now() - interval '1 second'")

    def all_turns() -> None:
        taken = 0
        while outcomes := pk.run_retention():
            assert all(o.purge_id is None and o.error is None for o in outcomes), outcomes[:3]
            taken += len(outcomes)
        assert taken == policies, taken

    spent = timed(all_turns)
    per_tick = spent / (DEFAULT_INTERVAL / DEFAULT_SWEEP)
    return {
        "due_turn_s": spent,
        "due_turn_per_policy_ms": spent * 1000 / policies,
        "due_turn_per_tick_ms": per_tick * 1000,
    }


# -- 3. acceptance ------------------------------------------------------------------------------


def accept_timed(pk: Purgekeeper, policy_id: str) -> float:
    interval = pk.retention_interval
    plan = pk.db.transact(lambda conn: _plan(conn, policy_id=policy_id, interval=interval, taker=SCHEDULER))
    assert plan is not None and plan.cutoff is not None, policy_id
    causal = _run_causal(SCHEDULER, policy_id, plan.policy_purge_id, plan.cutoff)
    request = {"policy_id": policy_id, "cutoff": utc_text(plan.cutoff)}
    return timed(lambda: pk.acceptance.accept(kinds.RETENTION_RUN, Run(policy_id, plan.cutoff), request, causal))


def acceptance(pk: Purgekeeper, repeat: int) -> dict[str, float]:
    accept_timed(pk, "p-warm-0")
    large, small = [], []
    for n in range(repeat):
        large.append(accept_timed(pk, f"p-large{n}-0"))
        small.append(accept_timed(pk, f"p-small{n}-0"))
    return {"accept_large_ms": statistics.median(large) * 1000, "accept_small_ms": statistics.median(small) * 1000}


# -- 4. reads while a fence stands --------------------------------------------------------------


def reads(server_url: str, root: Path, repeat: int) -> dict[str, float]:
    with scratch_database(server_url, "plain") as plain_url, scratch_database(server_url, "fenced") as fenced_url:
        for url in (plain_url, fenced_url):
            with loading(url) as conn:
                seed_conversations(conn, "reader", 1, age="1 hour", events=READ_EVENTS)
                seed_conversations(conn, "old", 1, age="40 days")  # what the fence expires
            settle(url)
        with handle(plain_url, root / "plain") as plain, handle(fenced_url, root / "fenced") as fenced:
            _set_global(fenced)
            [outcome] = fenced.run_retention()  # accepted; its cleanup never runs here
            assert outcome.purge_id is not None
            assert len(plain.read_conversation("reader-0")) == len(fenced.read_conversation("reader-0")) == READ_EVENTS
            for _ in range(WARM):
                plain.read_conversation("reader-0")
                fenced.read_conversation("reader-0")
            pairs = [
                (
                    timed(lambda: plain.read_conversation("reader-0")),
                    timed(lambda: fenced.read_conversation("reader-0")),
                )
                for _ in range(repeat * 20)
            ]
    return {
        "read_ms": statistics.median(p[0] for p in pairs) * 1000,
        "read_fenced_ms": statistics.median(p[1] for p in pairs) * 1000,
    }


def _set_global(pk: Purgekeeper) -> None:
    preview = pk.preview_retention(max_age=dt.timedelta(days=30))
    pk.set_retention(
        "global", max_age=dt.timedelta(days=30), scope_digest=preview.scope_digest, actor="bench", reason="bench"
    )


# -- the run ------------------------------------------------------------------------------------


TARGETS: dict[str, Callable[[dict[str, float]], bool]] = {
    "a tick with 1,000 policies and nothing to expire <= 1.2x a tick with none": lambda r: r["tick_ratio"] <= 1.2,
    "a run's acceptance at 100,000 expiring events <= 1.5x at 10": lambda r: r["accept_ratio"] <= 1.5,
    "read_conversation while a run's fence stands <= 1.1x none": lambda r: r["read_ratio"] <= 1.1,
}


def measure(server_url: str, root: Path, repeat: int, policies: int, events: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    with scratch_database(server_url, "quiet") as quiet_url, scratch_database(server_url, "busy") as busy_url:
        for url in (quiet_url, busy_url):
            with loading(url) as conn:
                seed_conversations(conn, "c", policies, age="1 hour")
                if url == busy_url:
                    seed_policies(conn, "c", policies, due=False)
            settle(url)
        with handle(quiet_url, root / "quiet") as quiet, handle(busy_url, root / "busy") as busy:
            figures |= ticks(quiet, busy, repeat)
            figures |= due_turn(busy, busy_url, policies)
    with scratch_database(server_url, "accept") as url:
        with loading(url) as conn:
            seed_conversations(conn, "warm", 1, age="40 days", events=SMALL_EVENTS)
            seed_policies(conn, "warm", 1, due=True)
            for n in range(repeat):
                seed_conversations(conn, f"large{n}", 1, age="40 days", events=events)
                seed_conversations(conn, f"small{n}", 1, age="40 days", events=SMALL_EVENTS)
                seed_policies(conn, f"large{n}", 1, due=True)
                seed_policies(conn, f"small{n}", 1, due=True)
            conn.execute("UPDATE retention_policies SET expired_through = NULL")  # walk from the beginning
        settle(url)
        with handle(url, root / "accept") as pk:
            figures |= acceptance(pk, repeat)
    figures |= reads(server_url, root, repeat)
    figures["tick_ratio"] = figures["tick_policies_ms"] / figures["tick_none_ms"]
    figures["tick_amortised_ratio"] = (figures["tick_policies_ms"] + figures["due_turn_per_tick_ms"]) / figures[
        "tick_none_ms"
    ]
    figures["accept_ratio"] = figures["accept_large_ms"] / figures["accept_small_ms"]
    figures["read_ratio"] = figures["read_fenced_ms"] / figures["read_ms"]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--policies", type=int, default=1_000, help="standing policies of the tick figure")
    parser.add_argument("--events", type=int, default=100_000, help="events the large run expires")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    server_url = os.environ.get("PK_BENCH_POSTGRES_URL", DEFAULT_SERVER_URL)
    print(f"server {shown_url(server_url)}; {args.policies} policies, {args.events} events", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="pk-retention-") as directory:
        figures = measure(server_url, Path(directory), args.repeat, args.policies, args.events)
    met = {name: check(figures) for name, check in TARGETS.items()}
    print(
        f"tick: {figures['tick_policies_ms']:.2f} ms with {args.policies} policies, {figures['tick_none_ms']:.2f} ms "
        f"with none: {figures['tick_ratio']:.2f}x"
    )
    print(
        f"the turn of {args.policies} due policies with nothing to expire: {figures['due_turn_s']:.2f} s "
        f"({figures['due_turn_per_policy_ms']:.2f} ms a policy; {figures['due_turn_per_tick_ms']:.3f} ms a tick "
        f"over an hour of 5 s sweeps: a tick with its share {figures['tick_amortised_ratio']:.2f}x one with none)"
    )
    print(
        f"acceptance: {figures['accept_large_ms']:.1f} ms expiring {args.events} events, "
        f"{figures['accept_small_ms']:.1f} ms expiring {SMALL_EVENTS}: {figures['accept_ratio']:.2f}x"
    )
    print(
        f"read {READ_EVENTS}: {figures['read_ms']:.2f} ms, with a run's fence standing "
        f"{figures['read_fenced_ms']:.2f} ms: {figures['read_ratio']:.2f}x"
    )
    for name, ok in met.items():
        print(f"  {'met' if ok else 'MISSED'}: {name}")
    print(json.dumps({**figures, "targets_met": all(met.values())}))
    return 1 if args.strict and not all(met.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
