"""Prometheus ``/metrics`` on SQLite and PostgreSQL, through a tiny app of its router: the bearer
token, every metric's value as the purges move (parsed with prometheus_client's own parser),
and that a scrape costs the same few aggregate statements however many purges there are."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import bindparam, event, text

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.commands.web import metrics
from purgekeeper.commands.web.auth import Tokens
from purgekeeper.schema import ledger, overview
from purgekeeper.schema.states import WorkerRole
from purgekeeper.schema.tables import UtcDateTime
from tests.helpers import FailingStore, scalar, settle
from tests.helpers.heartbeats import heartbeat

with warnings.catch_warnings():  # starlette warns at import when httpx2 is not installed
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

Pk = purgekeeper.Purgekeeper
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

OPERATOR = "operator-token-7f3a"
HOST = "host-token-91c2"
TOKENS = Tokens(api=HOST, operator=OPERATOR)
WHO = {"actor": "ops@example.org", "reason": "the user asked"}
LONG_AGO = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
STEP_STATUSES = ("pending", "running", "retrying", "done", "incomplete")
STEP_KINDS = ("bodies", "attachments", "memory")


@pytest.fixture
def client(pk: Pk) -> Iterator[TestClient]:
    app = FastAPI()
    app.include_router(metrics.router(pk, TOKENS))
    with TestClient(app) as test_client:
        yield test_client


def scrape(client: TestClient) -> Samples:
    response = client.get("/metrics", headers={"Authorization": f"Bearer {OPERATOR}"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[("purgekeeper_" + name, tuple(sorted(labels.items())))]


def per_kind(samples: Samples, name: str) -> dict[str, float]:
    """A counter's non-zero values by step kind."""
    counts = {kind: value(samples, name, kind=kind) for kind in STEP_KINDS}
    return {kind: count for kind, count in counts.items() if count}


def steps(samples: Samples) -> dict[tuple[str, str], float]:
    """Only the non-zero step counts, by (status, kind)."""
    counts = {(s, k): value(samples, "steps", status=s, kind=k) for s in STEP_STATUSES for k in STEP_KINDS}
    return {key: count for key, count in counts.items() if count}


# -- purges in every state ----------------------------------------------------------------------------


def purge_new_event(pk: Pk, conversation_id: str, *, files: int = 0, shared_blob: str | None = None) -> str:
    pk.create_conversation(conversation_id)
    attachments = [NewAttachment.file(f"bytes {n}".encode(), name=f"f{n}.txt") for n in range(files)]
    if shared_blob is not None:
        attachments.append(NewAttachment.reuse(shared_blob, name="shared.txt"))
    purged = pk.ingest_event(conversation_id, author="ada", body="gone soon", attachments=attachments)
    scope = EventScope(event_ids=(purged.id,))
    return pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO).purge_id


def scrape_between_clock_reads(pk: Pk, client: TestClient) -> tuple[Samples, tuple[dt.datetime, dt.datetime]]:
    """A scrape, with the database clock read just before and just after it."""
    with pk.db.read() as conn:
        before = ledger.database_now(conn)
    samples = scrape(client)
    with pk.db.read() as conn:
        after = ledger.database_now(conn)
    return samples, (before, after)


def assert_age_between(age: float, *, since: dt.datetime, before: dt.datetime, after: dt.datetime) -> None:
    """The age was read on the database clock between ``before`` and ``after`` (no bound on
    how long anything took; SQLite's clock has milliseconds, hence the one of slack)."""
    slack = 0.001
    assert (before - since).total_seconds() - slack <= age <= (after - since).total_seconds() + slack


def as_utc(value: Any) -> dt.datetime:
    moment = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)


def set_due_since(pk: Pk, purge_id: str, moment: dt.datetime) -> None:
    statement = text("UPDATE cleanup_steps SET next_attempt_at = :t WHERE purge_id = :p").bindparams(
        bindparam("t", type_=UtcDateTime())
    )
    with pk.db.write() as conn:
        assert conn.execute(statement, {"t": moment, "p": purge_id}).rowcount >= 1


