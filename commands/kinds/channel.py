"""A channel deletion: no new membership, routing or content; the history stays readable,
the id is tombstoned, and nothing is removed (a conversation purge removes content)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Row

from purgekeeper.commands.kinds import conversation, selector_fields, skeleton
from purgekeeper.commands.kinds.kind import Already, Decision, Env, Kind
from purgekeeper.commands.records import ConversationPreview
from purgekeeper.schema import content_queries, ledger, purges
from purgekeeper.schema.errors import NotFound, ValidationError
from purgekeeper.schema.states import ConversationKind, PurgeKind, StepKind, TombstoneKind


class ChannelKind(Kind[str, Row[Any]]):
    label = "channel deletion"
    name = PurgeKind.CHANNEL
    head_first = True
    bodies = None  # it removes no content, so it has no cleanup at all

    def preview(self, conn: Connection, env: Env, channel_id: str) -> tuple[ConversationPreview, None]:
        """What the channel holds, which stays (it is confirmed by its id alone)."""
        _channel(content_queries.conversation_row(conn, channel_id), channel_id)  # refused as a confirmation is
        return conversation.preview_of(conn, channel_id, removes_content=False), None

    def conversations(self, conn: Connection, selectors: Mapping[str, Any]) -> list[str]:
        return [str(selectors["channel_id"])]

    def check_selectors(self, selectors: Mapping[str, Any]) -> None:
        selector_fields.require_id(selectors, "channel_id")

    def lock(self, conn: Connection, env: Env, args: str) -> Row[Any]:
        return _channel(purges.lock_conversation(conn, args), args)

    def decide(self, conn: Connection, env: Env, args: str, locked: Row[Any]) -> Decision | Already:
        done = purges.tombstone_of(conn, TombstoneKind.CHANNEL, args) or purges.tombstone_of(
            conn, TombstoneKind.CONVERSATION, args
        )
        return skeleton.already(done) if done else Decision({"channel_id": args})

    def fence(self, conn: Connection, purge_id: str, selectors: Mapping[str, Any]) -> None:
        purges.insert_tombstones(conn, purge_id, {TombstoneKind.CHANNEL: [selectors["channel_id"]]})

    def left_after_restore(self, conn: Connection, entry: ledger.LedgerEntry) -> list[tuple[StepKind, bool]]:
        return []  # nothing was removed, so nothing can come back


def _channel(row: Row[Any] | None, channel_id: str) -> Row[Any]:
    """The channel's row; an unknown id or a conversation's is refused."""
    if row is None:
        raise NotFound(f"no channel {channel_id}")
    if row.kind != ConversationKind.CHANNEL:
        raise ValidationError(f"{channel_id} is a conversation, not a channel; purge it instead")
    return row
