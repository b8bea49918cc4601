"""The ``decide`` of the operator's kinds (a retention policy set and removed, a run of it, a
legal hold placed and released), with no database: the policy's row ``lock`` returned stands
in as a row of ``retention_policies``, a hold's as the ``HoldRow`` it is, and each lookup
``decide`` makes is faked with its answer; one it makes unfaked fails the test."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from purgekeeper.commands.kinds import HOLD, HOLD_RELEASE, RETENTION, RETENTION_END, RETENTION_RUN, retention
from purgekeeper.commands.kinds.hold import Placing
from purgekeeper.commands.kinds.hold_release import Release
from purgekeeper.commands.kinds.kind import Already, Decision
from purgekeeper.commands.kinds.retention import Definition, Setting, digest_of
from purgekeeper.commands.kinds.retention_end import Removal
from purgekeeper.commands.kinds.retention_run import Run
from purgekeeper.schema import holds, ledger, purges, retention_queries
from purgekeeper.schema.errors import (
    ConversationPurged,
    IdempotencyConflict,
    IdReserved,
    NotFound,
    PolicyConflict,
    StaleConfirmation,
    ValidationError,
)
from purgekeeper.schema.holds import AlreadyPurged, HoldRow
from purgekeeper.schema.retention_queries import Deferral
from purgekeeper.schema.states import StepKind
from purgekeeper.schema.tables import retention_policies
from tests.helpers.decide_fakes import NO_DATABASE, Queries, row_of

DAY = 86_400
CUTOFF = dt.datetime(2026, 6, 1, 5, tzinfo=dt.UTC)
NOW = dt.datetime(2026, 6, 2, 5, 0, 1, tzinfo=dt.UTC)


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> Queries:
    return Queries(monkeypatch)


def policy(
    conversation_id: str | None = None, max_age_seconds: int = DAY, ended_by: str | None = None, **more: Any
) -> Any:
    return row_of(
        retention_policies,
        policy_id="p1",
        conversation_id=conversation_id,
        max_age_seconds=max_age_seconds,
        purge_id="v1",
        ended_by=ended_by,
        **more,
    )


def seqs(queries: Queries, **known: int) -> None:
    """``retention_queries.ledger_seq`` knows these rows' seqs, and no other row."""
    queries.computes(retention_queries, "ledger_seq", lambda purge_id: known.get(purge_id or ""))


# -- a retention policy set ------------------------------------------------------------------------


def set_policy(
    queries: Queries, definition: Definition, locked: Any, *, standing: Any = None, purgeable: bool = True
) -> Decision | Already:
    """``set_retention`` confirmed with a saved preview of ``definition``, named by its digest;
    ``standing`` governs the scope now; a conversation in it is there and not purged, unless
    ``purgeable`` is false."""

    def require_purgeable_conversation(conversation_id: str) -> None:
        if not purgeable:
            raise ConversationPurged(f"conversation {conversation_id} is already purged")

    queries.returns(purges, "saved_preview", {"retention": [definition.conversation_id, definition.max_age_seconds]})
    queries.computes(retention, "require_purgeable_conversation", require_purgeable_conversation)
    queries.returns(retention_queries, "standing_for_scope", standing)
    seqs(queries, v1=4)
    return RETENTION.decide(NO_DATABASE, None, Setting("p1", definition, digest_of(definition)), locked)


def test_a_new_global_policy_is_set_by_its_preview_s_digest(queries: Queries) -> None:
    definition = Definition(None, DAY)
    assert set_policy(queries, definition, None) == Decision(
        {"policy_id": "p1", "conversation_id": None, "max_age_seconds": DAY, "replaces": None},
        digest=digest_of(definition),
    )
    assert queries.arguments("standing_for_scope") == [{"conversation_id": None}]
    assert queries.arguments("require_purgeable_conversation") == []  # no conversation to check


def test_a_changed_max_age_replaces_the_standing_version(queries: Queries) -> None:
    decision = set_policy(queries, Definition(None, 2 * DAY), policy(), standing=policy())
    assert isinstance(decision, Decision)
    assert decision.selectors["replaces"] == "v1"


def test_the_same_definition_again_is_the_version_in_force(queries: Queries) -> None:
    assert set_policy(queries, Definition("c1", DAY), policy("c1"), standing=policy("c1")) == Already("v1", 4)


def test_an_ended_policy_set_again_is_a_new_version_replacing_none(queries: Queries) -> None:
    decision = set_policy(queries, Definition(None, DAY), policy(ended_by="end1"))
    assert isinstance(decision, Decision)
    assert decision.selectors["replaces"] is None


def test_another_policy_governing_the_scope_is_a_conflict(queries: Queries) -> None:
    other = row_of(retention_policies, policy_id="p9", conversation_id=None, max_age_seconds=DAY, purge_id="v9")
    with pytest.raises(PolicyConflict, match=r"policy p9 already governs every conversation; .*set_retention\('p9'"):
        set_policy(queries, Definition(None, 2 * DAY), None, standing=other)