def tamper_ledger(pk: Pk, sql: str) -> None:
    """Committed SQL with the ledger's append-only triggers out of the way (the test database
    is thrown away)."""
    with pk.db.engine.connect() as conn, conn.begin():
        if pk.db.is_sqlite:
            for trigger in ("pk_purge_ledger_no_update", "pk_purge_ledger_no_delete", "pk_purge_ledger_chain"):
                conn.execute(text(f"DROP TRIGGER IF EXISTS {trigger}"))
        else:
            conn.execute(text("ALTER TABLE purge_ledger DISABLE TRIGGER USER"))
        conn.execute(text(sql))
        if not pk.db.is_sqlite:
            conn.execute(text("ALTER TABLE purge_ledger ENABLE TRIGGER USER"))


# -- the token ----------------------------------------------------------------------------------------


WRONG_AUTHORIZATIONS = (
    None,
    "",
    "Bearer",
    "Bearer wrong",
    f"Bearer {HOST}",
    f"Basic {OPERATOR}",
    OPERATOR,
    f"Bearer {OPERATOR}x",
)


def test_metrics_need_the_operator_bearer_token(client: TestClient) -> None:
    for authorization in WRONG_AUTHORIZATIONS:
        headers = {} if authorization is None else {"Authorization": authorization}
        response = client.get("/metrics", headers=headers)
        assert response.status_code == 401, authorization
        assert response.json() == {"error": "unauthorized", "detail": "a valid bearer token is required"}
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert client.get("/metrics", headers={"Authorization": f"Bearer {OPERATOR}"}).status_code == 200


def test_the_host_token_scrapes_when_no_operator_token_is_set(pk: Pk) -> None:
    app = FastAPI()
    app.include_router(metrics.router(pk, Tokens(api=HOST)))
    with TestClient(app) as client:
        assert client.get("/metrics", headers={"Authorization": f"Bearer {HOST}"}).status_code == 200
        assert client.get("/metrics", headers={"Authorization": f"Bearer {OPERATOR}"}).status_code == 401


# -- the values ---------------------------------------------------------------------------------------


def test_an_empty_database_reports_zeros_and_an_open_verified_ledger(client: TestClient) -> None:
    samples = scrape(client)
    assert steps(samples) == {}
    assert len([key for key in samples if key[0] == "purgekeeper_steps"]) == len(STEP_STATUSES) * len(STEP_KINDS)
    for name in ("incomplete_purges", "stalled_purges", "oldest_due_step_age_seconds", "ledger_rows"):
        assert value(samples, name) == 0, name
    for name in ("rows_removed_total", "blobs_deleted_total", "blobs_retained_shared"):
        assert value(samples, name) == 0, name
    for kind in STEP_KINDS:  # every step kind's series exists from the start, at zero
        assert value(samples, "step_attempts_total", kind=kind) == 0
        assert value(samples, "step_failures_total", kind=kind) == 0
        assert value(samples, "step_attempt_duration_seconds_count", kind=kind) == 0
        assert value(samples, "step_attempt_duration_seconds_bucket", kind=kind, le="+Inf") == 0
    assert not [key for key in samples if key[0].startswith("purgekeeper_purge_duration_seconds")]
    assert not [key for key in samples if key[0] == "purgekeeper_step_attempts"]  # the gauge is gone
    assert (value(samples, "ledger_verified"), value(samples, "messaging_available")) == (1, 1)


