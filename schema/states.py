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
    RETENTION = "retention"  # a retention policy set or changed
    RETENTION_END = "retention_end"  # a retention policy removed
    RETENTION_RUN = "retention_run"  # one run of a policy: a purge of what it expires
    HOLD = "hold"  # a legal hold placed
    HOLD_RELEASE = "hold_release"  # a legal hold released


class TombstoneKind(StrEnum):
    CONVERSATION = "conversation"
    CHANNEL = "channel"
    BOT = "bot"
    EVENT = "event"
    PROVIDER_EVENT = "provider_event"


class HoldSubject(StrEnum):
    """What a legal hold covers, and what a retention run exempts: a conversation (or
    channel) and everything placed in it, or everything one author wrote."""

    CONVERSATION = "conversation"
    AUTHOR = "author"


class Exemption(StrEnum):
    """Why a retention run leaves a subject alone: a legal hold, or (a global run) the
    conversation's own policy, which takes precedence."""

    HOLD = "hold"
    OWN_POLICY = "own_policy"


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


class PurgeStatus(StrEnum):
    """A purge's status, derived from its cleanup steps (``purgekeeper.schema.lifecycle``): accepted (no
    step attempted yet) → cleaning → complete (every step done, or none) | incomplete (a step
    gave up; an operator's retry re-arms it)."""

    ACCEPTED = "accepted"
    CLEANING = "cleaning"
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"


class WorkerRole(StrEnum):
    """What a process that sends heartbeats (``worker_processes``, ``purgekeeper.schema.heartbeats``) does:
    a ``worker`` runs cleanup steps (``purgekeeper.commands.worker``), a ``scheduler`` re-sends due ones
    (``purgectl scheduler``), and ``embedded`` is both, inside a handle opened with
    ``workers="auto"`` and no broker URL."""

    WORKER = "worker"
    SCHEDULER = "scheduler"
    EMBEDDED = "embedded"


RUNS_STEPS = (WorkerRole.WORKER.value, WorkerRole.EMBEDDED.value)  # the roles that clean up


FINISHED_PURGE_STATUSES = (PurgeStatus.COMPLETE.value, PurgeStatus.INCOMPLETE.value)
MAX_PAGE = 1000  # the most purges one page of the purge list holds (the API, the CLI and the console)


def values(enum: type[StrEnum]) -> tuple[str, ...]:
    return tuple(member.value for member in enum)
