"""Queries over the host's content: writes and fenced reads.

Writes rely on the triggers in schema/sql/ for every fence; the checks here only give a
clearer error first. Reads apply the fences themselves: a fenced event, a purged
conversation and a non-live event are never returned, whether or not cleanup has run.

Here: the writes, and the reads of single rows. The fences a read applies are in
``liveness``, the read of a conversation in ``conversation_read``; every name is importable
from here.
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    Table,
    and_,
    bindparam,
    exists,
    func,
    insert,
    literal_column,
    not_,
    or_,
    select,
    text,
    update,
)

from purgekeeper.schema.content_tables import PLAIN_CONTENT
from purgekeeper.schema.conversation_read import (
    EVENT_COLUMNS,
    ConversationRead,
    read_conversation,
    utc_from_text,
    utc_from_texts,
)
from purgekeeper.schema.ingest_queries import conversation_known, ingest_placed, ingest_placed_batch
from purgekeeper.schema.liveness import (
    NOT_PURGED,
    _tombstone_exists,
    author_erased,
    event_erased,
    is_event_live,
    is_tombstoned,
    live_event,
)
from purgekeeper.schema.states import BlobState, TombstoneKind
from purgekeeper.schema.tables import (
    SQLITE_NOW,
    admissions,
    attachments,
    blobs,
    bots,
    conversations,
    derivative_sources,
    derivatives,
    events,
    ledger_head,
    placements,
    runs,
)

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
    key_id: str,
) -> bool:
    """Insert the event (``body`` sealed under the key ``key_id``); False when its
    provider_event_id was already ingested."""
    values = {
        "id": event_id,
        "provider_event_id": provider_event_id,
        "author": author,
        "occurred_at": occurred_at,
        "body": body,
        "key_id": key_id,
    }
    statement = _insert_event(conn.dialect.name, deduplicated=provider_event_id is not None)
    return conn.execute(statement, values).first() is not None


def dialect_insert(dialect: str) -> Any:
    """The dialect's ``insert`` construct, which has ON CONFLICT DO NOTHING. Its module is
    imported when first asked for: a process on SQLite never loads the PostgreSQL dialect
    (a command-line call pays for every module it imports)."""
    return importlib.import_module(f"sqlalchemy.dialects.{dialect}").insert


# Built once per dialect, when first used (building an INSERT costs as much as sending it):
# with a provider event id, a duplicate delivery inserts nothing (ON CONFLICT DO NOTHING) and
# returns no row.
@functools.cache
def _insert_event(dialect: str, *, deduplicated: bool) -> Any:
    statement = dialect_insert(dialect)(events)
    if deduplicated:
        statement = statement.on_conflict_do_nothing(index_elements=["provider_event_id"])
    return statement.returning(events.c.id)


# A placement's created_at to the millisecond on SQLite too (its column default has whole
# seconds): a retention run's fence covers only what was placed before its acceptance.
_INSERT_PLACEMENT = {
    "postgresql": insert(placements),
    "sqlite": insert(placements).values(created_at=literal_column(SQLITE_NOW)),
}


def upsert_insert(conn: Connection, table: Table) -> Any:
    """The dialect's INSERT, which has ON CONFLICT DO NOTHING on both backends."""
    return dialect_insert(conn.dialect.name)(table)


def insert_placement(conn: Connection, event_id: str, conversation_id: str) -> None:
    conn.execute(_INSERT_PLACEMENT[conn.dialect.name], {"event_id": event_id, "conversation_id": conversation_id})


def placement_exists(conn: Connection, event_id: str, conversation_id: str) -> bool:
    query = select(placements.c.event_id).where(
        placements.c.event_id == event_id, placements.c.conversation_id == conversation_id
    )
    return conn.execute(query).first() is not None


# The gate's head read of an ingest, with whether its conversation id is known: one
# statement, not two.
_CONVERSATION_KNOWN = conversation_known(bindparam("conversation_id"))
HEAD_WITH_CONVERSATION = select(
    ledger_head.c.seq,
    ledger_head.c.head_hash,
    ledger_head.c.gate_reason,
    _CONVERSATION_KNOWN.label("conversation_known"),
).where(ledger_head.c.id == 1)

# -- blobs and attachments ----------------------------------------------------------------

# A blob whose file may still be on disk: present, or deleting (marked by a cleanup attempt
# that had not yet unlinked it, or had not yet recorded the unlink).
BLOB_HAS_BYTES = blobs.c.state.in_([BlobState.PRESENT.value, BlobState.DELETING.value])


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


def insert_blob(
    conn: Connection, *, blob_id: str, kind: str, sha256: str, size: int, path: str, key_id: str | None
) -> None:
    conn.execute(insert(blobs).values(id=blob_id, kind=kind, sha256=sha256, size=size, path=path, key_id=key_id))


