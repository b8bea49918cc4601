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
    Admission,
    Attachment,
    Bot,
    Conversation,
    Derivative,
    Event,
    Placement,
    Run,
)
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
    "ActiveRuns",
    "Admission",
    "Attachment",
    "Binding",
    "BlobState",
    "Bot",
    "BotDeleted",
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
    "Fenced",
    "IdReserved",
    "IdempotencyConflict",
    "InfrastructureError",
    "MemoryErasureUnavailable",
    "MessagingUnavailable",
    "NewAttachment",
    "NotFound",
    "Placement",
    "Purgekeeper",
    "PurgekeeperError",
    "Run",
    "RunStatus",
    "SchemaMismatch",
    "Settings",
    "StaleConfirmation",
    "ValidationError",
    "VersionConflict",
    "open",
]
