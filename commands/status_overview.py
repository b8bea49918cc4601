"""The operator's overview of the purge machinery: what ``/metrics`` and the ``/status`` page
show, read by :func:`snapshot` in one read transaction on the database clock.

The reads are aggregates (``purgekeeper.schema.overview``): the cleanup steps by status and kind, the
oldest due step, the incomplete and stalled purges, retention, and the counters the step
protocol keeps (attempts, failures, attempt durations, acceptance to complete), and the
live worker processes by role (their heartbeats). Their cost does not grow with the ledger,
the attempts' history, the steps done, the retention runs accepted, or one purge's size:
what is history is a counter the database keeps as it is written (``metric_counters``,
migration 0015), and only what is unfinished is summed. The ledger's
verification is the read gate's background audit (``purgekeeper.commands.gate``): a snapshot never walks
the chain. The signed log's state is the key's file read and the newest checkpoint stat-ed
(``purgekeeper.commands.receipts.Receipts.log_state``), never its tiles. The surfaces render a
snapshot; they open no transaction of their own.
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib.metadata
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import Connection

from purgekeeper.commands import sealing_backfill
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.purge_reads import stall_bound
from purgekeeper.commands.receipts import LogState
from purgekeeper.commands.records import LedgerReport
from purgekeeper.schema import heartbeats, ledger, migrate, overview, retention_queries
from purgekeeper.schema.errors import MessagingUnavailable
from purgekeeper.schema.overview import Counters, StepTotals
from purgekeeper.schema.states import StepKind
from purgekeeper.storage import checkpoint
from purgekeeper.storage.keystore import KeyStoreUnusable

DISTRIBUTION = "purgekeeper"


@dataclass(frozen=True)
class Snapshot:
    """The aggregate state of the purge machinery, read in one transaction on the database clock."""

    now: dt.datetime
    ledger_seq: int
    head_hash: str
    steps: Mapping[tuple[str, str], StepTotals]
    oldest_due_age: dt.timedelta
    incomplete_purges: int
    stalled_purges: int
    ledger: LedgerReport
    gate_problems: tuple[str, ...]  # why content reads and writes are closed; empty when open
    retention_summary: retention_queries.Summary  # policies, runs, expired, held, holds, fences
    counters: Counters  # attempts, failures and durations, kept by the step protocol
    checkpoint_problem: str | None = None  # why the checkpoint directory cannot be written
    workers_alive: Mapping[str, int] = field(default_factory=dict)  # live processes by role, every role
    log: LogState = field(default_factory=LogState)  # the signed log's size and age, why its key fails
    key_store_problem: str | None = None  # why the key store cannot be written (no ingest seals, no purge shreds)
    plain_content: Mapping[str, int] = field(default_factory=dict)  # rows written before sealing, by table (capped)

    @property
    def log_checkpoint_age(self) -> dt.timedelta | None:
        age = self.log.checkpoint_age
        return None if age is None else dt.timedelta(seconds=age)

    @property
    def plain_summary(self) -> str:
        """What is left in plain text, as ``events 3, blobs 10000+``; "" when nothing is."""
        return ", ".join(
            f"{table} {min(count, 10_000)}{'+' if count > 10_000 else ''}"
            for table, count in sorted(self.plain_content.items())
            if count
        )

    @property
    def messaging_available(self) -> bool:
        return not self.gate_problems

    @property
    def oldest_deferral_age(self) -> dt.timedelta:
        """How long the standing policy that non-terminal agent runs have held back longest has
        been held back (from the first turn they deferred); 0 when none is."""
        since = self.retention_summary.oldest_deferral
        return dt.timedelta(0) if since is None else max(self.now - since, dt.timedelta(0))

    def of_kind(self, kind: StepKind) -> StepTotals:
        groups = [totals for (_status, k), totals in self.steps.items() if k == kind.value]
        return overview.summed(groups)

    @property
    def all_steps(self) -> StepTotals:
        return overview.summed(list(self.steps.values()))


class LedgerCheck:
    """What the gate's background audit has verified of the chain so far (``purgekeeper.commands.gate``):
    a snapshot never walks the ledger, so its cost does not grow with it."""

    def __init__(self, pk: Purgekeeper) -> None:
        self.pk = pk

    def report(self, head: tuple[int, str]) -> LedgerReport:
        audited, audited_hash, damage = self.pk.gate.audit_state()
        return LedgerReport(ok=not damage, rows=audited, head_hash=audited_hash, problems=damage)


def snapshot(pk: Purgekeeper, check: LedgerCheck | None = None) -> Snapshot:
    """Read the overview (``check``: the audit's state, the handle's by default)."""
    check = check or LedgerCheck(pk)
    with pk.db.read() as conn:
        head = ledger.read_head(conn)
        totals = overview.step_totals(conn)
        due_since = overview.oldest_due_since(conn, head.now)
        present = heartbeats.presence(conn, head.now)
        incomplete, stalled = overview.purge_counts(conn, head.now, stall_bound(present, pk.stall_after))
        gate_problems = probe_gate(pk, conn)
        retained = retention_queries.summary(conn)
        counted = overview.counters(conn)
    return Snapshot(
        now=head.now,
        ledger_seq=head.seq,
        head_hash=head.head_hash,
        steps=totals,
        oldest_due_age=max(head.now - due_since, dt.timedelta(0)) if due_since else dt.timedelta(0),
        incomplete_purges=incomplete,
        stalled_purges=stalled,
        ledger=check.report((head.seq, head.head_hash)),
        gate_problems=gate_problems,
        retention_summary=retained,
        counters=counted,
        checkpoint_problem=checkpoint.unwritable(pk.settings.checkpoint_dir),
        workers_alive=present.alive,
        log=pk.receipts.log_state(),  # a read of the key, a stat of the checkpoint: no walk
        key_store_problem=key_store_problem(pk),
        plain_content=sealing_backfill.content_left(pk.db),
    )


def key_store_problem(pk: Purgekeeper) -> str | None:
    """Why the handle's key store cannot be written now (``FileKeyStore.check``), or None."""
    try:
        pk.key_store.check()
    except KeyStoreUnusable as exc:
        return str(exc)
    return None


def probe_gate(pk: Purgekeeper, conn: Connection) -> tuple[str, ...]:
    """What the next content read would meet: nothing when the gate is open, else its reasons.
    (The same one-row check a read makes; it changes nothing a read would not.)"""
    try:
        pk.gate.require_open(conn)
    except MessagingUnavailable as closed:
        return closed.diagnostics or (closed.detail,)
    return ()


@dataclass(frozen=True)
class Build:
    """What is running: purgekeeper's version, Python's, and the schema revision this code
    migrates a database to (``purgectl init``)."""

    version: str
    python: str
    schema_revision: str


@functools.cache
def build() -> Build:
    """Read once per process: none of it changes while the process runs."""
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        version = "unknown"
    return Build(version, platform.python_version(), migrate.head_revision())
