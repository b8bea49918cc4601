"""What the CLI and the HTTP API share: how each error is reported, and records as JSON.

docs/design.md's error table, in one place:

    error                                              HTTP  CLI exit code
    ValidationError                                    400   2
    NotFound                                           404   1
    conflicts, IdReserved, MemoryErasureUnavailable    409   3
    the other fences                                   410   3
    MessagingUnavailable, InfrastructureError          503   4

The body of an error (HTTP, and ``purgectl --json``) is ``{"error": CODE, "detail": ...}``
where CODE is the class name in snake_case; a few errors add machine-readable fields
(``reason``, ``diagnostics``, ``run_ids``, ``hold_ids``). Never a traceback, never content.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from purgekeeper.schema.errors import (
    ActiveRuns,
    Conflict,
    Fenced,
    IdReserved,
    InfrastructureError,
    LedgerNotCopied,
    LegalHold,
    MemoryErasureUnavailable,
    MessagingUnavailable,
    NotFound,
    PurgekeeperError,
    ValidationError,
)

# (class, HTTP status, CLI exit code); the first match wins, so IdReserved precedes Fenced.
ERROR_TABLE: tuple[tuple[type[PurgekeeperError], int, int], ...] = (
    (ValidationError, 400, 2),
    (NotFound, 404, 1),
    (Conflict, 409, 3),
    (IdReserved, 409, 3),
    (MemoryErasureUnavailable, 409, 3),
    (Fenced, 410, 3),
    (MessagingUnavailable, 503, 4),
    (InfrastructureError, 503, 4),
)
UNKNOWN_ERROR = (503, 4)


def _row(error: PurgekeeperError) -> tuple[int, int]:
    for cls, status, code in ERROR_TABLE:
        if isinstance(error, cls):
            return status, code
    return UNKNOWN_ERROR


def http_status(error: PurgekeeperError) -> int:
    return _row(error)[0]


def exit_code(error: PurgekeeperError) -> int:
    return _row(error)[1]


def error_body(error: PurgekeeperError) -> dict[str, Any]:
    """``{"error": CODE, "detail": ...}`` plus the error's machine-readable fields."""
    body: dict[str, Any] = {"error": error.code, "detail": error.detail}
    if isinstance(error, MemoryErasureUnavailable):
        body["reason"] = error.reason
    if isinstance(error, MessagingUnavailable):
        body["diagnostics"] = list(error.diagnostics)
    if isinstance(error, ActiveRuns):
        body["run_ids"] = list(error.run_ids)
    if isinstance(error, LegalHold):
        body["hold_ids"] = list(error.hold_ids)
    if isinstance(error, LedgerNotCopied):  # accepted and fenced: the host keeps the purge id
        body["purge_id"], body["ledger_seq"] = error.purge_id, error.ledger_seq
    return body


def plain(value: Any) -> Any:
    """A record (frozen dataclasses, tuples, datetimes, enums, paths) as JSON-ready values.
    Datetimes are UTC ISO 8601 with a ``Z``; durations are seconds."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
        return int(seconds) if seconds.is_integer() else seconds
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(item) for item in value]
    if isinstance(value, bytes):
        raise TypeError("bytes are content: they are never serialised")
    return value
