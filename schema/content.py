"""Queries over the host's content: writes and fenced reads.

Writes rely on the triggers in schema/sql/ for every fence; the checks here only give a
clearer error first. Reads apply the fences themselves: a fenced event, a purged
conversation and a non-live event are never returned, whether or not cleanup has run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    Row,
    Table,
    Text,
    and_,
    bindparam,
    cast,
    exists,
    func,
    insert,
    literal,
    literal_column,
    not_,
    null,
    or_,
    select,
    type_coerce,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from schema.driver import DriverStatement, Reader
from schema.expiry import placement_expired, readable_in
from schema.states import BlobState, ConversationState, TombstoneKind
from schema.tables import (
    SQLITE_NOW,
    UtcDateTime,
    admissions,
    attachments,
    author_erasures,
    blobs,
    bots,
    conversations,
    derivative_sources,
    derivatives,
    events,
    ledger_head,
    placements,
    retention_fences,
    runs,
    tombstones,
)

# The constant is written into the SQL text, not bound: a generic plan of a prepared statement
# that cannot see the value would guess "almost every row is purged" and scan every placement.
NOT_PURGED = conversations.c.state != literal_column(f"'{ConversationState.PURGED.value}'")


def is_tombstoned(conn: Connection, kinds: Iterable[TombstoneKind], the_id: str) -> bool:
    query = select(tombstones.c.kind).where(tombstones.c.kind.in_([k.value for k in kinds]), tombstones.c.id == the_id)
    return conn.execute(query.limit(1)).first() is not None


# -- conversations and bots ---------------------------------------------------------------


def conversation_row(conn: Connection, conversation_id: str) -> Row[Any] | None:
    query = select(conversations).where(conversations.c.id == conversation_id)
    return conn.execute(query).first()


def insert_conversation(conn: Connection, conversation_id: str, kind: str, bot_id: str | None) -> None:
    conn.execute(insert(conversations).values(id=conversation_id, kind=kind, bot_id=bot_id))


def catalog(conn: Connection) -> list[Row[Any]]:
    """Every conversation that is not purged, by id."""
    query = (
        select(conversations)
        .where(NOT_PURGED)
        .where(not_(_tombstone_exists(TombstoneKind.CONVERSATION, conversations.c.id)))
        .order_by(conversations.c.id)
    )
    return list(conn.execute(query))


def bot_row(conn: Connection, bot_id: str) -> Row[Any] | None:
    return conn.execute(select(bots).where(bots.c.id == bot_id)).first()


def insert_bot(conn: Connection, bot_id: str, *, name: str, memory_path: str | None, marker_id: str | None) -> None:
    conn.execute(insert(bots).values(id=bot_id, name=name, memory_path=memory_path, marker_id=marker_id))


# -- events -------------------------------------------------------------------------------


def event_row(conn: Connection, event_id: str) -> Row[Any] | None:
    return conn.execute(select(events).where(events.c.id == event_id)).first()


def event_by_provider_id(conn: Connection, provider_event_id: str) -> Row[Any] | None:
    query = select(events).where(events.c.provider_event_id == provider_event_id)
    return conn.execute(query).first()


def insert_event(
    conn: Connection,
    *,
    event_id: str,
    provider_event_id: str | None,
    author: str,
    occurred_at: dt.datetime,
    body: str | None,
) -> bool:
    """Insert the event; False when its provider_event_id was already ingested."""
    values = {
        "id": event_id,
        "provider_event_id": provider_event_id,
        "author": author,
        "occurred_at": occurred_at,
        "body": body,
    }
    statement = _INSERT_EVENT[conn.dialect.name, provider_event_id is not None]
    return conn.execute(statement, values).first() is not None


# Built once per dialect (building an INSERT costs as much as sending it): with a provider
# event id, a duplicate delivery inserts nothing (ON CONFLICT DO NOTHING) and returns no row.
_INSERT_EVENT = {
    (dialect, deduplicated): (
        insert_of(events).on_conflict_do_nothing(index_elements=["provider_event_id"])
        if deduplicated
        else insert_of(events)
    ).returning(events.c.id)
    for dialect, insert_of in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
    for deduplicated in (False, True)
}
# A placement's created_at to the millisecond on SQLite too (its column default has whole
# seconds): a retention run's fence covers only what was placed before its acceptance.
_INSERT_PLACEMENT = {
    "postgresql": insert(placements),
    "sqlite": insert(placements).values(created_at=literal_column(SQLITE_NOW)),
}


def insert_event_reading_head(
    conn: Connection, *, event_id: str, author: str, occurred_at: dt.datetime, body: str | None, conversation_id: str
) -> Any:
    """PostgreSQL: insert an event without a provider event id, and return in the same
    statement the ledger head (``seq``, ``head_hash``, ``gate_reason``) and whether the
    conversation is known (``conversation_known``), for the checks before its placement."""
    params = {"id": event_id, "author": author, "occurred_at": occurred_at, "body": body}
    return conn.execute(_INSERT_EVENT_READING_HEAD, {**params, "conversation_id": conversation_id}).one()


def upsert_insert(conn: Connection, table: Table) -> Any:
    """The dialect's INSERT, which has ON CONFLICT DO NOTHING on both backends."""
    return (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)


