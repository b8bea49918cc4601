"""Steps of one kind worked together (``purgekeeper.workers.grouped``), on both backends: one
delivery claims the waiting steps of its kind with its own, and they share their claim, their
batch transactions and their finish; each purge's status, attempts, counts, retained reasons
and retries stay exactly its own. Tried: small conversation purges made at once, against the
same purges worked one step at a time; a group with one file that cannot be unlinked; a group
with an event kept by a hold; a group one of whose leases is lost midway; a process that
stops while a group is at work."""

from __future__ import annotations

import dataclasses
import datetime as dt
import sqlite3
import threading
from typing import Any

import pytest
from sqlalchemy import create_engine, text

import purgekeeper
from purgekeeper import NewAttachment
from purgekeeper.schema.errors import InfrastructureError
from purgekeeper.workers import grouped, runner
from tests.helpers import body_of
from tests.helpers.at_rest import file_store, key_ids
from tests.helpers.cleanup import SECRET, WHO, blob_file, claim_as, expire_lease, run, run_when_due, step_of
from tests.helpers.reads import rows
from tests.helpers.steps import POLICY

Pk = purgekeeper.Purgekeeper


def _conversations(pk: Pk, names: list[str], *, events: int = 3) -> dict[str, list[str]]:
    """Each conversation with ``events`` events, the first with a file of its own; the event ids."""
    made: dict[str, list[str]] = {}
    for name in names:
        pk.create_conversation(name)
        first = pk.ingest_event(
            name, author="ada", body=f"{SECRET} {name} 0", attachments=[NewAttachment.file(name.encode(), name="f")]
        )
        rest = [pk.ingest_event(name, author="ada", body=f"{SECRET} {name} {i}").id for i in range(1, events)]
        made[name] = [first.id, *rest]
    return made


def _purge(pk: Pk, names: list[str]) -> dict[str, str]:
    return {name: pk.purge_conversation(name, **WHO).purge_id for name in names}


def _step_rows(pk: Pk, purge_id: str, kind: str) -> Any:
    return rows(
        pk,
        "SELECT status, attempts, removed, retained_shared, retained_reasons, held, last_error, lease_owner"
        " FROM cleanup_steps WHERE purge_id = :p AND kind = :k",
        p=purge_id,
        k=kind,
    )[0]


