"""What the operator's console and the purge list read, on SQLite and PostgreSQL: each step's
attempts (owner, start, finish, outcome, error), a purge's audit rows and times, the live
leases by worker, ``wait``'s progress callback, and ``list_purges`` by kind, conversation and
time, with bad filters refused before anything is read."""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Callable

import pytest

import purgekeeper
from purgekeeper.schema import steps
from purgekeeper.schema.states import StepStatus
from tests.helpers.backups import Backups
from tests.helpers.cleanup import (
    WHO,
    break_blob_file,
    claim_as,
    clean,
    expire_lease,
    run,
    run_when_due,
    seed_content,
    set_max_attempts,
    step_of,
)
from tests.helpers.factories import purge_events
from tests.helpers.retention import restored_after

Pk = purgekeeper.Purgekeeper


def test_each_attempt_of_a_step_is_recorded_with_its_owner_times_outcome_and_error(pk: Pk) -> None:
    seed = seed_content(pk)
    broken = break_blob_file(pk, seed.exclusive_cas)
    purge_id = purge_events(pk, "e-doomed")
    set_max_attempts(pk, purge_id, 2)
    step_id = step_of(pk, purge_id, "attachments").id
    assert run(pk, step_id).status == "retrying"
    assert run_when_due(pk, step_id).status == "incomplete"
    clean(pk, purge_id)
    shutil.rmtree(broken)
    pk.retry(purge_id, actor="oncall@example.org", reason="freed the blob path")
    assert run(pk, step_id).status == "done"

    detail = pk.purge_detail(purge_id)
    tried = [a for a in detail.attempts if a.step_id == step_id]
    assert [(a.attempt, a.outcome) for a in tried] == [(1, "retrying"), (2, "incomplete"), (1, "done")]
    assert all(a.step_kind == "attachments" and a.owner for a in tried)
    assert all(a.finished_at is not None and a.duration is not None and a.duration >= dt.timedelta(0) for a in tried)
    assert "IsADirectoryError" in (tried[0].error or "") and "IsADirectoryError" in (tried[1].error or "")
    assert tried[2].error is None
    assert [(a.action, a.actor, a.reason, a.step_ids) for a in detail.audit] == [
        ("retry", "oncall@example.org", "freed the blob path", (step_id,))
    ]
    status = detail.status
    assert status.status == "complete" and status.completed_at is not None
    assert status.completed_at >= max(a.finished_at for a in detail.attempts if a.finished_at)
    assert status.duration == status.completed_at - status.accepted_at


def test_an_attempt_whose_lease_ran_out_is_closed_as_lease_lost_when_another_takes_over(pk: Pk) -> None:
    seed_content(pk)
    purge_id = purge_events(pk, "e-doomed")
    step_id = step_of(pk, purge_id, "bodies").id
    claim_as(pk, step_id, "frozen-worker")
    running = pk.purge_detail(purge_id)
    assert [(a.owner, a.outcome, a.finished_at) for a in running.attempts] == [("frozen-worker", None, None)]
    assert step_of(pk, purge_id, "bodies").lease_owner == "frozen-worker"
    expire_lease(pk, step_id)
    assert run(pk, step_id).status == "done"
    attempts = [a for a in pk.purge_detail(purge_id).attempts if a.step_id == step_id]
    assert (attempts[0].owner, attempts[0].outcome) == ("frozen-worker", "lease_lost")
    assert attempts[0].error is not None and "lease expired" in attempts[0].error
    assert [a.outcome for a in attempts][1:] == ["done"] and attempts[1].owner != "frozen-worker"


def test_a_worker_shutting_down_leaves_its_attempt_to_end_as_it_ends(pk: Pk) -> None:
    """A SIGTERM releases the leases (``steps.release``) while the running batches may still
    finish: the attempt keeps its real outcome, or, when another worker takes the step
    first, it is ``lease_lost`` and counted a failure."""
    seed_content(pk)
    purge_id = purge_events(pk, "e-doomed")
    step_id = step_of(pk, purge_id, "bodies").id
    held = claim_as(pk, step_id, "leaving-worker")
    assert pk.db.transact(lambda conn: steps.release(conn, "leaving-worker")) == 1
    pk.db.transact(lambda conn: steps.finish(conn, held, outcome=StepStatus.RETRYING, error="boom"))
    (attempt,) = [a for a in pk.purge_detail(purge_id).attempts if a.step_id == step_id]
    assert (attempt.outcome, attempt.error) == ("retrying", "boom")

    attachments = step_of(pk, purge_id, "attachments").id
    claim_as(pk, attachments, "leaving-worker")
    assert pk.db.transact(lambda conn: steps.release(conn, "leaving-worker")) == 1
    assert run(pk, attachments).status == "done"  # another worker took it at once
    ended = [(a.owner, a.outcome) for a in pk.purge_detail(purge_id).attempts if a.step_id == attachments]
    assert ended[0] == ("leaving-worker", "lease_lost") and ended[1][1] == "done"


