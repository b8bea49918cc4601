"""Retention and hold bookkeeping is bound to the ledger (0011), on both backends.

A policy's definition (scope, max age), its end and a hold's release change only together
with the ledger row that records them: the triggers look the row up in ``purge_ledger`` (its
kind, its policy or hold id, its definition, and that it is newer than the state it
replaces). The scheduler's bookkeeping moves only within what the policy's rows allow: a
planned cutoff is never later than now - max_age, and the window (``expired_through``) moves
forward only to the cutoff of a run of the policy's version (accepted after anything that
widened the walk again), or over a stretch that holds nothing to expire.

Each attack is raw SQL in its own transaction, through a writer that bypasses the library;
after each refusal the test checks that the library's promise still holds.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import purgekeeper
from purgekeeper.schema.errors import ContentPurged, LegalHold, ValidationError
from tests.helpers import scalar
from tests.helpers.raw import refused, write
from tests.helpers.retention import ago, body_of, set_policy, turn

Pk = purgekeeper.Purgekeeper
DAY = dt.timedelta(days=1)
CENTURY = 100 * 365 * 86400


def purge_id_of(pk: Pk, policy_id: str) -> str:
    return str(scalar(pk, "SELECT purge_id FROM retention_policies WHERE policy_id = :p", p=policy_id))


@pytest.fixture
def policies(pk: Pk) -> dict[str, Any]:
    """c1 holds ``old`` (40 days, ada), ``bobs`` (40 days, bob) and ``recent`` (1 day),
    under policy ``thirty`` (30 days, not run yet); c2 is under policy ``year`` (365 days)."""
    for conversation in ("c1", "c2"):
        pk.create_conversation(conversation)
    pk.ingest_event("c1", author="ada", body="old", event_id="old", occurred_at=ago(40))
    pk.ingest_event("c1", author="ada", body="recent", event_id="recent", occurred_at=ago(1))
    pk.ingest_event("c1", author="bob", body="bobs", event_id="bobs", occurred_at=ago(40))
    set_policy(pk, "thirty", 30, "c1")
    set_policy(pk, "year", 365, "c2")
    return {"thirty": purge_id_of(pk, "thirty"), "year": purge_id_of(pk, "year")}


def test_a_policy_is_not_lengthened_with_another_policys_ledger_row(pk: Pk, policies: dict[str, Any]) -> None:
    refused(
        pk.db,
        "UPDATE retention_policies SET max_age_seconds = :age, purge_id = :other WHERE policy_id = 'thirty'",
        ValidationError,
        age=CENTURY,
        other=policies["year"],
    )
    # nor with its own row and another definition
    refused(pk.db, "UPDATE retention_policies SET max_age_seconds = :age WHERE policy_id = 'thirty'", ValidationError,
            age=CENTURY)  # fmt: skip
    # the policy still refuses a 60-day-old backfill
    write(pk.db, "INSERT INTO events (id, author, occurred_at, body) VALUES ('late', 'ada', :at, 'x')", at=ago(60))
    refused(pk.db, "INSERT INTO placements (event_id, conversation_id) VALUES ('late', 'c1')", ContentPurged)


def test_a_policy_does_not_go_back_to_an_older_version(pk: Pk, policies: dict[str, Any]) -> None:
    set_policy(pk, "thirty", 20, "c1")  # a new version; the 30-day one is older
    refused(
        pk.db,
        "UPDATE retention_policies SET max_age_seconds = :age, purge_id = :older WHERE policy_id = 'thirty'",
        ValidationError,
        age=30 * 86400,
        older=policies["thirty"],
    )
    assert scalar(pk, "SELECT max_age_seconds FROM retention_policies WHERE policy_id = 'thirty'") == 20 * 86400


def test_a_policy_is_not_ended_without_its_own_end_row(pk: Pk, policies: dict[str, Any]) -> None:
    for forged in (policies["year"], policies["thirty"]):
        refused(
            pk.db,
            "UPDATE retention_policies SET ended_by = :row, next_run_at = NULL WHERE policy_id = 'thirty'",
            ValidationError,
            row=forged,
        )
    pk.remove_retention("year", actor="dpo", reason="c2 is kept")
    ended_year = scalar(pk, "SELECT ended_by FROM retention_policies WHERE policy_id = 'year'")
    refused(pk.db, "UPDATE retention_policies SET ended_by = :row WHERE policy_id = 'thirty'", ValidationError,
            row=ended_year)  # fmt: skip
    # an ended policy is not brought back without a new version
    refused(pk.db, "UPDATE retention_policies SET ended_by = NULL WHERE policy_id = 'year'", ValidationError)
    assert scalar(pk, "SELECT ended_by FROM retention_policies WHERE policy_id = 'thirty'") is None
    [outcome] = [o for o in turn(pk) if o.policy_id == "thirty"]
    assert outcome.purge_id and body_of(pk, "old") is None


def test_a_forged_policy_row_is_not_inserted(pk: Pk, policies: dict[str, Any]) -> None:
    refused(
        pk.db,
        "INSERT INTO retention_policies (policy_id, conversation_id, max_age_seconds, purge_id) "
        "VALUES ('forged', 'c1', 60, :row)",
        ValidationError,
        row=policies["thirty"],
    )


def test_the_window_is_not_moved_before_the_first_run(pk: Pk, policies: dict[str, Any]) -> None:
    for through in (dt.datetime.now(dt.UTC), ago(30.01), ago(39)):
        refused(pk.db, "UPDATE retention_policies SET expired_through = :t WHERE policy_id = 'thirty'",
                ValidationError, t=through)  # fmt: skip
    # a stretch with nothing in it to expire may be passed over (the scheduler's quiet turn)
    write(pk.db, "UPDATE retention_policies SET expired_through = :t WHERE policy_id = 'thirty'", t=ago(41))
    turn(pk)
    assert body_of(pk, "old") is None
    assert body_of(pk, "recent") == "recent"


def test_the_window_moves_only_to_a_run_of_this_version_accepted_after_what_widened_it(
    pk: Pk, policies: dict[str, Any]
) -> None:
    """A run's cutoff moves the window at its acceptance. A later hold's release makes the
    next run walk everything again; citing the old run does not move the window back over
    what the hold kept."""
    pk.place_hold("h1", authors=["ada"], actor="counsel", reason="litigation")
    [first] = [o for o in turn(pk) if o.policy_id == "thirty"]
    assert first.purge_id and body_of(pk, "bobs") is None
    assert body_of(pk, "old") == "old"  # held
    cutoff = scalar(pk, "SELECT last_cutoff FROM retention_policies WHERE policy_id = 'thirty'")
    pk.release_hold("h1", actor="counsel", reason="settled")
    assert scalar(pk, "SELECT expired_through FROM retention_policies WHERE policy_id = 'thirty'") is None
    refused(
        pk.db,
        "UPDATE retention_policies SET expired_through = :t, last_purge_id = :run WHERE policy_id = 'thirty'",
        ValidationError,
        t=cutoff if isinstance(cutoff, dt.datetime) else dt.datetime.fromisoformat(cutoff).replace(tzinfo=dt.UTC),
        run=first.purge_id,
    )
    write(pk.db, "UPDATE retention_policies SET next_run_at = :t WHERE policy_id = 'thirty'", t=ago(1))  # due now
    turn(pk)
    assert body_of(pk, "old") is None


def test_a_planned_cutoff_is_never_later_than_now_minus_max_age(pk: Pk, policies: dict[str, Any]) -> None:
    refused(
        pk.db,
        "UPDATE retention_policies SET pending_cutoff = :t WHERE policy_id = 'thirty'",
        ValidationError,
        t=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=30),
    )
    write(pk.db, "UPDATE retention_policies SET pending_cutoff = :t WHERE policy_id = 'thirty'", t=ago(31))
    turn(pk)
    assert body_of(pk, "old") is None
    assert body_of(pk, "recent") == "recent"


def test_a_raw_release_does_not_lift_a_legal_hold(pk: Pk, policies: dict[str, Any]) -> None:
    pk.place_hold("h1", conversation_ids=["c1"], actor="counsel", reason="litigation")
    pk.place_hold("h2", conversation_ids=["c2"], actor="counsel", reason="litigation")
    pk.release_hold("h2", actor="counsel", reason="settled")
    own = scalar(pk, "SELECT purge_id FROM legal_holds WHERE hold_id = 'h1'")
    other_hold = scalar(pk, "SELECT purge_id FROM legal_holds WHERE hold_id = 'h2'")
    other_release = scalar(pk, "SELECT released_by FROM legal_holds WHERE hold_id = 'h2'")
    for forged in (own, other_hold, other_release, policies["thirty"]):
        refused(pk.db, "UPDATE legal_holds SET released_by = :row WHERE hold_id = 'h1'", ValidationError, row=forged)
    with pytest.raises(LegalHold):
        pk.purge_conversation("c1", actor="ops", reason="cleanup")
    preview = pk.preview_purge(purgekeeper.EventScope(event_ids=["old"]))
    with pytest.raises(LegalHold):
        pk.confirm_purge(
            purgekeeper.EventScope(event_ids=["old"]), scope_digest=preview.scope_digest, actor="ops", reason="x"
        )


def test_a_forged_hold_row_is_not_inserted(pk: Pk, policies: dict[str, Any]) -> None:
    refused(pk.db, "INSERT INTO legal_holds (hold_id, purge_id) VALUES ('forged', :row)", ValidationError,
            row=policies["thirty"])  # fmt: skip


def test_the_library_still_sets_changes_ends_runs_holds_and_releases(pk: Pk, policies: dict[str, Any]) -> None:
    """The ordinary flows write exactly what the triggers allow."""
    pk.place_hold("h1", authors=["ada"], actor="counsel", reason="litigation")
    turn(pk)
    assert body_of(pk, "old") == "old"
    pk.release_hold("h1", actor="counsel", reason="settled")
    set_policy(pk, "thirty", 35, "c1")
    turn(pk)
    assert body_of(pk, "old") is None
    turn(pk)  # nothing left: a quiet turn moves the window on
    pk.remove_retention("thirty", actor="dpo", reason="done")
    set_policy(pk, "thirty", 30, "c1")
    assert scalar(pk, "SELECT ended_by FROM retention_policies WHERE policy_id = 'thirty'") is None


def test_a_full_merge_re_applies_a_run_and_the_release_after_it_in_order(
    pk: Pk, policies: dict[str, Any], tmp_path: Any
) -> None:
    """The merge writes the run again, then the release: the run no longer moves the window
    (a release came after it), so the triggers have nothing to refuse."""
    pk.place_hold("h1", authors=["ada"], actor="counsel", reason="litigation")
    [run] = [o for o in turn(pk) if o.policy_id == "thirty"]
    assert run.purge_id
    pk.release_hold("h1", actor="counsel", reason="settled")
    pk.checkpoint_ledger(tmp_path / "ledger.checkpoint")
    pk.merge_ledger(tmp_path / "ledger.checkpoint", full=True)
    assert scalar(pk, "SELECT expired_through FROM retention_policies WHERE policy_id = 'thirty'") is None
    assert scalar(pk, "SELECT released_by FROM legal_holds WHERE hold_id = 'h1'") is not None


def test_a_hold_covers_only_what_its_ledger_row_names(pk: Pk, policies: dict[str, Any]) -> None:
    """Tried (a review's finding): a subject added raw to a hold in force made a purge of c2
    raise LegalHold and kept it from retention."""
    pk.place_hold("h1", conversation_ids=["c1"], actor="counsel", reason="litigation")
    for kind, subject in (("conversation", "c2"), ("author", "bob")):
        refused(
            pk.db,
            "INSERT INTO legal_hold_subjects (hold_id, kind, subject_id) VALUES ('h1', :kind, :subject)",
            ValidationError,
            kind=kind,
            subject=subject,
        )
    pk.purge_conversation("c2", actor="ops", reason="not held")


@pytest.mark.sqlite_only
@pytest.mark.parametrize(
    "sql",
    [
        pytest.param(
            "INSERT OR REPLACE INTO legal_holds (hold_id, purge_id, released_by) VALUES ('h1', :hold_row, NULL)",
            id="a release undone",
        ),
        pytest.param(
            "INSERT OR REPLACE INTO retention_policies (policy_id, conversation_id, max_age_seconds, purge_id) "
            "VALUES ('year', 'c2', 31536000, :year)",
            id="an ended policy back",
        ),
        pytest.param(
            "INSERT OR REPLACE INTO retention_policies (policy_id, conversation_id, max_age_seconds, purge_id) "
            "VALUES ('thirty', 'c1', 2592000, :thirty)",
            id="an older version back",
        ),
    ],
)
def test_sqlite_replace_does_not_rewrite_the_bookkeeping(pk: Pk, policies: dict[str, Any], sql: str) -> None:
    """Tried (a review's finding): SQLite's REPLACE deletes the row it conflicts with without
    its DELETE triggers, so only the INSERT checks stand between it and the state."""
    pk.place_hold("h1", conversation_ids=["c1"], actor="counsel", reason="litigation")
    pk.release_hold("h1", actor="counsel", reason="settled")
    pk.remove_retention("year", actor="dpo", reason="kept")
    set_policy(pk, "thirty", 20, "c1")
    hold_row = scalar(pk, "SELECT purge_id FROM legal_holds WHERE hold_id = 'h1'")
    before = scalar(pk, "SELECT count(*) FROM retention_policies WHERE ended_by IS NULL")
    refused(pk.db, sql, ValidationError, hold_row=hold_row, year=policies["year"], thirty=policies["thirty"])
    assert scalar(pk, "SELECT released_by FROM legal_holds WHERE hold_id = 'h1'") is not None
    assert scalar(pk, "SELECT count(*) FROM retention_policies WHERE ended_by IS NULL") == before


@pytest.mark.sqlite_only
def test_sqlite_replace_does_not_delete_a_ledger_row(pk: Pk, policies: dict[str, Any]) -> None:
    """Tried (a review's finding): REPLACE of a ledger row's purge id at the next seq deleted
    that row, leaving a gap in the chain."""
    head = scalar(pk, "SELECT seq FROM ledger_head")
    head_hash = scalar(pk, "SELECT head_hash FROM ledger_head")
    refused(
        pk.db,
        "INSERT OR REPLACE INTO purge_ledger (seq, purge_id, kind, selectors, scope_digest, actor, reason, "
        "accepted_at, prev_hash, row_hash) VALUES (:seq, :purge, 'retention', '{}', 'x', 'a', 'r', "
        "'2026-01-01 00:00:00.000000', :prev, :row)",
        ValidationError,
        seq=int(head) + 1,
        purge=policies["thirty"],
        prev=head_hash,
        row="f" * 64,
    )
    assert scalar(pk, "SELECT count(*) FROM purge_ledger") == head
