"""Queries of legal holds: the holds in force, what they cover, and the one lock that
serialises them with every acceptance that removes content.

A hold covers conversations (everything placed in them) and authors (everything they
wrote). The ledger's ``hold`` and ``hold_release`` rows are the record; ``legal_holds`` and
``legal_hold_subjects`` are the state they leave, which a merge writes again from them.

``lock_policies`` is taken by every acceptance that removes content (shared: they run side by
side) and by every change of a hold or a retention policy (exclusive): a hold and a purge of
what it covers are serialised, and one of them wins whole. Its key is two int4s,
(1886089832, 0): 1886089832 is 'pkrh', a space apart from the authors' 'pkau' keys.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, exists, func, literal_column, or_, select, union, update

from purgekeeper.schema.content_queries import event_erased
from purgekeeper.schema.driver import DriverStatement
from purgekeeper.schema.expiry import placement_expired
from purgekeeper.schema.idlists import IdList, among
from purgekeeper.schema.locks import AdvisoryLock
from purgekeeper.schema.states import HoldSubject, TombstoneKind
from purgekeeper.schema.tables import (
    IS_EVENT_TOMBSTONE,
    author_erasures,
    conversations,
    events,
    legal_hold_subjects,
    legal_holds,
    placements,
    purge_ledger,
    retention_policies,
    tombstones,
)

POLICY_LOCK_CLASS = 1886089832

_IN_FORCE = legal_holds.c.released_by.is_(None)
_CONVERSATION: Any = literal_column(f"'{HoldSubject.CONVERSATION.value}'")
_AUTHOR: Any = literal_column(f"'{HoldSubject.AUTHOR.value}'")
_HOLD = legal_holds.c.hold_id == legal_hold_subjects.c.hold_id
_subjects = legal_hold_subjects.join(legal_holds, _HOLD)


_POLICY_LOCK = AdvisoryLock(POLICY_LOCK_CLASS)
_ANY_IN_FORCE = DriverStatement(select(exists().where(_IN_FORCE)))


def lock_policies(conn: Connection, *, exclusive: bool) -> None:
    """Hold the holds-and-policies lock until the transaction ends (PostgreSQL; SQLite
    serialises writers already)."""
    _POLICY_LOCK.take(conn, exclusive=exclusive)


def any_in_force(conn: Connection) -> bool:
    """Whether any hold is in force: one probe, so a purge pays nothing more while none is."""
    return bool(_ANY_IN_FORCE.rows(conn, {})[0][0])


# -- what holds cover -------------------------------------------------------------------------


def _held(kind: Any, subject: Any) -> Any:
    """The holds in force on ``subject`` (a column or value) of ``kind``, as (hold_id)."""
    return (
        select(legal_hold_subjects.c.hold_id)
        .select_from(_subjects)
        .where(_IN_FORCE, legal_hold_subjects.c.kind == kind, legal_hold_subjects.c.subject_id == subject)
    )


def holds_of_events_parts(event_ids: Any) -> tuple[Any, Any]:
    """The holds in force on the listed events (``event_ids``: a bound ``IdList``), as two
    selects of (event_id, hold_id): by author, and by a conversation they are placed in. A
    purge's report unions them into its one statement."""
    by_author = (
        select(events.c.id.label("event_id"), legal_hold_subjects.c.hold_id)
        .select_from(
            events.join(legal_hold_subjects, legal_hold_subjects.c.subject_id == events.c.author).join(
                legal_holds, _HOLD
            )
        )
        .where(among(events.c.id, event_ids), legal_hold_subjects.c.kind == _AUTHOR, _IN_FORCE)
        .subquery("held_by_author")
    )
    subject_is_placed = legal_hold_subjects.c.subject_id == placements.c.conversation_id
    by_conversation = (
        select(placements.c.event_id, legal_hold_subjects.c.hold_id)
        .select_from(placements.join(legal_hold_subjects, subject_is_placed).join(legal_holds, _HOLD))
        .where(among(placements.c.event_id, event_ids), legal_hold_subjects.c.kind == _CONVERSATION, _IN_FORCE)
        .subquery("held_by_conversation")
    )
    return by_author, by_conversation


_EVENT_IDS: Any = bindparam("event_ids", type_=IdList())
_HOLDS_OF_EVENTS = union(*(select(*part.c) for part in holds_of_events_parts(_EVENT_IDS)))


