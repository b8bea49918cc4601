"""What a purge touched, in ids and counts, and finding purges by id: the queries behind the
console's page of one purge and its search box.

Each read is bounded: counts stop at a cap (``count_upto``), lists at a limit, and every one is
driven from the purge's own event tombstones (``ix_tombstones_event_purge_id``) or a primary
key. None reads a body, a payload or an attachment's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, func, select

from purgekeeper.schema.tables import IS_EVENT_TOMBSTONE, attachments, blobs, placements, purge_ledger, tombstones

LIKE_ESCAPE = "\\"


def _fenced_events() -> Any:
    """The events this purge fenced (its event tombstones), as a subquery of ids."""
    return select(tombstones.c.id).where(tombstones.c.purge_id == bindparam("purge_id"), IS_EVENT_TOMBSTONE)


_EVENTS = select(func.count()).select_from(_fenced_events().limit(bindparam("cap")).subquery())
_ATTACHMENTS = select(func.count()).select_from(
    select(attachments.c.id).where(attachments.c.event_id.in_(_fenced_events())).limit(bindparam("cap")).subquery()
)
_CONVERSATIONS = (
    select(placements.c.conversation_id)
    .where(placements.c.event_id.in_(_fenced_events()))
    .distinct()
    .order_by(placements.c.conversation_id)
    .limit(bindparam("limit"))
)


def fenced_event_count(conn: Connection, purge_id: str, *, cap: int) -> int:
    """How many events the purge has fenced so far, counted up to ``cap``."""
    return int(conn.scalar(_EVENTS, {"purge_id": purge_id, "cap": cap}) or 0)


def attachment_count(conn: Connection, purge_id: str, *, cap: int) -> int:
    """How many attachments are bound to the events the purge fenced, counted up to ``cap``."""
    return int(conn.scalar(_ATTACHMENTS, {"purge_id": purge_id, "cap": cap}) or 0)


def conversations_of_fenced(conn: Connection, purge_id: str, *, limit: int) -> list[str]:
    """The conversations the fenced events are still placed in, in id order, at most ``limit``
    (an author erasure names no conversation in its row: this is where it reached)."""
    return list(conn.scalars(_CONVERSATIONS, {"purge_id": purge_id, "limit": limit}))


def blob_places(conn: Connection, blob_ids: Sequence[str]) -> list[Any]:
    """Each blob's kind, canonical layout inputs (sha256) and stored path, by id."""
    query = select(blobs.c.id, blobs.c.kind, blobs.c.sha256, blobs.c.path).where(blobs.c.id.in_(list(blob_ids)))
    return list(conn.execute(query).all())


def purge_ids_starting(conn: Connection, prefix: str, *, limit: int) -> list[str]:
    """The purge ids that begin with ``prefix``, newest first, at most ``limit``."""
    pattern = "".join(LIKE_ESCAPE + c if c in "%_" + LIKE_ESCAPE else c for c in prefix) + "%"
    query = (
        select(purge_ledger.c.purge_id)
        .where(purge_ledger.c.purge_id.like(pattern, escape=LIKE_ESCAPE))
        .order_by(purge_ledger.c.seq.desc())
        .limit(limit)
    )
    return list(conn.scalars(query))
