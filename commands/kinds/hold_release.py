"""A legal hold released: purges of what it covered are possible again, and the next run of
every retention policy walks its whole scope, so content the hold kept past a cutoff expires
then. Releasing a released hold is ``already_purged`` (the release already in force)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from purgekeeper.commands.kinds import selector_fields
from purgekeeper.commands.kinds.kind import Already, Decision, Env, Kind
from purgekeeper.schema import holds, ledger, retention_queries
from purgekeeper.schema.errors import NotFound
from purgekeeper.schema.states import PurgeKind, StepKind


@dataclass(frozen=True)
class Release:
    hold_id: str


class HoldReleaseKind(Kind[Release, holds.HoldRow | None]):
    label = "legal hold {hold_id} released"
    operator_only = True  # its actor and reason are an operator's words
    name = PurgeKind.HOLD_RELEASE
    head_first = True
    policy_lock = "exclusive"
    ledger_first = True  # the triggers check its state against its ledger row (0011)
    preview = None  # confirmed by the hold's id
    bodies = None

    def check_selectors(self, selectors: Mapping[str, Any]) -> None:
        selector_fields.require_id(selectors, "hold_id")

    def lock(self, conn: Connection, env: Env, args: Release) -> holds.HoldRow | None:
        return holds.hold_row(conn, args.hold_id, lock=True)

    def decide(self, conn: Connection, env: Env, args: Release, locked: holds.HoldRow | None) -> Decision | Already:
        row: holds.HoldRow | None = locked
        if row is None:
            raise NotFound(f"no legal hold {args.hold_id}")
        if row.released_by is not None:
            return Already(row.released_by, retention_queries.ledger_seq(conn, row.released_by) or 0)
        return Decision({"hold_id": args.hold_id})

    def fence(self, conn: Connection, purge_id: str, selectors: Mapping[str, Any]) -> None:
        holds.release_hold(conn, hold_id=str(selectors["hold_id"]), purge_id=purge_id)
        retention_queries.walk_everything_again(conn)  # what the hold kept past a cutoff expires at the next run

    def left_after_restore(self, conn: Connection, entry: ledger.LedgerEntry) -> list[tuple[StepKind, bool]]:
        return []
