"""Issue 26, item 1: a typo must not purge forever without a word. A conversation or channel
has a preview (counts, holds, what stays), and every acceptance says whether it reserved an
absent id (``reserved_absent``). The library keeps its semantics: purging an absent id
reserves it. Both backends."""

from __future__ import annotations

import pytest

import purgekeeper
from purgekeeper import NewAttachment

Pk = purgekeeper.Purgekeeper
WHO = {"actor": "ops@example.org", "reason": "the user asked"}


@pytest.fixture
def seeded(pk: Pk) -> Pk:
    """c1: three events (one also placed in c2, one with two attachments), a finished run and
    a derivative; ch1: a channel with one event."""
    pk.register_bot("b1", name="Bot")
    pk.create_conversation("c1", bot_id="b1")
    pk.create_conversation("c2")
    pk.create_conversation("ch1", kind="channel")
    pk.ingest_event("c1", author="ada", body="only here", event_id="e1")
    pk.ingest_event(
        "c1",
        author="ada",
        body="with files",
        event_id="e2",
        attachments=[NewAttachment.file(b"one", name="a.txt"), NewAttachment.file(b"two", name="b.txt")],
    )
    pk.ingest_event("c1", author="bob", body="in both", event_id="e3")
    pk.place_event("e3", "c2")
    run = pk.start_run("c1", bot_id="b1")
    pk.finish_run(run.id, status="succeeded", output="done")
    pk.add_derivative("c1", kind="summary", payload={"text": "s"}, source_event_ids=["e1"])
    pk.ingest_event("ch1", author="cy", body="announcement", event_id="e4")
    return pk


def test_a_conversation_preview_counts_what_a_purge_removes_and_what_stays(seeded: Pk) -> None:
    preview = seeded.preview_conversation_purge("c1")
    assert (preview.conversation_id, preview.kind, preview.exists) == ("c1", "conversation", True)
    assert preview.version == seeded.get_conversation("c1").version  # type: ignore[union-attr]
    assert (preview.events, preview.events_placed_elsewhere, preview.attachments) == (3, 1, 2)
    assert (preview.runs, preview.active_runs, preview.derivatives) == (1, (), 1)
    assert preview.holds == () and preview.removes_content
    assert preview.purged_by is None
    assert any("placed in another conversation" in d for d in preview.disclosures), preview.disclosures


def test_a_preview_names_the_holds_that_would_refuse_the_purge(seeded: Pk) -> None:
    seeded.place_hold("h-c1", conversation_ids=["c1"], **WHO)
    seeded.place_hold("h-bob", authors=["bob"], **WHO)
    assert seeded.preview_conversation_purge("c1").holds == ("h-bob", "h-c1")
    with pytest.raises(purgekeeper.LegalHold):
        seeded.purge_conversation("c1", **WHO)


def test_a_preview_of_an_absent_id_says_a_purge_would_reserve_it(seeded: Pk) -> None:
    preview = seeded.preview_conversation_purge("c9")
    assert (preview.exists, preview.kind, preview.version, preview.events) == (False, None, None, 0)
    assert any("reserve" in d for d in preview.disclosures), preview.disclosures
    assert preview.unknown and not seeded.preview_conversation_purge("c1").unknown


def test_a_preview_after_the_purge_names_the_purge(seeded: Pk) -> None:
    done = seeded.purge_conversation("c1", **WHO)
    preview = seeded.preview_conversation_purge("c1")
    assert (preview.purged_by, preview.exists, preview.unknown) == (done.purge_id, False, False)


def test_a_channel_preview_removes_nothing_and_keeps_the_history(seeded: Pk) -> None:
    preview = seeded.preview_channel_deletion("ch1")
    assert (preview.kind, preview.events, preview.removes_content) == ("channel", 1, False)
    assert any("history stays readable" in d for d in preview.disclosures), preview.disclosures
    with pytest.raises(purgekeeper.NotFound):
        seeded.preview_channel_deletion("ch9")
    with pytest.raises(purgekeeper.ValidationError, match="not a channel"):
        seeded.preview_channel_deletion("c1")


def test_every_acceptance_says_whether_it_reserved_an_absent_id(seeded: Pk) -> None:
    present = seeded.purge_conversation("c2", **WHO)
    absent = seeded.purge_conversation("c9", **WHO)
    channel = seeded.delete_channel("ch1", **WHO)
    assert (present.reserved_absent, absent.reserved_absent, channel.reserved_absent) == (False, True, False)
    replayed = seeded.purge_conversation("c9", **WHO, idempotency_key="k9")
    again = seeded.purge_conversation("c9", **WHO, idempotency_key="k9")
    assert again.outcome == replayed.outcome == "already_purged"
    keyed = seeded.purge_conversation("c8", **WHO, idempotency_key="k8")
    assert keyed.reserved_absent
    assert seeded.purge_conversation("c8", **WHO, idempotency_key="k8").reserved_absent  # the replay says so too


def test_a_bad_id_is_refused_before_any_read(pk: Pk) -> None:
    for bad in ("", "a" * 300, "line\nbreak"):
        with pytest.raises(purgekeeper.ValidationError):
            pk.preview_conversation_purge(bad)
