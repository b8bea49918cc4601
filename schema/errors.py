"""The purgekeeper exception tree, and the one place database errors become domain errors.

    PurgekeeperError
    ├── ValidationError            bad input; nothing was written
    ├── NotFound                   an unknown id
    ├── Conflict
    │   ├── StaleConfirmation      the scope changed since its preview
    │   ├── VersionConflict        the conversation moved past expected_version
    │   ├── IdempotencyConflict    the key was used for another scope
    │   ├── ActiveRuns             a non-terminal run blocks the purge
    │   ├── LegalHold              a legal hold covers the selected content; names the holds
    │   ├── PolicyConflict         another retention policy already governs the scope
    │   ├── CleanupNotComplete     the purge's cleanup has not completed (no completion statement)
    │   └── SigningKeyExists       ``ledger key init`` never replaces a signing key
    ├── Fenced
    │   ├── ConversationPurged
    │   ├── ConversationDeleted
    │   ├── ContentPurged
    │   ├── BotDeleted
    │   ├── IdReserved
    │   └── AuthorErased           an author erasure covers the event, or closes the author
    ├── MemoryErasureUnavailable   carries a machine-readable ``reason``
    ├── MessagingUnavailable       carries bounded ``diagnostics``
    └── InfrastructureError        transient database, broker or filesystem faults
        ├── LedgerNotCopied        accepted and fenced, but not yet in the copy outside
        ├── LockTimeout            a row stayed locked by another session past the bound
        ├── SchemaMismatch         the database schema is newer than this code
        ├── SigningKeyUnusable     the signed log's key cannot be used (names its file)
        │   └── SigningKeyMissing  ... because it is not there: it is never made for a log that signed
        └── WitnessRefused         a witness refused the log's newest checkpoint (another history)

Each class's docstring is its default message. The database triggers raise errors whose
message starts with ``purgekeeper:<code>``; :func:`translate_db_error` maps those codes and
the named constraints to this tree, so a client that bypasses the library and a client
that uses it see the same refusal.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import exc as sa_exc


class PurgekeeperError(Exception):
    """purgekeeper refused the request."""

    def __init__(self, detail: str | None = None) -> None:
        self.detail = detail or (self.__doc__ or "").strip().splitlines()[0]
        super().__init__(self.detail)

    @property
    def code(self) -> str:
        """The class name in snake_case, as the HTTP API reports it."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", type(self).__name__).lower()


class ValidationError(PurgekeeperError):
    """The request is not valid; nothing was written."""


class NotFound(PurgekeeperError):
    """No such id."""


class Conflict(PurgekeeperError):
    """The request conflicts with the current state."""


class StaleConfirmation(Conflict):
    """The purge scope changed since it was previewed; preview it again."""


class VersionConflict(Conflict):
    """The conversation changed since the expected version."""


class IdempotencyConflict(Conflict):
    """The idempotency key was already used for a different request."""


class ActiveRuns(Conflict):
    """A non-terminal run is affected; settle or abandon it first."""

    def __init__(self, detail: str | None = None, *, run_ids: Sequence[str] = ()) -> None:
        self.run_ids = tuple(run_ids)
        super().__init__(detail)


class LegalHold(Conflict):
    """A legal hold covers the selected content; release the hold first."""

    def __init__(self, detail: str | None = None, *, hold_ids: Sequence[str] = ()) -> None:
        self.hold_ids = tuple(hold_ids)
        super().__init__(detail)


class PolicyConflict(Conflict):
    """Another retention policy already governs this scope; change or remove it instead."""


class CleanupNotComplete(Conflict):
    """The purge's cleanup has not completed: there is no completion statement for it yet."""


class SigningKeyExists(Conflict):
    """The ledger's signing key exists already: purgectl ledger key init never replaces one."""


class Fenced(PurgekeeperError):
    """The target is fenced by a purge or a deletion."""


class ConversationPurged(Fenced):
    """The conversation has been purged."""


class ConversationDeleted(Fenced):
    """The channel has been deleted; it takes no new content."""


class ContentPurged(Fenced):
    """The content has been purged."""


