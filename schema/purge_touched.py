"""What a purge touched, in ids and counts, and finding purges by id, hold, policy or actor:
the queries behind the console's page of one purge and its search box.

Each read is bounded: counts stop at a cap (``count_upto``), lists at a limit, and every one is
driven from the purge's own event tombstones (``ix_tombstones_event_purge_id``), a primary
key, or an index range (the ledger by actor, ``ix_purge_ledger_actor_seq``; a policy's rows
through the ledger's kinds, only once its primary key says it exists). None reads a body, a
payload or an attachment's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, String, bindparam, func, literal_column, or_, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from purgekeeper.schema.states import PurgeKind
from purgekeeper.schema.tables import (
    IS_EVENT_TOMBSTONE,
    attachments,
    blobs,
    legal_holds,
    placements,
    purge_audit,
    purge_ledger,
    retention_policies,
    tombstones,
)

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


# -- finding purges by a hold, a policy or an actor -------------------------------------------


def hold_rows(conn: Connection, hold_id: str) -> list[str]:
    """The rows that placed and released the legal hold ``hold_id``, newest first (its row in
    ``legal_holds``: a hold's id is never reused)."""
    row = conn.execute(
        select(legal_holds.c.purge_id, legal_holds.c.released_by).where(legal_holds.c.hold_id == hold_id)
    ).first()
    return [] if row is None else [purge_id for purge_id in (row.released_by, row.purge_id) if purge_id]


class _selector_text(FunctionElement[str]):
    """A top-level field of a ledger row's selectors (canonical JSON text), as text."""

    type = String()
    inherit_cache = True
    name = "pk_selector_text"


@compiles(_selector_text, "postgresql")
def _selector_text_postgresql(element: _selector_text, compiler: SQLCompiler, **kw: Any) -> str:
    selectors, field = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"(CAST({selectors} AS jsonb) ->> {field})"


@compiles(_selector_text, "sqlite")
def _selector_text_sqlite(element: _selector_text, compiler: SQLCompiler, **kw: Any) -> str:
    selectors, field = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"json_extract({selectors}, '$.' || {field})"


_POLICY_KINDS = (PurgeKind.RETENTION.value, PurgeKind.RETENTION_END.value, PurgeKind.RETENTION_RUN.value)
_POLICY_ROWS = (
    select(purge_ledger.c.purge_id)
    .where(
        purge_ledger.c.kind.in_(_POLICY_KINDS),
        _selector_text(purge_ledger.c.selectors, literal_column("'policy_id'")) == bindparam("policy_id"),
    )
    .order_by(purge_ledger.c.seq.desc())
    .limit(bindparam("limit"))
)


def policy_rows(conn: Connection, policy_id: str, *, limit: int) -> list[str]:
    """The rows that set, removed and ran the retention policy ``policy_id``, newest first, at
    most ``limit``: none unless the policy exists (a policy is never deleted), so an id that
    names no policy costs one primary-key probe, not a walk of the policies' rows."""
    known = select(retention_policies.c.policy_id).where(retention_policies.c.policy_id == policy_id)
    if conn.execute(known).first() is None:
        return []
    return list(conn.scalars(_POLICY_ROWS, {"policy_id": policy_id, "limit": limit}))


def actor_rows(conn: Connection, actor: str, *, limit: int) -> list[str]:
    """The purges ``actor`` accepted (the ledger row's actor) or retried (an audit row),
    newest first, at most ``limit``."""
    retried = select(purge_audit.c.purge_id).where(purge_audit.c.actor == actor)
    query = (
        select(purge_ledger.c.purge_id)
        .where(or_(purge_ledger.c.actor == actor, purge_ledger.c.purge_id.in_(retried)))
        .order_by(purge_ledger.c.seq.desc())
        .limit(limit)
    )
    return list(conn.scalars(query))
