"""What a fenced read may see of the host's content, as SQL expressions: a conversation that is
not purged (``NOT_PURGED``), an event that is live (``live_event``: no fence, an event
tombstone or an author erasure that covers it, and a placement in a conversation that is not
purged and that no retention run expires), an author's erasure (``author_erased``,
``event_erased``). Every read and the purge machinery build on them; ``purgekeeper.schema.content_queries``
names them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import (
    Connection,
    and_,
    exists,
    literal_column,
    not_,
    select,
)

from purgekeeper.schema.expiry import placement_expired
from purgekeeper.schema.states import ConversationState, TombstoneKind
from purgekeeper.schema.tables import (
    author_erasures,
    conversations,
    events,
    placements,
    retention_fences,
    tombstones,
)

# The constant is written into the SQL text, not bound: a generic plan of a prepared statement
# that cannot see the value would guess "almost every row is purged" and scan every placement.
NOT_PURGED = conversations.c.state != literal_column(f"'{ConversationState.PURGED.value}'")


def is_tombstoned(conn: Connection, kinds: Iterable[TombstoneKind], the_id: str) -> bool:
    query = select(tombstones.c.kind).where(tombstones.c.kind.in_([k.value for k in kinds]), tombstones.c.id == the_id)
    return conn.execute(query.limit(1)).first() is not None


_placed_event = events.alias("placed_event")
_any_fence = retention_fences.alias("any_fence")
# A run's expiry of the placement, gated by one uncorrelated EXISTS over the fences (usually
# empty; a one-time test): without it PostgreSQL plans a statement holding ``live_event`` (a
# purge's report) afresh at every execution instead of reusing its generic plan, the
# estimate of the fences' subplans tipping the choice (2.4 ms of planning per confirmation).
_EXPIRED_HERE = and_(
    exists().select_from(_any_fence).correlate_except(_any_fence),
    placement_expired(
        _placed_event.c.author, _placed_event.c.occurred_at, placements.c.conversation_id, placements.c.created_at
    ),
)


def live_event(event_id: Any) -> Any:
    """An event is live while it has no fence (an event tombstone, or an author erasure that
    covers it) and a placement in a conversation that is not purged (docs/design.md) and that no
    retention run expires. ``event_id`` is a value or a column."""
    return and_(
        not_(_tombstone_exists(TombstoneKind.EVENT, event_id)),
        not_(event_erased(event_id)),
        exists()
        .where(placements.c.event_id == event_id)
        .where(conversations.c.id == placements.c.conversation_id)
        .where(NOT_PURGED)
        .where(_placed_event.c.id == placements.c.event_id)
        .where(not_(_EXPIRED_HERE)),
    )


def is_event_live(conn: Connection, event_id: str) -> bool:
    return bool(conn.scalar(select(live_event(event_id))))


def _tombstone_exists(kind: TombstoneKind, id_expr: Any) -> Any:
    return exists().where(tombstones.c.kind == kind.value).where(tombstones.c.id == id_expr)


def author_erased(author: Any, occurred_at: Any) -> Any:
    """An erasure of ``author`` covers ``occurred_at`` (columns or values): one probe of the
    prefix of author_erasures' primary key."""
    return exists().where(author_erasures.c.author == author, author_erasures.c.window_end > occurred_at)


_erased_event = events.alias("erased_event")
_erasure = author_erasures.alias("erasure")


def event_erased(event_id: Any) -> Any:
    """The event (a value or a column) is erased with its author's content: the events key,
    then the prefix of author_erasures' key. Its own aliases are never correlated away, so
    the expression means the same inside any statement."""
    return (
        exists()
        .where(_erased_event.c.id == event_id)
        .where(_erasure.c.author == _erased_event.c.author, _erasure.c.window_end > _erased_event.c.occurred_at)
        .correlate_except(_erased_event, _erasure)
    )
