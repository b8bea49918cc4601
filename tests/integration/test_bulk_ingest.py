"""``ingest_events`` (issue 37, item 4) on both backends: a batch is one transaction, each
event stored as ``ingest_event`` stores it (sealed under a key of its own, idempotent on its
provider id), and a fence of one event refuses that event alone, with nothing of it written."""

from __future__ import annotations

import datetime as dt
import re

import pytest

import purgekeeper
from purgekeeper.commands.ingest_batch import MAX_BATCH_EVENTS, IngestStatus, NewEvent
from purgekeeper.schema.errors import ConversationPurged, NotFound, ValidationError
from tests.helpers import rows, scalar
from tests.helpers.factories import conversation, purge_conversation, purge_events
from tests.helpers.retention import ago, set_policy

Pk = purgekeeper.Purgekeeper
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def batch(count: int, prefix: str = "b", **fields: object) -> list[NewEvent]:
    return [
        NewEvent(
            author="ada", body=f"body {n}", event_id=f"{prefix}{n}", occurred_at=T0 + dt.timedelta(seconds=n), **fields
        )  # type: ignore[arg-type]
        for n in range(count)
    ]


def event_count(pk: Pk) -> int:
    return int(scalar(pk, "SELECT count(*) FROM events"))


def test_a_batch_is_stored_in_order_each_event_sealed_under_a_key_of_its_own(pk: Pk) -> None:
    conversation(pk, "c1")
    results = pk.ingest_events("c1", batch(5))
    assert [r.status for r in results] == [IngestStatus.ACCEPTED] * 5
    assert [r.event.id for r in results if r.event] == [f"b{n}" for n in range(5)]
    assert [e.body for e in pk.read_conversation("c1")] == [f"body {n}" for n in range(5)]
    stored = rows(pk, "SELECT body, key_id FROM events WHERE id LIKE 'b%' ORDER BY id")
    assert len({row.key_id for row in stored}) == 5 and all(row.key_id for row in stored)
    assert not any(row.body.startswith("body") for row in stored)  # sealed
    assert int(scalar(pk, "SELECT version FROM conversations WHERE id = 'c1'")) >= 1


def test_a_duplicate_delivery_returns_the_event_stored_first(pk: Pk) -> None:
    conversation(pk, "c1")
    first = pk.ingest_event("c1", author="ada", body="first", provider_event_id="p-1")
    results = pk.ingest_events(
        "c1",
        [
            NewEvent(author="ada", body="again", provider_event_id="p-1", event_id="x1"),
            NewEvent(author="ada", body="new", provider_event_id="p-2", event_id="x2"),
            NewEvent(author="ada", body="new again", provider_event_id="p-2", event_id="x3"),
        ],
    )
    assert [r.status for r in results] == [IngestStatus.DUPLICATE, IngestStatus.ACCEPTED, IngestStatus.DUPLICATE]
    assert results[0].event is not None and (results[0].event.id, results[0].event.body) == (first.id, "first")
    assert results[2].event is not None and (results[2].event.id, results[2].event.body) == ("x2", "new")
    assert [e.id for e in pk.read_conversation("c1")] == [first.id, "x2"]
    assert not rows(pk, "SELECT id FROM events WHERE id IN ('x1', 'x3')")


