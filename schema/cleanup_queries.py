"""Queries of the cleanup steps: small, bounded batches, each in its own short transaction.

Every statement is idempotent: NULLing what is already NULL, deleting what is gone, and
marking a blob that is already marked, change nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BindParameter,
    Connection,
    Row,
    bindparam,
    case,
    delete,
    exists,
    func,
    literal,
    literal_column,
    not_,
    select,
    text,
    true,
    update,
)

from purgekeeper.schema.content_queries import BLOB_HAS_BYTES, NOT_PURGED, dialect_insert, event_erased, live_event
from purgekeeper.schema.expiry import placement_expired
from purgekeeper.schema.idlists import IDS, among
from purgekeeper.schema.states import BlobKind, BlobState, TombstoneKind
from purgekeeper.schema.tables import (
    IS_EVENT_TOMBSTONE,
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

_CONVERSATION: BindParameter[Any] = bindparam("conversation_id")


def _event_fence_absent(event_id: Any) -> Any:
    return ~exists().where(tombstones.c.kind == TombstoneKind.EVENT.value, tombstones.c.id == event_id)


# The keys sealing these events' content (every event written since 0019 has one, whatever
# is left of its content: a body already NULL may leave named attachments).
_KEYS_OF = select(events.c.key_id).where(among(events.c.id, IDS), events.c.key_id.is_not(None))
SHRED = "purgekeeper.shred"  # in Connection.info, while a cleanup batch runs: the keys it must destroy
_NULL_BODIES = update(events).where(among(events.c.id, IDS), events.c.body.is_not(None)).values(body=None)


# Which dependents these events have, one EXISTS each; only the UPDATEs that have rows to
# change run (a batch of chat messages usually has attachments and nothing else). ``among``
# joins the id list as a table: with ``event_id = ANY(:ids)`` as the filter, PostgreSQL chose
# to scan a small table and compare each row with the whole list (264 ms for 2,000 ids against
# 2,000 attachments, the bodies step's costliest statement at 10,000 events a conversation).
_DEPENDENTS = select(
    exists().where(among(admissions.c.event_id, IDS)).label("admitted"),
    exists().where(among(derivative_sources.c.event_id, IDS)).label("derived"),
    exists().where(among(attachments.c.event_id, IDS), attachments.c.name.is_not(None)).label("attached"),
)
# the keys of the dependents' own content, by the same probes: their admissions' payloads,
# the outputs of the runs that admitted them, the payloads derived from them
_ADMITTED_KEYS = (
    select(admissions.c.key_id).where(among(admissions.c.event_id, IDS), admissions.c.key_id.is_not(None)),
    select(runs.c.key_id).where(
        runs.c.id.in_(select(admissions.c.run_id).where(among(admissions.c.event_id, IDS))), runs.c.key_id.is_not(None)
    ),
)
_DERIVED_KEYS = (
    select(derivatives.c.key_id).where(
        derivatives.c.id.in_(
            select(derivative_sources.c.derivative_id).where(among(derivative_sources.c.event_id, IDS))
        ),
        derivatives.c.key_id.is_not(None),
    ),
)
_NULL_ADMITTED = (
    update(admissions).where(among(admissions.c.event_id, IDS), admissions.c.payload.is_not(None)).values(payload=None),
    update(runs)
    .where(
        runs.c.id.in_(select(admissions.c.run_id).where(among(admissions.c.event_id, IDS))),
        runs.c.output.is_not(None),
    )
    .values(output=None),
)
_NULL_DERIVED = (
    update(derivatives)
    .where(
        derivatives.c.id.in_(
            select(derivative_sources.c.derivative_id).where(among(derivative_sources.c.event_id, IDS))
        ),
        derivatives.c.payload.is_not(None),
    )
    .values(payload=None),
)
# an attachment's name is content; the attachments step deletes its bytes
_NULL_ATTACHED = (
    update(attachments).where(among(attachments.c.event_id, IDS), attachments.c.name.is_not(None)).values(name=None),
)


def null_content_of(conn: Connection, event_ids: Sequence[str]) -> int:
    """NULL the bodies of these events, the names of their attachments, the payloads of
    their admissions, the outputs of the runs that admitted them, and the payloads of what
    was derived from them. One EXISTS probe per kind of dependent says which of their
    UPDATEs run.

    Their keys are added to the batch's list of keys to destroy (``conn.info[SHRED]``,
    which ``purgekeeper.workers.cleanup.run_batch`` sets and destroys before the batch
    commits): content is NULLed only in a batch that shreds it, so this refuses to run in
    any other transaction."""
    shred = _shred(conn)
    if not event_ids:
        return 0
    params = {"ids": event_ids}
    shred.extend(conn.scalars(_KEYS_OF, params))
    changed = int(conn.execute(_NULL_BODIES, params).rowcount or 0)
    found = conn.execute(_DEPENDENTS, params).one()
    keys_of = (_ADMITTED_KEYS, _DERIVED_KEYS, ())  # an attachment's name is sealed under its event's key
    for present, statements, keys in zip(found, (_NULL_ADMITTED, _NULL_DERIVED, _NULL_ATTACHED), keys_of, strict=True):
        if present:
            shred.extend(key_id for query in keys for key_id in conn.scalars(query, params))
            changed += sum(int(conn.execute(statement, params).rowcount or 0) for statement in statements)
    return changed


def _shred(conn: Connection) -> list[str]:
    """The batch's list of keys to destroy (``SHRED``); content is removed only in a cleanup
    batch, which destroys them before it commits."""
    shred = conn.info.get(SHRED)
    if shred is None:
        raise RuntimeError("content is removed only in a cleanup batch, which destroys its keys first")
    return shred


# Ordered as ix_placements_conversation_id is (conversation, event), which so serves the
# order and the LIMIT: ordered by event id alone, PostgreSQL may walk the primary key in
# event order instead, filtering by conversation, and a conversation's last batch (fewer
# rows than the limit) then read the whole index, dead entries and all (the soak's most
# active cleanup statement).
_PLACED = (
    select(placements.c.event_id)
    .where(placements.c.conversation_id == _CONVERSATION)
    .order_by(placements.c.conversation_id, placements.c.event_id)
    .limit(bindparam("limit"))
)
# The batch's events placed in another conversation too: an index search by the batch's ids
# (most events of a conversation are placed nowhere else, and then nothing more is asked).
_PLACED_ELSEWHERE = (
    select(placements.c.event_id)
    .distinct()
    .where(among(placements.c.event_id, IDS), placements.c.conversation_id != _CONVERSATION)
)
# Two statements, not one with a correlated EXISTS: PostgreSQL hashes such a subplan over the
# whole placements table, a cost that grows with the database instead of with the batch. Asked
# only of the events _PLACED_ELSEWHERE found: over a whole batch of ids, PostgreSQL misjudged
# how few of them are placed elsewhere and joined them to sequential scans of events (the soak,
# bench/soak.py, found that statement the cleanup's most active one).
_LIVE_ELSEWHERE = (
    select(placements.c.event_id)
    .join(conversations, conversations.c.id == placements.c.conversation_id)
    .join(events, events.c.id == placements.c.event_id)
    .where(among(placements.c.event_id, IDS), placements.c.conversation_id != _CONVERSATION, NOT_PURGED)
    .where(_event_fence_absent(placements.c.event_id))
    .where(not_(event_erased(placements.c.event_id)))  # an author erasure fences it too
    .where(
        not_(
            placement_expired(
                events.c.author, events.c.occurred_at, placements.c.conversation_id, placements.c.created_at
            )
        )
    )
)


def placed_events(conn: Connection, conversation_id: str, *, limit: int) -> list[str]:
    return list(conn.scalars(_PLACED, {"conversation_id": conversation_id, "limit": limit}))


def live_elsewhere(conn: Connection, event_ids: Sequence[str], conversation_id: str) -> set[str]:
    """The events that, now, are unfenced and placed in a conversation that is not purged and
    that no retention run expires them from."""
    params = {"conversation_id": conversation_id, "ids": event_ids}
    elsewhere = list(conn.scalars(_PLACED_ELSEWHERE, params))
    if not elsewhere:
        return set()
    return set(conn.scalars(_LIVE_ELSEWHERE, {**params, "ids": elsewhere}))


def _listed_ids(dialect: str) -> Any:
    """The bound id list as a table with one column, ``value``."""
    if dialect == "postgresql":
        return func.unnest(IDS).table_valued("value").render_derived()
    return func.json_each(IDS).table_valued("value")


@functools.cache
def _tombstone_events_statement(dialect: str) -> Any:
    purge_id: BindParameter[Any] = bindparam("purge_id")
    listed = _listed_ids(dialect)
    # No lookup: the ids are known. The WHERE is for SQLite, whose parser would otherwise read
    # the upsert's ON CONFLICT as a join constraint of the SELECT.
    fenced = select(literal(TombstoneKind.EVENT.value), listed.c.value, purge_id).where(true())
    return (
        dialect_insert(dialect)(tombstones)
        .from_select(["kind", "id", "purge_id"], fenced)
        .on_conflict_do_nothing(index_elements=["kind", "id"])
    )


def tombstone_events(conn: Connection, purge_id: str, event_ids: Sequence[str]) -> None:
    """Fence these events, in one INSERT ... SELECT; an id that already has its tombstone
    keeps it. Their provider event ids need no tombstone of their own: an event row is never
    deleted, so its ``provider_event_id`` stays taken, and a provider event id is fenced when
    the event that carries it is (the ingest's duplicate check, and the events trigger since
    migration 0005). A content purge, whose ledger row lists the provider event ids, still
    writes theirs at acceptance."""
    if event_ids:
        conn.execute(_tombstone_events_statement(conn.dialect.name), {"purge_id": purge_id, "ids": event_ids})


_REMOVE_PLACEMENTS = delete(placements).where(
    placements.c.conversation_id == _CONVERSATION, among(placements.c.event_id, IDS)
)


def remove_placements(conn: Connection, conversation_id: str, event_ids: Sequence[str]) -> int:
    result = conn.execute(_REMOVE_PLACEMENTS, {"conversation_id": conversation_id, "ids": event_ids})
    return int(result.rowcount or 0)


# Other sessions of this database running a statement now (PostgreSQL): the foreground a
# cleanup batch competes with for the CPU and the disk. SQLite has one writer at a time.
_OTHERS_ACTIVE = text(
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND state = 'active' AND backend_type = 'client backend'"
)


def others_active(conn: Connection) -> int:
    """How many other client sessions of this database are running a statement (0 on SQLite)."""
    if conn.dialect.name != "postgresql":
        return 0
    return int(conn.scalar(_OTHERS_ACTIVE) or 0)


_LIMIT: BindParameter[Any] = bindparam("limit")
_RUNS_OF = select(runs.c.id).where(runs.c.conversation_id == _CONVERSATION).limit(_LIMIT)
_RUN_KEYS = (
    select(runs.c.key_id)
    .where(among(runs.c.id, IDS), runs.c.key_id.is_not(None))
    .union_all(select(admissions.c.key_id).where(among(admissions.c.run_id, IDS), admissions.c.key_id.is_not(None)))
)
_DERIVATIVE_KEYS = select(derivatives.c.key_id).where(among(derivatives.c.id, IDS), derivatives.c.key_id.is_not(None))
_DELETE_ADMISSIONS = delete(admissions).where(among(admissions.c.run_id, IDS))
_DELETE_RUNS = delete(runs).where(among(runs.c.id, IDS))
_DERIVATIVES_OF = select(derivatives.c.id).where(derivatives.c.conversation_id == _CONVERSATION).limit(_LIMIT)
_DELETE_SOURCES = delete(derivative_sources).where(among(derivative_sources.c.derivative_id, IDS))
_DELETE_DERIVATIVES = delete(derivatives).where(among(derivatives.c.id, IDS))


def delete_runs_batch(conn: Connection, conversation_id: str, *, limit: int) -> int:
    """Delete a batch of the conversation's runs with their admissions (their keys added to the
    batch's to destroy); returns runs deleted."""
    ids = list(conn.scalars(_RUNS_OF, {"conversation_id": conversation_id, "limit": limit}))
    if ids:
        _shred(conn).extend(conn.scalars(_RUN_KEYS, {"ids": ids}))
        conn.execute(_DELETE_ADMISSIONS, {"ids": ids})
        conn.execute(_DELETE_RUNS, {"ids": ids})
    return len(ids)


