"""purgekeeper's host and operator API: what a host application imports.

    import commands
    with commands.open() as pk:
        pk.create_conversation("c1")
        pk.ingest_event("c1", author="ada", body="hello")

The CLI (``purgectl``) and the HTTP app are thin layers over the same methods.
"""

from commands.attachments import NewAttachment
from commands.handle import Purgekeeper, open
from commands.records import (
    Acceptance,
    Admission,
    Attachment,
    Bot,
    BotDeletionPreview,
    Conversation,
    Derivative,
    Event,
    LedgerReport,
    MemoryPreview,
    Placement,
    PurgePage,
    PurgeStatus,
    RepositoryIdentity,
    Run,
    StepProgress,
    StepState,
)
from commands.scope import EventScope, PurgePreview
from commands.settings import Settings
from schema.errors import (
    ActiveRuns,
    BotDeleted,
    Conflict,
    ContentPurged,
    ConversationDeleted,
    ConversationPurged,
    Fenced,
    IdempotencyConflict,
    IdReserved,
    InfrastructureError,
    LedgerNotCopied,
    MemoryErasureUnavailable,
    MessagingUnavailable,
    NotFound,
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

__all__ = [
    "Acceptance",
    "ActiveRuns",
    "Admission",
    "Attachment",
    "Binding",
    "BlobState",
    "Bot",
    "BotDeleted",
    "BotDeletionPreview",
    "BotState",
    "Conflict",
    "ContentPurged",
    "Conversation",
    "ConversationDeleted",
    "ConversationKind",
    "ConversationPurged",
    "ConversationState",
    "Derivative",
    "Event",
    "EventScope",
    "Fenced",
    "IdReserved",
    "IdempotencyConflict",
    "InfrastructureError",
    "LedgerNotCopied",
    "LedgerReport",
    "MemoryErasureUnavailable",
    "MemoryPreview",
    "MessagingUnavailable",
    "NewAttachment",
    "NotFound",
    "Placement",
    "PurgePage",
    "PurgePreview",
    "PurgeStatus",
    "Purgekeeper",
    "PurgekeeperError",
    "RepositoryIdentity",
    "Run",
    "RunStatus",
    "SchemaMismatch",
    "Settings",
    "StaleConfirmation",
    "StepProgress",
    "StepState",
    "ValidationError",
    "VersionConflict",
    "open",
]
