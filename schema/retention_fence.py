"""A retention run's fence, and the cleanup that carries the run out.

A run's fence (``retention_fences`` and its ``retention_exemptions``) is written at its
acceptance, in O(1) of what it expires, and read by every reader and trigger
(``purgekeeper.schema.expiry``); the run's bodies step deletes the placements it expires in batches
(``expire_batch``), fences the events that are then live nowhere, and finally deletes the
fence, which the triggers allow only once nothing it expires is left (``expiring_left``).
``purgekeeper.schema.retention_queries`` names all of it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Text,
    and_,
    bindparam,
    delete,
    exists,
    insert,
    literal_column,
    not_,
    select,
    tuple_,
    type_coerce,
)

from purgekeeper.schema import ledger
from purgekeeper.schema.content_queries import NOT_PURGED, live_event
from purgekeeper.schema.idlists import IDS, among
from purgekeeper.schema.locks import AdvisoryLock
from purgekeeper.schema.retention_expiring import (
    _AUTHOR_KIND,
    _CONVERSATION,
    _CONVERSATION_KIND,
    _CUTOFF,
    _JOINED,
    _PLACED_BEFORE,
    _PURGE,
    _SHAPES,
    _START,
    _window_params,
)
from purgekeeper.schema.states import Exemption
from purgekeeper.schema.tables import (
    UtcDateTime,
    conversations,
    events,
    placements,
    retention_exemptions,
    retention_fences,
)

# The fences' lock (two int4 keys: this, 0; 'pkrt'): a run's fence is written under it
# exclusively, and every batch of a run's cleanup holds it shared. A batch decides which
# events are live nowhere, then deletes placements, whose trigger checks liveness again in a
# later snapshot: a fence committed in between would make the two disagree.
FENCE_LOCK_CLASS = 1886089844
_FENCE_LOCK = AdvisoryLock(FENCE_LOCK_CLASS)


# -- a run's fence ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fence:
    """A run's fence as its ledger row records it."""

    purge_id: str
    policy_id: str
    conversation_id: str | None
    cutoff: dt.datetime
    window_start: dt.datetime | None
    placed_before: dt.datetime

    @classmethod
    def of(cls, purge_id: str, selectors: Mapping[str, Any]) -> Fence:
        """The fence a run's ledger row (its selectors, already checked) records."""
        start = selectors.get("window_start")
        return cls(
            purge_id=purge_id,
            policy_id=str(selectors["policy_id"]),
            conversation_id=selectors.get("conversation_id"),
            cutoff=ledger.from_utc_text(str(selectors["cutoff"])),
            window_start=ledger.from_utc_text(str(start)) if start else None,
            placed_before=ledger.from_utc_text(str(selectors["placed_before"])),
        )

    @property
    def shape(self) -> tuple[bool, bool]:
        """(global, windowed): which of the statements built once serves this fence."""
        return self.conversation_id is None, self.window_start is not None

    def params(self) -> dict[str, Any]:
        window = _window_params(self.conversation_id, self.cutoff, self.window_start)
        return {"purge_id": self.purge_id, "placed_before": self.placed_before, **window}


def lock_fences(conn: Connection, *, exclusive: bool) -> None:
    """Hold the fences' lock until the transaction ends (PostgreSQL; SQLite serialises
    writers already)."""
    _FENCE_LOCK.take(conn, exclusive=exclusive)


def insert_fence(conn: Connection, fence: Fence, exemptions: Sequence[tuple[str, str, str]]) -> None:
    """Write the run's exemptions, then its fence, under the fences' lock; a fence already
    there (a merge of a run whose cleanup had not finished) is kept as it is."""
    lock_fences(conn, exclusive=True)
    if conn.scalar(select(exists().where(retention_fences.c.purge_id == fence.purge_id))):
        return
    if exemptions:
        rows = [{"purge_id": fence.purge_id, "kind": k, "subject_id": s, "reason": r} for k, s, r in exemptions]
        conn.execute(insert(retention_exemptions), rows)
    conn.execute(
        insert(retention_fences).values(
            purge_id=fence.purge_id,
            policy_id=fence.policy_id,
            conversation_id=fence.conversation_id,
            cutoff=fence.cutoff,
            window_start=fence.window_start,
            placed_before=fence.placed_before,
        )
    )