def test_values_follow_a_purge_from_acceptance_to_complete(pk: Pk, client: TestClient) -> None:
    pk.create_conversation("c-keep")
    kept = pk.ingest_event("c-keep", author="bob", body="stays", attachments=[NewAttachment.cas(b"x", name="s.txt")])
    purge_id = purge_new_event(pk, "c1", files=2, shared_blob=kept.attachments[0].blob_id)

    due_at = scalar(pk, "SELECT min(next_attempt_at) FROM cleanup_steps WHERE purge_id = :p", p=purge_id)
    accepted, (before, after) = scrape_between_clock_reads(pk, client)
    assert steps(accepted) == {("pending", "bodies"): 1, ("pending", "attachments"): 1}
    assert value(accepted, "ledger_rows") == 1 and per_kind(accepted, "step_attempts_total") == {}
    assert_age_between(value(accepted, "oldest_due_step_age_seconds"), since=as_utc(due_at), before=before, after=after)

    assert settle(pk, purge_id).status == "complete"
    done = scrape(client)
    assert steps(done) == {("done", "bodies"): 1, ("done", "attachments"): 1}
    bodies = next(step for step in pk.status(purge_id).steps if step.kind == "bodies")
    assert value(done, "rows_removed_total") == bodies.progress.removed == 4  # the body and its 3 attachment names
    assert value(done, "blobs_deleted_total") == 2  # the two exclusive files
    assert value(done, "blobs_retained_shared") == 1  # the blob c-keep still shows
    assert per_kind(done, "step_attempts_total") == {"bodies": 1, "attachments": 1}
    assert per_kind(done, "step_failures_total") == {}
    assert value(done, "purge_duration_seconds_count", kind="content") == 1
    assert value(done, "oldest_due_step_age_seconds") == 0
    assert (value(done, "incomplete_purges"), value(done, "stalled_purges")) == (0, 0)


