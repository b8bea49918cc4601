"""A conversation purge: a whole conversation (or channel), whatever its size, accepted in
O(1) and emptied by its cleanup. An absent id is reserved anyway."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row

from commands.kinds import fields, skeleton
from commands.kinds.base import Already, Decision, Env, Kind
from schema import holds, ledger, purges, restore
from schema.errors import VersionConflict
from schema.states import ConversationKind, PurgeKind, StepKind, TombstoneKind
from workers import cleanup


@dataclass(frozen=True)
class Request:
    conversation_id: str
    expected_version: int | None


class Conversation(Kind[Request, Row[Any] | None]):
    label = "conversation purge"
    name = PurgeKind.CONVERSATION
    head_first = True  # an absent id has no row to lock: the head serialises its reservation
    policy_lock = "shared"
    preview = None  # confirmed by its id and, optionally, the version the host last saw
    bodies = staticmethod(cleanup.empty_conversation)

    def check_selectors(self, selectors: Mapping[str, Any]) -> None:
        fields.require_id(selectors, "conversation_id")
        kind = selectors.get("conversation_kind")
        if kind is not None and kind not in {k.value for k in ConversationKind}:
            raise fields.RowInvalid("conversation_kind is neither conversation nor channel")
        fields.flag(selectors, "reserved_absent_id")

    def lock(self, conn: Connection, env: Env, args: Request) -> Row[Any] | None:
        return purges.lock_conversation(conn, args.conversation_id)

    def decide(self, conn: Connection, env: Env, args: Request, locked: Row[Any] | None) -> Decision | Already:
        """The tombstone first: a repeat is ``already_purged``, even with the original
        expected version."""
        row, conversation_id = locked, args.conversation_id
        done = purges.tombstone_of(conn, TombstoneKind.CONVERSATION, conversation_id)
        if done:
            return skeleton.already(done)
        if row is not None and args.expected_version is not None and row.version != args.expected_version:
            raise VersionConflict(
                f"conversation {conversation_id} is at version {row.version}, not {args.expected_version}"
            )
        if row is not None:
            skeleton.refuse_active_runs(purges.active_run_ids(conn, conversation_ids=[conversation_id]))
            skeleton.refuse_held(holds.holds_of_conversation(conn, conversation_id), f"conversation {conversation_id}")
        selectors = {
            "conversation_id": conversation_id,
            "conversation_kind": row.kind if row is not None else None,
            "reserved_absent_id": row is None,
        }
        if row is None:
            return Decision(selectors)
        # The attachments wait for the bodies step, which decides (when it runs) which events
        # are no longer live anywhere and fences them.
        return Decision(selectors, (StepKind.BODIES, StepKind.ATTACHMENTS), parked=(StepKind.ATTACHMENTS,))

    def fence(self, conn: Connection, purge_id: str, selectors: Mapping[str, Any]) -> None:
        purges.insert_tombstones(conn, purge_id, {TombstoneKind.CONVERSATION: [selectors["conversation_id"]]})

    def left_after_restore(self, conn: Connection, entry: ledger.LedgerEntry) -> list[tuple[StepKind, bool]]:
        if restore.conversation_left(conn, str(entry.selectors["conversation_id"]), entry.purge_id):
            # the bodies step fences the events placed only here, then unparks attachments
            return [(StepKind.BODIES, False), (StepKind.ATTACHMENTS, True)]
        return [(StepKind.ATTACHMENTS, False)] if restore.bytes_left(conn, entry.purge_id) else []
