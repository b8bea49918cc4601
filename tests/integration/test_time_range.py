"""Times from input lie in ``validation``'s range (``EARLIEST_MOMENT`` to ``LATEST_MOMENT``,
years 2 to 9998 in UTC): an event's ``occurred_at``, a scope's ``after`` and ``before``, an
erasure's ``before``, the list's ``since`` and ``until``. A time outside it is a
``ValidationError`` with nothing written, and an author whose events lie at both ends of it
is erased like any other (the window's end, one microsecond after the latest event, fits).
Both backends."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import update

import purgekeeper
from purgekeeper import EventScope
from purgekeeper.commands import validation as v
from purgekeeper.commands.kinds.retention import MAX_AGE_LIMIT
from purgekeeper.schema.tables import events
from tests.helpers import rows, scalar, settle

Pk = purgekeeper.Purgekeeper
WHO = {"actor": "op", "reason": "GDPR"}
OUTSIDE = [
    pytest.param(dt.datetime.max.replace(tzinfo=dt.UTC), id="datetime-max"),
    pytest.param(dt.datetime.min.replace(tzinfo=dt.UTC), id="datetime-min"),
    pytest.param(v.LATEST_MOMENT + dt.timedelta(microseconds=1), id="just-after"),
    pytest.param(v.EARLIEST_MOMENT - dt.timedelta(microseconds=1), id="just-before"),
]


def written(pk: Pk) -> tuple[int, int, int]:
    return (
        scalar(pk, "SELECT count(*) FROM events"),
        scalar(pk, "SELECT count(*) FROM purge_ledger"),
        scalar(pk, "SELECT count(*) FROM author_erasures"),
    )


@pytest.mark.parametrize("when", OUTSIDE)
def test_an_event_outside_the_range_is_refused_and_nothing_is_written(pk: Pk, when: dt.datetime) -> None:
    """An event at datetime.max was taken, and then blocked its author's erasure (the window's
    end overflowed: an untyped OverflowError, a 500 over HTTP)."""
    pk.create_conversation("c1")
    with pytest.raises(purgekeeper.ValidationError, match="occurred_at"):
        pk.ingest_event("c1", author="ada", body="x", occurred_at=when)
    assert written(pk) == (0, 0, 0)
    assert pk.preview_author_erasure("ada").totals.events == 0


def test_an_author_with_events_at_both_ends_of_the_range_is_erased(pk: Pk) -> None:
    pk.create_conversation("c1")
    for n, when in enumerate((v.EARLIEST_MOMENT, v.LATEST_MOMENT)):
        pk.ingest_event("c1", author="ada", body=f"at {n}", event_id=f"e{n}", occurred_at=when)
    preview = pk.preview_author_erasure("ada")
    assert preview.totals.events == 2
    acceptance = pk.erase_author("ada", scope_digest=preview.scope_digest, **WHO)
    assert pk.read_conversation("c1") == []
    assert settle(pk, acceptance.purge_id).status == "complete"
    assert [r.body for r in rows(pk, "SELECT body FROM events")] == [None, None]
    with pytest.raises(purgekeeper.AuthorErased):
        pk.ingest_event("c1", author="ada", body="again", occurred_at=v.LATEST_MOMENT)


def test_an_erasure_before_the_end_of_the_range_covers_the_last_moment_but_one(pk: Pk) -> None:
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="x", event_id="e1", occurred_at=v.LATEST_MOMENT)
    pk.ingest_event("c1", author="ada", body="y", event_id="e0", occurred_at=v.EARLIEST_MOMENT)
    preview = pk.preview_author_erasure("ada", before=v.LATEST_MOMENT)
    assert preview.totals.events == 1
    pk.erase_author("ada", scope_digest=preview.scope_digest, before=v.LATEST_MOMENT, close_author=False, **WHO)
    assert [e.id for e in pk.read_conversation("c1")] == ["e1"]


@pytest.mark.parametrize("when", OUTSIDE)
def test_every_time_from_input_is_checked_against_the_range(pk: Pk, when: dt.datetime) -> None:
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="x", event_id="e1")
    before = written(pk)
    calls: dict[str, Any] = {
        "preview_author_erasure": lambda: pk.preview_author_erasure("ada", before=when),
        "erase_author": lambda: pk.erase_author("ada", scope_digest="0" * 64, before=when, **WHO),
        "scope after": lambda: EventScope(conversation_id="c1", after=when),
        "scope before": lambda: EventScope(conversation_id="c1", before=when),
        "list since": lambda: pk.list_purges(since=when),
        "list until": lambda: pk.list_purges(until=when),
    }
    for name, call in calls.items():
        field = name.split()[-1] if " " in name else "before"
        with pytest.raises(purgekeeper.ValidationError, match=field):
            call()
    assert written(pk) == before


def test_an_event_stored_at_datetime_max_before_the_range_existed_is_a_typed_refusal(pk: Pk) -> None:
    """A database written by an earlier version may hold one; the erasure names the problem
    (a 400, not an OverflowError) and the event can still be purged by its id."""
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="x", event_id="e1", occurred_at=v.LATEST_MOMENT)
    _store_at_datetime_max(pk, "e1")  # as an earlier version would have stored it
    with pytest.raises(purgekeeper.ValidationError, match="purge that event by its id"):
        pk.preview_author_erasure("ada")
    scope = EventScope(event_ids=["e1"])
    preview = pk.preview_purge(scope)
    acceptance = pk.confirm_purge(scope, scope_digest=preview.scope_digest, **WHO)
    assert settle(pk, acceptance.purge_id).status == "complete"


def _store_at_datetime_max(pk: Pk, event_id: str) -> None:
    with pk.db.write() as conn:
        conn.execute(
            update(events).where(events.c.id == event_id).values(occurred_at=dt.datetime.max.replace(tzinfo=dt.UTC))
        )


def test_the_durations_from_input_cannot_overflow_either(pk: Pk) -> None:
    """The sweep of issue 23's item 13: a retention's max_age is at most MAX_AGE_LIMIT before
    the database clock, and a wait's timeout is any finite number of seconds (added to a
    float clock, time.monotonic)."""
    pk.create_conversation("c1")
    assert pk.preview_retention(max_age=MAX_AGE_LIMIT).cutoff.year > 1900
    for too_long in (dt.timedelta.max, MAX_AGE_LIMIT + dt.timedelta(seconds=1)):
        with pytest.raises(purgekeeper.ValidationError, match="max_age"):
            pk.preview_retention(max_age=too_long)
    acceptance = pk.purge_conversation("c1", **WHO)
    settle(pk, acceptance.purge_id)
    assert pk.wait(acceptance.purge_id, 1e308).status == "complete"