class _Transactions:
    """The step context's database, counting the write transactions run through it."""

    def __init__(self, db: Any) -> None:
        self.db, self.count = db, 0

    def transact(self, work: Any, **options: Any) -> Any:
        self.count += 1
        return self.db.transact(work, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def _counting(ctx: Any) -> tuple[Any, _Transactions]:
    counter = _Transactions(ctx.db)
    return dataclasses.replace(ctx, db=counter), counter


def test_small_conversation_purges_share_their_claims_and_batches_and_count_exactly_as_alone(pk: Pk) -> None:
    """Five small conversation purges, made at once: one delivery of the first bodies step
    claims all five bodies steps, empties them in one batch transaction and finishes them in
    its commit (2 commits, where one step at a time takes 2 each); one delivery of an
    attachments step does the same for the five attachments steps (claim, one batch that
    marks, one that deletes). Five more, made the same way, purged next and worked with
    ``group_steps=1``, end with the same counts per step."""
    grouped_names = [f"g{i}" for i in range(5)]
    alone_names = [f"a{i}" for i in range(5)]
    made = _conversations(pk, grouped_names + alone_names)
    purged = _purge(pk, grouped_names)

    ctx, transactions = _counting(pk.step_context())
    outcome = run(pk, step_of(pk, purged["g0"], "bodies").id, ctx)
    assert outcome.status == "done"
    assert sorted(outcome.wake) == sorted(step_of(pk, p, "attachments").id for p in purged.values())
    assert transactions.count == 2  # the claim of all five, and one batch that finished them all
    ctx, transactions = _counting(pk.step_context())
    assert run(pk, step_of(pk, purged["g3"], "attachments").id, ctx).status == "done"
    assert transactions.count == 3
    assert all(pk.status(p).status == "complete" for p in purged.values())

    alone = _purge(pk, alone_names)
    for purge_id in alone.values():
        one_at_a_time, transactions = _counting(dataclasses.replace(pk.step_context(), group_steps=1))
        assert run(pk, step_of(pk, purge_id, "bodies").id, one_at_a_time).wake == (
            step_of(pk, purge_id, "attachments").id,
        )
        assert transactions.count == 2
        assert step_of(pk, purge_id, "attachments").status != "done"  # its own attachments step is still to run
        run(pk, step_of(pk, purge_id, "attachments").id, one_at_a_time)
    for name, twin in zip(grouped_names, alone_names, strict=True):
        for kind in ("bodies", "attachments"):
            ours, theirs = _step_rows(pk, purged[name], kind), _step_rows(pk, alone[twin], kind)
            counts = [(row.status, row.attempts, row.removed, row.retained_shared) for row in (ours, theirs)]
            assert counts[0] == counts[1] == ("done", 1, theirs.removed, 0)
        assert all(body_of(pk, event_id) is None for event_id in made[name])
    attempts = rows(pk, "SELECT step_id, outcome FROM step_attempts")
    assert len(attempts) == 20 and {a.outcome for a in attempts} == {"done"}  # one attempt per step, each its own


def test_a_file_that_cannot_be_unlinked_fails_its_own_purge_only(pk: Pk) -> None:
    """Three purges' attachments steps in one group; the second's file is a directory now (its
    unlink fails, EISDIR). Its step alone is retrying, with the error naming its blob and no
    path; the two others are done, their files gone and their blobs deleted. Once the
    directory is gone, its retry finishes it."""
    names = ["c1", "c2", "c3"]
    made = _conversations(pk, names, events=1)
    purged = _purge(pk, names)
    [broken] = rows(pk, "SELECT blob_id FROM attachments WHERE event_id = :e", e=made["c2"][0])
    path = blob_file(pk, broken.blob_id)
    path.unlink()
    path.mkdir()
    (path / "inside").write_bytes(b"not the blob")
    run(pk, step_of(pk, purged["c1"], "bodies").id)

    run(pk, step_of(pk, purged["c1"], "attachments").id)

    failed = _step_rows(pk, purged["c2"], "attachments")
    assert (failed.status, failed.attempts) == ("retrying", 1)
    assert broken.blob_id in failed.last_error and str(path) not in failed.last_error
    for name in ("c1", "c3"):
        assert pk.status(purged[name]).status == "complete"
        [gone] = rows(pk, "SELECT blob_id FROM attachments WHERE event_id = :e", e=made[name][0])
        assert rows(pk, "SELECT state FROM blobs WHERE id = :b", b=gone.blob_id)[0].state == "deleted"
    assert pk.status(purged["c2"]).status != "complete"

    (path / "inside").unlink()
    path.rmdir()
    assert run_when_due(pk, step_of(pk, purged["c2"], "attachments").id).status == "done"
    assert pk.status(purged["c2"]).status == "complete"


def test_an_event_kept_by_a_hold_is_retained_by_its_own_purge_only(pk: Pk) -> None:
    """c2's first event is placed in ``kept`` too, which a legal hold covers: in a group of
    three conversation purges, c2's bodies step alone reports it retained, with its reason; the
    event's body stays readable in ``kept``, and the other purges retain nothing."""
    names = ["c1", "c2", "c3"]
    made = _conversations(pk, names)
    pk.create_conversation("kept")
    pk.place_event(made["c2"][0], "kept")
    pk.place_hold("h1", conversation_ids=["kept"], **WHO)
    purged = _purge(pk, names)

    run(pk, step_of(pk, purged["c3"], "bodies").id)

    for name in names:
        step = _step_rows(pk, purged[name], "bodies")
        assert step.status == "done" and step.attempts == 1
        assert step.retained_shared == (1 if name == "c2" else 0)
        assert (step.retained_reasons is not None) == (name == "c2")
    assert made["c2"][0] in _step_rows(pk, purged["c2"], "bodies").retained_reasons
    assert [e.body for e in pk.read_conversation("kept")] == [f"{SECRET} c2 0"]


def test_a_member_whose_lease_is_lost_midway_drops_out_and_the_others_finish(pk: Pk, monkeypatch: Any) -> None:
    """Batches of 2 events, three purges of 4 events: after the group's first batch, c2's lease
    runs out and another worker claims its step. The group writes nothing more for c2 (its
    step stays the other worker's, its counts only what the group committed before), and
    finishes c1 and c3; the other worker's attempt then finishes c2."""
    names = ["c1", "c2", "c3"]
    made = _conversations(pk, names, events=4)
    purged = _purge(pk, names)
    stolen = step_of(pk, purged["c2"], "bodies").id
    ctx = dataclasses.replace(pk.step_context(), batch_size=2)
    batches = [0]
    original = grouped._batch

    def batch_then_steal(ctx: Any, group: grouped.Group) -> None:
        original(ctx, group)
        batches[0] += 1
        if batches[0] == 1:
            expire_lease(pk, stolen)
            claim_as(pk, stolen, "another-worker")

    monkeypatch.setattr(grouped, "_batch", batch_then_steal)
    outcome = run(pk, step_of(pk, purged["c1"], "bodies").id, ctx)
    monkeypatch.undo()

    assert outcome.status == "done"
    assert all(_step_rows(pk, purged[name], "bodies").status == "done" for name in ("c1", "c3"))
    taken = _step_rows(pk, purged["c2"], "bodies")
    assert (taken.status, taken.lease_owner, taken.attempts) == ("running", "another-worker", 2)
    assert taken.removed <= 4  # the first batch's share at most: nothing after the lease was lost
    lost = rows(pk, "SELECT outcome FROM step_attempts WHERE step_id = :s ORDER BY attempt", s=stolen)
    assert [a.outcome for a in lost] == ["lease_lost", None]
    expire_lease(pk, stolen)
    assert run(pk, stolen).status == "done"
    assert all(body_of(pk, event_id) is None for event_id in made["c2"])


def test_a_stopping_process_gives_back_every_member_of_its_group(pk: Pk, monkeypatch: Any) -> None:
    """The process stops after the group's first batch: every member is given back at that
    safe point, due again with its attempt given back, and the next delivery finishes them."""
    names = ["c1", "c2", "c3"]
    _conversations(pk, names, events=4)
    purged = _purge(pk, names)
    ctx = dataclasses.replace(pk.step_context(), batch_size=2, stopping=threading.Event())
    original = grouped._batch

    def batch_then_stop(ctx: Any, group: grouped.Group) -> None:
        original(ctx, group)
        ctx.stopping.set()

    monkeypatch.setattr(grouped, "_batch", batch_then_stop)
    assert run(pk, step_of(pk, purged["c1"], "bodies").id, ctx).status == "stopped"
    monkeypatch.undo()
    for purge_id in purged.values():
        step = _step_rows(pk, purge_id, "bodies")
        assert (step.status, step.attempts, step.lease_owner) == ("pending", 0, None)
    assert runner.run_step(pk.step_context(), step_of(pk, purged["c2"], "bodies").id, policy=POLICY).status == "done"
    assert all(_step_rows(pk, p, "bodies").status == "done" for p in purged.values())


# -- what a red-team review of the groups found (each failed before its fix) ----------------------


def _step(pk: Pk, purge_id: str, kind: str) -> Any:
    return _step_rows(pk, purge_id, kind)


@pytest.mark.postgres_only
def test_a_row_lock_in_a_members_part_is_waited_for_without_spending_an_attempt(pk: Pk) -> None:
    """Another session holds an event's row lock for about 1 s; the batch's lock timeout is
    0.2 s. The member's part is rolled back to its savepoint and tried again at the next
    batch: the step ends done in its first attempt (it failed ``retrying``, with the raw SQL
    and the ids in its error, when the driver's error was taken for the member's own)."""
    pk.create_conversation("c1")
    event = pk.ingest_event("c1", author="ada", body="secret").id
    purge_id = pk.purge_conversation("c1", **WHO).purge_id
    ctx = dataclasses.replace(pk.step_context(), lock_timeout=dt.timedelta(milliseconds=200))
    engine = create_engine(pk.db.engine.url.render_as_string(hide_password=False))
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        with engine.connect() as conn, conn.begin():
            conn.execute(text("SELECT id FROM events WHERE id = :e FOR UPDATE"), {"e": event})
            locked.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    assert locked.wait(5)
    threading.Timer(1.0, release.set).start()
    try:
        outcome = run(pk, step_of(pk, purge_id, "bodies").id, ctx)
    finally:
        release.set()
        holder.join()
        engine.dispose()
    step = _step(pk, purge_id, "bodies")
    assert (outcome.status, step.status, step.attempts) == ("done", "done", 1), (outcome, step)


@pytest.mark.postgres_only
def test_a_connection_the_server_ends_inside_a_part_runs_the_batch_again(pk: Pk, monkeypatch: Any) -> None:
    """The batch's session is terminated by the server while a member's part runs: the whole
    transaction runs again on a new connection, in the same attempt (it failed the attempt
    with PendingRollbackError)."""
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="secret")
    purge_id = pk.purge_conversation("c1", **WHO).purge_id
    original, calls = grouped._bodies_part, [0]

    def part(ctx: Any, conn: Any, **kw: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            conn.exec_driver_sql("SELECT pg_terminate_backend(pg_backend_pid())")
        return original(ctx, conn, **kw)

    monkeypatch.setattr(grouped, "_bodies_part", part)
    outcome = run(pk, step_of(pk, purge_id, "bodies").id)
    step = _step(pk, purge_id, "bodies")
    assert (outcome.status, step.status, step.attempts, step.last_error) == ("done", "done", 1, None)


def test_a_blob_two_members_share_is_neither_members_until_it_is_gone(pk: Pk) -> None:
    """c1's and c2's events bind one blob; their attachments steps run as one group while the
    blob's file cannot be unlinked. Neither purge completes (c2's completed, leaving the file,
    when only c1 was given the blob); once the file can go, both do."""
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    first = pk.ingest_event("c1", author="ada", body="x", attachments=[NewAttachment.file(b"secret bytes", name="f")])
    shared = first.attachments[0].blob_id
    pk.ingest_event("c2", author="ada", body="y", attachments=[NewAttachment.reuse(shared, name="g")])
    purged = [pk.purge_conversation(name, **WHO).purge_id for name in ("c1", "c2")]
    run(pk, step_of(pk, purged[0], "bodies").id)
    path = blob_file(pk, shared)
    path.unlink()
    path.mkdir()
    (path / "in-the-way").write_text("x")

    run(pk, step_of(pk, purged[0], "attachments").id)

    assert [_step(pk, p, "attachments").status for p in purged] == ["retrying", "retrying"]
    assert all(shared in _step(pk, p, "attachments").last_error for p in purged)
    (path / "in-the-way").unlink()
    path.rmdir()
    for purge_id in purged:  # each when its own backoff is over (together if both are due by then)
        if step_of(pk, purge_id, "attachments").status != "done":
            assert run_when_due(pk, step_of(pk, purge_id, "attachments").id).status == "done"
    assert [pk.status(p).status for p in purged] == ["complete", "complete"]
    assert rows(pk, "SELECT state FROM blobs WHERE id = :b", b=shared)[0].state == "deleted"


def test_a_fault_after_an_attachments_batch_commits_counts_nothing_twice(pk: Pk, monkeypatch: Any) -> None:
    """Batches of 2 blobs; the key store fails once, transiently, just after the batch that
    counted a shared blob committed: the attempt goes on from there (the committed batch's
    files first), and the shared blob is retained once (it was counted twice, the walk run
    again from its old cursor)."""
    pk.create_conversation("keeper")
    kept = pk.ingest_event("keeper", author="ada", body="s", attachments=[NewAttachment.file(b"shared", name="s")])
    shared = kept.attachments[0].blob_id
    pk.create_conversation("c1")
    pk.ingest_event(
        "c1",
        author="ada",
        body="x",
        attachments=[NewAttachment.reuse(shared, name="s")]
        + [NewAttachment.file(f"x{i}".encode(), name=f"x{i}") for i in range(5)],
    )
    purge_id = pk.purge_conversation("c1", **WHO).purge_id
    run(pk, step_of(pk, purge_id, "bodies").id)
    ctx = dataclasses.replace(pk.step_context(), batch_size=2)
    original, failed = grouped._unlink, [False]

    def flaky(ctx: Any, group: grouped.Group) -> None:
        if not failed[0] and any(shared in m.kept and m.unlinking for m in group.active):
            failed[0] = True
            raise InfrastructureError("the key store is briefly unavailable")
        original(ctx, group)

    monkeypatch.setattr(grouped, "_unlink", flaky)
    outcome = run(pk, step_of(pk, purge_id, "attachments").id, ctx)
    step = _step(pk, purge_id, "attachments")
    assert failed[0] and outcome.status == "done"
    assert (step.attempts, step.retained_shared, step.removed) == (1, 1, 5)


def test_a_key_the_store_never_held_fails_its_own_purge_only(pk: Pk) -> None:
    """The key store lacks c2's event key (restored from a copy older than its ingest): in a
    group of three conversation purges c2 alone fails; c1 and c3 complete their bodies steps
    (all three failed, and on every retry c2 took innocent steps down with it)."""
    made = {}
    for name in ("c1", "c2", "c3"):
        pk.create_conversation(name)
        made[name] = pk.ingest_event(name, author="ada", body=f"secret {name}").id
    purged = {name: pk.purge_conversation(name, **WHO).purge_id for name in made}
    lost_key = key_ids(pk, "events", [made["c2"]])[made["c2"]]
    with sqlite3.connect(file_store(pk).directory / "keys.db") as store:
        store.execute("DELETE FROM keys WHERE id = ?", (lost_key,))

    run(pk, step_of(pk, purged["c1"], "bodies").id)

    got = {name: _step(pk, purged[name], "bodies") for name in made}
    assert (got["c1"].status, got["c3"].status) == ("done", "done")
    assert got["c2"].status == "retrying" and "never held" in got["c2"].last_error
