"""A scrape follows the change, not the history (issue 27, item 6): the totals of the steps
that are done and of the retention runs are counters the database keeps up to date as steps
finish or are re-armed and as runs are accepted (``metric_counters``, triggers: migration
0015), and a snapshot adds the steps still unfinished to them. On SQLite and PostgreSQL.

The counters must equal what the history says at every point (accepted, cleaned, a retry,
a restore's re-arm, rows written by raw SQL), and the snapshot must read them rather than
walk the history again."""

from __future__ import annotations

import dataclasses

from sqlalchemy import text

import purgekeeper
from purgekeeper.commands import status_overview
from purgekeeper.schema import ledger, restore
from purgekeeper.schema.overview import StepTotals
from purgekeeper.schema.retention_queries import Summary
from tests.helpers import FailingStore, rows, settle
from tests.helpers.factories import confirm_events, event_with_attachments
from tests.helpers.retention import ago, set_policy

Pk = purgekeeper.Purgekeeper
WHO = {"actor": "ops@example.org", "reason": "the user asked"}


def from_history(pk: Pk) -> tuple[dict[tuple[str, str], StepTotals], tuple[int, int, int]]:
    """What a walk of every step and every run says: the step totals by (status, kind), and
    the retention runs with the events their bodies steps expired and found held."""
    steps = {
        (row.status, row.kind): StepTotals(int(row.n), int(row.attempts), int(row.removed), int(row.retained))
        for row in rows(
            pk,
            "SELECT status, kind, count(*) AS n, sum(attempts) AS attempts, sum(removed) AS removed, "
            "sum(retained_shared) AS retained FROM cleanup_steps GROUP BY status, kind",
        )
    }
    [runs] = rows(
        pk,
        "SELECT count(DISTINCT l.purge_id) AS runs, coalesce(sum(s.removed), 0) AS expired, "
        "coalesce(sum(s.held), 0) AS held FROM purge_ledger l LEFT JOIN cleanup_steps s "
        "ON s.purge_id = l.purge_id AND s.kind = 'bodies' WHERE l.kind = 'retention_run'",
    )
    return steps, (int(runs.runs), int(runs.expired), int(runs.held))


def shown(pk: Pk) -> tuple[dict[tuple[str, str], StepTotals], tuple[int, int, int]]:
    snap = status_overview.snapshot(pk)
    steps = {key: totals for key, totals in snap.steps.items() if totals != StepTotals()}
    summary: Summary = snap.retention_summary
    return steps, (summary.runs, summary.expired, summary.held)


def assert_follows_history(pk: Pk) -> None:
    assert shown(pk) == from_history(pk)


def retention_run(pk: Pk, conversation_id: str, policy_id: str) -> str:
    """A policy over a conversation with two old events, one of them by a held author; its
    run accepted (not cleaned)."""
    pk.create_conversation(conversation_id)
    pk.ingest_event(conversation_id, author="ada", body="expires", occurred_at=ago(40))
    pk.ingest_event(conversation_id, author="held-" + conversation_id, body="held", occurred_at=ago(40))
    pk.place_hold("h-" + conversation_id, authors=["held-" + conversation_id], **WHO)
    set_policy(pk, policy_id, 30, conversation_id)
    [run] = [outcome.purge_id for outcome in pk.run_retention() if outcome.purge_id]
    return run


def purge_with_files(pk: Pk, conversation_id: str, files: int) -> str:
    pk.create_conversation(conversation_id)
    named = [(f"f{n}.txt", f"bytes {n}".encode()) for n in range(files)]
    event = event_with_attachments(pk, conversation_id, files=named, body="gone soon")
    return confirm_events(pk, event.id, who=WHO).purge_id


def test_the_snapshot_reads_the_counters_not_the_history(pk: Pk) -> None:
    """The done steps' and the runs' totals come from their counters: a scrape's cost does not
    grow with the steps that are done and the runs accepted. Tried: each counter raised by
    hand shows in the snapshot, although no step or run changed."""
    run = retention_run(pk, "c-run", "p-run")
    assert settle(pk, run).status == "complete"
    before = status_overview.snapshot(pk)
    with pk.db.write() as conn:
        conn.execute(text("UPDATE metric_counters SET value = value + 1000 WHERE kind = 'bodies'"))
        conn.execute(text("UPDATE metric_counters SET value = value + 1000 WHERE kind = 'retention_run'"))
    after = status_overview.snapshot(pk)
    done_bodies = ("done", "bodies")
    assert after.steps[done_bodies] == StepTotals(*(n + 1000 for n in dataclasses.astuple(before.steps[done_bodies])))
    assert dataclasses.astuple(after.retention_summary) == dataclasses.astuple(
        dataclasses.replace(
            before.retention_summary,
            runs=before.retention_summary.runs + 1000,
            expired=before.retention_summary.expired + 1000,
            held=before.retention_summary.held + 1000,
        )
    )


def test_the_counters_follow_runs_steps_retries_and_restores(pk: Pk) -> None:
    """Against a walk of the history at every point: runs accepted then cleaned, a content
    purge whose attachments step fails to incomplete and is retried, a restore's re-arm of a
    done step (it is done no more, then done again), and steps written by raw SQL."""
    assert_follows_history(pk)
    first = retention_run(pk, "c1", "p1")
    assert_follows_history(pk)  # accepted: its steps are unfinished, its run counted
    assert settle(pk, first).status == "complete"
    assert_follows_history(pk)
    failing = purge_with_files(pk, "c-failing", files=2)
    with pk.db.write() as conn:
        conn.execute(text("UPDATE cleanup_steps SET max_attempts = 1 WHERE purge_id = :p"), {"p": failing})
    broken = dataclasses.replace(pk.step_context(), blobs=FailingStore(pk.blobs.blob_root, pk.blobs.file_root))
    assert settle(pk, failing, broken).status == "incomplete"
    assert_follows_history(pk)
    pk.retry(failing, **WHO)
    assert settle(pk, failing).status == "complete"
    assert_follows_history(pk)
    second = retention_run(pk, "c2", "p2")
    assert settle(pk, second).status == "complete"
    assert_follows_history(pk)
    rearmed = pk.db.transact(
        lambda conn: restore.rearm_step(conn, failing, "attachments", due=ledger.clock(conn), note="restored")
    )
    assert rearmed is not None
    assert_follows_history(pk)  # done no more
    assert settle(pk, failing).status == "complete"
    assert_follows_history(pk)  # done again
    with pk.db.write() as conn:  # a raw writer's steps, done at once, and one made done later
        conn.execute(
            text(
                "INSERT INTO cleanup_steps (id, purge_id, kind, status, attempts, max_attempts, removed, held) "
                "VALUES ('raw-1', :p, 'memory', 'done', 2, 5, 7, 0), ('raw-2', :q, 'memory', 'pending', 0, 5, 0, 0)"
            ),
            {"p": first, "q": second},
        )
    assert_follows_history(pk)
    with pk.db.write() as conn:
        conn.execute(text("UPDATE cleanup_steps SET status = 'done', attempts = 1, removed = 3 WHERE id = 'raw-2'"))
        conn.execute(text("UPDATE cleanup_steps SET removed = 9 WHERE id = 'raw-1'"))
    assert_follows_history(pk)