def insert_placement(conn: Connection, event_id: str, conversation_id: str) -> None:
    conn.execute(_INSERT_PLACEMENT[conn.dialect.name], {"event_id": event_id, "conversation_id": conversation_id})


def placement_exists(conn: Connection, event_id: str, conversation_id: str) -> bool:
    query = select(placements.c.event_id).where(
        placements.c.event_id == event_id, placements.c.conversation_id == conversation_id
    )
    return conn.execute(query).first() is not None


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


_placed_event = events.alias("placed_event")
_any_fence = retention_fences.alias("any_fence")
# A run's expiry of the placement, gated by one uncorrelated EXISTS over the fences (usually
# empty; a one-time test): without it PostgreSQL plans a statement holding ``live_event`` (a
# purge's report) afresh at every execution instead of reusing its generic plan, the
# estimate of the fences' subplans tipping the choice (2.4 ms of planning per confirmation).
_EXPIRED_HERE = and_(
    exists().select_from(_any_fence).correlate_except(_any_fence),
    placement_expired(
        _placed_event.c.author, _placed_event.c.occurred_at, placements.c.conversation_id, placements.c.created_at
    ),
)


def live_event(event_id: Any) -> Any:
    """An event is live while it has no fence (an event tombstone, or an author erasure that
    covers it) and a placement in a conversation that is not purged (docs/design.md) and that no
    retention run expires. ``event_id`` is a value or a column."""
    return and_(
        not_(_tombstone_exists(TombstoneKind.EVENT, event_id)),
        not_(event_erased(event_id)),
        exists()
        .where(placements.c.event_id == event_id)
        .where(conversations.c.id == placements.c.conversation_id)
        .where(NOT_PURGED)
        .where(_placed_event.c.id == placements.c.event_id)
        .where(not_(_EXPIRED_HERE)),
    )


def is_event_live(conn: Connection, event_id: str) -> bool:
    return bool(conn.scalar(select(live_event(event_id))))


def _tombstone_exists(kind: TombstoneKind, id_expr: Any) -> Any:
    return exists().where(tombstones.c.kind == kind.value).where(tombstones.c.id == id_expr)


def author_erased(author: Any, occurred_at: Any) -> Any:
    """An erasure of ``author`` covers ``occurred_at`` (columns or values): one probe of the
    prefix of author_erasures' primary key."""
    return exists().where(author_erasures.c.author == author, author_erasures.c.window_end > occurred_at)


_erased_event = events.alias("erased_event")
_erasure = author_erasures.alias("erasure")


def event_erased(event_id: Any) -> Any:
    """The event (a value or a column) is erased with its author's content: the events key,
    then the prefix of author_erasures' key. Its own aliases are never correlated away, so
    the expression means the same inside any statement."""
    return (
        exists()
        .where(_erased_event.c.id == event_id)
        .where(_erasure.c.author == _erased_event.c.author, _erasure.c.window_end > _erased_event.c.occurred_at)
        .correlate_except(_erased_event, _erasure)
    )


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


# The gate's head read of an ingest, with whether its conversation id is known (a row, or a
# conversation or channel tombstone: the triggers refuse those): one statement, not two.
_CONVERSATION_KNOWN = or_(
    exists().where(conversations.c.id == bindparam("conversation_id")),
    exists().where(
        tombstones.c.kind.in_([TombstoneKind.CONVERSATION.value, TombstoneKind.CHANNEL.value]),
        tombstones.c.id == bindparam("conversation_id"),
    ),
)
HEAD_WITH_CONVERSATION = select(
    ledger_head.c.seq,
    ledger_head.c.head_hash,
    ledger_head.c.gate_reason,
    _CONVERSATION_KNOWN.label("conversation_known"),
).where(ledger_head.c.id == 1)
# each a one-value statement, for a RETURNING clause
_HEAD_VALUES = (
    *(
        select(column).where(ledger_head.c.id == 1).scalar_subquery().label(column.name)
        for column in (ledger_head.c.seq, ledger_head.c.head_hash, ledger_head.c.gate_reason)
    ),
    select(_CONVERSATION_KNOWN).scalar_subquery().label("conversation_known"),
)