def delete_derivatives_batch(conn: Connection, conversation_id: str, *, limit: int) -> int:
    ids = list(conn.scalars(_DERIVATIVES_OF, {"conversation_id": conversation_id, "limit": limit}))
    if ids:
        _shred(conn).extend(conn.scalars(_DERIVATIVE_KEYS, {"ids": ids}))
        conn.execute(_DELETE_SOURCES, {"ids": ids})
        conn.execute(_DELETE_DERIVATIVES, {"ids": ids})
    return len(ids)


# -- attachments ------------------------------------------------------------------------------


# A purge's fenced events, a window at a time, in id order: an index range read of
# ix_tombstones_event_purge_id (purge_id, id), so a window costs what it holds, whatever the
# purge's size (0016).
_FENCED_EVENTS_AFTER = (
    select(tombstones.c.id)
    .where(tombstones.c.purge_id == bindparam("purge_id"), IS_EVENT_TOMBSTONE, tombstones.c.id > bindparam("after"))
    .order_by(tombstones.c.id)
    .limit(bindparam("limit"))
)


def fenced_events_after(conn: Connection, purge_id: str, *, after: str, limit: int) -> list[str]:
    """The next ``limit`` events this purge fenced, after event ``after`` in id order."""
    return list(conn.scalars(_FENCED_EVENTS_AFTER, {"purge_id": purge_id, "after": after, "limit": limit}))


