"""purgekeeper's host and operator API: what a host application imports.

    import commands
    with commands.open() as pk:
        pk.create_conversation("c1")
        pk.ingest_event("c1", author="ada", body="hello")

The CLI (``purgectl``) and the HTTP app are thin layers over the same methods.
"""

from typing import TYPE_CHECKING

from commands import lazy

# The public names, imported when first used (commands/lazy.py): `import commands` and
# `purgectl --help` load no database or HTTP stack.
if TYPE_CHECKING:
    from commands.attachments import NewAttachment
    from commands.handle import Purgekeeper
    from commands.opening import open
    from commands.records import (
        Acceptance,
        Admission,
        Attachment,
        Attempt,
        AuditEntry,
        AuthorErasurePreview,
        Bot,
        BotDeletionPreview,
        Conversation,
        ConversationCount,
        ConversationPreview,
        Derivative,
        ErasureTotals,
        Event,
        HeldStep,
        Hold,
        HoldCount,
        LedgerReport,
        MemoryPreview,
        Placement,
        PurgeDetail,
        PurgePage,
        PurgeStatus,
        RepositoryIdentity,
        RetentionPolicy,
        RetentionPreview,
        RetentionRunOutcome,
        Run,
        SharedAttachment,
        StepProgress,
        StepState,
        WorkerLeases,
    )
    from commands.scope import EventScope, HeldEvent, PurgePreview
    from commands.settings import Settings
    from commands.touched import FailurePlace, PurgeSearch, PurgeTouched
    from commands.worker_records import WorkerProcess
    from schema.errors import (
        ActiveRuns,
        AuthorErased,
        BotDeleted,
        CleanupNotComplete,
        Conflict,
        ContentPurged,
        ConversationDeleted,
        ConversationPurged,
        Fenced,
        IdempotencyConflict,
        IdReserved,
        InfrastructureError,
        LedgerNotCopied,
        LegalHold,
        MemoryErasureUnavailable,
        MessagingUnavailable,
        NotFound,
        PolicyConflict,
        PurgekeeperError,
        SchemaMismatch,
        StaleConfirmation,
        ValidationError,
        VersionConflict,
    )
    from schema.states import (
        Binding,
        BlobState,
        BotState,
        ConversationKind,
        ConversationState,
        RunStatus,
    )
else:
    __getattr__, __dir__ = lazy.exports(__name__, __file__)

__all__ = [
    "Acceptance",
    "ActiveRuns",
    "Admission",
    "Attachment",
    "Attempt",
    "AuditEntry",
    "AuthorErased",
    "AuthorErasurePreview",
    "Binding",
    "BlobState",
    "Bot",
    "BotDeleted",
    "BotDeletionPreview",
    "BotState",
    "CleanupNotComplete",
    "Conflict",
    "ContentPurged",
    "Conversation",
    "ConversationCount",
    "ConversationDeleted",
    "ConversationKind",
    "ConversationPreview",
    "ConversationPurged",
    "ConversationState",
    "Derivative",
    "ErasureTotals",
    "Event",
    "EventScope",
    "FailurePlace",
    "Fenced",
    "HeldEvent",
    "HeldStep",
    "Hold",
    "HoldCount",
    "IdReserved",
    "IdempotencyConflict",
    "InfrastructureError",
    "LedgerNotCopied",
    "LedgerReport",
    "LegalHold",
    "MemoryErasureUnavailable",
    "MemoryPreview",
    "MessagingUnavailable",
    "NewAttachment",
    "NotFound",
    "Placement",
    "PolicyConflict",
    "PurgeDetail",
    "PurgePage",
    "PurgePreview",
    "PurgeSearch",
    "PurgeStatus",
    "PurgeTouched",
    "Purgekeeper",
    "PurgekeeperError",
    "RepositoryIdentity",
    "RetentionPolicy",
    "RetentionPreview",
    "RetentionRunOutcome",
    "Run",
    "RunStatus",
    "SchemaMismatch",
    "Settings",
    "SharedAttachment",
    "StaleConfirmation",
    "StepProgress",
    "StepState",
    "ValidationError",
    "VersionConflict",
    "WorkerLeases",
    "WorkerProcess",
    "open",
]