_INSERT_EVENT_READING_HEAD = (
    postgresql.insert(events)
    .values(
        id=bindparam("id"),
        provider_event_id=None,
        author=bindparam("author"),
        occurred_at=bindparam("occurred_at", type_=events.c.occurred_at.type),
        body=bindparam("body"),
    )
    .returning(*_HEAD_VALUES)
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
#   t5                                           name
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
        null(),
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


# -- blobs and attachments ----------------------------------------------------------------


def holds_purged_content(blob_id: Any) -> Any:
    """The blob is bound, and only by events that are not live: its bytes are purged
    content, however present, and are bound to nothing new (the attachments trigger says
    the same). ``blob_id`` is a value or a column."""
    bound = attachments.alias("bound")
    return and_(
        exists().where(bound.c.blob_id == blob_id),
        ~exists().where(bound.c.blob_id == blob_id, live_event(bound.c.event_id)),
    )


def present_cas_blob(conn: Connection, sha256: str) -> Row[Any] | None:
    """A present CAS blob with these bytes, locked shared so deletion cannot pass it. A blob
    that holds purged content is no twin: the upload gets a blob of its own."""
    query = (
        select(blobs)
        .where(blobs.c.kind == "cas", blobs.c.sha256 == sha256)
        .where(blobs.c.state == BlobState.PRESENT.value)
        .where(not_(holds_purged_content(blobs.c.id)))
        .order_by(blobs.c.created_at, blobs.c.id)
        .limit(1)
        .with_for_update(read=True)
    )
    return conn.execute(query).first()


def blob_holds_purged_content(conn: Connection, blob_id: str) -> bool:
    return bool(conn.scalar(select(holds_purged_content(blob_id))))


def blob_row(conn: Connection, blob_id: str, *, lock_shared: bool = False) -> Row[Any] | None:
    query = select(blobs).where(blobs.c.id == blob_id)
    if lock_shared:
        query = query.with_for_update(read=True)
    return conn.execute(query).first()


def insert_blob(conn: Connection, *, blob_id: str, kind: str, sha256: str, size: int, path: str) -> None:
    conn.execute(insert(blobs).values(id=blob_id, kind=kind, sha256=sha256, size=size, path=path))


def insert_attachment(
    conn: Connection, *, attachment_id: str, event_id: str, blob_id: str, binding: str, name: str, position: int
) -> None:
    conn.execute(
        insert(attachments).values(
            id=attachment_id, event_id=event_id, blob_id=blob_id, binding=binding, name=name, position=position
        )
    )


def attachments_of(conn: Connection, event_ids: Sequence[str]) -> list[Row[Any]]:
    """The attachments of these events whose bytes are present, with their blob's size."""
    if not event_ids:
        return []
    query = (
        select(attachments, blobs.c.size)
        .join(blobs, blobs.c.id == attachments.c.blob_id)
        .where(attachments.c.event_id.in_(list(event_ids)))
        .where(blobs.c.state == BlobState.PRESENT.value)
        .order_by(attachments.c.event_id, attachments.c.position)
    )
    return list(conn.execute(query))


def attachment_with_blob(conn: Connection, attachment_id: str) -> Any:
    query = (
        select(
            attachments.c.id,
            attachments.c.event_id,
            attachments.c.name,
            blobs.c.id.label("blob_id"),
            blobs.c.kind.label("blob_kind"),
            blobs.c.path,
            blobs.c.state.label("blob_state"),
        )
        .join(blobs, blobs.c.id == attachments.c.blob_id)
        .where(attachments.c.id == attachment_id)
    )
    return conn.execute(query).first()


# -- runs, admissions, derivatives --------------------------------------------------------


def run_row(conn: Connection, run_id: str) -> Row[Any] | None:
    return conn.execute(select(runs).where(runs.c.id == run_id)).first()


def insert_run(conn: Connection, *, run_id: str, conversation_id: str, bot_id: str) -> None:
    conn.execute(insert(runs).values(id=run_id, conversation_id=conversation_id, bot_id=bot_id, status="running"))


def finish_run(conn: Connection, run_id: str, *, status: str, output: str | None) -> None:
    conn.execute(
        update(runs)
        .where(runs.c.id == run_id)
        .values(status=status, output=output, finished_at=func.current_timestamp())
    )


def insert_admission(conn: Connection, *, admission_id: str, event_id: str, run_id: str, payload: str) -> None:
    conn.execute(insert(admissions).values(id=admission_id, event_id=event_id, run_id=run_id, payload=payload))


def insert_derivative(
    conn: Connection,
    *,
    derivative_id: str,
    conversation_id: str,
    kind: str,
    payload: str,
    source_event_ids: Sequence[str],
) -> None:
    conn.execute(
        insert(derivatives).values(id=derivative_id, conversation_id=conversation_id, kind=kind, payload=payload)
    )
    if source_event_ids:
        conn.execute(
            insert(derivative_sources),
            [{"derivative_id": derivative_id, "event_id": e} for e in source_event_ids],
        )


def existing_event_ids(conn: Connection, event_ids: Sequence[str]) -> set[str]:
    return set(conn.scalars(select(events.c.id).where(events.c.id.in_(list(event_ids)))))
