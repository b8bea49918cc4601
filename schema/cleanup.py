"""Queries of the cleanup steps: small, bounded batches, each in its own short transaction.

Every statement is idempotent: NULLing what is already NULL, deleting what is gone, and
marking a blob that is already marked, change nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Row, delete, exists, func, select, update

from schema.content import NOT_PURGED, live_event
from schema.states import BlobState, TombstoneKind
from schema.tables import (
    admissions,
    attachments,
    blobs,
    conversations,
    derivative_sources,
    derivatives,
    events,
    placements,
    runs,
    tombstones,
)


def null_content_of(conn: Connection, event_ids: Sequence[str]) -> int:
    """NULL the bodies of these events, the payloads of their admissions, the outputs of the
    runs that admitted them, and the payloads of what was derived from them."""
    ids = list(event_ids)
    if not ids:
        return 0
    admitting_runs = select(admissions.c.run_id).where(admissions.c.event_id.in_(ids))
    derived = select(derivative_sources.c.derivative_id).where(derivative_sources.c.event_id.in_(ids))
    statements = (
        update(events).where(events.c.id.in_(ids), events.c.body.is_not(None)).values(body=None),
        update(admissions)
        .where(admissions.c.event_id.in_(ids), admissions.c.payload.is_not(None))
        .values(payload=None),
        update(runs).where(runs.c.id.in_(admitting_runs), runs.c.output.is_not(None)).values(output=None),
        update(derivatives)
        .where(derivatives.c.id.in_(derived), derivatives.c.payload.is_not(None))
        .values(payload=None),
    )
    return sum(int(conn.execute(statement).rowcount or 0) for statement in statements)


def placed_events(conn: Connection, conversation_id: str, *, limit: int) -> list[str]:
    query = (
        select(placements.c.event_id)
        .where(placements.c.conversation_id == conversation_id)
        .order_by(placements.c.event_id)
        .limit(limit)
    )
    return list(conn.scalars(query))


def live_elsewhere(conn: Connection, event_ids: Sequence[str], conversation_id: str) -> set[str]:
    """The events that, now, are unfenced and placed in a conversation that is not purged."""
    query = (
        select(placements.c.event_id)
        .join(conversations, conversations.c.id == placements.c.conversation_id)
        .where(placements.c.event_id.in_(list(event_ids)), placements.c.conversation_id != conversation_id)
        .where(NOT_PURGED)
        .where(
            ~exists().where(tombstones.c.kind == TombstoneKind.EVENT.value, tombstones.c.id == placements.c.event_id)
        )
    )
    return set(conn.scalars(query))


def provider_ids_of(conn: Connection, event_ids: Sequence[str]) -> list[str]:
    query = select(events.c.provider_event_id).where(
        events.c.id.in_(list(event_ids)), events.c.provider_event_id.is_not(None)
    )
    return list(conn.scalars(query))


def remove_placements(conn: Connection, conversation_id: str, event_ids: Sequence[str]) -> int:
    statement = delete(placements).where(
        placements.c.conversation_id == conversation_id, placements.c.event_id.in_(list(event_ids))
    )
    return int(conn.execute(statement).rowcount or 0)


def delete_runs_batch(conn: Connection, conversation_id: str, *, limit: int) -> int:
    """Delete a batch of the conversation's runs with their admissions; returns runs deleted."""
    ids = list(conn.scalars(select(runs.c.id).where(runs.c.conversation_id == conversation_id).limit(limit)))
    if ids:
        conn.execute(delete(admissions).where(admissions.c.run_id.in_(ids)))
        conn.execute(delete(runs).where(runs.c.id.in_(ids)))
    return len(ids)


def delete_derivatives_batch(conn: Connection, conversation_id: str, *, limit: int) -> int:
    query = select(derivatives.c.id).where(derivatives.c.conversation_id == conversation_id).limit(limit)
    ids = list(conn.scalars(query))
    if ids:
        conn.execute(delete(derivative_sources).where(derivative_sources.c.derivative_id.in_(ids)))
        conn.execute(delete(derivatives).where(derivatives.c.id.in_(ids)))
    return len(ids)


# -- attachments ------------------------------------------------------------------------------


def candidate_blobs(conn: Connection, purge_id: str, *, after: str, limit: int) -> list[str]:
    """Blobs bound to events this purge fenced that still have bytes (present or deleting).
    Driven from the purge's own tombstones (index on purge_id), so the cost follows the purge,
    not the size of the attachments table."""
    fenced = (
        select(tombstones.c.id)
        .where(tombstones.c.purge_id == purge_id, tombstones.c.kind == TombstoneKind.EVENT.value)
        .cte("fenced")
        .prefix_with("MATERIALIZED", dialect="postgresql")
    )
    query = (
        select(attachments.c.blob_id)
        .join(fenced, fenced.c.id == attachments.c.event_id)
        .join(blobs, blobs.c.id == attachments.c.blob_id)
        .where(attachments.c.blob_id > after)
        .where(blobs.c.state.in_([BlobState.PRESENT.value, BlobState.DELETING.value]))
        .group_by(attachments.c.blob_id)
        .order_by(attachments.c.blob_id)
        .limit(limit)
    )
    return list(conn.scalars(query))


def lock_blobs(conn: Connection, blob_ids: Sequence[str]) -> list[Row[Any]]:
    query = select(blobs).where(blobs.c.id.in_(list(blob_ids))).order_by(blobs.c.id).with_for_update()
    return list(conn.execute(query))


def live_references(conn: Connection, blob_ids: Sequence[str]) -> dict[str, int]:
    """Live references per blob, of both binding kinds, in one set-based query."""
    query = (
        select(attachments.c.blob_id, func.count())
        .where(attachments.c.blob_id.in_(list(blob_ids)), live_event(attachments.c.event_id))
        .group_by(attachments.c.blob_id)
    )
    return {row[0]: int(row[1]) for row in conn.execute(query)}


def mark_blobs(conn: Connection, blob_ids: Sequence[str], *, from_state: BlobState, to_state: BlobState) -> int:
    if not blob_ids:
        return 0
    statement = (
        update(blobs)
        .where(blobs.c.id.in_(list(blob_ids)), blobs.c.state == from_state.value)
        .values(state=to_state.value)
    )
    return int(conn.execute(statement).rowcount or 0)