class BotDeleted(Fenced):
    """The bot has been deleted."""


class IdReserved(Fenced):
    """The id belongs to a purged or deleted identity and is never reused."""


class AuthorErased(Fenced):
    """Content by this author is erased."""


class MemoryErasureUnavailable(PurgekeeperError):
    """Memory erasure is unavailable: ownership of the repository cannot be proven."""

    def __init__(self, detail: str | None = None, *, reason: str = "unprovable") -> None:
        self.reason = reason
        super().__init__(detail)


class MessagingUnavailable(PurgekeeperError):
    """Messaging is unavailable until the purge ledger is consistent again."""

    MAX_DIAGNOSTICS = 20

    def __init__(self, detail: str | None = None, *, diagnostics: Sequence[str] = ()) -> None:
        self.diagnostics = tuple(diagnostics)[: self.MAX_DIAGNOSTICS]
        super().__init__(detail)


class InfrastructureError(PurgekeeperError):
    """A transient database, broker or filesystem fault; the request may be retried."""


class SchemaMismatch(InfrastructureError):
    """The database schema does not match this version of purgekeeper."""


class LedgerNotCopied(InfrastructureError):
    """The purge is accepted and fenced, but its ledger row is not yet in the checkpoint
    directory; retrying with the same idempotency key, the next acceptance or the scheduler
    completes the copy."""

    def __init__(self, detail: str | None = None, *, purge_id: str = "", ledger_seq: int = 0) -> None:
        self.purge_id = purge_id
        self.ledger_seq = ledger_seq
        super().__init__(detail)


class LockTimeout(InfrastructureError):
    """A row this transaction needs stayed locked by another session past the lock timeout."""


class SigningKeyUnusable(InfrastructureError):
    """The signed log's signing key cannot be used: no checkpoint, receipt or statement is
    signed until the operator fixes it (the ledger's copy is written all the same, and the log
    catches up at the next signing). The message names the key's file, never its contents."""


class SigningKeyMissing(SigningKeyUnusable):
    """The signed log's signing key is missing: restore it, or make one with purgectl ledger
    key init (a log that has signed needs its own key back, or a new origin)."""


class WitnessRefused(InfrastructureError):
    """A witness of the signed log refused its newest checkpoint: the witness has cosigned
    another history of this log (a restore from an old backup, or a fork). The message names
    the witness and its reason; the log stays unwitnessed until the operator resolves it."""


# Codes raised by the triggers in schema/sql/*/. The SQL files spell the same strings.
TRIGGER_ERRORS: dict[str, type[PurgekeeperError]] = {
    "conversation_purged": ConversationPurged,
    "conversation_deleted": ConversationDeleted,
    "content_purged": ContentPurged,
    "bot_deleted": BotDeleted,
    "id_reserved": IdReserved,
    "author_erased": AuthorErased,
    "legal_hold": LegalHold,
    "ledger_append_only": ValidationError,
    "tombstone_permanent": ValidationError,
    "invalid_change": ValidationError,
    "blob_not_present": ContentPurged,
}

# Named constraints (schema/tables.py) whose violation is a caller's mistake.
CONSTRAINT_ERRORS: dict[str, tuple[type[PurgekeeperError], str]] = {
    "pk_conversations": (Conflict, "a conversation with this id already exists"),
    "pk_bots": (Conflict, "a bot with this id already exists"),
    "pk_events": (Conflict, "an event with this id already exists"),
    "pk_runs": (Conflict, "a run with this id already exists"),
    "pk_placements": (ValidationError, "the event is already placed in this conversation"),
    "uq_events_provider_event_id": (ValidationError, "provider_event_id is already used"),
    "fk_conversations_bot_id_bots": (NotFound, "no such bot"),
    "fk_placements_event_id_events": (NotFound, "no such event"),
    "fk_placements_conversation_id_conversations": (NotFound, "no such conversation"),
    "fk_runs_conversation_id_conversations": (NotFound, "no such conversation"),
    "fk_runs_bot_id_bots": (NotFound, "no such bot"),
    "fk_admissions_event_id_events": (NotFound, "no such event"),
    "fk_admissions_run_id_runs": (NotFound, "no such run"),
    "fk_attachments_blob_id_blobs": (NotFound, "no such blob"),
    # a REPEATABLE READ writer whose snapshot predates a reservation meets it here (0006)
    "pk_identity_reservations": (IdReserved, "the id belongs to a purged or deleted identity and is never reused"),
}

