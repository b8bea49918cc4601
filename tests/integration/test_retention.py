"""Retention policies end to end, on both backends: preview, confirmation, the scheduler's
turns (plan, accept, schedule), the run's fence and cleanup, precedence, holds, backfill,
changes and removals, and bad input. A turn is ``run_retention()``; the run's steps are
carried out as a worker would (``settle``)."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

import purgekeeper
from purgekeeper import NewAttachment
from purgekeeper.commands.kinds.retention_run import idempotency_key
from purgekeeper.schema.content_queries import utc_from_text
from purgekeeper.schema.ledger import utc_text
from purgekeeper.storage import failpoints
from tests.helpers import rows, scalar, settle
from tests.helpers.retention import DAY, ago, body_of, set_policy, set_policy_of, texts, turn

Pk = purgekeeper.Purgekeeper


def ledger_rows(pk: Pk, kind: str) -> int:
    return int(scalar(pk, "SELECT count(*) FROM purge_ledger WHERE kind = :kind", kind=kind))


@pytest.fixture
def world(pk: Pk) -> dict[str, Any]:
    """c1: ``old`` (40 days, ada, an exclusive file), ``fresh`` (1 day), and ``shared`` (40
    days, bob), which is also placed in c2; c2: ``old2`` (40 days, bob); channel ``ch``:
    ``chan`` (40 days)."""
    for conversation in ("c1", "c2"):
        pk.create_conversation(conversation)
    pk.create_conversation("ch", kind="channel")
    old = pk.ingest_event(
        "c1", author="ada", body="old", event_id="old", occurred_at=ago(40),
        attachments=(NewAttachment.file(b"old bytes", name="old.txt"),),
    )  # fmt: skip
    pk.ingest_event("c1", author="ada", body="fresh", event_id="fresh", occurred_at=ago(1))
    pk.ingest_event("c2", author="bob", body="shared", event_id="shared", occurred_at=ago(40))
    pk.place_event("shared", "c1")
    pk.ingest_event("c2", author="bob", body="old2", event_id="old2", occurred_at=ago(40))
    pk.ingest_event("ch", author="cy", body="chan", event_id="chan", occurred_at=ago(40))
    blob = old.attachments[0].blob_id
    path = rows(pk, "SELECT kind, path FROM blobs WHERE id = :id", id=blob)[0]
    return {"old_file": pk.blobs.root(path.kind) / path.path}


@pytest.fixture
def short_turns(open_pk: Callable[..., Pk]) -> Callable[[], Pk]:
    """Handles whose policies are due again a millisecond after each turn."""
    return lambda: open_pk(retention_interval=dt.timedelta(milliseconds=1))


def test_a_conversation_policy_is_previewed_confirmed_and_run_at_the_next_turn(pk: Pk, world: dict[str, Any]) -> None:
    preview = pk.preview_retention(max_age=30 * DAY, conversation_id="c1")
    assert (preview.events, preview.placements, preview.conversations) == (2, 2, 1)
    assert preview.kept_elsewhere == 1  # "shared" stays in c2, which this policy leaves alone
    assert [(c.conversation_id, c.events) for c in preview.by_conversation] == [("c1", 2)]
    assert preview.replaces is None and preview.held == 0
    assert any("backfill" in d for d in preview.disclosures)

    acceptance = pk.set_retention(
        "thirty", max_age=30 * DAY, conversation_id="c1", scope_digest=preview.scope_digest, actor="dpo", reason="r"
    )
    assert acceptance.outcome == "accepted"
    [policy] = pk.list_retention()
    assert (policy.policy_id, policy.conversation_id, policy.max_age) == ("thirty", "c1", 30 * DAY)
    assert policy.set_at is not None and policy.last_run is None and policy.purge_id == acceptance.purge_id

    [outcome] = pk.run_retention()  # due at once
    assert outcome.policy_id == "thirty" and outcome.purge_id and outcome.error is None
    # fenced from the acceptance on, before any cleanup ran
    assert texts(pk, "c1") == ["fresh"]
    assert body_of(pk, "old") == "old" and world["old_file"].exists()
    status = pk.status(outcome.purge_id)
    assert (status.kind, status.status, status.policy_id) == ("retention_run", "accepted", "thirty")
    assert status.label == "retention purge (policy thirty)"

    status = settle(pk, outcome.purge_id)
    assert status.status == "complete"
    bodies = {s.kind: s for s in status.steps}["bodies"]
    assert bodies.progress.removed == 2
    assert bodies.progress.retained_reasons["event placed in a conversation it has not expired from"]["count"] == 1
    assert body_of(pk, "old") is None and not world["old_file"].exists()
    assert body_of(pk, "shared") == "shared" and texts(pk, "c2") == ["shared", "old2"]
    assert texts(pk, "c1") == ["fresh"]
    [policy] = pk.list_retention()
    assert policy.last_purge_id == outcome.purge_id and policy.last_cutoff == outcome.cutoff
    assert pk.list_purges(limit=1).purges[0].purge_id == outcome.purge_id


def test_a_run_is_accepted_once_and_a_turn_with_nothing_to_expire_writes_no_row(
    world: dict[str, Any], short_turns: Callable[[], Pk]
) -> None:
    pk = short_turns()
    set_policy(pk, "thirty", 30, "c1")
    [first] = turn(pk)
    assert first.purge_id
    [second] = pk.run_retention()  # due again a millisecond later; nothing new to expire
    assert second.purge_id is None and second.error is None
    assert ledger_rows(pk, "retention_run") == 1
    [policy] = pk.list_retention()
    assert policy.last_run is not None and policy.last_run > policy.last_cutoff  # type: ignore[operator]


def test_the_turn_is_not_taken_again_before_the_interval(pk: Pk, world: dict[str, Any]) -> None:
    set_policy(pk, "thirty", 30, "c1")
    assert len(turn(pk)) == 1
    assert pk.run_retention() == []  # next due in an hour
    assert pk.resume() == 0 and ledger_rows(pk, "retention_run") == 1


def test_resume_runs_every_due_policy(pk: Pk, world: dict[str, Any]) -> None:
    set_policy(pk, "thirty", 30, "c1")
    sent = pk.resume()
    assert ledger_rows(pk, "retention_run") == 1
    assert sent == 1  # the run's bodies step (its attachments step waits for it)
    assert texts(pk, "c1") == ["fresh"]


def test_a_global_policy_covers_every_conversation_and_channel(pk: Pk, world: dict[str, Any]) -> None:
    set_policy(pk, "all", 30)
    [outcome] = turn(pk)
    assert texts(pk, "c1") == ["fresh"] and texts(pk, "c2") == [] and texts(pk, "ch") == []
    assert {body_of(pk, e) for e in ("old", "shared", "old2", "chan")} == {None}
    run = pk.status(outcome.purge_id)
    assert {s.kind: s.progress.removed for s in run.steps}["bodies"] == 4


def test_a_conversations_own_policy_takes_precedence_over_the_global_one(pk: Pk, world: dict[str, Any]) -> None:
    set_policy(pk, "all", 30)
    set_policy(pk, "c1-long", 365, "c1")
    outcomes = {o.policy_id: o for o in turn(pk)}
    assert outcomes["c1-long"].purge_id is None  # nothing in c1 is a year old
    assert texts(pk, "c1") == ["old", "shared", "fresh"]  # the global policy left c1 alone
    assert texts(pk, "c2") == [] and body_of(pk, "shared") == "shared"  # still live in c1
    run = pk.status(str(outcomes["all"].purge_id))
    entry = rows(pk, "SELECT selectors FROM purge_ledger WHERE purge_id = :id", id=run.purge_id)[0]
    assert '"own_policy_conversations":["c1"]' in entry.selectors


def test_removing_a_conversations_own_policy_hands_it_back_to_the_global_one(
    world: dict[str, Any], short_turns: Callable[[], Pk]
) -> None:
    pk = short_turns()
    set_policy(pk, "all", 30)
    set_policy(pk, "c1-long", 365, "c1")
    turn(pk)
    assert texts(pk, "c1") == ["old", "shared", "fresh"]
    pk.remove_retention("c1-long", actor="dpo", reason="back to the default")
    turn(pk)  # the global policy's window starts from the beginning again
    assert texts(pk, "c1") == ["fresh"] and body_of(pk, "old") is None


def test_backfill_past_a_standing_policys_cutoff_is_refused(pk: Pk, world: dict[str, Any]) -> None:
    set_policy(pk, "thirty", 30, "c1")
    before = ledger_rows(pk, "content") + int(scalar(pk, "SELECT count(*) FROM events"))
    with pytest.raises(purgekeeper.ContentPurged, match="backfill cannot bring expired content back"):
        pk.ingest_event("c1", author="ada", body="from the provider's history", occurred_at=ago(31))
    assert int(scalar(pk, "SELECT count(*) FROM events")) + ledger_rows(pk, "content") == before  # nothing written
    pk.ingest_event("c1", author="ada", body="recent history", occurred_at=ago(29))  # inside the policy: kept
    pk.ingest_event("c2", author="ada", body="c2 has no policy", occurred_at=ago(31))
    with pytest.raises(purgekeeper.ContentPurged):
        pk.place_event("old2", "c1")  # a forward of old content into the governed conversation


def test_a_redelivered_expired_event_is_refused(pk: Pk, world: dict[str, Any]) -> None:
    pk.ingest_event("c2", author="bob", body="provider copy", provider_event_id="slack-9", occurred_at=ago(40))
    set_policy(pk, "all", 30)
    turn(pk)
    with pytest.raises(purgekeeper.ContentPurged):
        pk.ingest_event("c2", author="bob", body="provider copy", provider_event_id="slack-9", occurred_at=ago(40))


def test_a_hold_keeps_content_from_runs_and_the_run_after_its_release_expires_it(
    world: dict[str, Any], short_turns: Callable[[], Pk]
) -> None:
    pk = short_turns()
    pk.place_hold("case-1", conversation_ids=["c2"], actor="counsel", reason="litigation")
    preview = pk.preview_retention(max_age=30 * DAY)
    assert preview.held == 2 and preview.hold_ids == ("case-1",)
    set_policy(pk, "all", 30)
    [outcome] = turn(pk)
    bodies = {s.kind: s for s in pk.status(str(outcome.purge_id)).steps}["bodies"]
    assert bodies.progress.held == 2  # shared and old2, in the held c2
    assert texts(pk, "c2") == ["shared", "old2"]
    assert texts(pk, "c1") == ["fresh"]  # shared expired from c1, kept in c2 by the hold
    assert body_of(pk, "shared") == "shared" and body_of(pk, "old") is None
    # a backfill into the held conversation is kept too
    pk.ingest_event("c2", author="bob", body="held history", event_id="late", occurred_at=ago(50))

    pk.release_hold("case-1", actor="counsel", reason="settled")
    [after] = turn(pk)
    assert after.purge_id is not None
    assert texts(pk, "c2") == [] and {body_of(pk, e) for e in ("shared", "old2", "late")} == {None}


def test_a_hold_on_an_author_keeps_what_they_wrote(pk: Pk, world: dict[str, Any]) -> None:
    pk.place_hold("ada-hold", authors=["ada"], actor="counsel", reason="custodian")
    set_policy(pk, "all", 30)
    turn(pk)
    assert texts(pk, "c1") == ["old", "fresh"] and texts(pk, "c2") == []
    assert body_of(pk, "old") == "old"


def test_a_hold_placed_after_a_run_does_not_undo_it(pk: Pk, world: dict[str, Any]) -> None:
    set_policy(pk, "all", 30)
    [outcome] = pk.run_retention()  # accepted, not yet cleaned
    placed = pk.place_hold("late-hold", conversation_ids=["c2"], actor="counsel", reason="too late")
    assert any("does not undo" in d for d in placed.disclosures)
    assert texts(pk, "c2") == []  # the run's fence stands
    settle(pk, str(outcome.purge_id))
    assert body_of(pk, "old2") is None


def test_changing_a_policy_is_a_new_version_and_removing_it_ends_its_runs(pk: Pk, world: dict[str, Any]) -> None:
    first = set_policy(pk, "p", 30, "c1")
    again = set_policy(pk, "p", 30, "c1")
    assert (again.outcome, again.purge_id) == ("already_purged", first.purge_id)
    changed = set_policy(pk, "p", 60, "c1")
    assert changed.outcome == "accepted" and changed.purge_id != first.purge_id
    entry = rows(pk, "SELECT selectors FROM purge_ledger WHERE purge_id = :id", id=changed.purge_id)[0]
    assert f'"replaces":"{first.purge_id}"' in entry.selectors
    assert [p.max_age for p in pk.list_retention()] == [60 * DAY]
    assert [o.purge_id for o in turn(pk)] == [None]  # nothing is 60 days old

    removed = pk.remove_retention("p", actor="dpo", reason="no longer needed")
    assert removed.outcome == "accepted" and pk.list_retention() == []
    assert pk.run_retention() == []
    assert pk.remove_retention("p", actor="dpo", reason="again").purge_id == removed.purge_id
    assert pk.status(removed.purge_id).label == "retention policy p removed"
    with pytest.raises(purgekeeper.NotFound):
        pk.remove_retention("never-set", actor="dpo", reason="?")
    set_policy(pk, "p", 30, "c1")  # an ended policy's id may stand again
    assert len(pk.list_retention()) == 1


def test_one_standing_policy_per_scope(pk: Pk, world: dict[str, Any]) -> None:
    set_policy(pk, "all", 30)
    set_policy(pk, "c1", 90, "c1")
    for policy_id, conversation_id in (("all-2", None), ("c1-2", "c1")):
        before = ledger_rows(pk, "retention")
        with pytest.raises(purgekeeper.PolicyConflict):
            set_policy(pk, policy_id, 10, conversation_id)
        assert ledger_rows(pk, "retention") == before


def test_a_confirmation_needs_a_preview_of_that_definition(pk: Pk, world: dict[str, Any]) -> None:
    """Tried: the digest of another max_age, of another scope, a digest nobody previewed, and
    malformed ones; nothing is written."""
    thirty = pk.preview_retention(max_age=30 * DAY, conversation_id="c1")
    for max_age, conversation_id in ((31 * DAY, "c1"), (30 * DAY, None), (30 * DAY, "c2")):
        with pytest.raises(purgekeeper.StaleConfirmation):
            pk.set_retention(
                "p", max_age=max_age, conversation_id=conversation_id, scope_digest=thirty.scope_digest,
                actor="dpo", reason="r",
            )  # fmt: skip
    with pytest.raises(purgekeeper.StaleConfirmation):
        pk.set_retention("p", max_age=30 * DAY, scope_digest="0" * 64, actor="dpo", reason="r")
    for digest in ("", "xyz", "A" * 64, None):
        with pytest.raises(purgekeeper.ValidationError):
            pk.set_retention("p", max_age=30 * DAY, scope_digest=digest, actor="dpo", reason="r")  # type: ignore[arg-type]
    assert pk.list_retention() == [] and ledger_rows(pk, "retention") == 0


@pytest.mark.parametrize(
    ("max_age", "conversation_id", "error"),
    [
        (dt.timedelta(0), None, purgekeeper.ValidationError),
        (-DAY, None, purgekeeper.ValidationError),
        (dt.timedelta(seconds=1.5), None, purgekeeper.ValidationError),
        (dt.timedelta(days=365 * 101), None, purgekeeper.ValidationError),
        (30, None, purgekeeper.ValidationError),
        (DAY, "bad id!", purgekeeper.ValidationError),
        (DAY, "nowhere", purgekeeper.NotFound),
    ],
)
def test_bad_input_to_a_preview_is_refused(
    pk: Pk, world: dict[str, Any], max_age: Any, conversation_id: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        pk.preview_retention(max_age=max_age, conversation_id=conversation_id)


def test_a_policy_of_a_purged_conversation_is_refused(pk: Pk, world: dict[str, Any]) -> None:
    pk.purge_conversation("c2", actor="op", reason="gone")
    with pytest.raises(purgekeeper.ConversationPurged):
        pk.preview_retention(max_age=DAY, conversation_id="c2")


def test_a_planned_run_is_accepted_exactly_once_with_its_cutoff(pk: Pk, world: dict[str, Any]) -> None:
    """Tried: the turn fails between the plan and the acceptance (the run keeps its cutoff for
    the next turn), then after the acceptance and before the schedule (the next turn finds
    nothing new: no second row)."""
    set_policy(pk, "all", 30)
    failpoints.arm("retention.planned=EIO")
    try:
        [failed] = pk.run_retention()
    finally:
        failpoints.disarm()
    assert failed.purge_id is None and failed.error == "unexpected OSError"
    planned = scalar(pk, "SELECT pending_cutoff FROM retention_policies WHERE policy_id = 'all'")
    assert planned is not None and ledger_rows(pk, "retention_run") == 0
    assert texts(pk, "c2") == ["shared", "old2"]

    failpoints.arm("retention.accepted=EIO")
    try:
        [accepted] = pk.run_retention()
    finally:
        failpoints.disarm()
    assert accepted.error == "unexpected OSError"
    assert ledger_rows(pk, "retention_run") == 1
    [run] = rows(pk, "SELECT purge_id, idempotency_key, selectors FROM purge_ledger WHERE kind = 'retention_run'")
    [policy] = pk.list_retention()
    assert accepted.cutoff == policy.last_cutoff
    assert run.idempotency_key == idempotency_key(policy.purge_id, policy.last_cutoff)  # type: ignore[arg-type]
    assert utc_from_text(planned) == accepted.cutoff  # the cutoff planned before the failure
    assert json.loads(run.selectors)["cutoff"] == utc_text(accepted.cutoff)  # type: ignore[arg-type]
    assert scalar(pk, "SELECT pending_cutoff FROM retention_policies WHERE policy_id = 'all'") is None

    again = pk.run_retention()  # still due: the schedule was not written
    assert [o.purge_id for o in again] == [None] and ledger_rows(pk, "retention_run") == 1
    settle(pk, run.purge_id)
    assert texts(pk, "c2") == []


def test_a_run_planned_for_a_policy_removed_since_is_dropped(pk: Pk, world: dict[str, Any]) -> None:
    set_policy(pk, "all", 30)
    failpoints.arm("retention.planned=EIO")
    try:
        pk.run_retention()
    finally:
        failpoints.disarm()
    pk.remove_retention("all", actor="dpo", reason="changed our minds")
    assert pk.run_retention() == [] and ledger_rows(pk, "retention_run") == 0
    assert texts(pk, "c2") == ["shared", "old2"]


def test_a_run_walks_only_what_occurred_since_the_last_cutoff(
    world: dict[str, Any], short_turns: Callable[[], Pk]
) -> None:
    pk = short_turns()
    set_policy_of(pk, "quick", dt.timedelta(seconds=2), "c2")
    [first] = turn(pk)
    assert first.purge_id is not None and texts(pk, "c2") == []
    pk.ingest_event("c2", author="bob", body="ages soon", event_id="soon")
    time.sleep(2.2)
    [second] = turn(pk)
    assert second.purge_id is not None
    selectors = json.loads(
        rows(pk, "SELECT selectors FROM purge_ledger WHERE purge_id = :id", id=second.purge_id)[0].selectors
    )
    assert selectors["window_start"] == utc_text(first.cutoff)  # type: ignore[arg-type]
    assert selectors["cutoff"] == utc_text(second.cutoff)  # type: ignore[arg-type]
    assert body_of(pk, "soon") is None and texts(pk, "c2") == []


def test_a_lengthened_policy_runs_again_with_its_new_cutoff(
    world: dict[str, Any], short_turns: Callable[[], Pk]
) -> None:
    """Tried (a review's finding): a policy's run at 30 days, not yet cleaned up, then the
    policy lengthened to 35 days, whose cutoff is earlier than that run's: its next turn is a
    run of the new version (the old version's run was answered instead, its planned cutoff
    never cleared, and the policy never ran again)."""
    pk = short_turns()
    set_policy(pk, "p", 30, "c2")
    [first] = pk.run_retention()
    assert first.purge_id is not None
    set_policy(pk, "p", 35, "c2")
    [second] = pk.run_retention()  # old2 and shared are 40 days old, still placed: expiring
    assert second.purge_id not in (None, first.purge_id) and second.error is None
    assert scalar(pk, "SELECT pending_cutoff FROM retention_policies") is None
    for run in (first, second):
        settle(pk, str(run.purge_id))
    assert texts(pk, "c2") == [] and body_of(pk, "old2") is None
    [third] = pk.run_retention()
    assert (third.purge_id, third.error) == (None, None)


def test_an_operator_runs_a_policy_now_exactly_once_per_cutoff(pk: Pk, world: dict[str, Any]) -> None:
    """Issue 26: a released hold's policy waited ``retention_interval`` (an hour) for its next
    turn. ``run_retention_policy`` takes the turn now, as the scheduler would. Tried: a
    policy an hour from its next turn with held content just released; the same call again
    at once (nothing new since that cutoff: no second run); an unknown id; a bad id."""
    pk.place_hold("case-1", conversation_ids=["c2"], actor="counsel", reason="litigation")
    set_policy(pk, "all", 30)
    [first] = turn(pk)
    assert first.purge_id is not None and texts(pk, "c2") == ["shared", "old2"]  # held
    pk.release_hold("case-1", actor="counsel", reason="settled")
    assert pk.run_retention() == []  # not due for an hour
    now = pk.run_retention_policy("all")
    assert now.policy_id == "all" and now.purge_id not in (None, first.purge_id) and now.error is None
    assert texts(pk, "c2") == []
    again = pk.run_retention_policy("all")
    assert (again.purge_id, again.error) == (None, None)  # nothing new since that cutoff
    assert ledger_rows(pk, "retention_run") == 2
    with pytest.raises(purgekeeper.NotFound):
        pk.run_retention_policy("nowhere")
    with pytest.raises(purgekeeper.ValidationError):
        pk.run_retention_policy("bad id!")
