"""The ingest's statements (PostgreSQL): an event and its placement in one round trip, and
many events in one statement. SQLite writes an event in steps (``content_queries``).

They run on the driver (``purgekeeper.schema.driver``): an ingest is a host's hottest write,
and SQLAlchemy's execution of a statement costs as much as a round trip. Each is built when
first used (it loads the PostgreSQL dialect, which a process on SQLite never does).
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, exists, insert, literal_column, or_, select, text

from purgekeeper.schema.driver import DriverStatement
from purgekeeper.schema.states import TombstoneKind
from purgekeeper.schema.tables import conversations, events, ledger_head, placements, tombstones

__all__ = ["conversation_known", "ingest_placed", "ingest_placed_batch"]


def conversation_known(conversation_id: Any) -> Any:
    """Whether the conversation id is known: a row, or a conversation or channel tombstone
    (the triggers refuse those). No expanding IN: a ``DriverStatement`` runs it too."""
    return or_(
        exists().where(conversations.c.id == conversation_id),
        exists().where(
            or_(
                tombstones.c.kind == TombstoneKind.CONVERSATION.value,
                tombstones.c.kind == TombstoneKind.CHANNEL.value,
            ),
            tombstones.c.id == conversation_id,
        ),
    )


def ingest_placed(
    conn: Connection,
    *,
    event_id: str,
    provider_event_id: str | None,
    author: str,
    occurred_at: dt.datetime,
    body: str | None,
    key_id: str,
    conversation_id: str,
) -> Any:
    """PostgreSQL: an ingest in one statement. Insert the event (nothing when its
    provider_event_id was ingested already), place it in the conversation when that id is
    known, and return the ledger head (``seq``, ``head_hash``, ``gate_reason``), whether the
    conversation is known (``conversation_known``) and whether the event was placed
    (``placed``). The triggers check every fence of both rows as for two statements: the
    placement's see the event, inserted before it in the same statement."""
    params = {
        "id": event_id,
        "provider_event_id": provider_event_id,
        "author": author,
        "occurred_at": occurred_at,
        "body": body,
        "key_id": key_id,
        "conversation_id": conversation_id,
    }
    return _ingest_placed_statement().first(conn, params)


def _ingest_placed() -> Any:
    known = conversation_known(bindparam("conversation_id", type_=placements.c.conversation_id.type))
    new_event = (
        importlib.import_module("sqlalchemy.dialects.postgresql")
        .insert(events)
        .values(
            id=bindparam("id"),
            provider_event_id=bindparam("provider_event_id"),
            author=bindparam("author"),
            occurred_at=bindparam("occurred_at", type_=events.c.occurred_at.type),
            body=bindparam("body"),
            key_id=bindparam("key_id"),
        )
        .on_conflict_do_nothing(index_elements=["provider_event_id"])
        .returning(events.c.id)
        .cte("new_event")
    )
    placed = (
        insert(placements)
        .from_select(
            ["event_id", "conversation_id"],
            select(new_event.c.id, bindparam("conversation_id", type_=placements.c.conversation_id.type)).where(known),
        )
        .returning(placements.c.event_id)
        .cte("placed")
    )
    return select(
        ledger_head.c.seq,
        ledger_head.c.head_hash,
        ledger_head.c.gate_reason,
        known.label("conversation_known"),
        exists(select(placed.c.event_id)).label("placed"),
    ).where(ledger_head.c.id == 1)


def ingest_placed_batch(conn: Connection, rows: Sequence[Mapping[str, Any]], conversation_id: str) -> Any:
    """PostgreSQL: ``ingest_placed`` for many events in one statement (``rows``: each with
    the keys of ``ingest_placed``'s event). Returns the head, ``conversation_known`` and
    ``placed``, the ids of the events inserted and placed; an event of a provider id
    ingested already (before, or earlier in ``rows``) is neither. A fence trigger refusing
    one row refuses the statement."""
    params = {name: [row[name] for row in rows] for name in _BATCH_COLUMNS}
    return _ingest_placed_batch_statement().first(conn, {**params, "conversation_id": conversation_id})


_BATCH_COLUMNS = ("id", "provider_event_id", "author", "occurred_at", "body", "key_id")


@functools.cache
def _ingest_placed_batch_statement() -> DriverStatement:
    """The batch's statement: the rows given as arrays, in their order."""
    statement = text(
        """
        WITH given AS (
            SELECT * FROM unnest(CAST(:id AS text[]), CAST(:provider_event_id AS text[]), CAST(:author AS text[]),
                                 CAST(:occurred_at AS timestamptz[]), CAST(:body AS text[]), CAST(:key_id AS text[]))
                     WITH ORDINALITY AS g(id, provider_event_id, author, occurred_at, body, key_id, n)
        ),
        known AS (
            SELECT EXISTS (SELECT 1 FROM conversations WHERE id = :conversation_id)
                OR EXISTS (SELECT 1 FROM tombstones WHERE kind IN ('conversation', 'channel')
                                                      AND id = :conversation_id) AS known
        ),
        new_events AS (
            INSERT INTO events (id, provider_event_id, author, occurred_at, body, key_id)
            SELECT id, provider_event_id, author, occurred_at, body, key_id FROM given ORDER BY n
            ON CONFLICT (provider_event_id) DO NOTHING
            RETURNING id
        ),
        placed AS (
            INSERT INTO placements (event_id, conversation_id)
            SELECT new_events.id, CAST(:conversation_id AS text) FROM new_events, known WHERE known.known
            RETURNING event_id
        )
        SELECT h.seq, h.head_hash, h.gate_reason, (SELECT known FROM known) AS conversation_known,
               ARRAY(SELECT event_id FROM placed) AS placed
          FROM ledger_head h WHERE h.id = 1
        """
    ).columns(*(literal_column(name) for name in ("seq", "head_hash", "gate_reason", "conversation_known", "placed")))
    return DriverStatement(statement, named=True)


@functools.cache
def _ingest_placed_statement() -> DriverStatement:
    """The ingest's one statement, run by the driver (``purgekeeper.schema.driver``): an
    ingest is a host's hottest write, and SQLAlchemy's execution of it costs as much as a
    round trip. Built when first used (it loads the PostgreSQL dialect)."""
    return DriverStatement(_ingest_placed(), named=True)
