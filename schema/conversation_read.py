"""A read of a conversation: its readable events and their present attachments, with the ledger
head as the same snapshot saw it (for the gate), in one statement on PostgreSQL and three in
one read transaction on SQLite (``read_conversation``); and the parsing of the timestamps a
read gives (``utc_from_text``). ``purgekeeper.schema.content_queries`` names all of it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Integer,
    Text,
    bindparam,
    cast,
    literal,
    not_,
    null,
    select,
    type_coerce,
    union_all,
)

from purgekeeper.schema.driver import DriverStatement, Reader
from purgekeeper.schema.expiry import readable_in
from purgekeeper.schema.liveness import NOT_PURGED, _tombstone_exists, author_erased
from purgekeeper.schema.states import BlobState, TombstoneKind
from purgekeeper.schema.tables import (
    UtcDateTime,
    attachments,
    blobs,
    conversations,
    events,
    ledger_head,
    placements,
)


@dataclass(frozen=True)
class ConversationRead:
    """A read of a conversation: the ledger head as the same snapshot saw it (for the gate),
    the readable events in time order as ``(id, provider_event_id, author, body,
    occurred_at)`` and the attachments of events placed there whose bytes are present, in
    position order, as ``(id, event_id, blob_id, binding, name, size)``."""

    seq: int
    head_hash: str
    gate_reason: str | None
    events: Sequence[Any]
    attachments: Sequence[Any]


def read_conversation(conn: Reader, conversation_id: str) -> ConversationRead:
    """One snapshot, on the driver: on PostgreSQL ONE statement (the union
    ``_CONVERSATION_READ``) outside an explicit transaction (``Database.single``), so a read
    is one round trip; on SQLite three statements in the read transaction ``single`` began.
    Either way the rows are in the columns of ``_PARTS``."""
    params = {"conversation_id": conversation_id}
    if conn.dialect.name == "sqlite":
        head = _SQLITE_HEAD.rows(conn, params)[0]
        found = _SQLITE_EVENTS.rows(conn, params)
        attached = _SQLITE_ATTACHMENTS.rows(conn, params) if found else []
    else:
        rows = _CONVERSATION_READ.rows(conn, params)
        head, found, attached = rows[0], [], []
        for row in rows[1:]:
            (found if row[0] == 1 else attached).append(row)
    return ConversationRead(head[7], head[1], head[2], found, attached)  # n: seq, t1: head_hash, t2: gate_reason


# The reads of every content call are built once (a statement's construction costs as
# much as its execution on a small conversation); SQLAlchemy caches their compiled form.
EVENT_COLUMNS = (events.c.id, events.c.provider_event_id, events.c.author, events.c.occurred_at, events.c.body)
_READABLE_EVENTS = (
    select(*EVENT_COLUMNS)
    .join(placements, placements.c.event_id == events.c.id)
    .join(conversations, conversations.c.id == placements.c.conversation_id)
    .where(placements.c.conversation_id == bindparam("conversation_id"))
    .where(NOT_PURGED)
    .where(not_(_tombstone_exists(TombstoneKind.CONVERSATION, conversations.c.id)))
    .where(not_(_tombstone_exists(TombstoneKind.EVENT, events.c.id)))
    .where(not_(author_erased(events.c.author, events.c.occurred_at)))
    .where(readable_in(events.c.author, events.c.occurred_at, bindparam("conversation_id"), placements.c.created_at))
    .order_by(events.c.occurred_at, events.c.id)
)


# A read of a conversation as ONE statement: the head's row first (``part`` 0, for the gate),
# then the events (``part`` 1), then the attachments of events placed there whose bytes are
# present (``part`` 2). One snapshot, and on PostgreSQL one round trip (no BEGIN and COMMIT:
# see ``Database.single``). The parts share eight columns, so a row of 10,000 is no wider
# than an event's:
#
#   column      head         event               attachment
#   t1          head_hash    id                  id
#   t2          gate_reason  provider_event_id   event_id
#   t3                       author              blob_id
#   t4                       body                binding
#   t5                       key_id              name
#   at                       occurred_at
#   n           seq                              size
#   k                                            position
_HEAD_PART = select(
    literal(0).label("part"),
    ledger_head.c.head_hash.label("t1"),
    ledger_head.c.gate_reason.label("t2"),
    cast(null(), Text()).label("t3"),
    cast(null(), Text()).label("t4"),
    cast(null(), Text()).label("t5"),
    cast(null(), UtcDateTime()).label("at"),
    ledger_head.c.seq.label("n"),
    cast(null(), Integer()).label("k"),
).where(ledger_head.c.id == 1)


def _events_part(occurred_at: Any) -> Any:
    """The readable events in the shared columns, with ``occurred_at`` as given."""
    return _READABLE_EVENTS.order_by(None).with_only_columns(
        literal(1),
        events.c.id,
        events.c.provider_event_id,
        events.c.author,
        events.c.body,
        events.c.key_id,
        occurred_at,
        null(),
        null(),
    )


_EVENTS_PART = _events_part(events.c.occurred_at)
_ATTACHMENTS_PART = (
    select(
        literal(2),
        attachments.c.id,
        attachments.c.event_id,
        attachments.c.blob_id,
        attachments.c.binding,
        attachments.c.name,
        null(),
        blobs.c.size,
        attachments.c.position,
    )
    .join(placements, placements.c.event_id == attachments.c.event_id)
    .join(blobs, blobs.c.id == attachments.c.blob_id)
    .where(placements.c.conversation_id == bindparam("conversation_id"))
    .where(blobs.c.state == BlobState.PRESENT.value)
)
# SQLite: occurred_at as its stored text (UTC, naive), parsed by the caller in one C call
# (``utc_from_text``): the type's two processors cost more than the rest of the row.
_READABLE_EVENTS_AS_PARTS = _events_part(type_coerce(events.c.occurred_at, Text())).order_by(
    events.c.occurred_at, events.c.id
)


def utc_from_text(value: Any) -> Any:
    """A timestamp as a read gives it: a datetime already, or SQLite's stored text (naive
    UTC as this code writes it; any other ISO form a raw writer left is read as
    ``UtcDateTime`` reads it)."""
    if value.__class__ is not str:
        return value
    try:
        return dt.datetime.fromisoformat(value + "+00:00")
    except ValueError:
        parsed = dt.datetime.fromisoformat(value)
        return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)


def utc_from_texts(values: Sequence[Any]) -> list[Any]:
    """``utc_from_text`` of every value of a read's column, in one C call each while they are
    SQLite's stored text as this code writes it (a read of 10,000 events parses 10,000)."""
    if not values or values[0].__class__ is not str:
        return list(values)  # datetimes already (PostgreSQL)
    try:
        parse, utc = dt.datetime.fromisoformat, "+00:00"
        return [parse(value + utc) for value in values]
    except (TypeError, ValueError):  # a raw writer's other ISO form, or a mix
        return [utc_from_text(value) for value in values]


_PARTS = union_all(_HEAD_PART, _EVENTS_PART, _ATTACHMENTS_PART).subquery("parts")
# events by (occurred_at, id); attachments by position (within each event, as listed)
_CONVERSATION_READ = DriverStatement(select(*_PARTS.c).order_by(_PARTS.c.part, _PARTS.c.at, _PARTS.c.k, _PARTS.c.t1))
# SQLite: three statements in one read transaction (in process there are no round trips to
# save, and these are faster than the union's sort), the rows as SQLite gives them
# (timestamps as their stored text: ``utc_from_text``).
_SQLITE_HEAD = DriverStatement(_HEAD_PART, convert=False)
_SQLITE_EVENTS = DriverStatement(_READABLE_EVENTS_AS_PARTS, convert=False)
_SQLITE_ATTACHMENTS = DriverStatement(_ATTACHMENTS_PART.order_by(attachments.c.position), convert=False)