def test_the_workers_view_lists_each_live_lease_owner_with_the_steps_it_holds(pk: Pk) -> None:
    seed_content(pk)
    first = purge_events(pk, "e-doomed")
    bodies, attachments = (step_of(pk, first, kind).id for kind in ("bodies", "attachments"))
    claim_as(pk, bodies, "worker-a:1")
    claim_as(pk, attachments, "worker-b:1")
    leases = {w.owner: [(s.step_id, s.purge_id, s.kind, s.attempt) for s in w.steps] for w in pk.worker_leases()}
    assert leases == {
        "worker-a:1": [(bodies, first, "bodies", 1)],
        "worker-b:1": [(attachments, first, "attachments", 1)],
    }
    expire_lease(pk, attachments)  # a frozen worker's lease ran out: it holds nothing now
    assert [w.owner for w in pk.worker_leases()] == ["worker-a:1"]
    with pytest.raises(purgekeeper.ValidationError):
        pk.worker_leases(limit=0)


def test_wait_reports_each_new_status_to_its_progress_callback(pk: Pk) -> None:
    seed_content(pk)
    purge_id = purge_events(pk, "e-doomed")
    seen: list[purgekeeper.PurgeStatus] = []
    assert pk.wait(purge_id, 0, on_progress=seen.append).status == "accepted"
    assert [s.status for s in seen] == ["accepted"]
    clean(pk, purge_id)
    seen.clear()
    assert pk.wait(purge_id, 5, on_progress=seen.append).status == "complete"
    assert [s.status for s in seen] == ["complete"]


def test_list_purges_filters_by_kind_conversation_and_time(pk: Pk) -> None:
    seed_content(pk)
    content = purge_events(pk, "e-doomed")  # placed in c1
    conversation = pk.purge_conversation("c2", **WHO).purge_id
    pk.place_hold("h-1", conversation_ids=["c1", "c9"], **WHO)
    hold = pk.list_purges(kind="hold").purges[0].purge_id

    def listed(**where: object) -> list[str]:
        return [p.purge_id for p in pk.list_purges(**where).purges]  # type: ignore[arg-type]

    assert listed(kind="content") == [content]
    assert listed(kind="conversation") == [conversation]
    assert listed(conversation_id="c1") == [hold, content]
    assert listed(conversation_id="c2") == [conversation]
    assert listed(conversation_id="c9") == [hold]
    assert listed(conversation_id="c1", kind="content") == [content]
    assert listed(conversation_id="nowhere") == []
    accepted = {p.purge_id: p.accepted_at for p in pk.list_purges().purges}
    assert listed(since=accepted[hold]) == [hold]
    assert listed(until=accepted[hold]) == [conversation, content]
    assert listed(since=accepted[content], until=accepted[conversation]) == [content]
    first = pk.list_purges(kind="content", limit=1)
    assert [p.purge_id for p in first.purges] == [content] and first.next_after is None


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ({"kind": "everything"}, "kind"),
        ({"kind": 3}, "kind"),
        ({"conversation_id": "has space"}, "conversation_id"),
        ({"since": dt.datetime(2026, 1, 1)}, "since must be timezone-aware"),
        ({"until": "yesterday"}, "until must be a datetime"),
        ({"status": "finished"}, "status"),
    ],
)
def test_list_purges_refuses_a_bad_filter_with_a_typed_error(pk: Pk, where: dict[str, object], says: str) -> None:
    with pytest.raises(purgekeeper.ValidationError, match=says):
        pk.list_purges(**where)  # type: ignore[arg-type]


def test_purge_detail_of_an_unknown_purge_is_not_found(pk: Pk) -> None:
    with pytest.raises(purgekeeper.NotFound):
        pk.purge_detail("no-such-purge")
    with pytest.raises(purgekeeper.ValidationError):
        pk.purge_detail("bad id")


def test_a_restore_lists_the_merged_purges_by_conversation_again(
    pk: Pk, backups: Backups, open_pk: Callable[[], Pk]
) -> None:
    """``purge_conversations`` is not in the ledger: a merged row's conversations are written
    again from its selectors, by the function acceptance uses."""
    backups.handles.append(pk)
    seed_content(pk)
    backup = backups.take()
    content = purge_events(pk, "e-doomed")
    pk.place_hold("h-1", conversation_ids=["c2"], **WHO)
    hold = pk.list_purges(kind="hold").purges[0].purge_id
    restored, report = restored_after(pk, backups, backup, open_pk)
    assert report.appended == (content, hold)
    assert [p.purge_id for p in restored.list_purges(conversation_id="c1").purges] == [content]
    assert [p.purge_id for p in restored.list_purges(conversation_id="c2").purges] == [hold]
