"""An author erasure's ``decide``, with no database. It is all lookups (the saved preview, the
author's newest ingest, the runs admitting the author's events, the earlier erasures, the
holds), each faked here with its answer as the real query would give it; what is tested is
what ``decide`` makes of them: stale, refused, already done, or the erasure to write."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

import pytest

from purgekeeper.commands.kinds import AUTHOR
from purgekeeper.commands.kinds.author import ErasureConfirmation, Window
from purgekeeper.commands.kinds.kind import Already, Decision
from purgekeeper.commands.kinds.selector_fields import RowInvalid
from purgekeeper.schema import authors, holds, ledger, purges
from purgekeeper.schema.errors import ActiveRuns, LegalHold, StaleConfirmation
from purgekeeper.schema.states import StepKind
from purgekeeper.schema.tables import author_erasures
from tests.helpers.decide_fakes import NO_DATABASE, Queries, row_of

BEFORE = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
END = dt.datetime(2026, 4, 20, 9, 30, tzinfo=dt.UTC)  # what ``lock`` read: the window's end
DIGEST = "a" * 64
NEWEST = ("2026-04-20T09:00:00.000000Z", "e9")


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> Queries:
    return Queries(monkeypatch)


def saved(before: dt.datetime | None = BEFORE, newest: Any = NEWEST, held_by: tuple[str, ...] = ()) -> dict[str, Any]:
    """The preview as ``purges.saved_preview`` gives it back (JSON: lists, texts)."""
    window = ["ada", ledger.utc_text(before) if before else None]
    return {"author_erasure": window, "newest_ingest": list(newest) if newest else None, "held_by": list(held_by)}


def erasure(purge_id: str, window_end: dt.datetime, close_author: bool = False, author: str = "ada") -> Any:
    return row_of(author_erasures, author=author, purge_id=purge_id, window_end=window_end, close_author=close_author)


def state(
    queries: Queries,
    *,
    preview: dict[str, Any] | None = None,
    newest: tuple[str, str] | None = NEWEST,
    runs: tuple[str, ...] = (),
    earlier: tuple[Any, ...] = (),
    between: bool = False,
    held: tuple[str, ...] = (),
) -> None:
    """The author's state as each lookup ``decide`` makes answers it."""
    queries.returns(purges, "saved_preview", saved() if preview is None else preview)
    queries.returns(authors, "newest_ingest", newest)
    queries.returns(authors, "active_runs_admitting", list(runs))
    queries.returns(authors, "erasures_of", list(earlier))
    queries.returns(authors, "any_event_between", between)
    queries.computes(ledger, "entry_by_purge_id", lambda purge_id: SimpleNamespace(seq={"p1": 11, "p2": 12}[purge_id]))
    queries.returns(holds, "holds_of_author", list(held))


def erase(before: dt.datetime | None = BEFORE, close_author: bool = True) -> Decision | Already:
    confirmation = ErasureConfirmation(Window("ada", before), DIGEST, close_author)
    return AUTHOR.decide(NO_DATABASE, None, confirmation, END)


def test_the_erasure_records_its_window_and_waits_attachments_for_its_bodies(queries: Queries) -> None:
    state(queries)
    assert erase() == Decision(
        {
            "author": "ada",
            "before": "2026-05-01T00:00:00.000000Z",
            "window_end": "2026-04-20T09:30:00.000000Z",  # what ``lock`` read, not ``before``
            "close_author": True,
        },
        (StepKind.BODIES, StepKind.ATTACHMENTS),
        parked=(StepKind.ATTACHMENTS,),
        digest=DIGEST,  # the preview's
    )
    assert queries.arguments("saved_preview") == [{"scope_digest": DIGEST}]
    assert queries.arguments("holds_of_author") == [{"author": "ada", "window_end": END}]


def test_an_erasure_without_before_records_none(queries: Queries) -> None:
    state(queries, preview=saved(before=None))
    decision = erase(before=None)
    assert isinstance(decision, Decision)
    assert decision.selectors["before"] is None


@pytest.mark.parametrize(
    ("preview", "why"),
    [
        (None, "no preview of the erasure of ada with this window"),
        (saved(before=BEFORE - dt.timedelta(microseconds=1)), "no preview of the erasure of ada with this window"),
        ({**saved(), "author_erasure": ["bob", "2026-05-01T00:00:00.000000Z"]}, "no preview of the erasure"),
        (saved(newest=("2026-04-20T09:00:00.000000Z", "e8")), "ingested since the preview"),
        (saved(newest=None), "ingested since the preview"),
    ],
    ids=["no preview", "another window", "another author", "another newest event", "no event then"],
)
def test_a_confirmation_of_another_preview_or_of_older_events_is_stale(
    queries: Queries, preview: dict[str, Any] | None, why: str
) -> None:
    queries.returns(purges, "saved_preview", preview)
    queries.returns(authors, "newest_ingest", NEWEST)
    with pytest.raises(StaleConfirmation, match=why):  # nothing after the staleness is asked
        erase()


