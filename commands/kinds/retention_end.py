"""A retention policy removed: it no longer stands, no run of it is started again, and a run
it planned and had not accepted is dropped with it. Runs already accepted go on to the end of
their cleanup (purges stay irreversible). Removing a conversation's own policy hands that
conversation back to the global policy, whose next run walks its whole scope."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row

from purgekeeper.commands.kinds import selector_fields
from purgekeeper.commands.kinds.kind import Already, Decision, Env, Kind
from purgekeeper.commands.kinds.retention import state_is_newer
from purgekeeper.schema import ledger, retention_queries
from purgekeeper.schema.errors import NotFound
from purgekeeper.schema.states import PurgeKind, StepKind


@dataclass(frozen=True)
class Removal:
    policy_id: str


class RetentionEndKind(Kind[Removal, Row[Any] | None]):
    label = "retention policy {policy_id} removed"
    names_policy = True
    operator_only = True  # its actor and reason are an operator's words
    name = PurgeKind.RETENTION_END
    head_first = True
    policy_lock = "exclusive"
    ledger_first = True  # the triggers check its state against its ledger row (0011)
    preview = None  # confirmed by the policy's id
    bodies = None

    def check_selectors(self, selectors: Mapping[str, Any]) -> None:
        selector_fields.require_id(selectors, "policy_id")
        selector_fields.optional_text(selectors, "ended", None)
        if selectors.get("conversation_id") is not None:
            selector_fields.require_id(selectors, "conversation_id")

    def lock(self, conn: Connection, env: Env, args: Removal) -> Row[Any] | None:
        return retention_queries.policy_row(conn, args.policy_id, lock=True)

    def decide(self, conn: Connection, env: Env, args: Removal, locked: Row[Any] | None) -> Decision | Already:
        row = locked
        if row is None:
            raise NotFound(f"no retention policy {args.policy_id}")
        if row.ended_by is not None:
            return Already(row.ended_by, retention_queries.ledger_seq(conn, row.ended_by) or 0)
        selectors = {"policy_id": args.policy_id, "ended": row.purge_id, "conversation_id": row.conversation_id}
        return Decision(selectors)

    def fence(self, conn: Connection, purge_id: str, selectors: Mapping[str, Any]) -> None:
        row = retention_queries.policy_row(conn, str(selectors["policy_id"]), lock=True)
        if row is None or row.ended_by is not None or state_is_newer(conn, row, purge_id):
            return  # gone already, or a merge of a removal older than the policy's state
        retention_queries.end_policy(conn, policy_id=row.policy_id, purge_id=purge_id)
        if row.conversation_id is not None:
            retention_queries.walk_everything_again(conn, global_only=True)  # that conversation is the global one's now

    def left_after_restore(self, conn: Connection, entry: ledger.LedgerEntry) -> list[tuple[StepKind, bool]]:
        return []
