"""Prometheus ``/metrics``, computed from the database on every scrape (several API
processes and workers share one database: no process holds the numbers in its memory).

A scrape renders one :func:`purgekeeper.commands.status_overview.snapshot`: a handful of aggregate statements in
one read transaction, whose cost does not grow with the ledger, the attempts' history, the
steps done, the retention runs accepted, or one purge's size (the histograms and counters are
rows the step protocol keeps up to date, ``purgekeeper.schema.overview``; the totals of the done steps
and of the retention runs are rows the database's triggers keep, migration 0015): a scrape
costs the same with 100,000 retention runs as with 10 (``bench/scrape.py``). The metrics
(all prefixed ``purgekeeper_``):

    steps{status,kind}                   gauge      cleanup steps by status and kind
    oldest_due_step_age_seconds          gauge      how long the oldest due (or lease-expired) step waits
    incomplete_purges                    gauge      purges with an incomplete step
    stalled_purges                       gauge      purges with a step due for longer than STALL_AFTER,
                                                    or due at all while no worker is alive
    workers_alive{role}                  gauge      processes whose heartbeat is not overdue, by role
                                                    (worker, scheduler, embedded; 0 included)
    rows_removed_total                   counter    rows the bodies steps removed or NULLed
    blobs_deleted_total                  counter    blobs the attachments steps deleted
    blobs_retained_shared                gauge      blobs kept because a live event still shares them
    step_attempts_total{kind}            counter    attempts started (a retry does not reset it)
    step_failures_total{kind}            counter    attempts that ended retrying, incomplete or lease_lost
    step_attempt_duration_seconds{kind}  histogram  an attempt's start to its end (0.01 s .. 1 h)
    purge_duration_seconds{kind}         histogram  a purge's acceptance to complete, by purge kind
                                                    (0.1 s .. 1 day; purges with cleanup steps)
    ledger_rows                          gauge      rows in the purge ledger (the head's seq)
    ledger_verified                      gauge      0 once the audit found the hash chain damaged, else 1
    ledger_audited_rows                  gauge      rows the audit verified in its current round
    messaging_available                  gauge      1 when the read gate is open, else 0
    checkpoint_dir_writable              gauge      1 when a checkpoint can be written now, else 0
    log_size                             gauge      the newest signed checkpoint's tree size (no sample
                                                    before the first, or while it cannot be verified)
    log_checkpoint_age_seconds           gauge      how long ago the newest checkpoint was signed
                                                    (its file's mtime; no sample before the first)
    signing_key_usable                   gauge      1 when the signed log's key can be used (or no log
                                                    has signed yet, or signing is off), else 0
    log_witnessed_size                   gauge      the tree size of the newest checkpoint that holds its
                                                    witnesses' quorum (no sample without witnesses or before)
    witness_cosigned_size{witness}       gauge      the size each witness last cosigned (no sample before)
    witness_refusing{witness}            gauge      1 while the witness refuses the log's checkpoint, else 0
    witness_reachable{witness}           gauge      0 when the last round could not ask the witness, else 1
    key_store_usable                     gauge      1 when the key store that seals content can be written
    plain_content_rows{table}            gauge      rows written before encryption at rest, still plain (up to 10,001)
    retention_policies                   gauge      standing retention policies
    retention_runs_total                 counter    retention runs accepted (ledger rows)
    retention_expired_events_total       counter    events the retention runs' bodies steps expired
    retention_held_events_total          counter    events legal holds kept out of retention runs
    legal_holds                          gauge      legal holds in force
    retention_fences                     gauge      retention runs whose cleanup has not finished
    oldest_retention_deferral_age_seconds
                                         gauge      how long the standing policy held back longest by
                                                    non-terminal agent runs has been (0: none is)
    build_info{version,python,schema_revision}
                                         gauge      1; what is running

``step_attempts_total`` replaces the ``step_attempts`` gauge (the sum of the steps' attempt
counts, which a retry re-armed to 0). An attempt's duration runs to the moment it was closed:
an attempt whose lease ran out is measured until another claim found it lost.

``messaging_available`` is what the next content read would meet (``purgekeeper.commands.gate``).
``ledger_verified`` and ``ledger_audited_rows`` are the gate's background audit (a few
thousand rows a second, a new round every few minutes): a scrape never walks the chain. A
tampered old row shows as ``ledger_verified 0`` once the audit's round reaches it, and the
gate closes at the same moment; ``purgectl ledger verify`` walks the whole chain at once.

``oldest_retention_deferral_age_seconds`` counts from the first turn of a policy that a
non-terminal agent run deferred (the events it admitted, and what occurred after the earliest
of them, wait), as long as each turn since deferred something; turns come one
``retention_interval`` apart (an hour), so it moves in those steps. A stuck agent run shows
here, and the ``PurgekeeperRetentionDeferred`` alert fires once it passes a day.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from purgekeeper.commands import status_overview
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.receipts import LogState
from purgekeeper.commands.status_overview import LedgerCheck, Snapshot
from purgekeeper.commands.surface import error_body, http_status
from purgekeeper.commands.web.auth import Tokens, bearer
from purgekeeper.schema import retention_queries
from purgekeeper.schema.errors import PurgekeeperError
from purgekeeper.schema.overview import Histogram
from purgekeeper.schema.states import StepKind

PREFIX = "purgekeeper_"


# -- Prometheus ------------------------------------------------------------------------------------


class PurgekeeperCollector(Collector):
    """Reads a fresh :class:`Snapshot` on every scrape."""

    def __init__(self, pk: Purgekeeper, check: LedgerCheck) -> None:
        self.pk = pk
        self.check = check

    def collect(self) -> Iterator[Metric]:
        snap = status_overview.snapshot(self.pk, self.check)
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
            "stalled_purges",
            "Purges with a step due for longer than the stall threshold, or due at all while no worker is alive.",
            snap.stalled_purges,
        )
        alive = GaugeMetricFamily(
            PREFIX + "workers_alive", "Processes whose heartbeat is not overdue, by role.", labels=["role"]
        )
        for role, count in sorted(snap.workers_alive.items()):
            alive.add_metric([role], count)
        yield alive
        yield from self._work(snap)
        yield from self._attempts(snap)
        yield from self._retention(snap.retention_summary)
        yield _gauge(
            "oldest_retention_deferral_age_seconds",
            "Seconds the standing retention policy held back longest by non-terminal agent runs has waited.",
            snap.oldest_deferral_age.total_seconds(),
        )
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
        yield from self._log(snap)
        plain = GaugeMetricFamily(
            PREFIX + "plain_content_rows",
            "Rows written before encryption at rest, still in plain text, by table (counted up to 10,001).",
            labels=["table"],
        )
        for table, count in sorted(snap.plain_content.items()):
            plain.add_metric([table], count)
        yield plain
        yield _gauge(
            "key_store_usable",
            "1 when the key store that seals content can be written (no ingest seals, no purge shreds while 0).",
            int(snap.key_store_problem is None),
        )
        yield self._build_info()

    @staticmethod
    def _log(snap: Snapshot) -> Iterator[Metric]:
        state = snap.log
        size = GaugeMetricFamily(PREFIX + "log_size", "The newest signed checkpoint's tree size.")
        if state.size is not None:
            size.add_metric([], state.size)
        yield size
        age = GaugeMetricFamily(
            PREFIX + "log_checkpoint_age_seconds", "Seconds since the newest checkpoint of the signed log was signed."
        )
        if state.checkpoint_age is not None:
            age.add_metric([], state.checkpoint_age)
        yield age
        yield _gauge(
            "signing_key_usable", "1 when the signed log's signing key can be used.", int(state.key_problem is None)
        )
        yield from _witnesses(state)

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

    @staticmethod
    def _attempts(snap: Snapshot) -> Iterator[Metric]:
        counted = snap.counters
        yield _counter("step_attempts", "Attempts of cleanup steps started.", counted.attempts)
        yield _counter(
            "step_failures",
            "Attempts of cleanup steps that ended retrying, incomplete or with their lease lost.",
            counted.failures,
        )
        yield _histogram(
            "step_attempt_duration_seconds",
            "Seconds from the start of an attempt of a cleanup step to its end.",
            counted.attempt_seconds,
        )
        yield _histogram(
            "purge_duration_seconds",
            "Seconds from a purge's acceptance to the end of its last cleanup step, by purge kind.",
            counted.purge_seconds,
        )

    @staticmethod
    def _build_info() -> Metric:
        running = status_overview.build()
        info = GaugeMetricFamily(
            PREFIX + "build_info", "What is running: 1.", labels=["version", "python", "schema_revision"]
        )
        info.add_metric([running.version, running.python, running.schema_revision], 1)
        return info

    @staticmethod
    def _retention(summary: retention_queries.Summary) -> Iterator[Metric]:
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


def _counter(name: str, documentation: str, values: Mapping[str, float]) -> CounterMetricFamily:
    metric = CounterMetricFamily(PREFIX + name, documentation, labels=["kind"])
    for kind, value in sorted(values.items()):
        metric.add_metric([kind], value)
    return metric


def _histogram(name: str, documentation: str, series: Mapping[str, Histogram]) -> HistogramMetricFamily:
    metric = HistogramMetricFamily(PREFIX + name, documentation, labels=["kind"])
    for kind, histogram in sorted(series.items()):
        metric.add_metric([kind], list(histogram.buckets), sum_value=histogram.total)
    return metric


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


def _witnesses(state: LogState) -> Iterator[Metric]:
    """The witnesses' gauges (``purgekeeper.commands.receipts.LogState``)."""
    witnessed = GaugeMetricFamily(
        PREFIX + "log_witnessed_size", "The tree size of the newest checkpoint that holds its witnesses' quorum."
    )
    if state.witnessed_size is not None:
        witnessed.add_metric([], state.witnessed_size)
    yield witnessed
    labels = ["witness"]
    cosigned = GaugeMetricFamily(PREFIX + "witness_cosigned_size", "The size the witness last cosigned.", labels=labels)
    refusing = GaugeMetricFamily(PREFIX + "witness_refusing", "1 while the witness refuses the log.", labels=labels)
    reachable = GaugeMetricFamily(PREFIX + "witness_reachable", "0 when the witness could not be asked.", labels=labels)
    for witness in state.witnesses:
        if witness.cosigned_size is not None:
            cosigned.add_metric([witness.name], witness.cosigned_size)
        refusing.add_metric([witness.name], int(witness.refused is not None))
        reachable.add_metric([witness.name], int(witness.error is None))
    yield from (cosigned, refusing, reachable)
