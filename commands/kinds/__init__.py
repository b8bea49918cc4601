"""The purge kinds, one module each, and their registry.

Adding a kind means: a module here with one :class:`~commands.kinds.base.Kind` subclass that
defines every stage of ``base.STAGES``, its entry in ``KINDS`` below, and a migration that
adds its value to the ``purge_ledger.kind`` CHECK (``schema.states.PurgeKind``).
``tests/unit/test_kinds.py`` fails when a registered kind lacks a stage, or a ``PurgeKind``
has no module. Acceptance, preview, merge and cleanup find the kind here, never by an
if/elif over kind names.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection

from commands.kinds.author import Author
from commands.kinds.base import Kind
from commands.kinds.bot import Bot
from commands.kinds.channel import Channel
from commands.kinds.content import Content
from commands.kinds.conversation import Conversation
from commands.kinds.fields import RowInvalid
from commands.kinds.hold import Hold
from commands.kinds.hold_release import HoldRelease
from commands.kinds.retention import Retention
from commands.kinds.retention_end import RetentionEnd
from commands.kinds.retention_run import RetentionRun
from schema import purges
from schema.ledger import LedgerEntry
from schema.states import PurgeKind, StepKind
from workers import cleanup

CONTENT = Content()
CONVERSATION = Conversation()
CHANNEL = Channel()
BOT = Bot()
AUTHOR = Author()
RETENTION = Retention()
RETENTION_END = RetentionEnd()
RETENTION_RUN = RetentionRun()
HOLD = Hold()
HOLD_RELEASE = HoldRelease()

KINDS: dict[PurgeKind, Kind[Any, Any]] = {
    kind.name: kind
    for kind in (
        CONTENT,
        CONVERSATION,
        CHANNEL,
        BOT,
        AUTHOR,
        RETENTION,
        RETENTION_END,
        RETENTION_RUN,
        HOLD,
        HOLD_RELEASE,
    )
}

for _kind in KINDS.values():
    if _kind.bodies is not None:
        cleanup.register_bodies(_kind.name.value, _kind.bodies)


# The rows of the operator routes (policies and holds): their actor and reason are an
# operator's words ("litigation Doe v. Corp"), so a host's purge list and status leave them out.
OPERATOR_KINDS = tuple(kind.name.value for kind in KINDS.values() if kind.operator_only)
POLICY_KINDS = frozenset(kind.name.value for kind in KINDS.values() if kind.names_policy)


def label_of(entry: LedgerEntry) -> str:
    """The row in a few words: its kind's label, with the policy or hold it names."""
    try:
        template = kind_of(entry.kind).label
    except RowInvalid:
        template = f"{entry.kind} purge"
    names = {name: str(entry.selectors.get(name, "?")) for name in ("policy_id", "hold_id")}
    return template.format(**names)


def kind_of(name: str) -> Kind[Any, Any]:
    """The kind a ledger row names; RowInvalid for a name no module defines."""
    try:
        return KINDS[PurgeKind(name)]
    except (ValueError, KeyError):
        raise RowInvalid(f"unknown purge kind {str(name)[:40]!r}") from None


def reapply_fences(conn: Connection, entries: Iterable[LedgerEntry]) -> None:
    """A merge: every fence and tombstone these rows imply (an existing one is kept), and the
    conversations each names (``purge_conversations`` is not in the ledger); one row at a
    time, so a full merge holds one row in memory, not the ledger."""
    for entry in entries:
        kind = kind_of(entry.kind)
        kind.fence(conn, entry.purge_id, entry.selectors)
        purges.record_conversations(conn, entry.purge_id, kind.conversations(conn, entry.selectors))


def cleanup_left(conn: Connection, entry: LedgerEntry) -> list[tuple[StepKind, bool]]:
    """After a restore: the steps (kind, parked) this purge needs again."""
    return kind_of(entry.kind).left_after_restore(conn, entry)


__all__ = [
    "KINDS",
    "OPERATOR_KINDS",
    "POLICY_KINDS",
    "Kind",
    "RowInvalid",
    "cleanup_left",
    "kind_of",
    "label_of",
    "reapply_fences",
]