# The next blobs bound to the listed events that still have bytes (present, or deleting: an
# earlier attempt's), after ``:after`` in id order: found from the events' attachments (by
# event id), each blob once however many of the events bind it. Not locked: a batch locks all
# of its blobs in one statement, in id order (``lock_blobs``).
_BLOBS_OF_EVENTS = (
    select(attachments.c.blob_id)
    .distinct()
    .join(blobs, blobs.c.id == attachments.c.blob_id)
    .where(among(attachments.c.event_id, IDS), attachments.c.blob_id > bindparam("after"), BLOB_HAS_BYTES)
    .order_by(attachments.c.blob_id)
    .limit(bindparam("limit"))
)


def blobs_of_events(conn: Connection, event_ids: Sequence[str], *, after: str, limit: int) -> list[str]:
    """The next ``limit`` blobs of these events that still have bytes, after blob ``after``."""
    return list(conn.scalars(_BLOBS_OF_EVENTS, {"ids": event_ids, "after": after, "limit": limit}))


# A batch's blobs, locked in id order (so two steps that share blobs take them in the same
# order), those that still have bytes: a blob deleted meanwhile drops out here.
_LOCK_BLOBS = (
    select(blobs.c.id, blobs.c.kind, blobs.c.path, blobs.c.state, blobs.c.key_id)
    .where(among(blobs.c.id, IDS), BLOB_HAS_BYTES)
    .order_by(blobs.c.id)
    .with_for_update()
)


