"""Writing an ingested event: its row and its placement, behind the gate and the fences.

``ingest_event`` and ``ingest_events`` (``purgekeeper.commands.ingest_batch``) both store an
event through :func:`store_event`. On PostgreSQL that is one statement
(``content_queries.ingest_placed``): the event, its placement, the ledger head and whether the
conversation is known, in one round trip; the gate is checked on the head it returns before
anything is returned, and a closed gate rolls the writes back. On SQLite, the same in steps.

Idempotency is on the provider event id: a delivery of a provider event already ingested
writes nothing and gets the event stored first, unless that one is purged
(``ContentPurged``: a provider id once purged is never ingested again).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection

from purgekeeper.commands import sealed_content
from purgekeeper.commands.gate import Gate
from purgekeeper.commands.records import Event
from purgekeeper.schema import content_queries
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import ContentPurged, Fenced, NotFound
from purgekeeper.schema.states import TombstoneKind
from purgekeeper.storage.content_keys import ContentKeys

_T = TypeVar("_T")


@dataclass(frozen=True)
class StoredRow:
    """An event's row as written: its fields checked, its body sealed under ``key_id``."""

    event_id: str
    provider_event_id: str | None
    author: str
    occurred_at: dt.datetime
    body: str | None
    key_id: str

    def columns(self) -> dict[str, Any]:
        """The row's columns, as the schema's insert functions take them (a subclass's own
        fields are not columns)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(StoredRow)}


def store_event(conn: Connection, gate: Gate, keys: ContentKeys, row: StoredRow, conversation_id: str) -> Event | None:
    """Write the event's row and its placement, the gate checked before anything is
    returned; the event a delivery of the same provider event stored already (nothing
    written), else None."""
    if conn.dialect.name != "postgresql":
        return _store_in_steps(conn, gate, keys, row, conversation_id)
    stored = content_queries.ingest_placed(conn, **row.columns(), conversation_id=conversation_id)
    gate.check_values(conn, stored.seq, stored.head_hash, stored.gate_reason)
    if not stored.placed and row.provider_event_id is not None:
        duplicate = duplicate_delivery(conn, row.provider_event_id)
        if duplicate is not None:
            return sealed_content.stored_event(conn, keys, duplicate)
    if not stored.conversation_known:  # the triggers refuse a purged or deleted one
        raise NotFound(f"no conversation {conversation_id}")
    return None


def _store_in_steps(
    conn: Connection, gate: Gate, keys: ContentKeys, row: StoredRow, conversation_id: str
) -> Event | None:
    """``store_event`` on SQLite: the head, the duplicate, the event, its placement."""
    head = gate.require_open(conn, content_queries.HEAD_WITH_CONVERSATION, {"conversation_id": conversation_id})
    if row.provider_event_id is not None:
        duplicate = duplicate_delivery(conn, row.provider_event_id)
        if duplicate is not None:
            return sealed_content.stored_event(conn, keys, duplicate)
    if not head.conversation_known:  # the triggers refuse a purged or deleted one
        raise NotFound(f"no conversation {conversation_id}")
    inserted = content_queries.insert_event(conn, **row.columns())
    if not inserted:  # a concurrent delivery of the same provider event won
        return sealed_content.stored_event(conn, keys, duplicate_delivery(conn, row.provider_event_id or ""))
    content_queries.insert_placement(conn, row.event_id, conversation_id)
    return None


def transact_fenced(db: Database, gate: Gate, work: Callable[[Connection], _T]) -> _T:
    """``work`` in a transaction whose statements write before the gate is checked (on the
    head they return): a fence trigger's refusal is raised only while the gate is open, so
    a closed gate answers first, as it does for every content call."""
    try:
        return db.transact(work)
    except Fenced:
        require_gate_open(db, gate)
        raise


def require_gate_open(db: Database, gate: Gate) -> None:
    with db.read() as conn:
        gate.require_open(conn)


def duplicate_delivery(conn: Connection, provider_event_id: str) -> Any:
    """The event already ingested with this provider event id, if any. A purged one is refused,
    never returned: fenced by its own tombstone, by its event's, or no longer live at all (its
    conversations purged, the bodies step not yet run), so a redelivery cannot read it back."""
    existing = content_queries.event_by_provider_id(conn, provider_event_id)
    if content_queries.is_tombstoned(conn, [TombstoneKind.PROVIDER_EVENT], provider_event_id) or (
        existing is not None and not content_queries.is_event_live(conn, existing.id)
    ):
        raise ContentPurged(f"provider event {provider_event_id} was purged; it is never ingested again")
    return existing
