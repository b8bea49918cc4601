"""A legal hold placed: while it is in force, every purge that would remove what it covers
raises ``LegalHold`` (``confirm_purge``, ``purge_conversation``, ``erase_author``,
``delete_bot`` with Memory erasure), and retention runs keep it.

- **What it covers**: conversations (everything placed in them) and authors (everything they
  wrote). A hold on a conversation that holds nothing yet covers what is placed in it later.
- **What it does not undo**: a purge accepted before it. Purges stay irreversible, and the
  acceptance discloses what earlier purges already removed in its scope.
- **Races**: it takes the holds-and-policies lock exclusively, every purge that removes
  content takes it shared: one of them wins whole.
- **Ids** are never reused: placing the same hold again is ``already_purged`` (the row already
  in force); the same id with other subjects is an ``IdempotencyConflict``; a released id is
  ``IdReserved``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from purgekeeper.commands.kinds import selector_fields
from purgekeeper.commands.kinds.kind import Already, Decision, Env, Kind
from purgekeeper.schema import holds, ledger, retention_queries
from purgekeeper.schema.errors import IdempotencyConflict, IdReserved
from purgekeeper.schema.states import PurgeKind, StepKind


@dataclass(frozen=True)
class Placing:
    hold_id: str
    conversation_ids: tuple[str, ...]
    authors: tuple[str, ...]


class HoldKind(Kind[Placing, holds.HoldRow | None]):
    label = "legal hold {hold_id} placed"
    operator_only = True  # its actor and reason are an operator's words
    name = PurgeKind.HOLD
    head_first = True  # a new hold id has no row to lock
    policy_lock = "exclusive"
    ledger_first = True  # the triggers check its state against its ledger row (0011)
    preview = None  # it removes nothing: its acceptance says what was already removed
    bodies = None

    def check_selectors(self, selectors: Mapping[str, Any]) -> None:
        selector_fields.require_id(selectors, "hold_id")
        selector_fields.ids(selectors, "conversation_ids")
        authors = selector_fields.listed_values(selectors, "authors")
        for author in authors:
            selector_fields.text(author, "authors", None)
        if not (selector_fields.listed_values(selectors, "conversation_ids") or authors):
            raise selector_fields.RowInvalid("a hold covers at least one conversation or author")

    def lock(self, conn: Connection, env: Env, args: Placing) -> holds.HoldRow | None:
        return holds.hold_row(conn, args.hold_id, lock=True)

    def decide(self, conn: Connection, env: Env, args: Placing, locked: holds.HoldRow | None) -> Decision | Already:
        row: holds.HoldRow | None = locked
        if row is not None:
            return _repeat(conn, row, args)
        selectors = {
            "hold_id": args.hold_id,
            "conversation_ids": list(args.conversation_ids),
            "authors": list(args.authors),
        }
        return Decision(selectors, disclosures=_disclosures(conn, args))

    def fence(self, conn: Connection, purge_id: str, selectors: Mapping[str, Any]) -> None:
        holds.insert_hold(
            conn,
            hold_id=str(selectors["hold_id"]),
            purge_id=purge_id,
            conversation_ids=[str(c) for c in selectors.get("conversation_ids") or []],
            authors=[str(a) for a in selectors.get("authors") or []],
        )

    def left_after_restore(self, conn: Connection, entry: ledger.LedgerEntry) -> list[tuple[StepKind, bool]]:
        return []  # a hold removes nothing


def _repeat(conn: Connection, row: holds.HoldRow, args: Placing) -> Already:
    if row.released_by is not None:
        raise IdReserved(f"legal hold {row.hold_id} was released; a hold id is never reused")
    stored = (sorted(row.conversation_ids), sorted(row.authors))  # by Python's order, never the database's collation
    if stored != (sorted(args.conversation_ids), sorted(args.authors)):
        raise IdempotencyConflict(
            f"legal hold {row.hold_id} is in force and covers other conversations or authors; place a hold with "
            "another id"
        )
    return Already(row.purge_id, retention_queries.ledger_seq(conn, row.purge_id) or 0, _disclosures(conn, args))


def _disclosures(conn: Connection, args: Placing) -> tuple[str, ...]:
    """What the hold does not undo: what earlier purges removed (or are removing) in scope."""
    found = holds.already_purged(conn, args.conversation_ids, args.authors)
    said = ["A legal hold does not undo a purge accepted before it: purges are irreversible."]
    if found.purged_conversations:
        said.append(f"Already purged, and not held: conversations {_few(found.purged_conversations)}.")
    if found.erased_authors:
        said.append(f"Already erased, and not held: content by {_few(found.erased_authors)} in their erased windows.")
    if found.fenced_events:
        said.append(f"Already purged, and not held: {found.fenced_events} events in the hold's scope.")
    if found.retention_policies:
        said.append(
            f"Already expired, and not held: what retention policy {_few(found.retention_policies)} expired in the "
            "hold's scope before it."
        )
    return tuple(said)


def _few(ids: Sequence[str], limit: int = 10) -> str:
    return ", ".join(ids[:limit]) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")