def lock_blobs(conn: Connection, blob_ids: Sequence[str]) -> list[Row[Any]]:
    """These blobs, those that still have bytes, locked in id order (one statement)."""
    return list(conn.execute(_LOCK_BLOBS, {"ids": blob_ids}))


def _live_referenced_statement(dialect: str) -> Any:
    """For each listed blob, one live binding of either kind, or NULL: a scalar subquery with
    LIMIT 1 per blob. The LIMIT keeps PostgreSQL from pulling the subquery up into a join, so
    the fence and placement checks stay index probes per binding (pulled up, NOT EXISTS became
    an anti-join that read every event tombstone), and a blob bound by 100,000 live events
    costs one probe, not 100,000."""
    listed = _listed_ids(dialect)
    via = (
        select(attachments.c.event_id)
        .where(attachments.c.blob_id == listed.c.value, live_event(attachments.c.event_id))
        .limit(literal_column("1"))  # in the SQL text: a generic plan sees it too
        .scalar_subquery()
    )
    return select(listed.c.value, via.label("via"))


_LIVE_REFERENCED = {dialect: _live_referenced_statement(dialect) for dialect in ("postgresql", "sqlite")}


def live_referenced(conn: Connection, blob_ids: Sequence[str]) -> set[str]:
    """The blobs among these that a live event references, through either binding kind: one
    set-based query for the batch, stopping at each blob's first live reference."""
    result = conn.execute(_LIVE_REFERENCED[conn.dialect.name], {"ids": list(blob_ids)})
    return {row.value for row in result if row.via is not None}


def canonical_path(kind: Any, sha256: Any, blob_id: Any, path: Any) -> Any:
    """A deleted blob's path as SQL: its own, if it is the two-level one of the layout that
    0006 to 0020 wrote (canonical still, 0021); otherwise the one-level canonical path of new
    blobs (the path it has already, or, for a row of the layout before 0005, the one that
    drops the attachment's name)."""
    one_level = case(
        (kind == BlobKind.CAS.value, func.substr(sha256, 1, 2) + "/" + sha256 + "-" + blob_id),
        else_=func.substr(blob_id, 1, 2) + "/" + blob_id,
    )
    two_levels = case(
        (
            kind == BlobKind.CAS.value,
            func.substr(sha256, 1, 2) + "/" + func.substr(sha256, 3, 2) + "/" + sha256 + "-" + blob_id,
        ),
        else_=func.substr(blob_id, 1, 2) + "/" + func.substr(blob_id, 3, 2) + "/" + blob_id,
    )
    return case((path == two_levels, path), else_=one_level)


_MARK_DELETING = (
    update(blobs)
    .where(among(blobs.c.id, IDS), blobs.c.state == BlobState.PRESENT.value)
    .values(state=BlobState.DELETING.value)
)
# Deleted, a blob takes its canonical path: a row written by an earlier layout held the
# attachment's name in its path (an unchanged value keeps the update HOT).
_MARK_DELETED = (
    update(blobs)
    .where(among(blobs.c.id, IDS), blobs.c.state == BlobState.DELETING.value)
    .values(state=BlobState.DELETED.value, path=canonical_path(blobs.c.kind, blobs.c.sha256, blobs.c.id, blobs.c.path))
)


def mark_deleting(conn: Connection, blob_ids: Sequence[str]) -> int:
    """present → deleting, before any unlink."""
    return int(conn.execute(_MARK_DELETING, {"ids": blob_ids}).rowcount or 0) if blob_ids else 0


def mark_deleted(conn: Connection, blob_ids: Sequence[str]) -> int:
    """deleting → deleted, once the files are gone."""
    return int(conn.execute(_MARK_DELETED, {"ids": blob_ids}).rowcount or 0) if blob_ids else 0
