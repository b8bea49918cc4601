"""Many events into one conversation at once (``ingest_events``): a host importing history.

**One transaction.** The events accepted are committed together, or none of them: a
refusal that concerns the whole batch (the conversation unknown, purged or deleted, the gate
closed, the database unavailable) is raised, as ``ingest_event`` raises it, and nothing is
written. A refusal of one event (a fence: ``content_purged``, ``author_erased``,
``id_reserved``; or ``conflict``, its ``event_id`` taken, also by an earlier event of the
batch) is that event's result: it is not
written at all, and the others are stored.

**Each event as ``ingest_event`` stores it**: under a key of its own (in the key store before
any row names it), the fences checked by the same triggers, idempotent on the provider event
id (a duplicate, delivered before or earlier in the same batch, gets the event stored first).

On PostgreSQL the batch is one statement (``ingest_queries.ingest_placed_batch``). A fence
refusing one row refuses that statement, so then the batch runs again, each event in a
savepoint of its own (``store_event``), which tells which events the fences refuse. SQLite
runs that second way only. Attachments are not taken here: ``ingest_event`` and
``upload_event`` bind them.
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from purgekeeper.commands import event_ingest, sealed_content, validation
from purgekeeper.commands.event_ingest import StoredRow
from purgekeeper.commands.gate import Gate
from purgekeeper.commands.records import Event
from purgekeeper.schema import content_queries
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import (
    AuthorErased,
    Conflict,
    ContentPurged,
    IdReserved,
    NotFound,
    PurgekeeperError,
    ValidationError,
    translate_db_error,
)
from purgekeeper.schema.tables import events
from purgekeeper.storage.content_keys import ContentKeys

__all__ = ["MAX_BATCH_EVENTS", "IngestResult", "IngestStatus", "NewEvent", "ingest_events"]

MAX_BATCH_EVENTS = 1000  # events a batch takes at most (ValidationError beyond)


@dataclass(frozen=True)
class NewEvent:
    """One event of a batch, with ``ingest_event``'s arguments (attachments aside)."""

    author: str
    body: str | None
    provider_event_id: str | None = None
    event_id: str | None = None
    occurred_at: dt.datetime | None = None


class IngestStatus(enum.StrEnum):
    ACCEPTED = "accepted"  # stored now
    DUPLICATE = "duplicate"  # its provider event id was ingested before: nothing written
    REFUSED = "refused"  # not written: ``error`` says why


@dataclass(frozen=True)
class IngestResult:
    """What became of one event of a batch, in the batch's order: the event stored (now, or
    before for a duplicate), or the code and message of the error that refused it."""

    status: IngestStatus
    event: Event | None = None
    error: str | None = None
    message: str | None = None


# The errors that refuse one event and not the batch: the event's own fences, its id taken
# (the conversation's fences, the gate's and the database's refuse the batch).
PER_EVENT_ERRORS = (ContentPurged, AuthorErased, IdReserved, Conflict)


def ingest_events(
    db: Database, gate: Gate, keys: ContentKeys, conversation_id: str, batch: Sequence[NewEvent]
) -> list[IngestResult]:
    """Store ``batch`` in the conversation; one result per event, in order (module doc)."""
    validation.check_id(conversation_id, "conversation_id")
    given = _checked(batch)
    if not given:
        return []
    taken = keys.take_many(len(given))  # durable before any row names them
    rows = [_sealed(event, key_id, key) for event, (key_id, key) in zip(given, taken, strict=True)]
    key_ids = [row.key_id for row in rows]
    try:
        results = _store(db, gate, keys, rows, conversation_id)
    except BaseException:
        sealed_content.discard_keys(db, keys, key_ids, {events: [row.event_id for row in rows]})
        raise
    unused = [row.key_id for row, result in zip(rows, results, strict=True) if result.status != IngestStatus.ACCEPTED]
    sealed_content.discard_keys(db, keys, unused)
    return results


def _store(db: Database, gate: Gate, keys: ContentKeys, rows: list[_Given], conversation_id: str) -> list[IngestResult]:
    if db.dialect == "postgresql":
        try:
            return event_ingest.transact_fenced(db, gate, lambda conn: _in_one(conn, gate, keys, rows, conversation_id))
        except PER_EVENT_ERRORS:
            pass  # one event's fence refused the statement: each in a savepoint tells which
    return db.transact(lambda conn: _each_apart(conn, gate, keys, rows, conversation_id))