def test_a_policy_moved_to_a_conversation_another_governs_is_a_conflict(queries: Queries) -> None:
    other = row_of(retention_policies, policy_id="p9", conversation_id="c2", max_age_seconds=DAY, purge_id="v9")
    with pytest.raises(PolicyConflict, match="already governs conversation c2"):
        set_policy(queries, Definition("c2", DAY), policy(), standing=other)


@pytest.mark.parametrize(
    ("saved", "digest"),
    [
        ({"retention": [None, DAY]}, digest_of(Definition(None, 2 * DAY))),  # the digest of another definition
        (None, None),  # its preview is gone
        ({"retention": [None, 2 * DAY]}, None),  # a digest saved of another definition
    ],
    ids=["another digest", "no preview", "another saved definition"],
)
def test_a_confirmation_without_a_preview_of_this_definition_is_stale(
    queries: Queries, saved: Any, digest: str | None
) -> None:
    definition = Definition(None, DAY)
    queries.returns(purges, "saved_preview", saved)
    with pytest.raises(StaleConfirmation, match="preview it with preview_retention"):
        RETENTION.decide(NO_DATABASE, None, Setting("p1", definition, digest or digest_of(definition)), None)


def test_a_conversation_s_policy_needs_a_conversation_that_can_be_purged(queries: Queries) -> None:
    with pytest.raises(ConversationPurged, match="c1"):
        set_policy(queries, Definition("c1", DAY), None, purgeable=False)
    assert queries.arguments("require_purgeable_conversation") == [{"conversation_id": "c1"}]


# -- a retention policy removed --------------------------------------------------------------------


def test_a_standing_policy_is_removed_naming_the_version_it_ends(queries: Queries) -> None:
    decision = RETENTION_END.decide(NO_DATABASE, None, Removal("p1"), policy("c1"))
    assert decision == Decision({"policy_id": "p1", "ended": "v1", "conversation_id": "c1"})


def test_removing_an_unknown_policy_is_not_found() -> None:
    with pytest.raises(NotFound, match="no retention policy p1"):
        RETENTION_END.decide(NO_DATABASE, None, Removal("p1"), None)


@pytest.mark.parametrize(("known", "seq"), [({"end1": 8}, 8), ({}, 0)], ids=["in the ledger", "not yet"])
def test_a_removed_policy_is_already_removed_by_its_end(queries: Queries, known: dict[str, int], seq: int) -> None:
    seqs(queries, **known)
    assert RETENTION_END.decide(NO_DATABASE, None, Removal("p1"), policy(ended_by="end1")) == Already("end1", seq)


# -- a run of a retention policy -------------------------------------------------------------------


def planned(conversation_id: str | None = None, expired_through: dt.datetime | None = None) -> Any:
    return policy(conversation_id, pending_cutoff=CUTOFF, expired_through=expired_through)


NOTHING_DEFERRED = Deferral()


def run_state(queries: Queries, deferral: Deferral = NOTHING_DEFERRED) -> None:
    """The holds in force, the admissions, the clock and the policies as each lookup answers."""
    queries.returns(holds, "held_subjects", [("author", "ada"), ("conversation", "c2"), ("conversation", "c3")])
    queries.returns(retention_queries, "wait_for_admissions", None)
    queries.returns(retention_queries, "deferral", deferral)
    queries.returns(ledger, "database_now", NOW)
    queries.returns(retention_queries, "own_policy_conversations", ["c4"])
    queries.returns(holds, "hold_ids_in_force", ["h1", "h2"])


def run(locked: Any, cutoff: dt.datetime = CUTOFF) -> Decision | Already:
    return RETENTION_RUN.decide(NO_DATABASE, None, Run("p1", cutoff), locked)


def test_a_global_run_records_its_window_and_every_exemption(queries: Queries) -> None:
    run_state(queries)
    assert run(planned()) == Decision(
        {
            "policy_id": "p1",
            "policy_purge_id": "v1",
            "conversation_id": None,
            "max_age_seconds": DAY,
            "cutoff": "2026-06-01T05:00:00.000000Z",
            "window_start": None,  # walk everything
            "placed_before": "2026-06-02T05:00:01.000000Z",
            "held_conversations": ["c2", "c3"],
            "held_authors": ["ada"],
            "own_policy_conversations": ["c4"],  # a global run leaves them alone
            "hold_ids": ["h1", "h2"],
        },
        (StepKind.BODIES, StepKind.ATTACHMENTS),
        parked=(StepKind.ATTACHMENTS,),
    )
    assert queries.arguments("deferral") == [{"conversation_id": None, "cutoff": CUTOFF, "start": None}]


def test_a_conversation_s_run_walks_from_its_last_cutoff_and_exempts_no_own_policy(queries: Queries) -> None:
    run_state(queries)
    queries.computes(retention_queries, "own_policy_conversations", lambda: pytest.fail("asked of a conversation"))
    since = CUTOFF - dt.timedelta(hours=1)
    decision = run(planned("c1", expired_through=since))
    assert isinstance(decision, Decision)
    assert decision.selectors["window_start"] == "2026-06-01T04:00:00.000000Z"
    assert decision.selectors["own_policy_conversations"] == []
    assert queries.arguments("deferral") == [{"conversation_id": "c1", "cutoff": CUTOFF, "start": since}]


