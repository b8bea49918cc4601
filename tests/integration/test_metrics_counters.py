"""The counters and histograms of ``/metrics`` (``metric_counters``), on SQLite and PostgreSQL,
after real attempts: the attempt histogram counts every closed attempt with its duration in
its bucket, failures are counted by step kind, a retry resets no counter, a purge's
completion is counted once however its last steps race, concurrent increments add up, and
``build_info`` says what runs. The exposition is parsed with prometheus_client's parser."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import importlib.metadata
import platform
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import bindparam, text

import purgekeeper
from purgekeeper.commands.web import metrics
from purgekeeper.schema import ledger, migrate, overview, restore, steps
from purgekeeper.schema.overview import ATTEMPT_BUCKETS, Counter, Histogram
from purgekeeper.schema.states import StepStatus
from purgekeeper.schema.tables import UtcDateTime
from tests.helpers import POLICY, FailingStore, rows, settle
from tests.helpers.factories import confirm_events, event_with_attachments

Pk = purgekeeper.Purgekeeper
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
WHO = {"actor": "ops@example.org", "reason": "the user asked"}
STEP_KINDS = ("bodies", "attachments", "memory")


def scrape(pk: Pk) -> Samples:
    exposition = generate_latest(metrics.registry_for(pk)).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[("purgekeeper_" + name, tuple(sorted(labels.items())))]


def buckets(samples: Samples, name: str, kind: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of one histogram series, in bound order."""
    found = [
        (float(dict(labels)["le"]), count)
        for (sample, labels), count in samples.items()
        if sample == f"purgekeeper_{name}_bucket" and dict(labels)["kind"] == kind
    ]
    return sorted(found)


def purge_with_files(pk: Pk, conversation_id: str, files: int = 1) -> str:
    pk.create_conversation(conversation_id)
    named = [(f"f{n}.txt", f"bytes {n}".encode()) for n in range(files)]
    event = event_with_attachments(pk, conversation_id, files=named, body="gone soon")
    return confirm_events(pk, event.id, who=WHO).purge_id


def closed_attempts(pk: Pk) -> dict[str, list[float]]:
    """The durations of the closed attempts in ``step_attempts``, by step kind."""
    durations: dict[str, list[float]] = {}
    for row in rows(pk, "SELECT kind, started_at, finished_at FROM step_attempts WHERE finished_at IS NOT NULL"):
        started, ended = (UtcDateTime().process_result_value(t, pk.db.engine.dialect) for t in row[1:])
        assert started is not None and ended is not None
        durations.setdefault(row.kind, []).append((ended - started).total_seconds())
    return durations


def claim(pk: Pk, step_id: str, owner: str) -> steps.Claim:
    held = pk.db.transact(functools.partial(steps.claim, step_id=step_id, owner=owner, lease=POLICY.lease))
    assert held is not None, f"step {step_id} could not be claimed"
    return held


def database_now(pk: Pk) -> dt.datetime:
    with pk.db.read() as conn:
        return ledger.database_now(conn)


