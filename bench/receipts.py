"""What receipts cost: acceptance throughput with the signed log against without it, a
receipt's and a consistency proof's cost at a large ledger against a small one, and the
bytes the tree's hashes take per row.

1. **Acceptance throughput** (``bench/acceptance.py``'s method, its own functions): N threads
   (8) confirm content purges of 10 events each, every thread its own conversation; the
   window from the release of all threads to the last return gives purges per second, and
   each call's latency the p50. One scratch database signs checkpoints (the default), the
   other was opened with ``purgekeeper.open(..., sign_checkpoints=False)``; both are seeded the
   same and timed in turns, A B B A within a run (each side's purges in two halves), the
   order alternating per run; the figure is the median over pairs of runs (one of each order)
   of their geometric mean. Target: ratio >= 0.95.
2. **receipt() and consistency() at size**: a ledger of ``--rows`` rows (default 1,000,000)
   and one of ``--small`` (10,000), each bulk-loaded the way ``bench/scale.py`` loads one
   (COPY with a correct hash chain built by ``purgekeeper.schema.ledger``'s own functions; triggers off
   for the load) while the same rows go through the handle's own copy
   (``LedgerCopy.append``, in batches of a segment), which grows the tiles and signs a
   checkpoint per batch as it does in production. The setup's time is reported. Then the
   median of ``pk.receipt`` (a row in the middle) and ``pk.consistency`` (from half the
   size). Target: large <= 1.2 x small.
3. **Storage**: the size of ``<checkpoint dir>/<database id>.log/`` (tiles and checkpoint)
   divided by the rows, at both sizes: linear when the two agree.

With ``--witness`` the signed side also has one local witness (``purgectl witness serve``, its
own process on this machine, following the signed database's log): every checkpoint is
offered to it by the handle's witnessing thread, off the acceptance's path, and the figure is
``witnessed_throughput_ratio`` against signing switched off. Target: >= 0.9. The receipts of
that run must carry the witness's cosignature (checked with ``--witness VKEY`` and
``--quorum 1``). ``--throughput-only`` skips parts 2 and 3.

Each figure is against its baseline in the same run; ``--runs N`` takes medians. ``--tiny``
(tests/bench) runs every part at a few hundred rows.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
from acceptance import GROUP_SIZE, WARMUP_GROUPS_PER_THREAD, Bench, Phase, run_phase, seed_conversations
from scale import Chain, median_ms, seed_ledger, settle
from scratch import ScratchDatabase, open_under, shown_url

from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.settings import Settings
from purgekeeper.schema import ledger, migrate
from purgekeeper.schema.db import Database
from purgekeeper.storage import signed_log

DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
TARGET_THROUGHPUT_RATIO = 0.95
TARGET_WITNESSED_RATIO = 0.9
PURGECTL = Path(sys.executable).parent / "purgectl"
TARGET_COST_RATIO = 1.2


def new_database(server_url: str, label: str) -> ScratchDatabase:
    return ScratchDatabase(server_url, f"pk_receipts_{os.getpid()}_{label}_{uuid.uuid4().hex[:6]}")


def migrated(url: str) -> str:
    database = Database(url)
    try:
        migrate.upgrade(database)
        with database.read() as conn:
            return ledger.read_head(conn).database_id
    finally:
        database.dispose()


def open_handle(url: str, root: Path, *, sign: bool = True, witnesses: str | None = None) -> Purgekeeper:
    settings = dataclasses.replace(Settings.from_env(), witnesses=witnesses)
    return open_under(url, root, settings=settings, sign_checkpoints=sign)


@contextlib.contextmanager
def local_witness(root: Path, origin: str, log_vkey: str) -> Iterator[tuple[str, str]]:
    """``purgectl witness serve`` on a free port of this machine, following the log of
    ``origin``: yields its URL and its verification key."""
    root.mkdir(parents=True, exist_ok=True)
    key = root / "witness.key"
    init = [str(PURGECTL), "witness", "key", "init", "--key", str(key), "--name", "bench/w1"]
    subprocess.run(init, check=True, capture_output=True)
    shown = subprocess.run(
        [str(PURGECTL), "witness", "key", "show", "--key", str(key)], check=True, capture_output=True, text=True
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(PURGECTL), "witness", "serve", "--key", str(key), "--state", str(root / "state")]
    command += ["--log", f"{origin}={log_vkey}", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield url, shown.stdout.strip().splitlines()[-1]
    finally:
        process.terminate()
        process.wait(timeout=30)


# -- 1. acceptance throughput --------------------------------------------------------------------


def conversations(run: int, threads: int) -> list[str]:
    return [f"r{run}-t{t}" for t in range(threads)]


def seed_acceptances(url: str, runs: int, threads: int, per_thread: int) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        seed_conversations(conn, [f"warm-t{t}" for t in range(threads)], WARMUP_GROUPS_PER_THREAD * GROUP_SIZE)
        for run in range(runs):
            seed_conversations(conn, conversations(run, threads), per_thread * GROUP_SIZE)
    settle(url)


def throughput(
    server_url: str, root: Path, runs: int, threads: int, per_thread: int, *, witness: bool = False
) -> dict[str, Any]:
    signed_db, plain_db = new_database(server_url, "signed"), new_database(server_url, "plain")
    with signed_db, plain_db, contextlib.ExitStack() as stack:
        for scratch in (signed_db, plain_db):
            migrated(scratch.url)
            seed_acceptances(scratch.url, runs, threads, per_thread)
        witnesses = stack.enter_context(witnessed_by(signed_db.url, root)) if witness else None
        signed = Bench(open_handle(signed_db.url, root / "signed", witnesses=witnesses), [], threads, per_thread)
        plain = Bench(open_handle(plain_db.url, root / "plain", sign=False), [], threads, per_thread)
        try:
            for bench in (signed, plain):  # untimed: pools, caches, prepared statements
                run_phase(bench.product_jobs([f"warm-t{t}" for t in range(threads)], WARMUP_GROUPS_PER_THREAD))
            ratios, per_run = [], []
            for run in range(runs):
                jobs = {
                    name: bench.product_jobs(conversations(run, threads), per_thread)
                    for name, bench in (("signed", signed), ("plain", plain))
                }
                order = ("signed", "plain") if run % 2 == 0 else ("plain", "signed")
                phases = abba(jobs, order)
                ratio = phases["signed"].per_second / phases["plain"].per_second
                ratios.append(ratio)
                per_run.append(
                    {
                        "order": "{0}, {1}, {1}, {0}".format(*order),
                        "signed_per_s": round(phases["signed"].per_second, 1),
                        "plain_per_s": round(phases["plain"].per_second, 1),
                        "signed_p50_ms": round(phases["signed"].p50_ms, 2),
                        "plain_p50_ms": round(phases["plain"].p50_ms, 2),
                        "ratio": round(ratio, 3),
                    }
                )
                print(json.dumps(per_run[-1]), flush=True)
            receipts_ok = receipt_checks(signed.pk, witnesses)
        finally:
            signed.pk.close()
            plain.pk.close()
    return {
        "threads": threads,
        "purges_per_thread": per_thread,
        "throughput_ratio": statistics.median(order_pairs(ratios)),
        "run_ratios_median": statistics.median(ratios),
        "signed_p50_ms": statistics.median(r["signed_p50_ms"] for r in per_run),
        "plain_p50_ms": statistics.median(r["plain_p50_ms"] for r in per_run),
        "runs": per_run,
        "receipts_ok": receipts_ok,
    }


@contextlib.contextmanager
def witnessed_by(url: str, root: Path) -> Iterator[str]:
    """One local witness following the signed database's log (its key made by a first,
    untimed acceptance): yields ``PURGEKEEPER_WITNESSES`` for it."""
    pk = open_handle(url, root / "signed")
    try:
        pk.purge_conversation("witness-setup", actor="bench", reason="the log's first checkpoint")
        origin, log_vkey = pk.receipts.head().checkpoint.origin, pk.log_key()
    finally:
        pk.close()
    with local_witness(root / "witness", origin, log_vkey) as (witness_url, witness_vkey):
        yield f"{witness_url} {witness_vkey}"


def receipt_checks(pk: Purgekeeper, witnesses: str | None) -> bool:
    """The newest purge's receipt verifies; with a witness, with its cosignature too (its
    thread is given a moment to catch up with the last checkpoint)."""
    from purgekeeper.tlog.verify import ReceiptInvalid, verify_receipt

    newest = pk.list_purges(limit=1).purges[0].purge_id
    keys = [witnesses.split()[1]] if witnesses else []
    for _ in range(100):
        try:
            verify_receipt(pk.receipt(newest), pk.log_key(), witnesses=keys, quorum=len(keys) or None)
            return True
        except ReceiptInvalid:
            time.sleep(0.1)
    return False


def order_pairs(ratios: Sequence[float]) -> list[float]:
    """The runs two by two (one of each order), each pair's geometric mean: what a side gains
    from its place in a run (the middle of A B B A was faster in every run measured, by up to
    20%) cancels within a pair. An odd run out counts alone."""
    pairs = [math.sqrt(ratios[i] * ratios[i + 1]) for i in range(0, len(ratios) - 1, 2)]
    return pairs + list(ratios[len(pairs) * 2 :]) if pairs else list(ratios)


def abba(jobs: dict[str, list[list[Callable[[], object]]]], order: tuple[str, str]) -> dict[str, Phase]:
    """Each side's jobs in two halves, timed A, B, B, A: a drift of the machine during the run
    (the other side's database growing, a checkpoint of the server, another process) weighs
    on both sides alike, not on whichever goes second. Each side's phase is its two halves."""
    halves = {
        name: ([calls[: len(calls) // 2] for calls in per_thread], [calls[len(calls) // 2 :] for calls in per_thread])
        for name, per_thread in ((n, jobs[n]) for n in order)
    }
    first, second = order
    timed = [(first, 0), (second, 0), (second, 1), (first, 1)]
    found: dict[str, list[Phase]] = {first: [], second: []}
    for name, half in timed:
        found[name].append(run_phase(halves[name][half]))
    return {
        name: Phase(
            count=sum(p.count for p in phases),
            window_s=sum(p.window_s for p in phases),
            latencies_s=[v for p in phases for v in p.latencies_s],
        )
        for name, phases in found.items()
    }


# -- 2. and 3. receipt and consistency cost, storage -------------------------------------------------


def log_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def at_size(server_url: str, root: Path, rows: int, repeat: int) -> dict[str, Any]:
    scratch = new_database(server_url, f"n{rows}")
    with scratch:
        database_id = migrated(scratch.url)
        pk = open_handle(scratch.url, root)
        try:
            seeded = seed_ledger(scratch.url, pk.copy, Chain(database_id), rows)
            print(f"  {rows:,} rows seeded, copied and their tree signed in {seeded:.1f} s", flush=True)
            head = pk.receipts.head()
            assert head.size == rows, (head.size, rows)
            with pk.db.read() as conn:
                middle = ledger.entry_at(conn, rows // 2 + 1)
            assert middle is not None
            document = pk.receipt(middle.purge_id)
            from purgekeeper.tlog.verify import verify_receipt

            verify_receipt(document, pk.log_key())
            directory = pk.settings.checkpoint_dir / f"{database_id}{signed_log.LOG_SUFFIX}"
            size = log_bytes(directory)
            return {
                "rows": rows,
                "setup_s": round(seeded, 1),
                "receipt_ms": median_ms(lambda: pk.receipt(middle.purge_id), repeat),
                "consistency_ms": median_ms(lambda: pk.consistency(max(1, rows // 2)), repeat),
                "log_bytes": size,
                "log_bytes_per_row": size / rows,
                "proof_hashes": len(document["inclusion_proof"]),
            }
        finally:
            pk.close()


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(143)


def cost_figures(small: dict[str, Any], large: dict[str, Any]) -> dict[str, Any]:
    return {
        "receipt_ms": [round(small["receipt_ms"], 3), round(large["receipt_ms"], 3)],
        "consistency_ms": [round(small["consistency_ms"], 3), round(large["consistency_ms"], 3)],
        "receipt_ratio": round(large["receipt_ms"] / small["receipt_ms"], 3),
        "consistency_ratio": round(large["consistency_ms"] / small["consistency_ms"], 3),
        "setup_s": [small["setup_s"], large["setup_s"]],
        "log_bytes_per_row": [round(small["log_bytes_per_row"], 2), round(large["log_bytes_per_row"], 2)],
        "rows": [small["rows"], large["rows"]],
    }


def cost_targets(figures: dict[str, Any]) -> dict[str, bool]:
    small, large = figures["rows"]
    return {
        f"receipt() at {large:,} rows <= {TARGET_COST_RATIO} x at {small:,}": figures["receipt_ratio"]
        <= TARGET_COST_RATIO,
        f"consistency() at {large:,} rows <= {TARGET_COST_RATIO} x at {small:,}": figures["consistency_ratio"]
        <= TARGET_COST_RATIO,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3, help="runs of the throughput figure (medians)")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--per-thread", type=int, default=50, help="purges each thread confirms per run")
    parser.add_argument("--rows", type=int, default=1_000_000, help="the large ledger")
    parser.add_argument("--small", type=int, default=10_000, help="the small ledger")
    parser.add_argument("--repeat", type=int, default=51, help="calls per median of receipt and consistency")
    parser.add_argument("--tiny", action="store_true", help="a smoke run: a few hundred rows, few purges")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--witness", action="store_true", help="the signed side with one local witness")
    parser.add_argument("--throughput-only", action="store_true", help="skip the receipt and consistency costs")
    args = parser.parse_args(argv)
    if args.tiny:
        args.runs, args.threads, args.per_thread, args.rows, args.small, args.repeat = 1, 2, 2, 600, 300, 3
    signal.signal(signal.SIGTERM, _terminate)
    server_url = os.environ.get("PK_BENCH_POSTGRES_URL", DEFAULT_SERVER_URL)
    print(
        f"purgekeeper receipts benchmark: PostgreSQL at {shown_url(server_url)}; {args.threads} threads; "
        f"ledgers of {args.small:,} and {args.rows:,} rows; {os.cpu_count()} CPUs",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="pk-receipts-") as tmp:
        os.environ["PURGEKEEPER_DATA_DIR"] = str(Path(tmp) / "data")
        started = time.perf_counter()
        accepted = throughput(
            server_url, Path(tmp) / "throughput", args.runs, args.threads, args.per_thread, witness=args.witness
        )
        print(f"  throughput: {time.perf_counter() - started:.1f} s", flush=True)
        sizes = [] if args.throughput_only else [args.small, args.rows]
        measured = [at_size(server_url, Path(tmp) / f"n{rows}", rows, args.repeat) for rows in sizes]
        for found in measured:
            print(json.dumps(found), flush=True)
    name, target = (
        ("witnessed_throughput_ratio", TARGET_WITNESSED_RATIO)
        if args.witness
        else ("throughput_ratio", TARGET_THROUGHPUT_RATIO)
    )
    what = "with receipts and one local witness" if args.witness else "with receipts"
    figures: dict[str, Any] = {
        name: round(accepted["throughput_ratio"], 3),
        "signed_p50_ms": accepted["signed_p50_ms"],
        "plain_p50_ms": accepted["plain_p50_ms"],
    }
    targets = {f"acceptance throughput {what} >= {target} x without signing": figures[name] >= target}
    if measured:
        figures.update(cost_figures(*measured))
        targets.update(cost_targets(figures))
    print()
    met = True
    for label, ok in targets.items():
        met = met and ok
        print(f"  {'met   ' if ok else 'MISSED'} {label}")
    checks_ok = bool(accepted["receipts_ok"])
    print(json.dumps({**figures, "met": met, "checks_ok": checks_ok}, sort_keys=True))
    return 1 if not checks_ok or (args.strict and not met) else 0


if __name__ == "__main__":
    sys.exit(main())