def test_events_agent_runs_admitted_lower_the_cutoff_and_say_so(queries: Queries) -> None:
    earliest = CUTOFF - dt.timedelta(hours=3)
    run_state(queries, Deferral(earliest, 2, ("r1", "r2")))
    decision = run(planned())
    assert isinstance(decision, Decision)
    assert {k: decision.selectors[k] for k in ("cutoff", "planned_cutoff", "deferred_events", "deferred_run_ids")} == {
        "cutoff": "2026-06-01T02:00:00.000000Z",
        "planned_cutoff": "2026-06-01T05:00:00.000000Z",
        "deferred_events": 2,
        "deferred_run_ids": ["r1", "r2"],
    }
    assert decision.disclosures == (
        "2 events admitted by non-terminal agent runs (r1, r2), and what occurred after the earliest of them, "
        "wait for a later run of the policy",
    )


def test_a_run_of_an_unknown_policy_is_not_found() -> None:
    with pytest.raises(NotFound, match="no retention policy p1"):
        run(None)


@pytest.mark.parametrize(
    "locked",
    [
        policy(ended_by="end1", pending_cutoff=CUTOFF),  # removed since it was planned
        policy(pending_cutoff=CUTOFF + dt.timedelta(hours=1)),  # planned again, at another cutoff
        policy(),  # no run planned
    ],
    ids=["removed", "another cutoff", "none planned"],
)
def test_a_run_its_policy_no_longer_plans_is_refused(locked: Any) -> None:
    with pytest.raises(ValidationError, match=r"no run planned at 2026-06-01T05:00:00\.000000Z"):
        run(locked)


# -- a legal hold placed and released --------------------------------------------------------------

NOTHING_PURGED = AlreadyPurged(purged_conversations=(), erased_authors=(), fenced_events=0, retention_policies=())
IRREVERSIBLE = "A legal hold does not undo a purge accepted before it: purges are irreversible."


def hold(released_by: str | None = None, conversation_ids: tuple[str, ...] = ("c1", "c2")) -> HoldRow:
    return HoldRow("h1", "ph1", released_by, conversation_ids, ("ada",))


def place(locked: HoldRow | None, conversation_ids: tuple[str, ...] = ("c2", "c1")) -> Decision | Already:
    return HOLD.decide(NO_DATABASE, None, Placing("h1", conversation_ids, ("ada",)), locked)


def test_a_new_hold_is_placed_saying_it_undoes_no_purge(queries: Queries) -> None:
    queries.returns(holds, "already_purged", NOTHING_PURGED)
    assert place(None) == Decision(
        {"hold_id": "h1", "conversation_ids": ["c2", "c1"], "authors": ["ada"]}, disclosures=(IRREVERSIBLE,)
    )
    assert queries.arguments("already_purged") == [{"conversation_ids": ("c2", "c1"), "authors": ("ada",)}]


def test_a_hold_names_what_earlier_purges_removed_in_its_scope(queries: Queries) -> None:
    found = AlreadyPurged(tuple(f"c{n:02}" for n in range(12)), ("ada",), 7, ("p1",))
    queries.returns(holds, "already_purged", found)
    decision = place(None)
    assert isinstance(decision, Decision)
    assert decision.disclosures == (
        IRREVERSIBLE,
        "Already purged, and not held: conversations c00, c01, c02, c03, c04, c05, c06, c07, c08, c09 and 2 more.",
        "Already erased, and not held: content by ada in their erased windows.",
        "Already purged, and not held: 7 events in the hold's scope.",
        "Already expired, and not held: what retention policy p1 expired in the hold's scope before it.",
    )


def test_the_same_hold_again_is_the_one_in_force_whatever_the_order(queries: Queries) -> None:
    queries.returns(holds, "already_purged", NOTHING_PURGED)
    seqs(queries, ph1=6)
    assert place(hold()) == Already("ph1", 6, (IRREVERSIBLE,))


def test_a_hold_id_in_force_over_other_subjects_is_a_conflict() -> None:
    with pytest.raises(IdempotencyConflict, match="legal hold h1 is in force and covers other"):
        place(hold(conversation_ids=("c1",)))


def test_a_released_hold_s_id_is_never_placed_again() -> None:
    with pytest.raises(IdReserved, match="h1 was released"):
        place(hold(released_by="rel1"))


def test_a_hold_in_force_is_released() -> None:
    assert HOLD_RELEASE.decide(NO_DATABASE, None, Release("h1"), hold()) == Decision({"hold_id": "h1"})


def test_releasing_an_unknown_hold_is_not_found() -> None:
    with pytest.raises(NotFound, match="no legal hold h1"):
        HOLD_RELEASE.decide(NO_DATABASE, None, Release("h1"), None)


def test_a_released_hold_is_already_released(queries: Queries) -> None:
    seqs(queries, rel1=9)
    assert HOLD_RELEASE.decide(NO_DATABASE, None, Release("h1"), hold(released_by="rel1")) == Already("rel1", 9)
