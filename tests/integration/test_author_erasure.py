"""erase_author end to end: preview, acceptance, fences, cleanup, refusals, repeats and a
restore from a backup taken before the erasure. Both backends."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import purgekeeper
from purgekeeper import NewAttachment
from tests.helpers import bodies, rows, scalar, settle
from tests.helpers.backups import Backups

Pk = purgekeeper.Purgekeeper
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def at(minutes: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def blob_file(pk: Pk, blob_id: str) -> Path:
    row = rows(pk, "SELECT kind, path FROM blobs WHERE id = :id", id=blob_id)[0]
    return pk.blobs.root(row.kind) / row.path


def erase(pk: Pk, author: str = "ada", **options: Any) -> purgekeeper.Acceptance:
    before = options.pop("before", None)
    preview = pk.preview_author_erasure(author, before=before)
    return pk.erase_author(
        author, scope_digest=preview.scope_digest, actor="op", reason="GDPR", before=before, **options
    )


@pytest.fixture
def world(pk: Pk) -> dict[str, Any]:
    """ada wrote e1 (an exclusive file) in c1, e2 in c1 and placed in c2, e3 in c2 with a CAS
    blob that bob's e5 also binds; bob wrote e4 and e5. A run admitted e1; a derivative came
    from e2."""
    pk.register_bot("b1", name="Bot")
    for conversation in ("c1", "c2", "c3"):
        pk.create_conversation(conversation)
    e1 = pk.ingest_event(
        "c1",
        author="ada",
        body="one",
        event_id="e1",
        occurred_at=at(1),
        attachments=(NewAttachment.file(b"only ada", name="a.txt"),),
    )
    pk.ingest_event("c1", author="ada", body="two", event_id="e2", occurred_at=at(2))
    pk.place_event("e2", "c2")
    e3 = pk.ingest_event(
        "c2",
        author="ada",
        body="three",
        event_id="e3",
        occurred_at=at(3),
        provider_event_id="slack-3",
        attachments=(NewAttachment.cas(b"shared", name="s.png"),),
    )
    shared_blob = e3.attachments[0].blob_id
    pk.ingest_event("c1", author="bob", body="four", event_id="e4", occurred_at=at(4))
    pk.ingest_event(
        "c3",
        author="bob",
        body="five",
        event_id="e5",
        occurred_at=at(5),
        attachments=(NewAttachment.reuse(shared_blob, name="fwd.png", binding="legacy_cas"),),
    )
    run = pk.start_run("c1", bot_id="b1")
    pk.admit("e1", run.id, payload="prompt with one")
    pk.finish_run(run.id, status="succeeded", output="answer about one")
    pk.add_derivative("c1", kind="summary", payload="two, summarised", source_event_ids=["e2"])
    return {
        "exclusive_blob": e1.attachments[0].blob_id,
        "shared_blob": shared_blob,
        "run": run.id,
        "attachment": e1.attachments[0].id,
    }


def test_preview_counts_everything_the_author_wrote_everywhere(world: dict[str, Any], pk: Pk) -> None:
    preview = pk.preview_author_erasure("ada")
    assert preview.totals == purgekeeper.ErasureTotals(
        events=3,
        placements=4,
        conversations=2,
        admissions=1,
        run_outputs=1,
        derivatives=1,
        exclusive_attachments=1,
        shared_attachments=1,
        already_fenced=0,
    )
    assert [(c.conversation_id, c.events) for c in preview.conversations] == [("c1", 2), ("c2", 2)]
    assert [(a.event_id, a.blob_id) for a in preview.shared_attachments] == [("e3", world["shared_blob"])]
    assert preview.blocking_runs == ()
    assert len(preview.scope_digest) == 64
    assert pk.preview_author_erasure("ada").scope_digest == preview.scope_digest  # nothing changed


def versions(pk: Pk) -> dict[str, int]:
    return {r.id: r.version for r in rows(pk, "SELECT id, version FROM conversations")}


def test_erasure_fences_at_once_and_cleanup_removes_it_everywhere(world: dict[str, Any], pk: Pk) -> None:
    seen = versions(pk)
    acceptance = erase(pk)
    assert acceptance.outcome == "accepted"
    assert pk.status(acceptance.purge_id).kind == "author"
    # from the acceptance on, before any cleanup
    assert [e.id for e in pk.read_conversation("c1")] == ["e4"]
    assert pk.read_conversation("c2") == []
    assert [e.id for e in pk.read_conversation("c3")] == ["e5"]
    with pytest.raises(purgekeeper.ContentPurged):
        pk.open_attachment(world["attachment"])
    with pytest.raises(purgekeeper.AuthorErased):
        pk.ingest_event("c3", author="ada", body="I am back")
    with pytest.raises(purgekeeper.ContentPurged):
        pk.place_event("e1", "c3")
    assert bodies(pk)["e1"] == "one"  # still on disk: the cleanup removes it

    status = settle(pk, acceptance.purge_id)
    assert status.status == "complete", status
    now = versions(pk)
    assert now["c1"] > seen["c1"] and now["c2"] > seen["c2"] and now["c3"] == seen["c3"]
    assert {k: v for k, v in bodies(pk).items()} == {"e1": None, "e2": None, "e3": None, "e4": "four", "e5": "five"}
    assert scalar(pk, "SELECT payload FROM admissions") is None
    assert scalar(pk, "SELECT output FROM runs WHERE id = :id", id=world["run"]) is None
    assert scalar(pk, "SELECT payload FROM derivatives") is None
    assert not blob_file(pk, world["exclusive_blob"]).exists()
    assert blob_file(pk, world["shared_blob"]).exists()  # bob's forward still binds it
    assert [e.id for e in pk.read_conversation("c3")] == ["e5"]
    fenced = {
        r.id
        for r in rows(pk, "SELECT id FROM tombstones WHERE kind = 'event' AND purge_id = :p", p=acceptance.purge_id)
    }
    assert fenced == {"e1", "e2", "e3"}
    with pytest.raises(purgekeeper.ContentPurged):
        pk.ingest_event("c3", author="carol", body="dup", provider_event_id="slack-3")


def test_a_repeat_is_already_purged_and_writes_nothing(world: dict[str, Any], pk: Pk) -> None:
    first = erase(pk)
    again = erase(pk)
    assert (again.outcome, again.purge_id, again.ledger_seq) == ("already_purged", first.purge_id, first.ledger_seq)
    assert scalar(pk, "SELECT count(*) FROM purge_ledger") == 1


def test_a_new_event_since_the_preview_is_a_stale_confirmation(world: dict[str, Any], pk: Pk) -> None:
    preview = pk.preview_author_erasure("ada")
    pk.ingest_event("c3", author="ada", body="late", occurred_at=at(9))
    with pytest.raises(purgekeeper.StaleConfirmation, match="ingested since the preview"):
        pk.erase_author("ada", scope_digest=preview.scope_digest, actor="op", reason="r")
    with pytest.raises(purgekeeper.StaleConfirmation, match="no preview"):  # another window, same digest
        pk.erase_author("ada", scope_digest=preview.scope_digest, actor="op", reason="r", before=at(2))
    assert scalar(pk, "SELECT count(*) FROM purge_ledger") == 0
    assert [e.id for e in pk.read_conversation("c3")][-1] != "e5"  # nothing fenced


def test_a_non_terminal_run_that_admitted_an_event_refuses_the_erasure(world: dict[str, Any], pk: Pk) -> None:
    run = pk.start_run("c2", bot_id="b1")
    pk.admit("e3", run.id, payload="p")
    preview = pk.preview_author_erasure("ada")
    assert preview.blocking_runs == (run.id,)
    with pytest.raises(purgekeeper.ActiveRuns):
        pk.erase_author("ada", scope_digest=preview.scope_digest, actor="op", reason="r")
    assert scalar(pk, "SELECT count(*) FROM purge_ledger") == 0


def test_a_window_keeps_later_events_and_refuses_only_backfill_when_left_open(world: dict[str, Any], pk: Pk) -> None:
    acceptance = erase(pk, before=at(2), close_author=False)
    assert [e.id for e in pk.read_conversation("c1")] == ["e2", "e4"]
    pk.ingest_event("c3", author="ada", body="new", event_id="e6", occurred_at=at(10))
    with pytest.raises(purgekeeper.AuthorErased):
        pk.ingest_event("c3", author="ada", body="backfill", occurred_at=at(0))
    settle(pk, acceptance.purge_id)
    assert bodies(pk)["e1"] is None and bodies(pk)["e2"] == "two" and bodies(pk)["e6"] == "new"
    entry = rows(pk, "SELECT selectors FROM purge_ledger")[0]
    assert '"close_author":false' in entry.selectors and '"before":"2026-01-01T00:02:00.000000Z"' in entry.selectors


def test_idempotency_keys_work_as_for_content_purges(world: dict[str, Any], pk: Pk) -> None:
    preview = pk.preview_author_erasure("ada")
    first = pk.erase_author("ada", scope_digest=preview.scope_digest, actor="op", reason="r", idempotency_key="k1")
    same = pk.erase_author("ada", scope_digest=preview.scope_digest, actor="op", reason="r", idempotency_key="k1")
    assert same == first
    with pytest.raises(purgekeeper.IdempotencyConflict):
        pk.erase_author(
            "ada", scope_digest=preview.scope_digest, actor="op", reason="r", idempotency_key="k1", close_author=False
        )


def test_bad_input_is_refused_before_anything_is_written(pk: Pk) -> None:
    """What was tried: an empty author, a naive datetime, a digest that is not hex, a
    close_author that is not a bool."""
    with pytest.raises(purgekeeper.ValidationError):
        pk.preview_author_erasure("")
    with pytest.raises(purgekeeper.ValidationError):
        pk.preview_author_erasure("ada", before=dt.datetime(2026, 1, 1))
    with pytest.raises(purgekeeper.ValidationError):
        pk.erase_author("ada", scope_digest="nope", actor="op", reason="r")
    with pytest.raises(purgekeeper.ValidationError):
        pk.erase_author("ada", scope_digest="0" * 64, actor="op", reason="r", close_author="yes")  # type: ignore[arg-type]
    assert scalar(pk, "SELECT count(*) FROM purge_ledger") == 0


def test_a_restore_from_before_the_erasure_is_merged_and_erased_again(
    world: dict[str, Any], open_pk: Callable[[], Pk], backups: Backups, pk: Pk
) -> None:
    backups.handles.append(pk)
    backup = backups.take()
    acceptance = erase(pk)
    settle(pk, acceptance.purge_id)
    pk.close()
    backups.restore(backup)
    restored = open_pk()
    with pytest.raises(purgekeeper.MessagingUnavailable):
        restored.read_conversation("c1")
    report = restored.merge_ledger(restored.settings.checkpoint_dir)
    assert report.appended == (acceptance.purge_id,)
    assert [e.id for e in restored.read_conversation("c1")] == ["e4"]  # fenced before any cleanup
    with pytest.raises(purgekeeper.AuthorErased):
        restored.ingest_event("c3", author="ada", body="back from the backup")
    assert report.steps_rearmed
    settle(restored, acceptance.purge_id)
    assert bodies(restored)["e1"] is None and bodies(restored)["e3"] is None
    assert not blob_file(restored, world["exclusive_blob"]).exists()


def test_a_wider_window_of_an_open_author_is_a_new_erasure_that_refuses_more_backfill(
    world: dict[str, Any], pk: Pk
) -> None:
    first = erase(pk, before=at(2), close_author=False)
    assert erase(pk, before=at(2), close_author=False).outcome == "already_purged"
    assert erase(pk, before=at(1), close_author=False).outcome == "already_purged"  # a narrower one
    wider = erase(pk, before=at(9), close_author=False)
    assert wider.outcome == "accepted" and wider.purge_id != first.purge_id
    with pytest.raises(purgekeeper.AuthorErased):
        pk.ingest_event("c3", author="ada", body="backfill", occurred_at=at(5))
    closing = erase(pk, before=at(9))  # the same window, now closing the author
    assert closing.outcome == "accepted"
    with pytest.raises(purgekeeper.AuthorErased):
        pk.ingest_event("c3", author="ada", body="later", occurred_at=at(60))


def test_a_content_purge_of_erased_events_is_already_purged_by_the_erasure(world: dict[str, Any], pk: Pk) -> None:
    erasure = erase(pk)
    scope = purgekeeper.EventScope(event_ids=["e1", "e2"])
    preview = pk.preview_purge(scope)
    assert preview.already_fenced == ("e1", "e2")
    again = pk.confirm_purge(scope, scope_digest=preview.scope_digest, actor="op", reason="r")
    assert (again.outcome, again.purge_id) == ("already_purged", erasure.purge_id)


def test_a_conversation_purge_does_not_call_an_erased_event_live_elsewhere(world: dict[str, Any], pk: Pk) -> None:
    erase(pk)  # not cleaned up yet: e2, placed in c1 and c2, is fenced by the erasure alone
    purge = pk.purge_conversation("c1", actor="op", reason="r")
    settle(pk, purge.purge_id)
    [bodies_step] = [s for s in pk.status(purge.purge_id).steps if s.kind == "bodies"]
    assert bodies_step.progress.retained_shared == 0, bodies_step.progress
    assert bodies(pk)["e2"] is None


@pytest.mark.postgres_only
def test_an_ingest_whose_transaction_began_before_the_preview_makes_it_stale(world: dict[str, Any], pk: Pk) -> None:
    """What was tried: a writer's transaction begins (its now() is fixed), another ingest by
    the author commits, the preview is made, then the first writer inserts and commits."""
    with pk.db.engine.connect() as slow:
        slow.begin()
        slow.execute(text("SELECT now()"))
        time.sleep(0.05)
        pk.ingest_event("c3", author="ada", body="newer", occurred_at=at(8))
        preview = pk.preview_author_erasure("ada")
        insert = "INSERT INTO events (id, author, occurred_at, body) VALUES ('e-slow', 'ada', now(), 'slow')"
        slow.execute(text(insert))
        slow.execute(text("INSERT INTO placements (event_id, conversation_id) VALUES ('e-slow', 'c3')"))
        slow.commit()
    with pytest.raises(purgekeeper.StaleConfirmation, match="ingested since the preview"):
        pk.erase_author("ada", scope_digest=preview.scope_digest, actor="op", reason="r")