def insert_attachment(
    conn: Connection, *, attachment_id: str, event_id: str, blob_id: str, binding: str, name: str, position: int
) -> None:
    """Bind the blob to the event; ``name`` is sealed under the event's key, which the row
    names (``key_id``, 0020) from the event's row in the same statement."""
    conn.execute(
        insert(attachments).values(
            id=attachment_id,
            event_id=event_id,
            blob_id=blob_id,
            binding=binding,
            name=name,
            position=position,
            key_id=select(events.c.key_id).where(events.c.id == event_id).scalar_subquery(),
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
            blobs.c.key_id.label("blob_key_id"),
        )
        .join(blobs, blobs.c.id == attachments.c.blob_id)
        .where(attachments.c.id == attachment_id)
    )
    return conn.execute(query).first()


# -- runs, admissions, derivatives --------------------------------------------------------


_PLAIN_CONTENT = select(
    or_(*(exists().where(text(predicate)).select_from(table) for table, predicate in PLAIN_CONTENT.items()))
)


def holds_plain_content(conn: Connection) -> bool:
    """Whether content written before sealing is left (not sealed, nor purged): one probe
    of each ``ix_<table>_plain`` partial index."""
    return bool(conn.scalar(_PLAIN_CONTENT))


def named_keys(conn: Connection, rows: Mapping[Table, Sequence[str]]) -> set[str]:
    """The key ids that these rows (ids by table: each table's primary key is ``id``) name."""
    return {
        key_id
        for table, ids in rows.items()
        if ids
        for key_id in conn.scalars(select(table.c.key_id).where(table.c.id.in_(list(ids)), table.c.key_id.is_not(None)))
    }


def holds_sealed_content(conn: Connection) -> bool:
    """Whether any event or blob is sealed (names a key)."""
    return bool(
        conn.scalar(select(exists().where(events.c.key_id.is_not(None)) | exists().where(blobs.c.key_id.is_not(None))))
    )


def event_key_ids(conn: Connection, event_ids: Sequence[str]) -> dict[str, str | None]:
    """The ids of the keys that seal these events' content, by event."""
    query = select(events.c.id, events.c.key_id).where(events.c.id.in_(list(event_ids)))
    return {row.id: row.key_id for row in conn.execute(query)} if event_ids else {}


def run_row(conn: Connection, run_id: str) -> Row[Any] | None:
    return conn.execute(select(runs).where(runs.c.id == run_id)).first()


def insert_run(conn: Connection, *, run_id: str, conversation_id: str, bot_id: str) -> None:
    conn.execute(insert(runs).values(id=run_id, conversation_id=conversation_id, bot_id=bot_id, status="running"))


def finish_run(conn: Connection, run_id: str, *, status: str, output: str | None, key_id: str | None) -> None:
    conn.execute(
        update(runs)
        .where(runs.c.id == run_id)
        .values(status=status, output=output, key_id=key_id, finished_at=func.current_timestamp())
    )


def insert_admission(
    conn: Connection, *, admission_id: str, event_id: str, run_id: str, payload: str, key_id: str
) -> None:
    conn.execute(
        insert(admissions).values(id=admission_id, event_id=event_id, run_id=run_id, payload=payload, key_id=key_id)
    )


def insert_derivative(
    conn: Connection,
    *,
    derivative_id: str,
    conversation_id: str,
    kind: str,
    payload: str,
    key_id: str,
    source_event_ids: Sequence[str],
) -> None:
    conn.execute(
        insert(derivatives).values(
            id=derivative_id, conversation_id=conversation_id, kind=kind, payload=payload, key_id=key_id
        )
    )
    if source_event_ids:
        conn.execute(
            insert(derivative_sources),
            [{"derivative_id": derivative_id, "event_id": e} for e in source_event_ids],
        )


def existing_event_ids(conn: Connection, event_ids: Sequence[str]) -> set[str]:
    return set(conn.scalars(select(events.c.id).where(events.c.id.in_(list(event_ids)))))


__all__ = [
    "BLOB_HAS_BYTES",
    "EVENT_COLUMNS",
    "HEAD_WITH_CONVERSATION",
    "NOT_PURGED",
    "ConversationRead",
    "attachment_with_blob",
    "attachments_of",
    "author_erased",
    "blob_holds_purged_content",
    "blob_row",
    "bot_row",
    "catalog",
    "conversation_row",
    "dialect_insert",
    "event_by_provider_id",
    "event_erased",
    "event_row",
    "existing_event_ids",
    "finish_run",
    "holds_purged_content",
    "ingest_placed",
    "ingest_placed_batch",
    "insert_admission",
    "insert_attachment",
    "insert_blob",
    "insert_bot",
    "insert_conversation",
    "insert_derivative",
    "insert_event",
    "insert_placement",
    "insert_run",
    "is_event_live",
    "is_tombstoned",
    "live_event",
    "placement_exists",
    "present_cas_blob",
    "read_conversation",
    "run_row",
    "upsert_insert",
    "utc_from_text",
    "utc_from_texts",
]