def drop_fence(conn: Connection, purge_id: str) -> None:
    """Delete the fence (the triggers refuse while it still expires anything), then its
    exemptions."""
    conn.execute(delete(retention_fences).where(retention_fences.c.purge_id == purge_id))
    conn.execute(delete(retention_exemptions).where(retention_exemptions.c.purge_id == purge_id))


def fence_exists(conn: Connection, purge_id: str) -> bool:
    return bool(conn.scalar(select(exists().where(retention_fences.c.purge_id == purge_id))))


def _exempt(name: str, kind: Any, subject: Any, *, reason: Exemption | None = None) -> Any:
    """The run ``:purge_id`` exempts ``subject`` of ``kind`` (for ``reason``, if given): one
    probe of the exemptions' primary key, under an alias of its own (``name``)."""
    x = retention_exemptions.alias(name)
    query = exists().where(x.c.purge_id == _PURGE, x.c.kind == kind, x.c.subject_id == subject)
    return query.where(x.c.reason == literal_column(f"'{reason.value}'")) if reason else query


_OWN_POLICY_EXEMPT = _exempt(
    "exempt_own_policy", _CONVERSATION_KIND, placements.c.conversation_id, reason=Exemption.OWN_POLICY
)
_EXPIRES = and_(
    not_(_exempt("exempt_conversation", _CONVERSATION_KIND, placements.c.conversation_id)),
    not_(_exempt("exempt_author", _AUTHOR_KIND, events.c.author)),
)


def _in_window(occurred_at: Any, *, windowed: bool) -> Any:
    return and_(occurred_at < _CUTOFF, occurred_at >= _START) if windowed else occurred_at < _CUTOFF


def _concerned(*, global_scope: bool, windowed: bool) -> Any:
    """The placements of the run's window it is concerned with: in its scope (a global run:
    not in a conversation with a policy of its own), in a conversation not purged; they
    expire, or a hold keeps them."""
    scope = not_(_OWN_POLICY_EXEMPT) if global_scope else placements.c.conversation_id == _CONVERSATION
    placed = placements.c.created_at < _PLACED_BEFORE
    return and_(_in_window(events.c.occurred_at, windowed=windowed), NOT_PURGED, placed, scope)


def _walk_statement(dialect: str, *, global_scope: bool, windowed: bool, after: bool) -> Any:
    """The next events of the window with a placement the run is concerned with: a global run
    walks the events by (occurred_at, id) through their time index (SQLite: the stored text,
    never re-rendered, so no row is skipped or read twice); a conversation's run walks its
    placements by event id."""
    if not global_scope:
        query = (
            select(placements.c.event_id.label("id"), placements.c.event_id.label("key"))
            .select_from(_JOINED)
            .where(_concerned(global_scope=False, windowed=windowed))
            .order_by(placements.c.event_id)
            .limit(bindparam("limit"))
        )
        return query.where(placements.c.event_id > bindparam("after_id")) if after else query
    key_type = Text() if dialect == "sqlite" else UtcDateTime()
    walked = events.alias("walked")
    concerned = (
        exists()
        .where(placements.c.event_id == walked.c.id)
        .where(conversations.c.id == placements.c.conversation_id, NOT_PURGED)
        .where(placements.c.created_at < _PLACED_BEFORE, not_(_OWN_POLICY_EXEMPT))
    )
    query = (
        select(walked.c.id, type_coerce(walked.c.occurred_at, key_type).label("key"))
        .where(_in_window(walked.c.occurred_at, windowed=windowed), concerned)
        .order_by(walked.c.occurred_at, walked.c.id)
        .limit(bindparam("limit"))
    )
    if after:
        keyset = tuple_(bindparam("after_at", type_=key_type), bindparam("after_id"))
        query = query.where(tuple_(walked.c.occurred_at, walked.c.id) > keyset)
    return query


