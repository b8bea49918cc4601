"""Prometheus ``/metrics``, and the aggregate reads that it shares with the ``/status`` page.

Every scrape runs a handful of aggregate statements (GROUP BY, MIN, COUNT DISTINCT, through the
step status indexes) in one read transaction: the cost does not grow with one purge's size, and
nothing is read per purge. The metrics (all prefixed ``purgekeeper_``):

    steps{status,kind}                 gauge    cleanup steps by status and kind
    oldest_due_step_age_seconds        gauge    how long the oldest due (or lease-expired) step waits
    incomplete_purges                  gauge    purges with an incomplete step
    stalled_purges                     gauge    purges with a step due for longer than STALL_AFTER
    rows_removed_total                 counter  rows the bodies steps removed or NULLed
    blobs_deleted_total                counter  blobs the attachments steps deleted
    blobs_retained_shared              gauge    blobs kept because a live event still shares them
    step_attempts                      gauge    attempts of all steps (a retry re-arms them to 0)
    ledger_rows                        gauge    rows in the purge ledger (the head's seq)
    ledger_verified                    gauge    0 once the audit found the hash chain damaged, else 1
    ledger_audited_rows                gauge    rows the audit verified in its current round
    messaging_available                gauge    1 when the read gate is open, else 0
    checkpoint_dir_writable            gauge    1 when a checkpoint can be written now, else 0
    retention_policies                 gauge    standing retention policies
    retention_runs_total               counter  retention runs accepted (ledger rows)
    retention_expired_events_total     counter  events the retention runs' bodies steps expired
    retention_held_events_total        counter  events legal holds kept out of retention runs
    legal_holds                        gauge    legal holds in force
    retention_fences                   gauge    retention runs whose cleanup has not finished

``messaging_available`` is what the next content read would meet (``commands.gate``).
``ledger_verified`` and ``ledger_audited_rows`` are the gate's background audit (a few
thousand rows a second, a new round every few minutes): a scrape never walks the chain. A
tampered old row shows as ``ledger_verified 0`` once the audit's round reaches it, and the
gate closes at the same moment; ``purgectl ledger verify`` walks the whole chain at once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from sqlalchemy import Connection

from commands.handle import Purgekeeper
from commands.records import LedgerReport
from commands.surface import error_body, http_status
from commands.web.auth import Tokens, bearer
from schema import ledger, overview, retention
from schema.errors import MessagingUnavailable, PurgekeeperError
from schema.overview import StepTotals
from schema.states import StepKind
from workers import checkpoint

PREFIX = "purgekeeper_"


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
    retention_summary: retention.Summary  # policies, runs, expired, held, holds, fences
    checkpoint_problem: str | None = None  # why the checkpoint directory cannot be written

    @property
    def messaging_available(self) -> bool:
        return not self.gate_problems

    def of_kind(self, kind: StepKind) -> StepTotals:
        groups = [totals for (_status, k), totals in self.steps.items() if k == kind.value]
        return overview.summed(groups)

    @property
    def all_steps(self) -> StepTotals:
        return overview.summed(list(self.steps.values()))


class LedgerCheck:
    """What the gate's background audit has verified of the chain so far (``commands.gate``):
    a scrape never walks the ledger, so its cost does not grow with it."""

    def __init__(self, pk: Purgekeeper) -> None:
        self.pk = pk

    def report(self, head: tuple[int, str]) -> LedgerReport:
        audited, audited_hash, damage = self.pk.gate.audit_state()
        return LedgerReport(ok=not damage, rows=audited, head_hash=audited_hash, problems=damage)


def take_snapshot(pk: Purgekeeper, check: LedgerCheck) -> Snapshot:
    with pk.db.read() as conn:
        head = ledger.read_head(conn)
        totals = overview.step_totals(conn)
        due_since = overview.oldest_due_since(conn, head.now)
        incomplete, stalled = overview.purge_counts(conn, head.now, pk.stall_after)
        gate_problems = probe_gate(pk, conn)
        retained = retention.summary(conn)
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
        checkpoint_problem=checkpoint.unwritable(pk.settings.checkpoint_dir),
    )


def probe_gate(pk: Purgekeeper, conn: Connection) -> tuple[str, ...]:
    """What the next content read would meet: nothing when the gate is open, else its reasons.
    (The same one-row check a read makes; it changes nothing a read would not.)"""
    try:
        pk.gate.require_open(conn)
    except MessagingUnavailable as closed:
        return closed.diagnostics or (closed.detail,)
    return ()


# -- Prometheus ------------------------------------------------------------------------------------


class PurgekeeperCollector(Collector):
    """Reads a fresh :class:`Snapshot` on every scrape."""

    def __init__(self, pk: Purgekeeper, check: LedgerCheck) -> None:
        self.pk = pk
        self.check = check

    def collect(self) -> Iterator[Metric]:
        snap = take_snapshot(self.pk, self.check)
        steps = GaugeMetricFamily(PREFIX + "steps", "Cleanup steps by status and kind.", labels=["status", "kind"])
        for (status, kind), totals in sorted(snap.steps.items()):
            steps.add_metric([status, kind], totals.steps)
        yield steps
        yield _gauge(
            "oldest_due_step_age_seconds",
            "Seconds the oldest due (or lease-expired) step has waited.",
            snap.oldest_due_age.total_seconds(),
        )
        yield _gauge("incomplete_purges", "Purges with an incomplete cleanup step.", snap.incomplete_purges)
        yield _gauge(
            "stalled_purges", "Purges with a step due for longer than the stall threshold.", snap.stalled_purges
        )
        yield from self._work(snap)
        yield from self._retention(snap.retention_summary)
        yield _gauge("ledger_rows", "Rows in the purge ledger.", snap.ledger_seq)
        yield _gauge("ledger_verified", "0 once the audit found the ledger hash chain damaged.", int(snap.ledger.ok))
        yield _gauge(
            "ledger_audited_rows", "Rows of the ledger the audit verified in its current round.", snap.ledger.rows
        )
        yield _gauge("messaging_available", "1 when content reads and writes are open.", int(snap.messaging_available))
        yield _gauge(
            "checkpoint_dir_writable",
            "1 when a ledger checkpoint can be written into the checkpoint directory now.",
            int(snap.checkpoint_problem is None),
        )

    @staticmethod
    def _work(snap: Snapshot) -> Iterator[Metric]:
        bodies, attachments = snap.of_kind(StepKind.BODIES), snap.of_kind(StepKind.ATTACHMENTS)
        yield CounterMetricFamily(PREFIX + "rows_removed", "Rows the bodies steps removed.", value=bodies.removed)
        yield CounterMetricFamily(
            PREFIX + "blobs_deleted", "Blobs the attachments steps deleted.", value=attachments.removed
        )
        yield _gauge(
            "blobs_retained_shared", "Blobs kept because a live event shares them.", attachments.retained_shared
        )
        yield _gauge("step_attempts", "Attempts of all cleanup steps.", snap.all_steps.attempts)

    @staticmethod
    def _retention(summary: retention.Summary) -> Iterator[Metric]:
        yield _gauge("retention_policies", "Standing retention policies.", summary.policies)
        yield CounterMetricFamily(PREFIX + "retention_runs", "Retention runs accepted.", value=summary.runs)
        yield CounterMetricFamily(
            PREFIX + "retention_expired_events", "Events the retention runs expired.", value=summary.expired
        )
        yield CounterMetricFamily(
            PREFIX + "retention_held_events", "Events legal holds kept out of retention runs.", value=summary.held
        )
        yield _gauge("legal_holds", "Legal holds in force.", summary.holds)
        yield _gauge("retention_fences", "Retention runs whose cleanup has not finished.", summary.fences)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, documentation, value=value)


def registry_for(pk: Purgekeeper) -> CollectorRegistry:
    """A registry of this handle's metrics only (one per app: never the process-global one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PurgekeeperCollector(pk, LedgerCheck(pk)))
    return registry


def router(pk: Purgekeeper, tokens: Tokens) -> APIRouter:
    """``GET /metrics``: the Prometheus text format; ``Authorization: Bearer <operator token>``."""
    registry = registry_for(pk)
    api = APIRouter()

    @api.get("/metrics", include_in_schema=False)
    def metrics(
        authorization: Annotated[str | None, Header()] = None, accept: Annotated[str, Header()] = ""
    ) -> Response:
        if not tokens.operator_allows(bearer(authorization)):
            return unauthorized()
        encode, content_type = choose_encoder(accept)  # text 0.0.4 unless OpenMetrics is asked for
        try:
            body = encode(registry)
        except PurgekeeperError as exc:
            return JSONResponse(error_body(exc), status_code=http_status(exc))
        return Response(body, headers={"Content-Type": content_type, "Cache-Control": "no-store"})

    return api


def unauthorized() -> JSONResponse:
    return JSONResponse(
        {"error": "unauthorized", "detail": "a valid bearer token is required"},
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer realm="purgekeeper"'},
    )
