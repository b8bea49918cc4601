"""A purge's cleanup steps under test: content seeded for a purge (marked with ``SECRET``), raw
pokes at a step (its lease expired, its attempts capped, claimed by another owner, its blob's
file broken), and running the steps as a worker would."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, text

import purgekeeper
from purgekeeper import NewAttachment
from purgekeeper.schema import steps
from purgekeeper.schema.tables import UtcDateTime
from purgekeeper.workers import runner
from tests.helpers.reads import rows
from tests.helpers.steps import POLICY, SETTLE_S

Pk = purgekeeper.Purgekeeper


SECRET = "S3CR3T-purged"
WHO = {"actor": "ops@example.org", "reason": "the user asked"}
LONG_AGO = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


def blob(pk: Pk, blob_id: str) -> Any:
    return rows(pk, "SELECT id, kind, path, state, sha256 FROM blobs WHERE id = :id", id=blob_id)[0]


def blob_file(pk: Pk, blob_id: str) -> Path:
    row = blob(pk, blob_id)
    return pk.blobs.root(row.kind) / row.path


def step_of(pk: Pk, purge_id: str, kind: str) -> purgekeeper.StepState:
    return next(s for s in pk.status(purge_id).steps if s.kind == kind)


def lease_of(pk: Pk, step_id: str) -> Any:
    return rows(pk, "SELECT lease_owner, lease_expires_at FROM cleanup_steps WHERE id = :id", id=step_id)[0]


def expire_lease(pk: Pk, step_id: str) -> None:
    """Raw SQL: the lease ran out long ago (the worker holding it hung or died)."""
    statement = text("UPDATE cleanup_steps SET lease_expires_at = :past WHERE id = :id").bindparams(
        bindparam("past", type_=UtcDateTime())
    )
    with pk.db.write() as conn:
        assert conn.execute(statement, {"past": LONG_AGO, "id": step_id}).rowcount == 1


def postpone(pk: Pk, step_id: str, by: dt.timedelta = dt.timedelta(hours=1)) -> None:
    """Raw SQL: the step's next attempt is ``by`` from now (a retrying step waiting long)."""
    later = text("UPDATE cleanup_steps SET next_attempt_at = :later WHERE id = :s").bindparams(
        bindparam("later", type_=UtcDateTime())
    )
    with pk.db.write() as conn:
        conn.execute(later, {"later": dt.datetime.now(dt.UTC) + by, "s": step_id})


def set_max_attempts(pk: Pk, purge_id: str, attempts: int) -> None:
    with pk.db.write() as conn:
        sql = text("UPDATE cleanup_steps SET max_attempts = :n WHERE purge_id = :p")
        assert conn.execute(sql, {"n": attempts, "p": purge_id}).rowcount >= 1


def claim_as(pk: Pk, step_id: str, owner: str, *, lease: dt.timedelta = POLICY.lease) -> steps.Claim:
    held = pk.db.transact(lambda conn: steps.claim(conn, step_id, owner=owner, lease=lease))
    assert held is not None, f"step {step_id} could not be claimed"
    return held


def run(pk: Pk, step_id: str, ctx: Any = None) -> runner.Outcome:
    return runner.run_step(ctx or pk.step_context(), step_id, policy=POLICY)


def run_when_due(pk: Pk, step_id: str) -> runner.Outcome:
    """Deliver the step until a delivery is effective (a retry waits out its short backoff)."""
    deadline = time.monotonic() + SETTLE_S
    while (outcome := run(pk, step_id)).status == "skipped":
        assert time.monotonic() < deadline, f"step {step_id} never became due"
        time.sleep(0.01)
    return outcome


def clean(pk: Pk, *purge_ids: str) -> None:
    """Run the purges' steps (default: every purge's), as a worker would, until each is done
    or incomplete."""
    purge_ids = purge_ids or tuple(r[0] for r in rows(pk, "SELECT purge_id FROM purge_ledger"))
    deadline = time.monotonic() + SETTLE_S
    while True:
        waiting = [s for p in purge_ids for s in pk.status(p).steps if s.status not in ("done", "incomplete")]
        if not waiting:
            return
        assert time.monotonic() < deadline, waiting
        if all(run(pk, s.id).status == "skipped" for s in waiting):
            time.sleep(0.01)


@dataclass(frozen=True)
class Seed:
    exclusive_cas: str
    exclusive_file: str
    shared: str  # a CAS blob bound legacy_cas by e-doomed and real_file (a reuse) by e-kept
    kept_attachment: str


def seed_content(pk: Pk) -> Seed:
    """e-doomed (c1) has a body, an admission, a run output, a derivative and three blobs;
    e-kept (c2) stays live and shares one of those blobs through a reuse."""
    pk.register_bot("b-run", name="Runner")
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    doomed = pk.ingest_event(
        "c1",
        author="ada",
        body=f"{SECRET} body",
        event_id="e-doomed",
        provider_event_id="p-doomed",
        attachments=[
            NewAttachment.cas(f"{SECRET} cas bytes".encode(), name="a.txt"),
            NewAttachment.file(f"{SECRET} file bytes".encode(), name="b.txt"),
            NewAttachment.cas(b"kept shared bytes", name="s.txt"),
        ],
    )
    exclusive_cas, exclusive_file, shared = (a.blob_id for a in doomed.attachments)
    kept = pk.ingest_event(
        "c2",
        author="bob",
        body="kept body",
        event_id="e-kept",
        attachments=[NewAttachment.reuse(shared, name="forwarded.txt", binding="real_file")],
    )
    pk.start_run("c1", bot_id="b-run", run_id="r1")
    pk.admit("e-doomed", "r1", payload={"text": f"{SECRET} payload"})
    pk.finish_run("r1", status="succeeded", output=f"{SECRET} output")
    pk.add_derivative("c1", kind="summary", payload=f"{SECRET} summary", source_event_ids=["e-doomed"])
    return Seed(exclusive_cas, exclusive_file, shared, kept.attachments[0].id)


def break_blob_file(pk: Pk, blob_id: str) -> Path:
    """A real fault: the blob's file becomes a non-empty directory, so unlink always fails."""
    path = blob_file(pk, blob_id)
    path.unlink()
    path.mkdir()
    (path / "in-the-way").write_text("not content")
    return path
