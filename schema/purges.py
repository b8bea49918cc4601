"""Queries of the purge machinery: resolving a scope, its dependency report, locking,
fencing, cleanup steps and purge status.

Every query here is bounded by the scope (an indexed id list) or by one id, never by the size
of a conversation: acceptance of a conversation purge does not read its events.

Resolving a scope and its dependency report are in ``purge_scope``; every name is importable
from here.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    bindparam,
    exists,
    func,
    insert,
    not_,
    select,
    text,
    update,
)

from purgekeeper.schema import lifecycle
from purgekeeper.schema.content_queries import upsert_insert
from purgekeeper.schema.driver import DriverStatement
from purgekeeper.schema.idlists import among, array_literal
from purgekeeper.schema.ledger import database_now
from purgekeeper.schema.purge_scope import (
    _CONVERSATIONS_OF,
    CONVERSATION_IDS,
    EVENT_IDS,
    AdmissionRow,
    AttachmentRow,
    DerivativeRow,
    Placement,
    PreviewRows,
    ReferenceRow,
    ReportRows,
    RunRow,
    _ids,
    active_run_ids,
    active_runs,
    admissions_of,
    attachments_of,
    derivatives_of,
    event_rows,
    events_in_conversation,
    other_live_references,
    placements_of,
    preview_rows,
    report_rows,
)
from purgekeeper.schema.states import StepKind, StepStatus, TombstoneKind
from purgekeeper.schema.steps import PARKED_UNTIL
from purgekeeper.schema.tables import (
    bots,
    cleanup_steps,
    conversations,
    placements,
    purge_audit,
    purge_conversations,
    purge_ledger,
    purge_previews,
    step_attempts,
    tombstones,
)

DEFAULT_MAX_ATTEMPTS = 5


def ids_list(values: Iterable[str]) -> list[str]:
    return sorted(set(values))


# -- locks -----------------------------------------------------------------------------------


_LOCK_CONVERSATIONS = (
    select(conversations.c.id)
    .where(among(conversations.c.id, CONVERSATION_IDS))
    .order_by(conversations.c.id)
    .with_for_update()
)
_LOCK_CONVERSATIONS_OF_EVENTS = (
    select(conversations.c.id)
    .where(conversations.c.id.in_(select(placements.c.conversation_id).where(among(placements.c.event_id, EVENT_IDS))))
    .order_by(conversations.c.id)
    .with_for_update()
)


def lock_conversations(conn: Connection, conversation_ids: Iterable[str]) -> None:
    """Exclusive locks in id order, taken before the events' (the ledger head comes last).
    Writers take FOR NO KEY UPDATE on the same rows, so a writer that began before this
    acceptance waits for it and then sees the fences. (SQLite: BEGIN IMMEDIATE already.)"""
    ids = ids_list(conversation_ids)
    if ids:
        conn.execute(_LOCK_CONVERSATIONS, {"conversation_ids": ids})


_LOCK_CONVERSATIONS_OF_EVENTS_ON_DRIVER = DriverStatement(_LOCK_CONVERSATIONS_OF_EVENTS)


def lock_conversations_of(conn: Connection, event_ids: Sequence[str]) -> None:
    """Lock the conversations the events are placed in, the same way, in one statement."""
    _LOCK_CONVERSATIONS_OF_EVENTS_ON_DRIVER.rows(conn, {"event_ids": _ids(event_ids)})


def conversations_of(conn: Connection, event_ids: Sequence[str]) -> list[str]:
    return list(conn.scalars(_CONVERSATIONS_OF, {"event_ids": _ids(event_ids)}))


def lock_conversation(conn: Connection, conversation_id: str) -> Row[Any] | None:
    query = select(conversations).where(conversations.c.id == conversation_id).with_for_update()
    return conn.execute(query).first()


def lock_bot(conn: Connection, bot_id: str) -> Row[Any] | None:
    return conn.execute(select(bots).where(bots.c.id == bot_id).with_for_update()).first()


# -- fences and tombstones ----------------------------------------------------------------


def tombstone_of(conn: Connection, kind: TombstoneKind, the_id: str) -> Any:
    """The tombstone with the seq of the purge that wrote it."""
    query = (
        select(tombstones.c.purge_id, purge_ledger.c.seq)
        .join(purge_ledger, purge_ledger.c.purge_id == tombstones.c.purge_id, isouter=True)
        .where(tombstones.c.kind == kind.value, tombstones.c.id == the_id)
    )
    return conn.execute(query).first()


def latest_covering_purge(conn: Connection, event_ids: Sequence[str]) -> Any:
    """The newest purge whose fence covers one of these events."""
    query = (
        select(tombstones.c.purge_id, purge_ledger.c.seq)
        .join(purge_ledger, purge_ledger.c.purge_id == tombstones.c.purge_id, isouter=True)
        .where(tombstones.c.kind == TombstoneKind.EVENT.value, tombstones.c.id.in_(list(event_ids)))
        .order_by(func.coalesce(purge_ledger.c.seq, 0).desc())
        .limit(1)
    )
    return conn.execute(query).first()


_STEP_COLUMNS = ("id", "purge_id", "kind", "max_attempts")
_INSERT_STEP = DriverStatement(
    insert(cleanup_steps).values({name: bindparam(name, type_=cleanup_steps.c[name].type) for name in _STEP_COLUMNS})
)
_INSERT_PARKED_STEP = DriverStatement(
    insert(cleanup_steps).values(
        {name: bindparam(name, type_=cleanup_steps.c[name].type) for name in (*_STEP_COLUMNS, "next_attempt_at")}
    )
)


# ONE statement whatever the kinds and the number of ids: the ids and their kinds are two
# parameters (array literals; on SQLite one JSON array of pairs), unnested by the server.
_INSERT_TOMBSTONES = {
    "postgresql": DriverStatement(
        text(
            "INSERT INTO tombstones (kind, id, purge_id) SELECT t.kind, t.id, :purge_id "
            "FROM unnest(CAST(:kinds AS TEXT[]), CAST(:ids AS TEXT[])) WITH ORDINALITY AS t(kind, id, n) "
            "ORDER BY t.n ON CONFLICT (kind, id) DO NOTHING"
        )
    ),
    "sqlite": DriverStatement(
        text(
            "INSERT INTO tombstones (kind, id, purge_id) "
            "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), :purge_id "
            "FROM json_each(:pairs) WHERE true ON CONFLICT (kind, id) DO NOTHING"
        )
    ),
}


def insert_tombstones(conn: Connection, purge_id: str, by_kind: Mapping[TombstoneKind, Iterable[str]]) -> None:
    """Tombstone the ids, in one statement; an id that already has its tombstone keeps it."""
    pairs = [(kind.value, str(the_id)) for kind, ids in by_kind.items() for the_id in ids]
    if not pairs:
        return
    if conn.dialect.name == "postgresql":
        kinds, ids = zip(*pairs, strict=True)
        params = {"kinds": array_literal(kinds), "ids": array_literal(ids), "purge_id": purge_id}
    else:
        params = {"pairs": json.dumps(pairs), "purge_id": purge_id}
    _INSERT_TOMBSTONES[conn.dialect.name].execute(conn, params)


_BUMP_VERSIONS = (
    update(conversations)
    .where(among(conversations.c.id, CONVERSATION_IDS), conversations.c.state == "active")
    .values(version=conversations.c.version + 1)
)


_BUMP_VERSIONS_ON_DRIVER = DriverStatement(_BUMP_VERSIONS)


def bump_versions(conn: Connection, conversation_ids: Iterable[str]) -> None:
    ids = ids_list(conversation_ids)
    if ids:
        _BUMP_VERSIONS_ON_DRIVER.execute(conn, {"conversation_ids": ids})


def mark_memory_erasure(conn: Connection, bot_id: str) -> None:
    """Record that the bot's Memory is to be erased (before its tombstone: a deleted bot's row
    no longer changes). Marking it again changes nothing."""
    conn.execute(update(bots).where(bots.c.id == bot_id, bots.c.erase_memory.is_not(True)).values(erase_memory=True))


def kept_repositories(conn: Connection, *, except_bot: str) -> list[str]:
    """Memory repositories of every other bot whose Memory is kept (deleted bots included)."""
    query = select(bots.c.memory_path).where(
        bots.c.memory_path.is_not(None), bots.c.id != except_bot, not_(bots.c.erase_memory)
    )
    return list(conn.scalars(query))


def erased_repositories(conn: Connection) -> list[str]:
    """Memory repositories whose erasure was chosen."""
    return list(conn.scalars(select(bots.c.memory_path).where(bots.c.memory_path.is_not(None), bots.c.erase_memory)))


# -- cleanup steps --------------------------------------------------------------------------


def create_steps(
    conn: Connection,
    purge_id: str,
    kinds: Sequence[StepKind],
    *,
    parked: Sequence[StepKind] = (),
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> list[str]:
    """Pending cleanup steps; a ``parked`` one waits until another step unparks it."""
    rows: list[dict[str, Any]] = [
        {"id": uuid.uuid4().hex, "purge_id": purge_id, "kind": kind.value, "max_attempts": max_attempts}
        for kind in kinds
    ]
    for kind, row in zip(kinds, rows, strict=True):  # at most three
        if kind in parked:
            _INSERT_PARKED_STEP.execute(conn, {**row, "next_attempt_at": PARKED_UNTIL})
        else:
            _INSERT_STEP.execute(conn, row)
    return [str(row["id"]) for row in rows]


def steps_of(conn: Connection, purge_ids: Sequence[str]) -> list[Row[Any]]:
    query = (
        select(cleanup_steps)
        .where(cleanup_steps.c.purge_id.in_(list(purge_ids)))
        .order_by(cleanup_steps.c.purge_id, cleanup_steps.c.kind)
    )
    return list(conn.execute(query).all())


@dataclass(frozen=True)
class LedgerFilter:
    """Which ledger rows ``list_ledger`` returns: of one derived status, with a step in one
    ``step_status`` (``retrying``: waiting for its next attempt after a failed one), of one
    kind, naming one conversation (``purge_conversations``), accepted in ``[since, until)``,
    none of ``hidden_kinds``."""

    status: str | None = None
    step_status: str | None = None
    kind: str | None = None
    conversation_id: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    hidden_kinds: tuple[str, ...] = ()  # never these kinds (a caller who may not see them)


def list_ledger(conn: Connection, *, where: LedgerFilter, limit: int, before_seq: int | None) -> list[Row[Any]]:
    """Ledger rows newest first, before a seq cursor, as ``where`` says (by the primary key
    backwards, or the (kind, seq) index, or the conversation's rows)."""
    row = purge_ledger.c
    query = select(purge_ledger).order_by(row.seq.desc()).limit(limit)
    if where.status is not None:
        query = query.where(lifecycle.status_clause(where.status, row.purge_id))
    if where.step_status is not None:
        step = cleanup_steps.c
        query = query.where(exists().where(step.purge_id == row.purge_id, step.status == where.step_status))
    if where.kind is not None:
        query = query.where(row.kind == where.kind)
    if where.hidden_kinds:
        query = query.where(row.kind.not_in(where.hidden_kinds))
    if where.conversation_id is not None:
        named = select(purge_conversations.c.purge_id).where(
            purge_conversations.c.conversation_id == where.conversation_id
        )
        query = query.where(row.purge_id.in_(named))
    if where.since is not None:
        query = query.where(row.accepted_at >= where.since)
    if where.until is not None:
        query = query.where(row.accepted_at < where.until)
    if before_seq is not None:
        query = query.where(row.seq < before_seq)
    return list(conn.execute(query).all())


def record_conversations(conn: Connection, purge_id: str, conversation_ids: Iterable[str]) -> None:
    """The conversations the purge concerns, for listing by conversation (idempotent)."""
    rows = [{"conversation_id": c, "purge_id": purge_id} for c in sorted(set(conversation_ids))]
    if rows:
        statement = upsert_insert(conn, purge_conversations).on_conflict_do_nothing(
            index_elements=["conversation_id", "purge_id"]
        )
        conn.execute(statement, rows)


def audit_of(conn: Connection, purge_id: str) -> list[Row[Any]]:
    """Who re-armed the purge and why, oldest first."""
    query = select(purge_audit).where(purge_audit.c.purge_id == purge_id).order_by(purge_audit.c.created_at)
    return list(conn.execute(query).all())


def attempts_of(conn: Connection, purge_id: str) -> list[Row[Any]]:
    """Every attempt of the purge's steps, oldest first."""
    a = step_attempts.c
    return list(conn.execute(select(step_attempts).where(a.purge_id == purge_id).order_by(a.started_at, a.id)).all())


def live_leases(conn: Connection, *, limit: int) -> list[Any]:
    """The steps held under a lease that has not run out, by owner: what each worker does now."""
    c = cleanup_steps.c
    now = database_now(conn)
    query = (
        select(c.lease_owner, c.id, c.purge_id, c.kind, c.attempts, c.lease_expires_at)
        .where(c.status == StepStatus.RUNNING.value, c.lease_expires_at > now)
        .order_by(c.lease_owner, c.lease_expires_at)
        .limit(limit)
    )
    return list(conn.execute(query).all())


def record_audit(
    conn: Connection, purge_id: str, *, action: str, actor: str, reason: str, step_ids: Sequence[str]
) -> None:
    conn.execute(
        insert(purge_audit).values(
            id=uuid.uuid4().hex,
            purge_id=purge_id,
            action=action,
            actor=actor,
            reason=reason,
            step_ids=json.dumps(list(step_ids)),
        )
    )


# -- previews ---------------------------------------------------------------------------------


def save_preview(conn: Connection, scope_digest: str, report: dict[str, Any], *, keep_for: dt.timedelta) -> None:
    """Remember what a preview showed (ids only), and forget previews older than ``keep_for``."""
    now = dt.datetime.now(dt.UTC)
    conn.execute(purge_previews.delete().where(purge_previews.c.created_at < now - keep_for))
    statement = upsert_insert(conn, purge_previews).values(
        scope_digest=scope_digest, report=json.dumps(report), created_at=now
    )
    conn.execute(statement.on_conflict_do_nothing(index_elements=["scope_digest"]))


def saved_preview(conn: Connection, scope_digest: str) -> dict[str, Any] | None:
    text = conn.scalar(select(purge_previews.c.report).where(purge_previews.c.scope_digest == scope_digest))
    return json.loads(text) if text else None


__all__ = [
    "CONVERSATION_IDS",
    "DEFAULT_MAX_ATTEMPTS",
    "EVENT_IDS",
    "AdmissionRow",
    "AttachmentRow",
    "DerivativeRow",
    "LedgerFilter",
    "Placement",
    "PreviewRows",
    "ReferenceRow",
    "ReportRows",
    "RunRow",
    "active_run_ids",
    "active_runs",
    "admissions_of",
    "attachments_of",
    "attempts_of",
    "audit_of",
    "bump_versions",
    "conversations_of",
    "create_steps",
    "derivatives_of",
    "erased_repositories",
    "event_rows",
    "events_in_conversation",
    "ids_list",
    "insert_tombstones",
    "kept_repositories",
    "latest_covering_purge",
    "list_ledger",
    "live_leases",
    "lock_bot",
    "lock_conversation",
    "lock_conversations",
    "lock_conversations_of",
    "mark_memory_erasure",
    "other_live_references",
    "placements_of",
    "preview_rows",
    "record_audit",
    "record_conversations",
    "report_rows",
    "save_preview",
    "saved_preview",
    "steps_of",
    "tombstone_of",
]