_WALKS = {
    (dialect, g, w, after): _walk_statement(dialect, global_scope=g, windowed=w, after=after)
    for dialect in ("postgresql", "sqlite")
    for g, w in _SHAPES
    for after in (False, True)
}


def _placements_statement(*, global_scope: bool, windowed: bool) -> Any:
    """The batch's placements the run is concerned with, each with whether it expires."""
    return (
        select(placements.c.event_id, placements.c.conversation_id, _EXPIRES.label("expires"))
        .select_from(_JOINED)
        .where(among(placements.c.event_id, IDS), _concerned(global_scope=global_scope, windowed=windowed))
    )


_PLACEMENTS = {(g, w): _placements_statement(global_scope=g, windowed=w) for g, w in _SHAPES}
_LIVE = select(events.c.id).where(among(events.c.id, IDS), live_event(events.c.id))


def _delete_statement(*, global_scope: bool, windowed: bool) -> Any:
    expired = (
        select(placements.c.event_id, placements.c.conversation_id)
        .select_from(_JOINED)
        .where(among(placements.c.event_id, IDS), _concerned(global_scope=global_scope, windowed=windowed), _EXPIRES)
    )
    return delete(placements).where(tuple_(placements.c.event_id, placements.c.conversation_id).in_(expired))


_DELETES = {(g, w): _delete_statement(global_scope=g, windowed=w) for g, w in _SHAPES}


@dataclass(frozen=True)
class Batch:
    """One batch of a run's walk: the events some placement of which expired (``expired``),
    those of them now live nowhere, fenced and emptied (``fenced``), those still live in a
    conversation the run leaves alone (``kept_elsewhere``), those a hold kept in at least one
    of the run's conversations (``held``), and
    the keyset to pass next, or None once the walk is done."""

    expired: list[str]
    fenced: list[str]
    kept_elsewhere: list[str]
    held: list[str]
    after: tuple[Any, ...] | None


def expire_batch(conn: Connection, fence: Fence, *, after: tuple[Any, ...] | None, limit: int) -> Batch:
    """The next ``limit`` events of the run's window: the ones no longer live anywhere once
    their expiring placements go get their ``event`` tombstones (for this run) and lose
    their content, then the expiring placements are deleted. Idempotent."""
    from purgekeeper.schema import cleanup_queries  # its NULLs and tombstones; it imports content, not this

    lock_fences(conn, exclusive=False)
    shape = fence.shape
    params: dict[str, Any] = {**fence.params(), "limit": limit}
    if after is not None:
        params.update(after_at=after[0], after_id=after[1])
    walked = conn.execute(_WALKS[(conn.dialect.name, *shape, after is not None)], params).all()
    ids = [row.id for row in walked]
    rows = conn.execute(_PLACEMENTS[shape], {**fence.params(), "ids": ids}).all() if ids else []
    expired = sorted({row.event_id for row in rows if row.expires})
    held = sorted({row.event_id for row in rows if not row.expires})
    live = set(conn.scalars(_LIVE, {"ids": expired})) if expired else set()
    fenced = [event_id for event_id in expired if event_id not in live]
    cleanup_queries.tombstone_events(conn, fence.purge_id, fenced)
    cleanup_queries.null_content_of(conn, fenced)
    if expired:
        conn.execute(_DELETES[shape], {**fence.params(), "ids": expired})
    last = (walked[-1].key, walked[-1].id) if len(walked) >= limit else None
    return Batch(expired, fenced, sorted(live), held, last)


def _left_statement(*, global_scope: bool, windowed: bool) -> Any:
    concerned = _concerned(global_scope=global_scope, windowed=windowed)
    return select(exists().select_from(_JOINED).where(concerned, _EXPIRES))


_LEFT = {(g, w): _left_statement(global_scope=g, windowed=w) for g, w in _SHAPES}


def expiring_left(conn: Connection, fence: Fence) -> bool:
    """A placement the fence expires is still there (the triggers ask the same before the
    fence may go)."""
    return bool(conn.scalar(_LEFT[fence.shape], fence.params()))