def _in_one(
    conn: Connection, gate: Gate, keys: ContentKeys, rows: list[_Given], conversation_id: str
) -> list[IngestResult]:
    """The batch in one statement; the duplicates looked up after it."""
    stored = content_queries.ingest_placed_batch(conn, [row.values() for row in rows], conversation_id)
    gate.check_values(conn, stored.seq, stored.head_hash, stored.gate_reason)
    if not stored.conversation_known:  # the triggers refuse a purged or deleted one
        raise NotFound(f"no conversation {conversation_id}")
    placed = set(stored.placed)
    return [
        IngestResult(IngestStatus.ACCEPTED, row.event) if row.event_id in placed else _duplicate(conn, keys, row)
        for row in rows
    ]


def _duplicate(conn: Connection, keys: ContentKeys, row: _Given) -> IngestResult:
    """A row the batch's statement did not insert: its provider event id was taken."""
    try:
        existing = event_ingest.duplicate_delivery(conn, row.provider_event_id or "")
        if existing is None:  # pragma: no cover - not inserted, not placed, yet no event has its provider id
            raise AssertionError(f"event {row.event_id} was neither inserted nor a duplicate")
        return IngestResult(IngestStatus.DUPLICATE, sealed_content.stored_event(conn, keys, existing))
    except ContentPurged as exc:
        return _refused(exc)


def _each_apart(
    conn: Connection, gate: Gate, keys: ContentKeys, rows: list[_Given], conversation_id: str
) -> list[IngestResult]:
    """Each event in a savepoint of its own: a refused one is rolled back alone."""
    gate.require_open(conn)  # a closed gate answers before any fence
    return [_one_apart(conn, gate, keys, row, conversation_id) for row in rows]


def _one_apart(conn: Connection, gate: Gate, keys: ContentKeys, row: _Given, conversation_id: str) -> IngestResult:
    try:
        with conn.begin_nested():
            duplicate = event_ingest.store_event(conn, gate, keys, row, conversation_id)
    except PER_EVENT_ERRORS as exc:
        return _refused(exc)
    except Exception as exc:
        domain = translate_db_error(exc)
        if isinstance(domain, PER_EVENT_ERRORS):
            return _refused(domain)
        raise
    if duplicate is not None:
        return IngestResult(IngestStatus.DUPLICATE, duplicate)
    return IngestResult(IngestStatus.ACCEPTED, row.event)


def _refused(exc: PurgekeeperError) -> IngestResult:
    return IngestResult(IngestStatus.REFUSED, error=exc.code, message=str(exc))


# -- the events as given, checked and sealed ---------------------------------------------------


@dataclass(frozen=True)
class _Given(StoredRow):
    plain_body: str | None = None  # the body as given, for the result

    @property
    def event(self) -> Event:
        return Event(self.event_id, self.provider_event_id, self.author, self.occurred_at, self.plain_body)

    def values(self) -> dict[str, Any]:
        return {
            "id": self.event_id,
            "provider_event_id": self.provider_event_id,
            "author": self.author,
            "occurred_at": self.occurred_at,
            "body": self.body,
            "key_id": self.key_id,
        }


def _checked(batch: Sequence[NewEvent]) -> list[NewEvent]:
    """The batch with each event's fields checked as ``ingest_event`` checks them, its ids
    and times filled in; ValidationError (nothing written) for any bad one."""
    if isinstance(batch, str | bytes) or not isinstance(batch, Sequence):
        raise ValidationError("events must be a list of NewEvent")
    if len(batch) > MAX_BATCH_EVENTS:
        raise ValidationError(f"a batch holds at most {MAX_BATCH_EVENTS} events, not {len(batch)}")
    now = dt.datetime.now(dt.UTC)
    return [_checked_event(index, event, now) for index, event in enumerate(batch)]


def _checked_event(index: int, event: Any, now: dt.datetime) -> NewEvent:
    if not isinstance(event, NewEvent):
        raise ValidationError(f"events[{index}] must be a NewEvent")
    try:
        validation.check_text(event.author, "author", max_length=validation.MAX_AUTHOR_LENGTH)
        return NewEvent(
            author=event.author,
            body=validation.check_body(event.body),
            provider_event_id=validation.check_optional_provider_id(event.provider_event_id),
            event_id=validation.check_optional_id(event.event_id, "event_id") or uuid.uuid4().hex,
            occurred_at=validation.check_occurred_at(event.occurred_at) or now,
        )
    except ValidationError as exc:
        raise ValidationError(f"events[{index}]: {exc}") from None


def _sealed(event: NewEvent, key_id: str, key: bytes) -> _Given:
    event_id = event.event_id or ""
    assert event.occurred_at is not None
    body = sealed_content.seal_optional(key, event.body, bound_to=sealed_content.body_bound(event_id))
    return _Given(event_id, event.provider_event_id, event.author, event.occurred_at, body, key_id, event.body)
