"""Queries of a restore merge: what a purge left behind that a restored backup brought back,
the runs a restore must abandon, and re-arming cleanup. Every statement is idempotent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import BindParameter, Connection, and_, bindparam, exists, or_, select, update

from purgekeeper.schema.content_queries import BLOB_HAS_BYTES, event_erased, live_event
from purgekeeper.schema.idlists import IDS, among
from purgekeeper.schema.states import (
    ACTIVE_RUN_STATUSES,
    BlobState,
    ConversationState,
    RunStatus,
    StepStatus,
    TombstoneKind,
)
from purgekeeper.schema.tables import (
    IS_EVENT_TOMBSTONE,
    admissions,
    attachments,
    blobs,
    cleanup_steps,
    conversations,
    derivative_sources,
    derivatives,
    events,
    placements,
    runs,
    tombstones,
)

_PURGE: BindParameter[Any] = bindparam("purge_id")
_CONVERSATION: BindParameter[Any] = bindparam("conversation_id")

_FENCED_BY_PURGE = select(tombstones.c.id).where(tombstones.c.purge_id == _PURGE, IS_EVENT_TOMBSTONE)

_CONTENT_LEFT = select(
    or_(
        exists().where(among(events.c.id, IDS), events.c.body.is_not(None)),
        exists().where(among(admissions.c.event_id, IDS), admissions.c.payload.is_not(None)),
        exists().where(
            runs.c.id.in_(select(admissions.c.run_id).where(among(admissions.c.event_id, IDS))),
            runs.c.output.is_not(None),
        ),
        exists().where(
            derivatives.c.id.in_(
                select(derivative_sources.c.derivative_id).where(among(derivative_sources.c.event_id, IDS))
            ),
            derivatives.c.payload.is_not(None),
        ),
        exists().where(among(attachments.c.event_id, IDS), attachments.c.name.is_not(None)),
    )
)

_CONVERSATION_LEFT = select(
    or_(
        exists().where(placements.c.conversation_id == _CONVERSATION),
        exists().where(runs.c.conversation_id == _CONVERSATION),
        exists().where(derivatives.c.conversation_id == _CONVERSATION),
        exists().where(events.c.id.in_(_FENCED_BY_PURGE), events.c.body.is_not(None)),
        exists().where(attachments.c.event_id.in_(_FENCED_BY_PURGE), attachments.c.name.is_not(None)),
    )
)

_other_binding = attachments.alias("other_binding")
_BYTES_LEFT = select(
    exists()
    .where(attachments.c.event_id.in_(_FENCED_BY_PURGE))
    .where(blobs.c.id == attachments.c.blob_id, BLOB_HAS_BYTES)
    .where(
        or_(
            blobs.c.state == BlobState.DELETING.value,
            # a present blob that live content still binds is retained-shared, not left over
            ~exists().where(_other_binding.c.blob_id == blobs.c.id, live_event(_other_binding.c.event_id)),
        )
    )
)


def content_left(conn: Connection, event_ids: Sequence[str]) -> bool:
    """Bodies, attachment names, payloads or outputs of these events that are not NULL
    (again)."""
    return bool(event_ids) and bool(conn.scalar(_CONTENT_LEFT, {"ids": list(event_ids)}))


_FENCED_CONTENT_LEFT = select(
    or_(
        exists().where(events.c.id.in_(_FENCED_BY_PURGE), events.c.body.is_not(None)),
        exists().where(attachments.c.event_id.in_(_FENCED_BY_PURGE), attachments.c.name.is_not(None)),
        exists().where(admissions.c.event_id.in_(_FENCED_BY_PURGE), admissions.c.payload.is_not(None)),
        exists().where(
            runs.c.id.in_(select(admissions.c.run_id).where(admissions.c.event_id.in_(_FENCED_BY_PURGE))),
            runs.c.output.is_not(None),
        ),
        exists().where(
            derivatives.c.id.in_(
                select(derivative_sources.c.derivative_id).where(derivative_sources.c.event_id.in_(_FENCED_BY_PURGE))
            ),
            derivatives.c.payload.is_not(None),
        ),
    )
)


def fenced_content_left(conn: Connection, purge_id: str) -> bool:
    """Bodies, attachment names, payloads or outputs of the events this purge fenced (its own
    event tombstones) that are not NULL (again)."""
    return bool(conn.scalar(_FENCED_CONTENT_LEFT, {"purge_id": purge_id}))


def conversation_left(conn: Connection, conversation_id: str, purge_id: str) -> bool:
    """Placements, runs or derivatives of the purged conversation, or bodies or attachment
    names of the events the purge fenced."""
    return bool(conn.scalar(_CONVERSATION_LEFT, {"conversation_id": conversation_id, "purge_id": purge_id}))


def bytes_left(conn: Connection, purge_id: str) -> bool:
    """A blob bound to an event this purge fenced that still has (or may have) bytes, and
    that no live content binds (those are kept: retained-shared)."""
    return bool(conn.scalar(_BYTES_LEFT, {"purge_id": purge_id}))


_ABANDON_RUNS = (
    update(runs)
    .where(runs.c.status.in_(ACTIVE_RUN_STATUSES))
    .where(
        or_(
            runs.c.conversation_id.in_(
                select(conversations.c.id).where(conversations.c.state == ConversationState.PURGED.value)
            ),
            runs.c.id.in_(
                select(admissions.c.run_id).join(
                    tombstones,
                    and_(tombstones.c.kind == TombstoneKind.EVENT.value, tombstones.c.id == admissions.c.event_id),
                )
            ),
            runs.c.bot_id.in_(select(tombstones.c.id).where(tombstones.c.kind == TombstoneKind.BOT.value)),
            # per non-terminal run, its admissions: the cost follows the active runs
            exists().where(admissions.c.run_id == runs.c.id, event_erased(admissions.c.event_id)),
        )
    )
    .values(status=RunStatus.ABANDONED.value, output=None)
)


def abandon_runs_in_purged_scopes(conn: Connection) -> int:
    """Non-terminal runs in purged conversations, admitting fenced or erased events, or of
    deleted bots (a restore brought them back): abandoned, their output NULL."""
    return int(conn.execute(_ABANDON_RUNS).rowcount or 0)


def deleted_blobs(conn: Connection) -> list[Any]:
    """Blobs marked deleted: their path must hold no file."""
    query = select(blobs.c.id, blobs.c.kind, blobs.c.path).where(blobs.c.state == BlobState.DELETED.value)
    return list(conn.execute(query))


def rearm_step(conn: Connection, purge_id: str, kind: str, *, due: Any, note: str) -> str | None:
    """Make an existing step pending again with fresh attempts; returns its id, or None if
    the purge has no step of that kind."""
    c = cleanup_steps.c
    statement = (
        update(cleanup_steps)
        .where(c.purge_id == purge_id, c.kind == kind)
        .values(
            status=StepStatus.PENDING.value,
            attempts=0,
            next_attempt_at=due,
            lease_owner=None,
            lease_expires_at=None,
            last_error=note,
        )
        .returning(c.id)
    )
    row = conn.execute(statement).first()
    return None if row is None else str(row.id)
