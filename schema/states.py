"""The state machines of purgekeeper's rows, each written once with its transitions.

The CHECK constraints in schema/tables.py and the triggers in schema/sql/ use these values.
"""

from __future__ import annotations

from enum import StrEnum


class ConversationKind(StrEnum):
    CONVERSATION = "conversation"
    CHANNEL = "channel"


class ConversationState(StrEnum):
    """active → deleted (channels only) → purged; active → purged. Never back."""

    ACTIVE = "active"
    DELETED = "deleted"
    PURGED = "purged"


class RunStatus(StrEnum):
    """A run moves from a non-terminal status to a terminal one, and then never again."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ABANDONED = "abandoned"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_RUN_STATUSES


TERMINAL_RUN_STATUSES = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.ABANDONED})


ACTIVE_RUN_STATUSES = (RunStatus.QUEUED.value, RunStatus.RUNNING.value, RunStatus.WAITING.value)


class BotState(StrEnum):
    ACTIVE = "active"
    DELETED = "deleted"


class BlobKind(StrEnum):
    CAS = "cas"
    FILE = "file"


class BlobState(StrEnum):
    """present → deleting → deleted; a binding requires present."""

    PRESENT = "present"
    DELETING = "deleting"
    DELETED = "deleted"


class Binding(StrEnum):
    LEGACY_CAS = "legacy_cas"
    REAL_FILE = "real_file"


class PurgeKind(StrEnum):
    CONTENT = "content"
    CONVERSATION = "conversation"
    CHANNEL = "channel"
    BOT = "bot"
    AUTHOR = "author"


class TombstoneKind(StrEnum):
    CONVERSATION = "conversation"
    CHANNEL = "channel"
    BOT = "bot"
    EVENT = "event"
    PROVIDER_EVENT = "provider_event"


class StepKind(StrEnum):
    BODIES = "bodies"
    ATTACHMENTS = "attachments"
    MEMORY = "memory"


class StepStatus(StrEnum):
    """pending → running → done | retrying → running … | incomplete (re-armed by retry)."""

    PENDING = "pending"
    RUNNING = "running"
    RETRYING = "retrying"
    DONE = "done"
    INCOMPLETE = "incomplete"


def values(enum: type[StrEnum]) -> tuple[str, ...]:
    return tuple(member.value for member in enum)
