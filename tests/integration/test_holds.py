"""Legal holds on both backends: placing, listing and releasing them; every purge of what they
cover refused with ``LegalHold`` (and what they do not block); previews that mark held
content; what a hold does not undo; and (PostgreSQL) a hold racing a purge."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

import purgekeeper
from purgekeeper import EventScope
from tests.helpers import scalar

Pk = purgekeeper.Purgekeeper


def ledger_size(pk: Pk) -> int:
    return int(scalar(pk, "SELECT count(*) FROM purge_ledger"))


@pytest.fixture
def world(pk: Pk, roots: dict[str, Path]) -> dict[str, Any]:
    """A bot with a Memory repository and its conversation c1 (ada's e1, bob's e2), c2 (bob's
    e3, which is also placed in c1) and a channel ch (cy's e4)."""
    repository = roots["memory_root"] / "bot-1"
    (repository / ".git").mkdir(parents=True)
    pk.register_bot("bot-1", name="Helper", memory_path=repository)
    pk.create_conversation("c1", bot_id="bot-1")
    pk.create_conversation("c2")
    pk.create_conversation("ch", kind="channel")
    pk.ingest_event("c1", author="ada", body="one", event_id="e1")
    pk.ingest_event("c1", author="bob", body="two", event_id="e2")
    pk.ingest_event("c2", author="bob", body="three", event_id="e3")
    pk.place_event("e3", "c1")
    pk.ingest_event("ch", author="cy", body="four", event_id="e4")
    return {"repository": repository}


def hold(pk: Pk, hold_id: str = "case-1", **covers: Any) -> purgekeeper.Acceptance:
    return pk.place_hold(hold_id, actor="counsel@example.com", reason="litigation hold", **covers)


def confirm(pk: Pk, scope: EventScope, digest: str | None = None) -> purgekeeper.Acceptance:
    preview = pk.preview_purge(scope)
    return pk.confirm_purge(scope, scope_digest=digest or preview.scope_digest, actor="op", reason="request")


def test_a_hold_is_placed_listed_and_released(pk: Pk, world: dict[str, Any]) -> None:
    placed = hold(pk, conversation_ids=["c2", "c1", "c2"], authors=["ada"])
    assert placed.outcome == "accepted" and placed.ledger_seq == 1
    [held] = pk.list_holds()
    assert (held.hold_id, held.conversation_ids, held.authors) == ("case-1", ("c1", "c2"), ("ada",))
    assert (held.placed_by, held.reason, held.purge_id, held.release_purge_id, held.released_by) == (
        "counsel@example.com", "litigation hold", placed.purge_id, None, None,
    )  # fmt: skip
    assert pk.status(placed.purge_id).label == "legal hold case-1 placed"
    assert pk.status(placed.purge_id).status == "complete"

    again = hold(pk, conversation_ids=["c1", "c2"], authors=["ada"])
    assert (again.outcome, again.purge_id) == ("already_purged", placed.purge_id)
    assert again.disclosures == placed.disclosures  # a repeat says again what it does not undo
    hold(pk, "case-2", authors=["bob", "cy"])
    assert pk.count_holds() == [
        purgekeeper.HoldCount("case-1", 2, 1, held.placed_at),
        purgekeeper.HoldCount("case-2", 0, 2, pk.list_holds()[1].placed_at),
    ]
    assert [h.hold_id for h in pk.count_holds(limit=1)] == ["case-1"]
    for limit in (0, 1001, True, "1"):
        with pytest.raises(purgekeeper.ValidationError):
            pk.count_holds(limit=limit)  # type: ignore[arg-type]
    pk.release_hold("case-2", actor="counsel", reason="r")
    with pytest.raises(purgekeeper.IdempotencyConflict):
        hold(pk, conversation_ids=["c1"])

    released = pk.release_hold("case-1", actor="counsel@example.com", reason="settled")
    assert released.outcome == "accepted" and pk.list_holds() == []
    old, _case_2 = pk.list_holds(include_released=True)
    assert (old.release_purge_id, old.released_by) == (released.purge_id, "counsel@example.com")
    assert old.released_at is not None
    assert pk.release_hold("case-1", actor="counsel", reason="again").purge_id == released.purge_id
    with pytest.raises(purgekeeper.IdReserved):
        hold(pk, conversation_ids=["c1", "c2"], authors=["ada"])  # a hold id is never reused
    with pytest.raises(purgekeeper.NotFound):
        pk.release_hold("no-such-hold", actor="counsel", reason="?")


@pytest.mark.parametrize(
    "covers",
    [
        {},
        {"conversation_ids": []},
        {"conversation_ids": ["bad id!"]},
        {"conversation_ids": "c1"},
        {"authors": [""]},
        {"authors": ["a\x00b"]},
        {"authors": ["x"] * 1001},
    ],
)
def test_bad_holds_are_refused_and_nothing_is_written(pk: Pk, world: dict[str, Any], covers: dict[str, Any]) -> None:
    before = ledger_size(pk)
    with pytest.raises(purgekeeper.ValidationError):
        hold(pk, **covers)
    with pytest.raises(purgekeeper.ValidationError):
        pk.place_hold("bad id!", conversation_ids=["c1"], actor="counsel", reason="r")
    assert ledger_size(pk) == before and pk.list_holds() == []


def test_a_content_purge_of_held_events_is_refused_and_its_preview_marks_them(pk: Pk, world: dict[str, Any]) -> None:
    scope = EventScope(event_ids=["e1", "e3"])
    unheld = pk.preview_purge(scope)
    assert unheld.held == ()
    hold(pk, authors=["bob"])
    held = pk.preview_purge(scope)
    assert held.held == (purgekeeper.HeldEvent("e3", ("case-1",)),)
    assert held.scope_digest != unheld.scope_digest  # the digest covers the marks
    before = ledger_size(pk)
    for digest in (held.scope_digest, unheld.scope_digest):
        with pytest.raises(purgekeeper.LegalHold) as refused:
            confirm(pk, scope, digest)
        assert refused.value.hold_ids == ("case-1",)
    assert ledger_size(pk) == before and [e.body for e in pk.read_conversation("c2")] == ["three"]
    confirm(pk, EventScope(event_ids=["e1"]))  # ada's event is not held


def test_a_conversation_purge_is_refused_while_a_hold_covers_what_it_removes(pk: Pk, world: dict[str, Any]) -> None:
    hold(pk, "on-c2", conversation_ids=["c2"])
    with pytest.raises(purgekeeper.LegalHold, match="on-c2"):
        pk.purge_conversation("c2", actor="op", reason="r")
    hold(pk, "on-ada", authors=["ada"])
    with pytest.raises(purgekeeper.LegalHold, match="on-ada") as refused:
        pk.purge_conversation("c1", actor="op", reason="r")  # ada wrote e1 there
    assert refused.value.hold_ids == ("on-ada",)
    assert pk.purge_conversation("absent", actor="op", reason="reserve").outcome == "accepted"
    pk.release_hold("on-c2", actor="counsel", reason="done")
    assert pk.purge_conversation("c2", actor="op", reason="r").outcome == "accepted"


def test_an_author_erasure_is_refused_while_a_hold_covers_their_content(pk: Pk, world: dict[str, Any]) -> None:
    preview = pk.preview_author_erasure("bob")
    hold(pk, "on-c2", conversation_ids=["c2"])  # bob's e3 is placed there
    held_preview = pk.preview_author_erasure("bob")
    assert held_preview.held_by == ("on-c2",) and held_preview.scope_digest != preview.scope_digest
    for digest in (preview.scope_digest, held_preview.scope_digest):
        with pytest.raises(purgekeeper.LegalHold):
            pk.erase_author("bob", scope_digest=digest, actor="dpo", reason="GDPR")
    hold(pk, "on-cy", authors=["cy"])
    cy = pk.preview_author_erasure("cy")
    with pytest.raises(purgekeeper.LegalHold, match="on-cy"):
        pk.erase_author("cy", scope_digest=cy.scope_digest, actor="dpo", reason="GDPR")
    pk.release_hold("on-c2", actor="counsel", reason="done")
    with pytest.raises(purgekeeper.StaleConfirmation, match="legal holds"):
        pk.erase_author("bob", scope_digest=held_preview.scope_digest, actor="dpo", reason="GDPR")
    fresh = pk.preview_author_erasure("bob")
    assert pk.erase_author("bob", scope_digest=fresh.scope_digest, actor="dpo", reason="GDPR").outcome == "accepted"


def test_memory_erasure_is_refused_for_a_bot_whose_conversations_are_held(pk: Pk, world: dict[str, Any]) -> None:
    hold(pk, conversation_ids=["c1"])
    preview = pk.preview_bot_deletion("bot-1")
    assert preview.held_by == ("case-1",) and preview.memory.erasable
    with pytest.raises(purgekeeper.LegalHold):
        pk.delete_bot("bot-1", actor="op", reason="r", erase_memory=True, reviewed_repository=preview.memory.identity)
    assert world["repository"].exists()
    # without erasure a deletion removes no content: a hold does not block it
    assert pk.delete_bot("bot-1", actor="op", reason="r").outcome == "accepted"


def test_a_hold_does_not_block_a_channel_deletion(pk: Pk, world: dict[str, Any]) -> None:
    hold(pk, conversation_ids=["ch"])
    assert pk.delete_channel("ch", actor="op", reason="closing").outcome == "accepted"
    assert [e.body for e in pk.read_conversation("ch")] == ["four"]  # history stays readable


def test_a_hold_placed_after_a_purge_does_not_undo_it_and_says_so(pk: Pk, world: dict[str, Any]) -> None:
    pk.purge_conversation("c2", actor="op", reason="r")
    confirm(pk, EventScope(event_ids=["e1"]))
    preview = pk.preview_author_erasure("cy")
    pk.erase_author("cy", scope_digest=preview.scope_digest, actor="dpo", reason="GDPR")
    placed = hold(pk, conversation_ids=["c1", "c2"], authors=["cy"])
    said = " ".join(placed.disclosures)
    assert "does not undo" in said
    assert "conversations c2" in said and "content by cy" in said
    assert "2 events" in said  # e1, fenced by its content purge; cy's e4, erased
    assert [e.id for e in pk.read_conversation("c1")] == ["e2", "e3"]  # e1 stays purged; e3 lives on in c1
    with pytest.raises(purgekeeper.AuthorErased):
        pk.ingest_event("ch", author="cy", body="back?")


@pytest.mark.postgres_only
def test_a_hold_and_a_purge_racing_for_the_same_content_are_serialised(pk: Pk, world: dict[str, Any]) -> None:
    """Tried, ten times: a hold on c2 and a purge of e3 (in c2) started at once from two
    threads. One wins whole: either the purge is accepted and the hold says an event was
    already purged in its scope, or the hold is in force and the purge raised LegalHold."""
    outcomes = set()
    purged = 0
    for round_ in range(10):
        event_id = f"race-{round_}"
        pk.ingest_event("c2", author="bob", body="racing", event_id=event_id)
        scope = EventScope(event_ids=[event_id])
        digest = pk.preview_purge(scope).scope_digest
        results: dict[str, Any] = {}
        start = threading.Barrier(2)

        def purge(
            scope: EventScope = scope, digest: str = digest, results: dict[str, Any] = results, start: Any = start
        ) -> None:
            start.wait()
            try:
                results["purge"] = pk.confirm_purge(scope, scope_digest=digest, actor="op", reason="r")
            except purgekeeper.LegalHold as exc:
                results["purge"] = exc

        def place(round_: int = round_, results: dict[str, Any] = results, start: Any = start) -> None:
            start.wait()
            results["hold"] = hold(pk, f"race-hold-{round_}", conversation_ids=["c2"])

        threads = [threading.Thread(target=purge), threading.Thread(target=place)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        placed = results["hold"]
        if isinstance(results["purge"], purgekeeper.LegalHold):
            outcomes.add("hold first")
            assert [e.id for e in pk.read_conversation("c2")][-1] == event_id
        else:
            outcomes.add("purge first")
            purged += 1
            assert event_id not in [e.id for e in pk.read_conversation("c2")]
        counted = [d for d in placed.disclosures if "events in the hold's scope" in d]
        assert counted == ([f"Already purged, and not held: {purged} events in the hold's scope."] if purged else [])
        pk.release_hold(f"race-hold-{round_}", actor="counsel", reason="next round")
    assert outcomes  # each round was one or the other, whole


def test_a_hold_discloses_what_retention_runs_and_erasures_already_removed_in_its_scope(pk: Pk) -> None:
    """Tried (a review's finding): a retention run accepted over c-a (its fence standing), cy's
    content erased (an event of cy's in c-b, not yet cleaned up), then a hold on c-a and c-b:
    its acceptance named neither, as it counted event tombstones only."""
    from tests.helpers.retention import ago, set_policy

    pk.create_conversation("c-a")
    pk.create_conversation("c-b")
    pk.ingest_event("c-a", author="ada", body="old", occurred_at=ago(40))
    pk.ingest_event("c-b", author="cy", body="cy's")
    set_policy(pk, "thirty", 30, "c-a")
    [run] = pk.run_retention()
    assert run.purge_id is not None
    erasure = pk.preview_author_erasure("cy")
    pk.erase_author("cy", scope_digest=erasure.scope_digest, actor="dpo", reason="GDPR")
    placed = hold(pk, conversation_ids=["c-a", "c-b"])
    said = " ".join(placed.disclosures)
    assert "2 events in the hold's scope" in said  # ada's, expiring from c-a; cy's, erased
    assert "retention policy thirty" in said


def test_a_hold_placed_again_is_the_same_hold_under_any_collation(postgres_template: str, tmp_path: Path) -> None:
    """Tried (a review's finding): a database whose collation orders "adam" before "Zed"
    (ICU en-US), and the same hold on authors Zed and adam placed twice: the second is the
    first hold again, not an IdempotencyConflict. PostgreSQL only (``postgres_template``: the
    server must answer)."""
    from tests.helpers.databases import admin_connect, drop_database, postgres_url

    name = f"pk_icu_{uuid.uuid4().hex[:12]}"
    with admin_connect() as admin:
        admin.execute(
            f"CREATE DATABASE \"{name}\" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
        )
    try:
        with purgekeeper.open(postgres_url(name), checkpoint_dir=tmp_path / "l", blob_root=tmp_path / "b",
                           file_root=tmp_path / "f", workers="none") as pk:  # fmt: skip
            first = pk.place_hold("h", authors=["Zed", "adam"], actor="counsel", reason="r")
            again = pk.place_hold("h", authors=["adam", "Zed"], actor="counsel", reason="r")
            assert (again.outcome, again.purge_id) == ("already_purged", first.purge_id)
    finally:
        drop_database(name)