def test_an_active_run_admitting_the_author_s_events_refuses(queries: Queries) -> None:
    state(queries, runs=("r1",))
    with pytest.raises(ActiveRuns) as refused:
        erase()
    assert refused.value.run_ids == ("r1",)


def test_a_hold_on_the_author_s_content_refuses(queries: Queries) -> None:
    state(queries, held=("h1",), preview=saved(held_by=("h1",)))
    with pytest.raises(LegalHold, match="legal hold h1 covers content by ada") as refused:
        erase()
    assert refused.value.hold_ids == ("h1",)


def test_a_hold_released_since_the_preview_makes_it_stale(queries: Queries) -> None:
    """The preview said a hold covered the content; the confirmation cannot erase what the
    person reviewed as held."""
    state(queries, preview=saved(held_by=("h1",)))
    with pytest.raises(StaleConfirmation, match="legal holds on ada's content changed"):
        erase()


@pytest.mark.parametrize(
    ("earlier", "close_author", "between", "already"),
    [
        ((erasure("p1", END),), False, False, Already("p1", 11)),  # an open window as wide
        ((erasure("p1", END + dt.timedelta(days=1)),), False, False, Already("p1", 11)),  # wider
        ((erasure("p1", END - dt.timedelta(seconds=1)),), False, False, None),  # narrower: refuses more backfill
        ((erasure("p1", END),), True, False, None),  # this one closes the author: it adds the closure
        ((erasure("p1", END - dt.timedelta(days=9), close_author=True),), True, False, Already("p1", 11)),
        ((erasure("p1", END - dt.timedelta(days=9), close_author=True),), False, False, Already("p1", 11)),
        ((erasure("p1", END - dt.timedelta(days=9), close_author=True),), True, True, None),  # an event between
        (
            (erasure("p2", END + dt.timedelta(days=1)), erasure("p1", END - dt.timedelta(days=1), close_author=True)),
            True,
            False,
            Already("p2", 12),  # the latest window names it
        ),
    ],
    ids=["as wide", "wider", "narrower", "closing", "closed", "closed, open asked", "event between", "latest"],
)
def test_an_erasure_the_earlier_ones_cover_is_already_done(
    queries: Queries, earlier: tuple[Any, ...], close_author: bool, between: bool, already: Already | None
) -> None:
    state(queries, earlier=earlier, between=between)
    decision = erase(close_author=close_author)
    if already is None:
        assert isinstance(decision, Decision)
    else:
        assert decision == already


def test_a_closed_author_is_covered_up_to_the_widest_earlier_window(queries: Queries) -> None:
    widest = END - dt.timedelta(days=2)
    state(queries, earlier=(erasure("p1", widest, close_author=True), erasure("p2", END - dt.timedelta(days=5))))
    erase()
    assert queries.arguments("any_event_between") == [{"author": "ada", "start": widest, "end": END}]


def test_an_erasure_not_in_the_ledger_yet_covers_with_seq_zero(queries: Queries) -> None:
    state(queries, earlier=(erasure("p1", END),))
    queries.returns(ledger, "entry_by_purge_id", None)
    assert erase(close_author=False) == Already("p1", 0)


def test_a_covered_erasure_is_already_done_even_under_a_hold(queries: Queries) -> None:
    """Nothing new would be removed, so a hold placed since is no reason to refuse."""
    state(queries, earlier=(erasure("p1", END),), held=("h1",))
    assert erase(close_author=False) == Already("p1", 11)


# -- what a ledger row of the kind may hold --------------------------------------------------------

ROW = {"author": "ada", "before": None, "window_end": "2026-04-20T09:30:00.000000Z", "close_author": True}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"author": ""}, "author"),
        ({"author": "x" * 1000}, "author is longer"),
        ({"before": "2026-05-01"}, "before"),
        ({"window_end": None}, "window_end"),
        ({"close_author": 1}, "close_author"),
    ],
)
def test_an_erasure_row_no_acceptance_would_write_is_refused(change: dict[str, Any], named: str) -> None:
    AUTHOR.check_selectors(ROW)
    with pytest.raises(RowInvalid, match=named):
        AUTHOR.check_selectors({**ROW, **change})


def test_an_erasure_row_without_its_author_is_refused() -> None:
    with pytest.raises(RowInvalid, match="lack author"):
        AUTHOR.check_selectors({k: v for k, v in ROW.items() if k != "author"})
