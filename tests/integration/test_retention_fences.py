"""Writers that bypass the library, against retention and legal holds (0009), on both backends.

A policy is set and its run accepted through the library (the run's fence stands: its cleanup
has not run); then every write below is raw SQL in its own transaction, and every refusal is
the triggers' own: backfill past a standing cutoff, placing, admitting, attaching, deriving
from and re-bodying what a run expires, moving an event's time or author, and removing or
changing a fence, its exemptions, a hold or a policy."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import purgekeeper
from purgekeeper.schema.errors import ContentPurged, PurgekeeperError, ValidationError
from tests.helpers import rows, scalar, settle
from tests.helpers.raw import refused, write
from tests.helpers.retention import ago, set_policy

Pk = purgekeeper.Purgekeeper
DAY = dt.timedelta(days=1)


@pytest.fixture
def run(pk: Pk) -> dict[str, Any]:
    """c1 (its own 30-day policy) holds ``old`` (40 days) and ``new``; c2 (no policy) holds
    ``elsewhere`` (40 days, also placed in c1) and ``free``. The policy's run is accepted and
    not cleaned up yet. A run of a bot admitted ``new``."""
    for conversation in ("c1", "c2"):
        pk.create_conversation(conversation)
    pk.register_bot("b1", name="Bot")
    pk.ingest_event("c1", author="ada", body="old", event_id="old", occurred_at=ago(40))
    pk.ingest_event("c1", author="ada", body="new", event_id="new", occurred_at=ago(1))
    pk.ingest_event("c2", author="bob", body="elsewhere", event_id="elsewhere", occurred_at=ago(40))
    pk.place_event("elsewhere", "c1")
    pk.ingest_event("c2", author="bob", body="free", event_id="free", occurred_at=ago(40))
    pk.start_run("c1", bot_id="b1", run_id="r1")
    pk.admit("new", "r1", payload={"text": "new"})
    set_policy(pk, "thirty", 30, "c1")
    [outcome] = pk.run_retention()
    return {"purge_id": outcome.purge_id, "at": ago(40)}


def test_a_raw_backfill_past_the_cutoff_is_refused(pk: Pk, run: dict[str, Any]) -> None:
    write(
        pk.db,
        "INSERT INTO events (id, author, occurred_at, body) VALUES ('late', 'ada', :at, 'from history')",
        at=run["at"],
    )
    refused(pk.db, "INSERT INTO placements (event_id, conversation_id) VALUES ('late', 'c1')", ContentPurged)
    write(pk.db, "INSERT INTO placements (event_id, conversation_id) VALUES ('late', 'c2')")  # c2 has no policy
    assert scalar(pk, "SELECT count(*) FROM placements WHERE event_id = 'late'") == 1


def test_what_a_run_expires_is_never_placed_there_again_nor_written(pk: Pk, run: dict[str, Any]) -> None:
    """``old`` is placed only in c1, where the run expires it: it is live nowhere."""
    refused(pk.db, "INSERT INTO placements (event_id, conversation_id) VALUES ('old', 'c2')", ContentPurged)
    refused(pk.db, "UPDATE events SET body = 'rewritten' WHERE id = 'old'", ContentPurged)
    refused(
        pk.db, "INSERT INTO admissions (id, event_id, run_id, payload) VALUES ('a9', 'old', 'r1', '1')", ContentPurged
    )
    write(pk.db, "INSERT INTO derivatives (id, conversation_id, kind, payload) VALUES ('d1', 'c1', 'summary', '1')")
    refused(pk.db, "INSERT INTO derivative_sources (derivative_id, event_id) VALUES ('d1', 'old')", ContentPurged)
    write(
        pk.db,
        "INSERT INTO blobs (id, kind, sha256, size, path) VALUES ('blob9', 'file', :sha, 1, 'bl/ob/blob9')",
        sha="9" * 64,
    )
    refused(
        pk.db,
        "INSERT INTO attachments (id, event_id, blob_id, binding, name) "
        "VALUES ('t9', 'old', 'blob9', 'real_file', 'n')",
        ContentPurged,
    )
    # a placement the run expires keeps nothing live: only the run's cleanup removes it
    refused(pk.db, "DELETE FROM placements WHERE event_id = 'old'", PurgekeeperError)
    # an event live elsewhere is still live there
    write(pk.db, "UPDATE events SET body = 'edited' WHERE id = 'elsewhere'")
    refused(pk.db, "INSERT INTO placements (event_id, conversation_id) VALUES ('free', 'c1')", ContentPurged)


def test_an_events_time_and_author_never_change_while_retention_is_in_force(pk: Pk, run: dict[str, Any]) -> None:
    now = dt.datetime.now(dt.UTC)
    refused(pk.db, "UPDATE events SET occurred_at = :now WHERE id = 'old'", PurgekeeperError, now=now)
    refused(pk.db, "UPDATE events SET occurred_at = :now WHERE id = 'free'", ValidationError, now=now)
    refused(pk.db, "UPDATE events SET author = 'someone else' WHERE id = 'new'", ValidationError)


def test_a_fence_goes_only_once_nothing_it_expires_is_left(pk: Pk, run: dict[str, Any]) -> None:
    refused(pk.db, "DELETE FROM retention_fences", ContentPurged)
    refused(pk.db, "UPDATE retention_fences SET cutoff = :now", ValidationError, now=ago(100))
    exemption = (
        "INSERT INTO retention_exemptions (purge_id, kind, subject_id, reason) "
        "VALUES (:p, 'conversation', 'c1', 'hold')"
    )
    refused(pk.db, exemption, ValidationError, p=run["purge_id"])
    settle(pk, run["purge_id"])
    assert scalar(pk, "SELECT count(*) FROM retention_fences") == 0  # its cleanup removed it
    assert [e.id for e in pk.read_conversation("c1")] == ["new"]
    assert [e.id for e in pk.read_conversation("c2")] == ["elsewhere", "free"]


def test_the_exemptions_of_a_standing_fence_are_fixed(pk: Pk) -> None:
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="old", event_id="old", occurred_at=ago(40))
    pk.place_hold("h", authors=["bob"], actor="counsel", reason="r")
    set_policy(pk, "all", 30)
    [outcome] = pk.run_retention()
    [exempt] = rows(pk, "SELECT kind, subject_id, reason FROM retention_exemptions")
    assert tuple(exempt) == ("author", "bob", "hold")
    refused(pk.db, "DELETE FROM retention_exemptions", ValidationError)
    refused(pk.db, "UPDATE retention_exemptions SET subject_id = 'ada'", ValidationError)
    settle(pk, str(outcome.purge_id))
    assert scalar(pk, "SELECT count(*) FROM retention_exemptions") == 0


def test_holds_and_policies_are_never_deleted_nor_a_release_undone(pk: Pk) -> None:
    pk.create_conversation("c1")
    pk.place_hold("h", conversation_ids=["c1"], actor="counsel", reason="r")
    refused(pk.db, "DELETE FROM legal_holds", ValidationError)
    refused(pk.db, "DELETE FROM legal_hold_subjects", ValidationError)
    refused(pk.db, "UPDATE legal_hold_subjects SET subject_id = 'c2'", ValidationError)
    pk.release_hold("h", actor="counsel", reason="r")
    refused(pk.db, "UPDATE legal_holds SET released_by = NULL", ValidationError)
    refused(pk.db, "UPDATE legal_holds SET released_by = 'another'", ValidationError)
    set_policy(pk, "all", 30)
    refused(pk.db, "DELETE FROM retention_policies", ValidationError)
    for weakened in (
        "UPDATE retention_policies SET max_age_seconds = 3153600000",
        "UPDATE retention_policies SET conversation_id = 'c1'",
        "UPDATE retention_policies SET policy_id = 'other'",
    ):
        refused(pk.db, weakened, ValidationError)
    far = dt.datetime(2999, 1, 1, tzinfo=dt.UTC)
    refused(pk.db, "UPDATE retention_policies SET expired_through = :far", ValidationError, far=far)
    write(pk.db, "UPDATE retention_policies SET next_run_at = :far", far=far)  # the schedule is bookkeeping
    assert [h.hold_id for h in pk.list_holds(include_released=True)] == ["h"] and len(pk.list_retention()) == 1


@pytest.mark.postgres_only
@pytest.mark.parametrize(
    "table", ["retention_policies", "retention_fences", "retention_exemptions", "legal_holds", "legal_hold_subjects"]
)
def test_none_of_the_new_tables_is_truncated(pk: Pk, table: str) -> None:
    refused(pk.db, f"TRUNCATE {table} CASCADE", ValidationError)


@pytest.mark.postgres_only
def test_a_writer_whose_transaction_began_before_a_run_is_checked_on_the_clock_of_its_write(pk: Pk) -> None:
    """Tried (a review's finding): a raw writer begins a transaction, a run expires c1's old
    content and finishes, then the writer places an event that occurred just before that
    run's cutoff. The backfill check used the transaction's start (now()), let it in, and no
    later run walks that far back: it must be refused."""
    import time

    from sqlalchemy import text

    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="old", occurred_at=ago(40))
    set_policy(pk, "thirty", 30, "c1")
    with pk.db.engine.connect() as stale:
        began = stale.execute(text("SELECT now()")).scalar()  # the transaction began here
        time.sleep(1.5)  # longer ago than the second between the event and the cutoff
        [outcome] = pk.run_retention()
        settle(pk, str(outcome.purge_id))
        assert outcome.cutoff is not None and began < outcome.cutoff + 30 * DAY
        stale.execute(
            text("INSERT INTO events (id, author, occurred_at, body) VALUES ('late', 'ada', :at, 'past the cutoff')"),
            {"at": outcome.cutoff - dt.timedelta(seconds=1)},
        )
        with pytest.raises(Exception) as refused:
            stale.execute(text("INSERT INTO placements (event_id, conversation_id) VALUES ('late', 'c1')"))
        assert "backfill cannot bring expired content back" in str(refused.value)
        stale.rollback()
    assert [e.body for e in pk.read_conversation("c1")] == []


@pytest.mark.postgres_only
def test_a_plan_waits_for_the_writers_placing_events_so_none_is_left_behind_its_window(pk: Pk) -> None:
    """Tried (a review's finding): a writer places an event that is within a 2-second policy
    when it checks, and commits only after the event has aged past it; a plan made in between
    must see it (it waits for the writer: the plans' lock), else the policy's window moves
    past the event and no run ever expires it."""
    import threading
    import time

    from sqlalchemy import text

    from tests.helpers.retention import set_policy_of

    pk.create_conversation("c1")
    set_policy_of(pk, "quick", dt.timedelta(seconds=2), "c1")
    outcomes: list[Any] = []
    with pk.db.engine.connect() as writer:
        writer.execute(
            text("INSERT INTO events (id, author, occurred_at, body) VALUES ('w', 'ada', clock_timestamp(), 'x')")
        )
        writer.execute(text("INSERT INTO placements (event_id, conversation_id) VALUES ('w', 'c1')"))
        time.sleep(2.5)  # the event is past the policy's cutoff now, and not committed
        turn = threading.Thread(target=lambda: outcomes.extend(pk.run_retention()))
        turn.start()
        time.sleep(0.5)
        assert turn.is_alive()  # the plan waits for the writer
        writer.commit()
        turn.join(timeout=30)
    [outcome] = outcomes
    assert outcome.purge_id is not None, outcome
    settle(pk, outcome.purge_id)
    assert pk.read_conversation("c1") == [] and scalar(pk, "SELECT body FROM events WHERE id = 'w'") is None