def test_the_histogram_counts_every_attempt_and_the_failures_by_kind_survive_a_retry(pk: Pk) -> None:
    complete = purge_with_files(pk, "c-ok")
    failing = purge_with_files(pk, "c-failing", files=2)
    with pk.db.write() as conn:
        conn.execute(text("UPDATE cleanup_steps SET max_attempts = 2 WHERE purge_id = :p"), {"p": failing})
    # each purge's steps alone: grouped, the first settle would clean the failing purge's too
    alone = dataclasses.replace(pk.step_context(), group_steps=1)
    broken = dataclasses.replace(alone, blobs=FailingStore(pk.blobs.blob_root, pk.blobs.file_root))
    assert settle(pk, complete, alone).status == "complete"
    assert settle(pk, failing, broken).status == "incomplete"

    samples = scrape(pk)
    durations = closed_attempts(pk)
    assert {kind: len(seen) for kind, seen in durations.items()} == {"bodies": 2, "attachments": 3}
    for kind in STEP_KINDS:
        seen = durations.get(kind, [])
        assert value(samples, "step_attempts_total", kind=kind) == len(seen)
        assert value(samples, "step_attempt_duration_seconds_count", kind=kind) == len(seen)
        assert value(samples, "step_attempt_duration_seconds_sum", kind=kind) == pytest.approx(sum(seen), abs=1e-6)
        cumulative = buckets(samples, "step_attempt_duration_seconds", kind)
        assert [bound for bound, _ in cumulative] == [*ATTEMPT_BUCKETS, float("inf")]
        counts = [count for _, count in cumulative]
        assert counts == sorted(counts) and counts[-1] == len(seen)  # cumulative, +Inf is the count
        for bound, count in cumulative:
            assert count == len([seconds for seconds in seen if seconds <= bound])
    assert {kind: value(samples, "step_failures_total", kind=kind) for kind in STEP_KINDS} == {
        "bodies": 0,
        "attachments": 2,  # retrying, then incomplete
        "memory": 0,
    }
    assert value(samples, "purge_duration_seconds_count", kind="content") == 1

    pk.retry(failing, **WHO)
    rearmed = scrape(pk)
    for name in ("step_attempts_total", "step_failures_total", "step_attempt_duration_seconds_count"):
        assert value(rearmed, name, kind="attachments") == value(samples, name, kind="attachments"), name
    assert settle(pk, failing).status == "complete"
    after = scrape(pk)
    assert value(after, "step_attempts_total", kind="attachments") == 4
    assert value(after, "step_failures_total", kind="attachments") == 2
    assert value(after, "purge_duration_seconds_count", kind="content") == 2


def test_a_purge_a_restore_cleans_again_is_counted_complete_once(pk: Pk) -> None:
    """A merge re-arms a done step when a restored file is back (``purgekeeper.schema.restore.rearm_step``);
    the purge completes a second time, weeks after its acceptance, but it completed once."""
    purge_id = purge_with_files(pk, "c-restored")
    assert settle(pk, purge_id).status == "complete"
    assert value(scrape(pk), "purge_duration_seconds_count", kind="content") == 1
    rearmed = pk.db.transact(
        lambda conn: restore.rearm_step(conn, purge_id, "attachments", due=ledger.clock(conn), note="restored")
    )
    assert rearmed is not None
    assert settle(pk, purge_id).status == "complete"
    samples = scrape(pk)
    assert value(samples, "purge_duration_seconds_count", kind="content") == 1
    assert value(samples, "step_attempts_total", kind="attachments") == 2  # the attempts are counted


def test_an_attempt_is_counted_in_the_bucket_of_its_duration(pk: Pk) -> None:
    purge_id = purge_with_files(pk, "c1", files=0)
    [step] = pk.status(purge_id).steps
    held = claim(pk, step.id, "slow")
    started = database_now(pk) - dt.timedelta(seconds=42)
    backdate = text("UPDATE step_attempts SET started_at = :t WHERE step_id = :s").bindparams(
        bindparam("t", type_=UtcDateTime())
    )
    with pk.db.write() as conn:
        conn.execute(backdate, {"t": started, "s": step.id})
    pk.db.transact(lambda conn: steps.finish(conn, held, outcome=StepStatus.RETRYING, error="slow"))
    upper = (database_now(pk) - started).total_seconds()

    samples = scrape(pk)
    assert 42 <= value(samples, "step_attempt_duration_seconds_sum", kind="bodies") <= upper
    cumulative = dict(buckets(samples, "step_attempt_duration_seconds", "bodies"))
    assert (cumulative[30.0], cumulative[60.0], cumulative[float("inf")]) == (0, 1, 1)
    assert value(samples, "step_failures_total", kind="bodies") == 1