def test_an_incomplete_step_counts_its_purge_once_and_a_retry_rearms_it(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c1", files=2)
    with pk.db.write() as conn:
        conn.execute(text("UPDATE cleanup_steps SET max_attempts = 2 WHERE purge_id = :p"), {"p": purge_id})
    failing = dataclasses.replace(pk.step_context(), blobs=FailingStore(pk.blobs.blob_root, pk.blobs.file_root))
    assert settle(pk, purge_id, failing).status == "incomplete"

    failed = scrape(client)
    assert steps(failed) == {("done", "bodies"): 1, ("incomplete", "attachments"): 1}
    assert value(failed, "incomplete_purges") == 1
    assert per_kind(failed, "step_attempts_total") == {"bodies": 1, "attachments": 2}
    assert per_kind(failed, "step_failures_total") == {"attachments": 2}  # retrying, then incomplete
    assert value(failed, "blobs_deleted_total") == 0

    pk.retry(purge_id, actor="oncall@example.org", reason="the disk is back")
    rearmed = scrape(client)
    assert steps(rearmed) == {("done", "bodies"): 1, ("pending", "attachments"): 1}
    assert value(rearmed, "incomplete_purges") == 0
    assert per_kind(rearmed, "step_attempts_total") == {"bodies": 1, "attachments": 2}  # a retry resets no counter
    assert per_kind(rearmed, "step_failures_total") == {"attachments": 2}
    assert settle(pk, purge_id).status == "complete"
    completed = scrape(client)
    assert value(completed, "blobs_deleted_total") == 2
    assert per_kind(completed, "step_attempts_total") == {"bodies": 1, "attachments": 3}
    assert value(completed, "purge_duration_seconds_count", kind="content") == 1  # once, when it completed


def test_stalled_purges_and_the_oldest_due_age_use_the_database_clock(pk: Pk, client: TestClient) -> None:
    stalled = purge_new_event(pk, "c-stalled", files=1)  # two steps: bodies and attachments
    recent = purge_new_event(pk, "c-recent")
    set_due_since(pk, stalled, LONG_AGO)
    with pk.db.read() as conn:
        now = ledger.database_now(conn)
    set_due_since(pk, recent, now - pk.stall_after + dt.timedelta(minutes=1))  # due, not yet stalled
    samples, (before, after) = scrape_between_clock_reads(pk, client)
    assert value(samples, "stalled_purges") == 1  # one purge, though both of its steps are late
    assert_age_between(value(samples, "oldest_due_step_age_seconds"), since=LONG_AGO, before=before, after=after)
    assert [p.stalled for p in (pk.status(stalled), pk.status(recent))] == [True, False]


def test_a_tampered_ledger_fails_verification_once_the_audit_reaches_it_and_closes_messaging(
    pk: Pk, client: TestClient
) -> None:
    pk.gate.stop_audit()  # the test takes the audit's steps itself
    for conversation_id in ("c1", "c2"):
        purge_new_event(pk, conversation_id)
    assert value(scrape(client), "messaging_available") == 1
    pk.gate.audit_step()
    assert (value(scrape(client), "ledger_verified"), value(scrape(client), "ledger_audited_rows")) == (1, 2)
    tamper_ledger(pk, "UPDATE purge_ledger SET reason = 'nothing happened' WHERE seq = 2")
    pk.gate.audit_cycle = 0  # the next round starts now (after AUDIT_CYCLE otherwise)
    pk.gate.audit_step()
    samples = scrape(client)
    assert (value(samples, "ledger_verified"), value(samples, "ledger_rows")) == (0, 2)
    assert value(samples, "messaging_available") == 0  # the audit closed the gate
    assert not pk.gate.evaluate().open  # and the full check agrees


def test_a_merge_under_way_closes_messaging_at_once(pk: Pk, client: TestClient) -> None:
    purge_new_event(pk, "c1")
    with pk.db.write() as conn:  # what a merge writes first, seen by every process
        conn.execute(text("UPDATE ledger_head SET gate_reason = 'a ledger merge is under way' WHERE id = 1"))
    samples = scrape(client)
    assert (value(samples, "messaging_available"), value(samples, "ledger_verified")) == (0, 1)
    with pytest.raises(purgekeeper.MessagingUnavailable):
        pk.read_conversation("c1")  # the metric tells what a read meets


def test_the_audit_walks_the_chain_a_step_at_a_time_and_remembers_what_it_verified(pk: Pk) -> None:
    pk.gate.stop_audit()  # the test takes the audit's steps itself, from the first row
    for conversation_id in ("c1", "c2", "c3"):
        purge_new_event(pk, conversation_id)
    pk.gate.audit_rows = 2
    assert pk.gate.audit_step() == (2, ())
    assert pk.gate.audit_step() == (3, ())
    tamper_ledger(pk, "UPDATE purge_ledger SET reason = 'nothing happened' WHERE seq = 1")
    assert pk.gate.audit_step() == (3, ()), "the verified prefix is not walked again in this round"
    pk.gate.audit_cycle = 0
    seq, problems = pk.gate.audit_step()  # a new round
    assert seq == 0 and any("tampered row at seq 1" in problem for problem in problems)
    assert metrics.LedgerCheck(pk).report((3, "")).ok is False


def test_a_scrape_runs_the_same_few_statements_however_many_purges_exist(pk: Pk, client: TestClient) -> None:
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if threading.current_thread().name != "purgekeeper-audit":  # the scrape's, not the background audit's
            statements.append(statement)

    purge_new_event(pk, "c0", files=1)
    event.listen(pk.db.engine, "before_cursor_execute", count)
    try:
        scrape(client)
        few = len(statements)
        for n in range(1, 16):
            purge_new_event(pk, f"c{n}", files=1)
        statements.clear()
        samples = scrape(client)
    finally:
        event.remove(pk.db.engine, "before_cursor_execute", count)
    assert value(samples, "ledger_rows") == 16
    assert len(statements) == few <= 12, statements
    # no statement reads one purge's steps (a join on the column, as retention's summary makes, is one statement)
    assert not any(re.search(r"cleanup_steps\.purge_id = (\?|%\()", s) or "purge_id IN" in s for s in statements)
    assert not any("step_attempts" in s for s in statements)  # the histograms read metric_counters, not history


def alive(samples: Samples) -> dict[str, float]:
    return {role.value: value(samples, "workers_alive", role=role.value) for role in WorkerRole}


def test_live_processes_are_counted_by_role_and_with_no_live_worker_due_steps_stall_at_once(
    pk: Pk, client: TestClient
) -> None:
    assert alive(scrape(client)) == {"worker": 0.0, "scheduler": 0.0, "embedded": 0.0}
    worker, scheduler = heartbeat(pk), heartbeat(pk, WorkerRole.SCHEDULER)
    assert worker.beat() and scheduler.beat()
    purge_new_event(pk, "c-due")
    samples = scrape(client)
    assert alive(samples) == {"worker": 1.0, "scheduler": 1.0, "embedded": 0.0}
    assert value(samples, "stalled_purges") == 0  # due, and a worker is there to do it
    worker.stop()
    samples = scrape(client)
    assert alive(samples) == {"worker": 0.0, "scheduler": 1.0, "embedded": 0.0}
    assert value(samples, "stalled_purges") == 1  # nobody to do it: stalled at once


def test_a_database_fault_is_a_503_with_the_error_body(
    pk: Pk, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def busy(*args: Any, **kwargs: Any) -> Any:
        raise purgekeeper.InfrastructureError("the database stayed busy after 5 attempts")

    monkeypatch.setattr(overview, "step_totals", busy)
    response = client.get("/metrics", headers={"Authorization": f"Bearer {OPERATOR}"})
    assert response.status_code == 503
    assert response.json() == {"error": "infrastructure_error", "detail": "the database stayed busy after 5 attempts"}


# -- retention and legal holds ------------------------------------------------------------------------

RETENTION_METRICS = (
    "retention_policies",
    "retention_runs_total",
    "retention_expired_events_total",
    "retention_held_events_total",
    "legal_holds",
    "retention_fences",
)


def retention_values(samples: Samples) -> dict[str, float]:
    return {name: value(samples, name) for name in RETENTION_METRICS}


def set_policy(pk: Pk, policy_id: str, max_age: dt.timedelta, conversation_id: str | None = None) -> None:
    preview = pk.preview_retention(max_age=max_age, conversation_id=conversation_id)
    pk.set_retention(
        policy_id, max_age=max_age, conversation_id=conversation_id, scope_digest=preview.scope_digest, **WHO
    )


def scrape_counting(pk: Pk, client: TestClient) -> tuple[Samples, int]:
    """A scrape, and how many statements it ran (not the background audit's)."""
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if threading.current_thread().name != "purgekeeper-audit":
            statements.append(statement)

    event.listen(pk.db.engine, "before_cursor_execute", count)
    try:
        samples = scrape(client)
    finally:
        event.remove(pk.db.engine, "before_cursor_execute", count)
    return samples, len(statements)


def test_retention_metrics_follow_a_run_that_a_hold_kept_content_out_of(pk: Pk, client: TestClient) -> None:
    empty, statements = scrape_counting(pk, client)
    assert retention_values(empty) == dict.fromkeys(RETENTION_METRICS, 0)
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=40)
    for conversation_id in ("c1", "c2", "c-own"):
        pk.create_conversation(conversation_id)
    pk.ingest_event("c1", author="ada", body="expires", occurred_at=old)
    pk.ingest_event("c1", author="ada", body="expires too", occurred_at=old)
    pk.ingest_event("c2", author="bob", body="held", occurred_at=old)
    pk.place_hold("h-case", conversation_ids=["c2"], **WHO)
    pk.place_hold("h-gone", authors=["cy"], **WHO)
    pk.release_hold("h-gone", **WHO)
    set_policy(pk, "p-all", dt.timedelta(days=30))
    set_policy(pk, "p-own", dt.timedelta(hours=12), "c-own")  # nothing to expire: no run

    [run] = [outcome.purge_id for outcome in pk.run_retention() if outcome.purge_id]
    accepted, same_statements = scrape_counting(pk, client)
    assert same_statements == statements  # however many policies, holds and runs
    assert retention_values(accepted) == {
        "retention_policies": 2,
        "retention_runs_total": 1,
        "retention_expired_events_total": 0,
        "retention_held_events_total": 0,
        "legal_holds": 1,
        "retention_fences": 1,  # the run's cleanup has not finished
    }
    assert settle(pk, run).status == "complete"
    done = retention_values(scrape(client))
    assert (done["retention_expired_events_total"], done["retention_held_events_total"]) == (2, 1)
    assert (done["retention_runs_total"], done["retention_fences"], done["legal_holds"]) == (1, 0, 1)
    pk.remove_retention("p-own", **WHO)
    pk.release_hold("h-case", **WHO)
    after = retention_values(scrape(client))
    assert (after["retention_policies"], after["legal_holds"], after["retention_runs_total"]) == (1, 0, 1)
