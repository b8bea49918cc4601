"""Steps of one kind worked together (``purgekeeper.workers.grouped``), on both backends: one
delivery claims the waiting steps of its kind with its own, and they share their claim, their
batch transactions and their finish; each purge's status, attempts, counts, retained reasons
and retries stay exactly its own. Tried: small conversation purges made at once, against the
same purges worked one step at a time; a group with one file that cannot be unlinked; a group
with an event kept by a hold; a group one of whose leases is lost midway; a process that
stops while a group is at work."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import purgekeeper
from purgekeeper import NewAttachment
from purgekeeper.workers import grouped, runner
from tests.helpers import body_of
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
