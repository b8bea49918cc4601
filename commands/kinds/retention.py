"""A retention policy set or changed: from its acceptance on, the scheduler runs it (see
``purgekeeper.commands.kinds.retention_run``) for as long as it stands.

- **Scope.** ``conversation_id=None`` is every conversation and channel; a conversation's
  own policy takes precedence over the global one (a global run leaves it alone). One
  standing policy per scope: another id for a scope already governed is a
  ``PolicyConflict`` (change that policy, or remove it first).
- **Confirmed once, like any purge.** ``preview_retention`` shows what the policy would
  expire if it ran now; its ``scope_digest`` covers the policy's definition (scope and
  ``max_age``), and ``set_retention`` needs a preview of that definition made within a day.
  Setting an unchanged policy again is ``already_purged`` (the row already in force).
- **Ledger rows.** Each version is a row (``replaces`` names the version it changes); a
  merge writes the policy again from the rows, in their order, and a row older than the
  policy's state is left alone.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row

from purgekeeper.commands.kinds import selector_fields
from purgekeeper.commands.kinds.kind import Already, Decision, Env, Kind
from purgekeeper.commands.records import ConversationCount, RetentionPreview
from purgekeeper.commands.scope import DISCLOSURES, require_purgeable_conversation
from purgekeeper.schema import ledger, purges, retention_queries
from purgekeeper.schema.errors import PolicyConflict, StaleConfirmation, ValidationError
from purgekeeper.schema.ledger import canonical_json, sha256_hex
from purgekeeper.schema.states import PurgeKind, StepKind

LISTED = 100  # the preview lists at most this many conversations
DIGEST_VERSION = 1
MAX_AGE_LIMIT = dt.timedelta(days=365 * 100)

RETENTION_DISCLOSURES = (
    *DISCLOSURES,
    "The policy runs at every sweep of the scheduler after it is set, then at an interval (hourly by default): "
    "each run expires what occurred before now - max_age, and goes through the same fences and cleanup as any "
    "purge.",
    "An event placed in several conversations expires from each conversation the policy governs; it keeps its "
    "content while it is placed in a conversation the policy leaves alone (one with a policy of its own, or a "
    "held one), and loses it once it has expired from every conversation it is placed in.",
    "Content a legal hold covers is kept, and expires at the first run after the hold is released.",
    "While the policy stands, an event older than its cutoff is refused at ingest (ContentPurged): a provider's "
    "backfill cannot bring expired content back.",
)


@dataclass(frozen=True)
class Definition:
    conversation_id: str | None
    max_age_seconds: int


@dataclass(frozen=True)
class Setting:
    policy_id: str
    definition: Definition
    scope_digest: str


class RetentionKind(Kind[Setting, Row[Any] | None]):
    label = "retention policy {policy_id} set"
    names_policy = True
    operator_only = True  # its actor and reason are an operator's words
    name = PurgeKind.RETENTION
    head_first = True  # a new policy id has no row to lock
    policy_lock = "exclusive"
    ledger_first = True  # the triggers check its state against its ledger row (0011)
    bodies = None  # a policy removes nothing itself: its runs do

    def preview(self, conn: Connection, env: Env, args: Definition) -> tuple[RetentionPreview, dict[str, Any]]:
        """What the policy would expire now, what holds would keep, and what it replaces."""
        if args.conversation_id is not None:
            require_purgeable_conversation(conn, args.conversation_id)
        max_age = dt.timedelta(seconds=args.max_age_seconds)
        cutoff = ledger.database_now(conn) - max_age
        found = retention_queries.preview_totals(
            conn, conversation_id=args.conversation_id, cutoff=cutoff, limit=LISTED
        )
        standing = retention_queries.standing_for_scope(conn, args.conversation_id)
        elsewhere = retention_queries.own_policy_conversations(conn) if args.conversation_id is None else []
        report = RetentionPreview(
            conversation_id=args.conversation_id,
            max_age=max_age,
            cutoff=cutoff,
            events=found.events,
            placements=found.placements,
            conversations=found.conversations,
            kept_elsewhere=found.kept_elsewhere,
            by_conversation=tuple(ConversationCount(c, n) for c, n in found.by_conversation),
            held=found.held,
            hold_ids=found.hold_ids,
            governed_elsewhere=tuple(elsewhere[:LISTED]),
            replaces=standing.policy_id if standing is not None else None,
            disclosures=RETENTION_DISCLOSURES,
            scope_digest=digest_of(args),
        )
        return report, {"retention": _key(args)}

    def check_selectors(self, selectors: Mapping[str, Any]) -> None:
        selector_fields.require_id(selectors, "policy_id")
        if selectors.get("conversation_id") is not None:
            selector_fields.require_id(selectors, "conversation_id")
        seconds = selectors.get("max_age_seconds")
        if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 1:
            raise selector_fields.RowInvalid("max_age_seconds is not a positive whole number")
        selector_fields.optional_text(selectors, "replaces", None)

    def lock(self, conn: Connection, env: Env, args: Setting) -> Row[Any] | None:
        return retention_queries.policy_row(conn, args.policy_id, lock=True)

    def decide(self, conn: Connection, env: Env, args: Setting, locked: Row[Any] | None) -> Decision | Already:
        definition, row = args.definition, locked
        saved = purges.saved_preview(conn, args.scope_digest)
        if args.scope_digest != digest_of(definition) or saved is None or saved.get("retention") != _key(definition):
            raise StaleConfirmation(
                "no preview of this policy's definition (scope and max_age) has this digest (a preview is kept "
                "for a day); preview it with preview_retention()"
            )
        if definition.conversation_id is not None:
            require_purgeable_conversation(conn, definition.conversation_id)
        standing = row if row is not None and row.ended_by is None else None
        if standing is not None and (standing.conversation_id, int(standing.max_age_seconds)) == dataclasses.astuple(
            definition
        ):
            return Already(standing.purge_id, retention_queries.ledger_seq(conn, standing.purge_id) or 0)
        other = retention_queries.standing_for_scope(conn, definition.conversation_id)
        if other is not None and other.policy_id != args.policy_id:
            scope = f"conversation {definition.conversation_id}" if definition.conversation_id else "every conversation"
            raise PolicyConflict(
                f"retention policy {other.policy_id} already governs {scope}; change it with "
                f"set_retention({other.policy_id!r}, ...) or remove it first"
            )
        selectors = {
            "policy_id": args.policy_id,
            "conversation_id": definition.conversation_id,
            "max_age_seconds": definition.max_age_seconds,
            "replaces": standing.purge_id if standing is not None else None,
        }
        return Decision(selectors, digest=args.scope_digest)

    def fence(self, conn: Connection, purge_id: str, selectors: Mapping[str, Any]) -> None:
        policy_id = str(selectors["policy_id"])
        row = retention_queries.policy_row(conn, policy_id, lock=True)
        if row is not None and (row.purge_id == purge_id or state_is_newer(conn, row, purge_id)):
            return  # already written, or a merge of a version older than the policy's state
        conversation_id = selectors.get("conversation_id")
        retention_queries.set_policy(
            conn,
            policy_id=policy_id,
            conversation_id=conversation_id,
            max_age_seconds=int(selectors["max_age_seconds"]),
            purge_id=purge_id,
        )
        if row is not None and row.ended_by is None and row.conversation_id not in (None, conversation_id):
            retention_queries.walk_everything_again(conn, global_only=True)  # that conversation is the global one's now

    def left_after_restore(self, conn: Connection, entry: ledger.LedgerEntry) -> list[tuple[StepKind, bool]]:
        return []  # a policy removes nothing itself; its runs have their own rows


def digest_of(definition: Definition) -> str:
    """The digest a confirmation names: the policy's definition, hashed."""
    shown = {"kind": PurgeKind.RETENTION.value, "digest_version": DIGEST_VERSION, "definition": _key(definition)}
    return sha256_hex(canonical_json(shown))


def _key(definition: Definition) -> list[Any]:
    return [definition.conversation_id, definition.max_age_seconds]


def state_is_newer(conn: Connection, row: Any, purge_id: str) -> bool:
    """Whether the policy's state was written by a ledger row after ``purge_id``'s (a row not
    in the ledger yet is an acceptance in progress: the newest of all)."""
    mine = retention_queries.ledger_seq(conn, purge_id)
    if mine is None:
        return False
    written = [retention_queries.ledger_seq(conn, row.purge_id), retention_queries.ledger_seq(conn, row.ended_by)]
    return any(seq is not None and seq > mine for seq in written)


def check_max_age(max_age: Any) -> int:
    """``max_age`` as whole seconds: a positive ``timedelta`` of whole seconds, at most a
    century."""
    if not isinstance(max_age, dt.timedelta):
        raise ValidationError("max_age must be a datetime.timedelta")
    if max_age <= dt.timedelta(0) or max_age > MAX_AGE_LIMIT:
        raise ValidationError("max_age must be more than zero and at most 100 years")
    if max_age.microseconds:
        raise ValidationError("max_age must be a whole number of seconds")
    return int(max_age.total_seconds())