def holds_of_events(conn: Connection, event_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The holds in force on each of these events (by its author, or a conversation it is
    placed in), by event; events no hold covers are absent."""
    if not event_ids or not any_in_force(conn):
        return {}
    found: dict[str, list[str]] = defaultdict(list)
    for event_id, hold_id in conn.execute(_HOLDS_OF_EVENTS, {"event_ids": list(event_ids)}):
        found[event_id].append(hold_id)
    return {event_id: tuple(sorted(set(ids))) for event_id, ids in found.items()}


def holds_of_conversation(conn: Connection, conversation_id: str) -> list[str]:
    """The holds in force on the conversation itself, or on an author of an event placed in
    it (its purge removes what those wrote there). One probe per held author: the cost
    follows the holds, not the conversation."""
    if not any_in_force(conn):
        return []
    held_authors = (
        select(legal_hold_subjects.c.hold_id)
        .select_from(_subjects)
        .where(_IN_FORCE, legal_hold_subjects.c.kind == _AUTHOR)
        .where(
            exists()
            .where(events.c.author == legal_hold_subjects.c.subject_id)
            .where(placements.c.event_id == events.c.id, placements.c.conversation_id == conversation_id)
        )
    )
    query = union(_held(_CONVERSATION, conversation_id), held_authors)
    return sorted(set(conn.scalars(query)))


def holds_of_author(conn: Connection, author: str, window_end: Any) -> list[str]:
    """The holds in force on the author, or on a conversation where an event of the author's
    window is placed. One probe per held conversation: the cost follows the holds."""
    if not any_in_force(conn):
        return []
    held_conversations = (
        select(legal_hold_subjects.c.hold_id)
        .select_from(_subjects)
        .where(_IN_FORCE, legal_hold_subjects.c.kind == _CONVERSATION)
        .where(
            exists()
            .where(placements.c.conversation_id == legal_hold_subjects.c.subject_id)
            .where(events.c.id == placements.c.event_id, events.c.author == author, events.c.occurred_at < window_end)
        )
    )
    query = union(_held(_AUTHOR, author), held_conversations)
    return sorted(set(conn.scalars(query)))


def holds_of_bot(conn: Connection, bot_id: str) -> list[str]:
    """The holds in force on a conversation of the bot (its Memory holds what they said)."""
    if not any_in_force(conn):
        return []
    owned = select(conversations.c.id).where(conversations.c.bot_id == bot_id)
    query = (
        select(legal_hold_subjects.c.hold_id)
        .select_from(_subjects)
        .where(_IN_FORCE, legal_hold_subjects.c.kind == _CONVERSATION, legal_hold_subjects.c.subject_id.in_(owned))
    )
    return sorted(set(conn.scalars(query)))


def held_subjects(conn: Connection) -> list[tuple[str, str]]:
    """Every (kind, subject_id) a hold in force covers, once each, sorted."""
    query = (
        select(legal_hold_subjects.c.kind, legal_hold_subjects.c.subject_id)
        .select_from(_subjects)
        .where(_IN_FORCE)
        .distinct()
        .order_by(legal_hold_subjects.c.kind, legal_hold_subjects.c.subject_id)
    )
    return [(row.kind, row.subject_id) for row in conn.execute(query)]


def hold_ids_in_force(conn: Connection) -> list[str]:
    return list(conn.scalars(select(legal_holds.c.hold_id).where(_IN_FORCE).order_by(legal_holds.c.hold_id)))


# -- the holds themselves ---------------------------------------------------------------------


@dataclass(frozen=True)
class HoldRow:
    hold_id: str
    purge_id: str
    released_by: str | None
    conversation_ids: tuple[str, ...]
    authors: tuple[str, ...]


def hold_row(conn: Connection, hold_id: str, *, lock: bool = False) -> HoldRow | None:
    query = select(legal_holds).where(legal_holds.c.hold_id == hold_id)
    row = conn.execute(query.with_for_update() if lock else query).first()
    if row is None:
        return None
    subjects = conn.execute(
        select(legal_hold_subjects.c.kind, legal_hold_subjects.c.subject_id)
        .where(legal_hold_subjects.c.hold_id == hold_id)
        .order_by(legal_hold_subjects.c.subject_id)
    ).all()
    return HoldRow(
        row.hold_id,
        row.purge_id,
        row.released_by,
        tuple(s.subject_id for s in subjects if s.kind == HoldSubject.CONVERSATION),
        tuple(s.subject_id for s in subjects if s.kind == HoldSubject.AUTHOR),
    )


def insert_hold(
    conn: Connection, *, hold_id: str, purge_id: str, conversation_ids: Iterable[str], authors: Iterable[str]
) -> None:
    """Write the hold and what it covers; writing it again (a merge) changes nothing, and a
    hold released since stays released."""
    # Looked up first, not ON CONFLICT: the triggers refuse a second write of a hold (SQLite's
    # REPLACE would otherwise rewrite it); the holds-and-policies lock (an acceptance) or the
    # merge lock serialises its writers.
    if conn.scalar(select(legal_holds.c.hold_id).where(legal_holds.c.hold_id == hold_id)) is None:
        conn.execute(legal_holds.insert().values(hold_id=hold_id, purge_id=purge_id))
        subjects = [
            {"hold_id": hold_id, "kind": HoldSubject.CONVERSATION.value, "subject_id": c} for c in conversation_ids
        ]
        subjects += [{"hold_id": hold_id, "kind": HoldSubject.AUTHOR.value, "subject_id": a} for a in authors]
        if subjects:
            conn.execute(legal_hold_subjects.insert(), subjects)


def release_hold(conn: Connection, *, hold_id: str, purge_id: str) -> None:
    """Mark the hold released by ``purge_id``, once (a release already in place is kept)."""
    conn.execute(update(legal_holds).where(legal_holds.c.hold_id == hold_id, _IN_FORCE).values(released_by=purge_id))


def list_holds(conn: Connection, *, include_released: bool) -> list[Any]:
    """The holds with when and by whom each was placed (and released): the ledger's rows."""
    placed, released = purge_ledger.alias("placed"), purge_ledger.alias("released")
    query = (
        select(
            legal_holds.c.hold_id,
            legal_holds.c.purge_id,
            legal_holds.c.released_by,
            placed.c.accepted_at.label("placed_at"),
            placed.c.actor.label("placed_by"),
            placed.c.reason.label("placed_reason"),
            released.c.accepted_at.label("released_at"),
            released.c.actor.label("released_by_actor"),
        )
        .select_from(
            legal_holds.outerjoin(placed, placed.c.purge_id == legal_holds.c.purge_id).outerjoin(
                released, released.c.purge_id == legal_holds.c.released_by
            )
        )
        .order_by(legal_holds.c.hold_id)
    )
    if not include_released:
        query = query.where(_IN_FORCE)
    return list(conn.execute(query).all())


def counts_in_force(conn: Connection, *, limit: int) -> list[Any]:
    """The first ``limit`` holds in force by id, each with how many conversations and authors
    it covers and when it was placed: counts, never the subjects (a hold may name a thousand)."""
    kind = legal_hold_subjects.c.kind
    query = (
        select(
            legal_holds.c.hold_id,
            func.count().filter(kind == _CONVERSATION).label("conversations"),
            func.count().filter(kind == _AUTHOR).label("authors"),
            func.min(purge_ledger.c.accepted_at).label("placed_at"),
        )
        .select_from(
            legal_holds.join(legal_hold_subjects, _HOLD).outerjoin(
                purge_ledger, purge_ledger.c.purge_id == legal_holds.c.purge_id
            )
        )
        .where(_IN_FORCE)
        .group_by(legal_holds.c.hold_id)
        .order_by(legal_holds.c.hold_id)
        .limit(limit)
    )
    return list(conn.execute(query).all())


def subjects_of(conn: Connection, hold_ids: Sequence[str]) -> dict[str, tuple[list[str], list[str]]]:
    """(conversation_ids, authors) of each hold."""
    found: dict[str, tuple[list[str], list[str]]] = {h: ([], []) for h in hold_ids}
    query = (
        select(legal_hold_subjects)
        .where(legal_hold_subjects.c.hold_id.in_(list(hold_ids)))
        .order_by(legal_hold_subjects.c.subject_id)
    )
    for row in conn.execute(query):
        found[row.hold_id][0 if row.kind == HoldSubject.CONVERSATION else 1].append(row.subject_id)
    return found


# -- what was purged before a hold ------------------------------------------------------------


@dataclass(frozen=True)
class AlreadyPurged:
    """What in a hold's scope earlier purges already removed (or are removing): ids and
    counts, never content."""

    purged_conversations: tuple[str, ...]
    erased_authors: tuple[str, ...]
    fenced_events: int  # by an event tombstone, an author erasure, or a retention run in scope
    retention_policies: tuple[str, ...]  # whose runs already expired what they governed in scope


def already_purged(conn: Connection, conversation_ids: Sequence[str], authors: Sequence[str]) -> AlreadyPurged:
    held_conversations, held_authors = list(conversation_ids), list(authors)
    purged = select(tombstones.c.id).where(
        tombstones.c.kind.in_([TombstoneKind.CONVERSATION.value, TombstoneKind.CHANNEL.value]),
        tombstones.c.id.in_(held_conversations),
    )
    erased = select(author_erasures.c.author).where(author_erasures.c.author.in_(held_authors)).distinct()
    placed_in_scope = or_(placements.c.conversation_id.in_(held_conversations), events.c.author.in_(held_authors))
    expiring = (
        exists()
        .where(placements.c.event_id == events.c.id, placed_in_scope)
        .where(
            placement_expired(
                events.c.author, events.c.occurred_at, placements.c.conversation_id, placements.c.created_at
            )
        )
    )
    fenced = or_(
        exists().where(IS_EVENT_TOMBSTONE, tombstones.c.id == events.c.id), event_erased(events.c.id), expiring
    )
    in_scope = events.c.author.in_(held_authors) | events.c.id.in_(
        select(placements.c.event_id).where(placements.c.conversation_id.in_(held_conversations))
    )
    counted = select(func.count()).select_from(events).where(in_scope, fenced)
    policy = retention_policies.c
    ran = select(policy.policy_id).where(policy.last_purge_id.is_not(None)).order_by(policy.policy_id)
    if not held_authors:  # a hold on conversations: the policies that governed them
        ran = ran.where(or_(policy.conversation_id.is_(None), policy.conversation_id.in_(held_conversations)))
    return AlreadyPurged(
        purged_conversations=tuple(sorted(set(conn.scalars(purged)))),
        erased_authors=tuple(sorted(set(conn.scalars(erased)))),
        fenced_events=int(conn.scalar(counted) or 0),
        retention_policies=tuple(conn.scalars(ran)),
    )