def test_an_attempt_whose_lease_ran_out_is_a_failure_when_the_next_claim_closes_it(pk: Pk) -> None:
    purge_id = purge_with_files(pk, "c1", files=0)
    [step] = pk.status(purge_id).steps
    for owner in ("died", "next"):
        expire = text("UPDATE cleanup_steps SET lease_expires_at = :past WHERE id = :id").bindparams(
            bindparam("past", type_=UtcDateTime())
        )
        with pk.db.write() as conn:
            conn.execute(expire, {"past": dt.datetime(2000, 1, 1, tzinfo=dt.UTC), "id": step.id})
        claim(pk, step.id, owner)
    samples = scrape(pk)
    assert value(samples, "step_attempts_total", kind="bodies") == 2
    assert value(samples, "step_failures_total", kind="bodies") == 1  # the lost one; "next" is still running
    assert value(samples, "step_attempt_duration_seconds_count", kind="bodies") == 1


def test_the_last_two_steps_of_a_purge_finishing_at_once_count_its_completion_once(pk: Pk) -> None:
    before = database_now(pk)
    purges = [purge_with_files(pk, f"c{n}") for n in range(6)]
    held = [claim(pk, step.id, "racer") for purge_id in purges for step in pk.status(purge_id).steps]
    for purge_id in purges:
        start = threading.Barrier(2)

        def finish(mine: steps.Claim, start: threading.Barrier = start) -> None:
            start.wait(timeout=10)  # both last steps of the purge finish at once
            pk.db.transact(functools.partial(steps.finish, held=mine, outcome=StepStatus.DONE))

        mine = [claimed for claimed in held if claimed.purge_id == purge_id]
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(finish, mine))
    samples = scrape(pk)
    assert [pk.status(purge_id).status for purge_id in purges] == ["complete"] * len(purges)
    assert value(samples, "purge_duration_seconds_count", kind="content") == len(purges)
    total = value(samples, "purge_duration_seconds_sum", kind="content")
    assert 0 <= total <= len(purges) * (database_now(pk) - before).total_seconds()


def test_concurrent_increments_all_count(pk: Pk) -> None:
    def add(times: int) -> None:
        for _ in range(times):
            pk.db.transact(lambda conn: overview.add(conn, Counter.ATTEMPTS, "memory"))
            pk.db.transact(lambda conn: overview.observe(conn, Counter.ATTEMPT_SECONDS, "memory", 0.02))

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(add, [10] * 6))
    samples = scrape(pk)
    assert value(samples, "step_attempts_total", kind="memory") == 60
    assert value(samples, "step_attempt_duration_seconds_bucket", kind="memory", le="0.025") == 60
    assert value(samples, "step_attempt_duration_seconds_bucket", kind="memory", le="0.01") == 0
    assert value(samples, "step_attempt_duration_seconds_sum", kind="memory") == pytest.approx(1.2)


def test_build_info_names_the_version_python_and_schema_revision(pk: Pk) -> None:
    labels = {
        "version": importlib.metadata.version("purgekeeper"),
        "python": platform.python_version(),
        "schema_revision": migrate.head_revision(),
    }
    assert value(scrape(pk), "build_info", **labels) == 1


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        ({}, [0, 0, 0]),
        ({"1": 2, "+Inf": 1, "sum": 9.5}, [0, 2, 3]),
        ({"0.5": 1, "2": 1}, [1, 2, 2]),  # a bound this code no longer uses counts in the next one above
        ({"9": 4}, [0, 0, 4]),
    ],
)
def test_a_histogram_is_cumulative_over_the_stored_buckets(stored: dict[str, float], expected: list[float]) -> None:
    histogram = Histogram.of((0.5, 5.0), stored)
    assert [count for _, count in histogram.buckets] == expected
    assert [label for label, _ in histogram.buckets] == ["0.5", "5", "+Inf"]
    assert (histogram.count, histogram.total) == (expected[-1], stored.get("sum", 0.0))