def test_a_fenced_event_is_refused_alone_and_nothing_of_it_is_written(pk: Pk) -> None:
    conversation(pk, "c1", events=2)
    gone = pk.ingest_event("c1", author="ada", body="gone", provider_event_id="p-gone", event_id="gone")
    purge_events(pk, gone.id)
    given = [
        NewEvent(author="ada", body="ok 1", event_id="ok1"),
        NewEvent(author="ada", body="again", provider_event_id="p-gone", event_id="back"),  # purged provider id
        NewEvent(author="ada", body="reused", event_id="gone"),  # a purged event's id
        NewEvent(author="ada", body="taken", event_id="c1-e0"),  # an id in use
        NewEvent(author="ada", body="ok 2", event_id="ok2"),
        NewEvent(author="ada", body="ok 1 again", event_id="ok1"),  # taken earlier in the batch
    ]
    results = pk.ingest_events("c1", given)
    assert [(r.status, r.error) for r in results] == [
        (IngestStatus.ACCEPTED, None),
        (IngestStatus.REFUSED, "content_purged"),
        (IngestStatus.REFUSED, "id_reserved"),
        (IngestStatus.REFUSED, "conflict"),
        (IngestStatus.ACCEPTED, None),
        (IngestStatus.REFUSED, "conflict"),
    ]
    assert all(r.message for r in results if r.status == IngestStatus.REFUSED)
    assert [e.id for e in pk.read_conversation("c1")] == ["c1-e0", "c1-e1", "ok1", "ok2"]
    assert not rows(pk, "SELECT id FROM events WHERE id = 'back'")
    assert [e.body for e in pk.read_conversation("c1")][2:] == ["ok 1", "ok 2"]


def test_an_erased_author_is_refused_per_event(pk: Pk) -> None:
    conversation(pk, "c1")
    pk.ingest_event("c1", author="eve", body="old", occurred_at=T0)
    preview = pk.preview_author_erasure("eve")
    pk.erase_author("eve", scope_digest=preview.scope_digest, actor="op", reason="GDPR")
    results = pk.ingest_events(
        "c1",
        [
            NewEvent(author="eve", body="backfill", occurred_at=T0 - dt.timedelta(days=1), event_id="e-back"),
            NewEvent(author="bob", body="fine", event_id="b-fine"),
        ],
    )
    assert [(r.status, r.error) for r in results] == [
        (IngestStatus.REFUSED, "author_erased"),
        (IngestStatus.ACCEPTED, None),
    ]
    assert [e.id for e in pk.read_conversation("c1")] == ["b-fine"]


def test_a_refusal_of_the_conversation_refuses_the_whole_batch(pk: Pk) -> None:
    before = event_count(pk)
    with pytest.raises(NotFound):
        pk.ingest_events("nowhere", batch(3))
    conversation(pk, "c1")
    purge_conversation(pk, "c1")
    with pytest.raises(ConversationPurged):
        pk.ingest_events("c1", batch(3))
    assert event_count(pk) == before


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (lambda: batch(MAX_BATCH_EVENTS + 1), f"at most {MAX_BATCH_EVENTS}"),
        (lambda: [*batch(2), NewEvent(author="", body="x")], "events[2]"),
        (lambda: [{"author": "ada", "body": "x"}], "NewEvent"),
        (lambda: "not a list", "list"),
    ],
)
def test_bad_input_is_refused_whole_and_writes_nothing(pk: Pk, given: object, said: str) -> None:
    conversation(pk, "c1")
    with pytest.raises(ValidationError, match=re.escape(said)):
        pk.ingest_events("c1", given())  # type: ignore[operator]
    assert event_count(pk) == 0


def test_an_empty_batch_writes_nothing(pk: Pk) -> None:
    conversation(pk, "c1")
    assert pk.ingest_events("c1", []) == []


def test_a_backfill_past_a_retention_cutoff_is_refused_per_event(pk: Pk) -> None:
    """The placement's trigger sees the event written before it in the batch's statement."""
    conversation(pk, "c1")
    pk.ingest_event("c1", author="ada", body="kept", occurred_at=ago(1))
    set_policy(pk, "thirty", 30, "c1")
    results = pk.ingest_events(
        "c1",
        [
            NewEvent(author="ada", body="expired", occurred_at=ago(31), event_id="old"),
            NewEvent(author="ada", body="recent", occurred_at=ago(29), event_id="recent"),
        ],
    )
    assert [(r.status, r.error) for r in results] == [
        (IngestStatus.REFUSED, "content_purged"),
        (IngestStatus.ACCEPTED, None),
    ]
    assert not rows(pk, "SELECT id FROM events WHERE id = 'old'")
