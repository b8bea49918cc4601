"""What the retention and hold kinds accept: a policy's max_age, and the ledger rows of the
five new kinds (a merge checks every row it would append). No I/O."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from purgekeeper.commands import kinds
from purgekeeper.commands.kinds import retention_run
from purgekeeper.commands.kinds.retention import Definition, check_max_age, digest_of
from purgekeeper.schema.errors import ValidationError
from purgekeeper.schema.states import PurgeKind

CUTOFF = "2026-11-02T05:00:00.000000Z"
VALID: dict[PurgeKind, dict[str, Any]] = {
    PurgeKind.RETENTION: {"policy_id": "p1", "conversation_id": None, "max_age_seconds": 86400, "replaces": None},
    PurgeKind.RETENTION_END: {"policy_id": "p1", "ended": "abc", "conversation_id": "c1"},
    PurgeKind.RETENTION_RUN: {
        "policy_id": "p1",
        "policy_purge_id": "abc",
        "conversation_id": None,
        "max_age_seconds": 86400,
        "cutoff": CUTOFF,
        "window_start": None,
        "placed_before": CUTOFF,
        "held_conversations": ["c2"],
        "held_authors": ["ada lovelace"],
        "own_policy_conversations": ["c3"],
        "hold_ids": ["h1"],
    },
    PurgeKind.HOLD: {"hold_id": "h1", "conversation_ids": ["c1"], "authors": []},
    PurgeKind.HOLD_RELEASE: {"hold_id": "h1"},
}


@pytest.mark.parametrize("kind", list(VALID), ids=str)
def test_a_row_an_acceptance_writes_is_accepted(kind: PurgeKind) -> None:
    kinds.KINDS[kind].check_selectors(VALID[kind])


def test_a_run_that_deferred_what_agent_runs_admitted_is_accepted() -> None:
    deferred = {"planned_cutoff": "2026-11-03T05:00:00.000000Z", "deferred_events": 2, "deferred_run_ids": ["r1"]}
    kinds.KINDS[PurgeKind.RETENTION_RUN].check_selectors({**VALID[PurgeKind.RETENTION_RUN], **deferred})


@pytest.mark.parametrize(
    ("kind", "change", "named"),
    [
        (PurgeKind.RETENTION, {"max_age_seconds": 0}, "max_age_seconds"),
        (PurgeKind.RETENTION, {"max_age_seconds": "86400"}, "max_age_seconds"),
        (PurgeKind.RETENTION, {"max_age_seconds": True}, "max_age_seconds"),
        (PurgeKind.RETENTION, {"policy_id": "../x"}, "policy_id"),
        (PurgeKind.RETENTION, {"conversation_id": "a b"}, "conversation_id"),
        (PurgeKind.RETENTION_END, {"policy_id": None}, "policy_id"),
        (PurgeKind.RETENTION_RUN, {"cutoff": "yesterday"}, "cutoff"),
        (PurgeKind.RETENTION_RUN, {"cutoff": "2026-11-02T05:00:00+00:00"}, "cutoff"),
        (PurgeKind.RETENTION_RUN, {"window_start": 5}, "window_start"),
        (PurgeKind.RETENTION_RUN, {"placed_before": None}, "placed_before"),
        (PurgeKind.RETENTION_RUN, {"held_conversations": "c2"}, "held_conversations"),
        (PurgeKind.RETENTION_RUN, {"held_authors": [""]}, "held_authors"),
        (PurgeKind.RETENTION_RUN, {"policy_purge_id": "x" * 65}, "policy_purge_id"),
        (PurgeKind.RETENTION_RUN, {"planned_cutoff": "2026-11-01T05:00:00.000000Z"}, "planned_cutoff"),
        (PurgeKind.RETENTION_RUN, {"deferred_events": -1}, "deferred_events"),
        (PurgeKind.RETENTION_RUN, {"deferred_events": True}, "deferred_events"),
        (PurgeKind.RETENTION_RUN, {"deferred_run_ids": ["r 1"]}, "deferred_run_ids"),
        (PurgeKind.HOLD, {"conversation_ids": [], "authors": []}, "at least one"),
        (PurgeKind.HOLD, {"authors": ["a\x00b"]}, "authors"),
        (PurgeKind.HOLD_RELEASE, {"hold_id": ""}, "hold_id"),
    ],
)
def test_a_row_no_acceptance_would_write_is_refused_naming_the_field(
    kind: PurgeKind, change: dict[str, Any], named: str
) -> None:
    with pytest.raises(kinds.RowInvalid, match=named):
        kinds.KINDS[kind].check_selectors({**VALID[kind], **change})


@pytest.mark.parametrize(
    ("max_age", "seconds"),
    [(dt.timedelta(days=30), 2_592_000), (dt.timedelta(seconds=1), 1), (dt.timedelta(days=36_500), 3_153_600_000)],
)
def test_a_max_age_is_whole_seconds(max_age: dt.timedelta, seconds: int) -> None:
    assert check_max_age(max_age) == seconds


@pytest.mark.parametrize(
    "max_age",
    [dt.timedelta(0), dt.timedelta(seconds=-1), dt.timedelta(milliseconds=1500), dt.timedelta(days=36_501), 30, "30d"],
)
def test_a_max_age_that_is_no_positive_whole_duration_is_refused(max_age: Any) -> None:
    with pytest.raises(ValidationError, match="max_age"):
        check_max_age(max_age)


def test_the_digest_covers_the_definition_and_nothing_else() -> None:
    thirty = digest_of(Definition(None, 2_592_000))
    assert thirty == digest_of(Definition(None, 2_592_000))
    assert len({thirty, digest_of(Definition(None, 2_592_001)), digest_of(Definition("c1", 2_592_000))}) == 3


def test_a_run_is_named_by_its_policy_version_and_cutoff() -> None:
    cutoff = dt.datetime(2026, 11, 2, 5, tzinfo=dt.UTC)
    assert retention_run.idempotency_key("v1", cutoff) == f"retention-run:v1:{CUTOFF}"
    assert retention_run.idempotency_key("v2", cutoff) != retention_run.idempotency_key("v1", cutoff)


def test_a_held_conversation_with_a_policy_of_its_own_is_exempt_once_as_held() -> None:
    selectors = {**VALID[PurgeKind.RETENTION_RUN], "own_policy_conversations": ["c2", "c3"]}
    assert retention_run.exemptions(selectors) == [
        ("author", "ada lovelace", "hold"),
        ("conversation", "c2", "hold"),
        ("conversation", "c3", "own_policy"),
    ]
