"""A content purge's ``decide``, with no database: the report ``lock`` read under the locks is
built here, and the decision is a function of it and the confirmation, save for two
lookups (the saved preview, to say what changed; the covering purges, when nothing is left
to fence), faked where a test reaches them."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

import pytest

from purgekeeper.commands.kinds import CONTENT
from purgekeeper.commands.kinds.content import ScopeConfirmation, describe_changes
from purgekeeper.commands.kinds.kind import Already, Decision
from purgekeeper.commands.kinds.selector_fields import RowInvalid
from purgekeeper.commands.scope import EventScope, HeldEvent, PreviewAttachment, PreviewEvent, PreviewRun, PurgePreview
from purgekeeper.schema import authors, purges
from purgekeeper.schema.errors import ActiveRuns, LegalHold, StaleConfirmation
from purgekeeper.schema.states import StepKind
from tests.helpers.decide_fakes import NO_DATABASE, Queries

AT = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)
DIGEST = "d" * 64


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> Queries:
    return Queries(monkeypatch)


def event(event_id: str, *placements: str, provider: str | None = None, fenced: bool = False) -> PreviewEvent:
    return PreviewEvent(event_id, provider, "ada", AT, placements or ("c1",), already_fenced=fenced)


def attachment(attachment_id: str, event_id: str) -> PreviewAttachment:
    return PreviewAttachment(attachment_id, event_id, f"blob-{attachment_id}", "file", "a.png", 10)


def report(*events: PreviewEvent, **sections: Any) -> PurgePreview:
    """The report ``lock`` returns, with only what a test names in it."""
    found: dict[str, Any] = {
        "admissions": (),
        "runs": (),
        "derivatives": (),
        "exclusive_attachments": (),
        "shared_attachments": (),
        "blocking_runs": (),
        "disclosures": (),
        "scope_digest": DIGEST,
    }
    found.update(sections)
    return PurgePreview(scope=EventScope(event_ids=tuple(e.id for e in events)), events=events, **found)


def decide(locked: PurgePreview, digest: str = DIGEST) -> Decision | Already:
    return CONTENT.decide(NO_DATABASE, None, ScopeConfirmation(locked.scope, digest), locked)


def test_the_fresh_events_are_fenced_and_the_fenced_ones_recorded_as_such() -> None:
    locked = report(
        event("e2", "c2", "c1", provider="p2"),
        event("e1", "c1"),
        event("e3", "c3", provider="p3", fenced=True),
    )
    assert decide(locked) == Decision(
        {
            "event_ids": ["e1", "e2"],
            "provider_event_ids": ["p2"],  # e3's is fenced already, e1 has none
            "already_fenced": ["e3"],
            "conversation_ids": ["c1", "c2", "c3"],  # where they are placed, fenced ones too
        },
        (StepKind.BODIES,),
        digest=DIGEST,  # the report's, not the selectors'
        touched=("c1", "c2", "c3"),
    )


@pytest.mark.parametrize("section", ["exclusive_attachments", "shared_attachments"])
def test_an_attachment_of_a_fresh_event_adds_the_attachments_step(section: str) -> None:
    decision = decide(report(event("e1"), event("e2"), **{section: (attachment("a1", "e2"),)}))
    assert isinstance(decision, Decision)
    assert decision.steps == (StepKind.BODIES, StepKind.ATTACHMENTS)


def test_an_attachment_of_an_event_fenced_already_adds_no_step() -> None:
    decision = decide(report(event("e1"), event("e2", fenced=True), exclusive_attachments=(attachment("a1", "e2"),)))
    assert isinstance(decision, Decision)
    assert decision.steps == (StepKind.BODIES,)


def test_a_hold_on_a_fresh_event_refuses_naming_each_hold_once() -> None:
    held = (HeldEvent("e1", ("h2", "h1")), HeldEvent("e2", ("h1",)))
    with pytest.raises(LegalHold, match="legal hold h1, h2 covers events e1, e2") as refused:
        decide(report(event("e1"), event("e2"), event("e3"), held=held))
    assert refused.value.hold_ids == ("h1", "h2")


def test_a_hold_on_an_event_fenced_already_does_not_refuse() -> None:
    """What a purge already fenced it does not remove again: a hold on it placed since
    stands in no one's way."""
    decision = decide(report(event("e1"), event("e2", fenced=True), held=(HeldEvent("e2", ("h1",)),)))
    assert isinstance(decision, Decision)
    assert decision.selectors["event_ids"] == ["e1"]


