"""The fence of a retention run, as SQL: whether a run whose cleanup has not finished expires
an event's placement in a conversation.

A run in ``retention_fences`` expires the placement of an event in a conversation when the
event occurred before its cutoff, the placement was made before the run's acceptance
(``placed_before``: a placement made later is never the run's, also when a merge writes the
fence again), the run is the conversation's own (or global), and neither the conversation
nor the event's author is among its exemptions (``retention_exemptions``:
holds, and for a global run the conversations with a policy of their own). The triggers
(schema/sql/*/0009_retention_and_holds.sql) say the same. Between runs the table is empty,
and the check is one probe of it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import and_, exists, func, literal, literal_column, not_, or_, select

from purgekeeper.schema.states import HoldSubject
from purgekeeper.schema.tables import UtcDateTime, retention_exemptions, retention_fences

_fence = retention_fences.alias("expiring_run")
_exempt_conversation = retention_exemptions.alias("exempt_conversation")
_exempt_author = retention_exemptions.alias("exempt_author")


def _exempt(alias: Any, kind: HoldSubject, subject: Any) -> Any:
    """The run ``_fence`` exempts ``subject``: one probe of the exemptions' primary key."""
    return (
        exists()
        .where(alias.c.purge_id == _fence.c.purge_id)
        .where(alias.c.kind == literal_column(f"'{kind.value}'"))  # in the text: a generic plan sees it
        .where(alias.c.subject_id == subject)
        .correlate_except(alias)
    )


def placement_expired(author: Any, occurred_at: Any, conversation_id: Any, placed_at: Any) -> Any:
    """A run whose cleanup has not finished expires the placement in ``conversation_id``,
    made at ``placed_at``, of an event by ``author`` that occurred at ``occurred_at``
    (columns or values). The expression's own aliases are never correlated away, so it means
    the same inside any statement."""
    return (
        exists()
        .where(_fence.c.cutoff > occurred_at, _fence.c.placed_before > placed_at)
        .where(or_(_fence.c.conversation_id.is_(None), _fence.c.conversation_id == conversation_id))
        .where(~_exempt(_exempt_conversation, HoldSubject.CONVERSATION, conversation_id))
        .where(~_exempt(_exempt_author, HoldSubject.AUTHOR, author))
        .correlate_except(_fence)
    )


_EARLIEST = literal(dt.datetime(1, 1, 1, tzinfo=dt.UTC), UtcDateTime())


def readable_in(author: Any, occurred_at: Any, conversation_id: Any, placed_at: Any) -> Any:
    """A read of one conversation (``conversation_id`` a bound value): no run expires the
    placement. The latest cutoff of the runs that could apply there is one uncorrelated
    subquery, evaluated once per read (an InitPlan on PostgreSQL, a cached subquery on
    SQLite), so an event that occurred after it costs one comparison, not a probe."""
    latest = (
        select(func.max(_fence.c.cutoff))
        .where(or_(_fence.c.conversation_id.is_(None), _fence.c.conversation_id == conversation_id))
        .scalar_subquery()
    )
    possible = occurred_at < func.coalesce(latest, _EARLIEST)
    return not_(and_(possible, placement_expired(author, occurred_at, conversation_id, placed_at)))
