"""Restores of an older backup, against holds and retention: the ledger's rows bring back the
latest state in the merge, so a restore weakens neither. Both backends.

- a hold placed after the backup is in force after the merge;
- a hold released after the backup stays released;
- a policy set, and a run accepted and cleaned, after the backup: the merge sets the policy
  again and re-applies the run's fence before any read, then its cleanup runs again;
- a policy removed after the backup stays removed.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import purgekeeper
from tests.helpers import scalar, settle
from tests.helpers.backups import Backups
from tests.helpers.retention import ago, body_of, restored_after, set_policy, texts

Pk = purgekeeper.Purgekeeper


@pytest.fixture
def world(pk: Pk, backups: Backups) -> Pk:
    backups.handles.append(pk)
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    pk.ingest_event("c1", author="ada", body="old", event_id="old", occurred_at=ago(40))
    pk.ingest_event("c1", author="ada", body="new", event_id="new", occurred_at=ago(1))
    pk.ingest_event("c2", author="bob", body="bob's", event_id="bobs", occurred_at=ago(40))
    return pk


def test_a_hold_placed_after_the_backup_is_in_force_after_the_merge(
    world: Pk, backups: Backups, open_pk: Callable[[], Pk]
) -> None:
    backup = backups.take()
    placed = world.place_hold("case-1", conversation_ids=["c2"], authors=["ada"], actor="counsel", reason="r")
    restored, report = restored_after(world, backups, backup, open_pk)
    assert report.appended == (placed.purge_id,)
    [held] = restored.list_holds()
    assert (held.hold_id, held.conversation_ids, held.authors) == ("case-1", ("c2",), ("ada",))
    with pytest.raises(purgekeeper.LegalHold):
        restored.purge_conversation("c2", actor="op", reason="after the restore")
    preview = restored.preview_author_erasure("ada")
    with pytest.raises(purgekeeper.LegalHold):
        restored.erase_author("ada", scope_digest=preview.scope_digest, actor="dpo", reason="r")
    set_policy(restored, "all", 30)
    [outcome] = restored.run_retention()
    assert outcome.purge_id is None  # everything past the cutoff is held
    assert texts(restored, "c2") == ["bob's"] and texts(restored, "c1") == ["old", "new"]


def test_a_hold_released_after_the_backup_stays_released(
    world: Pk, backups: Backups, open_pk: Callable[[], Pk]
) -> None:
    world.place_hold("case-1", conversation_ids=["c2"], actor="counsel", reason="r")
    backup = backups.take()
    released = world.release_hold("case-1", actor="counsel", reason="settled")
    restored, report = restored_after(world, backups, backup, open_pk)
    assert report.appended == (released.purge_id,)
    assert restored.list_holds() == []
    assert [h.release_purge_id for h in restored.list_holds(include_released=True)] == [released.purge_id]
    assert restored.purge_conversation("c2", actor="op", reason="released").outcome == "accepted"


def test_a_run_after_the_backup_is_fenced_again_before_any_read_and_cleaned_again(
    world: Pk, backups: Backups, open_pk: Callable[[], Pk]
) -> None:
    backup = backups.take()
    policy = set_policy(world, "thirty", 30, "c1")
    [outcome] = world.run_retention()
    settle(world, str(outcome.purge_id))
    assert body_of(world, "old") is None
    restored, report = restored_after(world, backups, backup, open_pk)
    assert report.appended == (policy.purge_id, outcome.purge_id)
    assert scalar(restored, "SELECT body FROM events WHERE id = 'old'") is not None  # the backup's copy is back...
    assert body_of(restored, "old") == "<shredded>"  # ...sealed under the key the cleanup destroyed...
    assert texts(restored, "c1") == ["new"]  # ...and fenced before any reader sees it
    [standing] = restored.list_retention()
    assert (standing.policy_id, standing.last_purge_id) == ("thirty", outcome.purge_id)
    with pytest.raises(purgekeeper.ContentPurged):
        restored.ingest_event("c1", author="ada", body="backfill", occurred_at=ago(31))
    assert report.steps_rearmed
    settle(restored, str(outcome.purge_id))
    assert body_of(restored, "old") is None and texts(restored, "c1") == ["new"]
    # the merged run moved the policy's window: its next turn finds nothing new, and writes no row
    assert [o.purge_id for o in restored.run_retention()] == [None]
    assert [p.purge_id for p in restored.list_purges().purges][:2] == [outcome.purge_id, policy.purge_id]


def test_a_policy_removed_after_the_backup_stays_removed(
    world: Pk, backups: Backups, open_pk: Callable[[], Pk]
) -> None:
    set_policy(world, "thirty", 30, "c2")
    backup = backups.take()
    world.remove_retention("thirty", actor="dpo", reason="no longer")
    restored, _report = restored_after(world, backups, backup, open_pk)
    assert restored.list_retention() == []
    assert restored.run_retention() == []
    assert texts(restored, "c2") == ["bob's"]


def test_a_merge_applies_a_run_only_to_what_was_placed_before_its_acceptance(world: Pk) -> None:
    """Tried (a review's finding): after a global run, a hold on c2 and a held backfill into
    it, and a conversation with a year's policy of its own given an older event; then a full
    merge, which writes every run's fence again. The run expired neither (they were placed
    after it), so the merge must not: it expired both, the held one included."""
    set_policy(world, "all", 30)
    [run] = world.run_retention()
    settle(world, str(run.purge_id))
    world.place_hold("h", conversation_ids=["c2"], actor="counsel", reason="r")
    world.ingest_event("c2", author="bob", body="held history", event_id="held-late", occurred_at=ago(50))
    world.create_conversation("own")
    set_policy(world, "own-year", 365, "own")
    world.ingest_event("own", author="cy", body="kept a year", event_id="own-late", occurred_at=ago(40))
    world.merge_ledger(world.settings.checkpoint_dir, full=True)
    for purge_id in {run.purge_id} | {o.purge_id for o in world.run_retention() if o.purge_id}:
        settle(world, str(purge_id))
    assert texts(world, "c2") == ["held history"] and texts(world, "own") == ["kept a year"]
    assert body_of(world, "held-late") == "held history" and body_of(world, "own-late") == "kept a year"
    assert texts(world, "c1") == ["new"]  # what the run expired stays expired