def test_a_hold_refuses_before_a_stale_digest_is_looked_at() -> None:
    """The hold is read under the locks: it refuses whatever the preview said, and the saved
    preview is never read (no query is faked)."""
    with pytest.raises(LegalHold):
        decide(report(event("e1"), held=(HeldEvent("e1", ("h1",)),)), digest="0" * 64)


def test_a_digest_other_than_the_report_s_is_stale_and_says_what_changed(queries: Queries) -> None:
    before = report(event("e1"), event("e2")).id_summary()
    queries.returns(purges, "saved_preview", before)
    now = report(event("e1"), event("e3"), blocking_runs=(PreviewRun("r1", "c1", "b1", "running", False),))
    with pytest.raises(StaleConfirmation, match=r"events added: e3; events removed: e2") as stale:
        decide(now, digest="0" * 64)
    assert "blocking runs added: r1" in stale.value.detail
    assert queries.arguments("saved_preview") == [{"scope_digest": "0" * 64}]


def test_a_stale_digest_whose_preview_is_gone_says_to_preview_again(queries: Queries) -> None:
    queries.returns(purges, "saved_preview", None)
    with pytest.raises(StaleConfirmation, match="preview is unknown or expired"):
        decide(report(event("e1")), digest="0" * 64)


def test_an_active_run_refuses_a_current_confirmation_naming_the_runs() -> None:
    runs = tuple(PreviewRun(f"r{n}", "c1", "b1", "queued", False) for n in range(12))
    with pytest.raises(ActiveRuns, match="affected: r0, r1, r2, r3, r4, r5, r6, r7, r8, r9; settle") as refused:
        decide(report(event("e1"), blocking_runs=runs))
    assert refused.value.run_ids == tuple(f"r{n}" for n in range(12))  # the message names the first ten


@pytest.mark.parametrize(
    ("tombstone", "erasure", "covering"),
    [
        (("p-tomb", 7), ("p-erase", 9), ("p-erase", 9)),
        (("p-tomb", 7), None, ("p-tomb", 7)),
        (None, ("p-erase", 3), ("p-erase", 3)),
    ],
)
def test_nothing_left_to_fence_is_already_purged_by_the_latest_covering_purge(
    queries: Queries, tombstone: tuple[str, int] | None, erasure: tuple[str, int] | None, covering: tuple[str, int]
) -> None:
    def row(found: tuple[str, int] | None) -> Any:
        return SimpleNamespace(purge_id=found[0], seq=found[1]) if found else None

    queries.returns(purges, "latest_covering_purge", row(tombstone))
    queries.returns(authors, "covering_erasure", row(erasure))
    assert decide(report(event("e2", fenced=True), event("e1", fenced=True))) == Already(*covering)
    assert queries.arguments("latest_covering_purge") == [{"event_ids": ("e2", "e1")}]


def test_a_report_with_the_same_ids_that_changed_says_its_details_changed() -> None:
    now = report(event("e1"))
    assert "the report's details changed" in describe_changes(now.id_summary(), now)


def test_a_long_list_of_changes_is_cut_short() -> None:
    now = report(*(event(f"e{n}") for n in range(8)))
    assert "events added: e0, e1, e2, e3, e4 and 3 more" in describe_changes({}, now)


# -- what a ledger row of the kind may hold (a merge checks every row) --------------------------

ROW = {"event_ids": ["e1"], "already_fenced": [], "provider_event_ids": ["p1"], "conversation_ids": ["c1"]}


def test_a_row_an_acceptance_writes_is_accepted() -> None:
    CONTENT.check_selectors(ROW)
    CONTENT.check_selectors({"event_ids": ["e1"]})  # a row from before 0010 lists no conversations


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"event_ids": []}, "event_ids is empty"),
        ({"event_ids": "e1"}, "event_ids"),
        ({"already_fenced": ["e 1"]}, "already_fenced"),
        ({"provider_event_ids": [""]}, "provider_event_ids"),
        ({"conversation_ids": [None]}, "conversation_ids"),
    ],
)
def test_a_row_no_acceptance_would_write_is_refused(change: dict[str, Any], named: str) -> None:
    with pytest.raises(RowInvalid, match=named):
        CONTENT.check_selectors({**ROW, **change})


def test_a_row_without_event_ids_is_refused() -> None:
    with pytest.raises(RowInvalid, match="lack event_ids"):
        CONTENT.check_selectors({"already_fenced": []})
