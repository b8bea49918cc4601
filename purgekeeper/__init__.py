"""purgekeeper: confirmed content purges for chat and agent hosts.

A host previews a purge, a person confirms it, and purgekeeper records the acceptance in a
hash-chained ledger, fences the content from every reader at once, and has idempotent workers
remove it from the database, the disk and a bot's Memory repository::

    import purgekeeper

    with purgekeeper.open() as pk:
        pk.create_conversation("c1")
        pk.ingest_event("c1", author="ada", body="hello")

This module is the host's and the operator's API: every public name lives here. The CLI
(``purgectl``) and the HTTP app are thin layers over the same methods. The subpackages are the
layers, each importing only the ones after it: ``commands`` (the API and its surfaces),
``workers`` (the broker, actors and scheduler), ``storage`` (what lives on disk outside the
database), ``tlog`` (the signed log and its verifier) and ``schema`` (tables, triggers, queries).
"""

__version__ = "0.2.0"


from typing import TYPE_CHECKING

from purgekeeper.commands import lazy

# The public names, imported when first used (commands/lazy.py): `import purgekeeper` and
# `purgectl --help` load no database or HTTP stack.
if TYPE_CHECKING:
    from purgekeeper.commands.attachments import NewAttachment
    from purgekeeper.commands.handle import Purgekeeper
    from purgekeeper.commands.ingest_batch import IngestResult, IngestStatus, NewEvent
    from purgekeeper.commands.opening import open
    from purgekeeper.commands.records import (
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
    from purgekeeper.commands.scope import EventScope, HeldEvent, PurgePreview
    from purgekeeper.commands.settings import Settings
    from purgekeeper.commands.touched import FailurePlace, PurgeSearch, PurgeTouched
    from purgekeeper.commands.worker_records import WorkerProcess
    from purgekeeper.schema.errors import (
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
        SigningKeyExists,
        SigningKeyMissing,
        SigningKeyUnusable,
        StaleConfirmation,
        ValidationError,
        VersionConflict,
        WitnessRefused,
    )
    from purgekeeper.schema.states import (
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
    "IngestResult",
    "IngestStatus",
    "LedgerNotCopied",
    "LedgerReport",
    "LegalHold",
    "MemoryErasureUnavailable",
    "MemoryPreview",
    "MessagingUnavailable",
    "NewAttachment",
    "NewEvent",
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
    "SigningKeyExists",
    "SigningKeyMissing",
    "SigningKeyUnusable",
    "StaleConfirmation",
    "StepProgress",
    "StepState",
    "ValidationError",
    "VersionConflict",
    "WitnessRefused",
    "WorkerLeases",
    "WorkerProcess",
    "open",
]
