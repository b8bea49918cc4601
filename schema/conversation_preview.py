"""What a whole-conversation purge or a channel deletion would touch, in counts: the preview a
person reads before confirming one (``purgekeeper.commands.kinds.conversation``).

Counts only, never ids or bodies: a conversation may hold a million events, and the preview
is read before anything is fenced. Each count is one aggregate over the conversation's own
rows through its index, so a preview costs what the conversation holds, not the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import BindParameter, Connection, Select, bindparam, exists, func, select

from purgekeeper.schema.liveness import NOT_PURGED
from purgekeeper.schema.tables import attachments, conversations, derivatives, placements, runs

_CONVERSATION: BindParameter[str] = bindparam("conversation_id")
_OTHER = placements.alias("other")

_EVENTS = select(func.count()).select_from(placements).where(placements.c.conversation_id == _CONVERSATION)
# An event placed in another live conversation too: its cleanup decides, when it runs, whether
# the event is still live there (then it stays there) or not (then it goes).
_PLACED_ELSEWHERE = _EVENTS.where(
    exists()
    .where(_OTHER.c.event_id == placements.c.event_id, _OTHER.c.conversation_id != _CONVERSATION)
    .where(exists().where(conversations.c.id == _OTHER.c.conversation_id, NOT_PURGED))
)
_ATTACHMENTS = (
    select(func.count())
    .select_from(attachments.join(placements, placements.c.event_id == attachments.c.event_id))
    .where(placements.c.conversation_id == _CONVERSATION)
)
_RUNS = select(func.count()).select_from(runs).where(runs.c.conversation_id == _CONVERSATION)
_DERIVATIVES = select(func.count()).select_from(derivatives).where(derivatives.c.conversation_id == _CONVERSATION)


@dataclass(frozen=True)
class ConversationCounts:
    events: int  # placed in the conversation
    events_placed_elsewhere: int  # of those, placed in another conversation that is not purged
    attachments: int  # on the events placed in the conversation
    runs: int
    derivatives: int


NONE = ConversationCounts(0, 0, 0, 0, 0)


def counts(conn: Connection, conversation_id: str) -> ConversationCounts:
    """What the conversation holds now (zeros for an absent id)."""

    def count(query: Select[Any]) -> int:
        return int(conn.scalar(query, {"conversation_id": conversation_id}) or 0)

    return ConversationCounts(
        events=count(_EVENTS),
        events_placed_elsewhere=count(_PLACED_ELSEWHERE),
        attachments=count(_ATTACHMENTS),
        runs=count(_RUNS),
        derivatives=count(_DERIVATIVES),
    )


__all__ = ["NONE", "ConversationCounts", "counts"]