# SQLite names no constraint in its messages; it names the columns instead.
_SQLITE_UNIQUE_COLUMNS: dict[str, str] = {
    "conversations.id": "pk_conversations",
    "bots.id": "pk_bots",
    "events.id": "pk_events",
    "runs.id": "pk_runs",
    "placements.event_id, placements.conversation_id": "pk_placements",
    "events.provider_event_id": "uq_events_provider_event_id",
}

_TRIGGER_CODE = re.compile(r"purgekeeper:([a-z_]+)(?::\s*(.*))?", re.S)
# psycopg SQLSTATEs that mean "run the transaction again".
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})
LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout expired


def translate_db_error(exc: BaseException) -> PurgekeeperError | None:
    """Map a driver error to the domain error it stands for, or None if it is not ours."""
    sa_exc = _driver_errors()
    if not isinstance(exc, sa_exc.DBAPIError):
        return None
    message = str(exc.orig)
    match = _TRIGGER_CODE.search(message)
    if match and match.group(1) in TRIGGER_ERRORS:
        detail = (match.group(2) or "").strip().splitlines()[0:1]
        return TRIGGER_ERRORS[match.group(1)](detail[0] if detail else None)
    constraint = _constraint_name(exc)
    if constraint in CONSTRAINT_ERRORS:
        cls, detail_text = CONSTRAINT_ERRORS[constraint]
        return cls(detail_text)
    if getattr(exc.orig, "sqlstate", None) == LOCK_NOT_AVAILABLE:
        return LockTimeout()
    if is_retryable(exc) or isinstance(exc, sa_exc.OperationalError):
        return InfrastructureError(f"database unavailable: {type(exc.orig).__name__}")
    return None


# SQLSTATEs of a server that went away or is not there yet: a restart, a failover, an
# administrator ending the session (class 08 is "connection exception").
CONNECTION_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})


def connection_lost(exc: BaseException) -> bool:
    """The error (or one it was raised from) is a lost or refused database connection: a
    restart or a failover, worth waiting out; not an error the server will give again."""
    sa_exc = _driver_errors()
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, sa_exc.DBAPIError):
            if seen.connection_invalidated:
                return True
            sqlstate = getattr(seen.orig, "sqlstate", None)
            if isinstance(seen, sa_exc.OperationalError) and sqlstate is None:
                return True  # no server answered (refused, reset, timed out)
            if sqlstate is not None and (sqlstate.startswith("08") or sqlstate in CONNECTION_SQLSTATES):
                return True
        seen = seen.__cause__ or seen.__context__
    return False


def is_retryable(exc: BaseException) -> bool:
    """Deadlocks, serialization failures and a locked SQLite database are worth a rerun."""
    sa_exc = _driver_errors()
    if not isinstance(exc, sa_exc.DBAPIError):
        return False
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if sqlstate in RETRYABLE_SQLSTATES:
        return True
    text = str(exc.orig).lower()
    return "database is locked" in text or "database table is locked" in text


def _driver_errors() -> Any:
    """``sqlalchemy.exc``, imported on first use rather than with this module: purgectl's
    ``--help`` imports the errors, and must not load SQLAlchemy to print its usage."""
    from sqlalchemy import exc

    return exc


def _constraint_name(exc: sa_exc.DBAPIError) -> str | None:
    diag = getattr(exc.orig, "diag", None)
    name = getattr(diag, "constraint_name", None)
    if name:
        return str(name)
    text = str(exc.orig)
    for prefix in ("UNIQUE constraint failed: ", "PRIMARY KEY constraint failed: "):
        if text.startswith(prefix):
            return _SQLITE_UNIQUE_COLUMNS.get(text[len(prefix) :].strip())
    return None
