"""The constrained field types of the HTTP API's requests, and the checks behind them.

Types are strict (``bodies._Body``): a value is never converted to the type declared. A time
is ISO 8601 text with an offset (``UtcTime``), within ``validation``'s range of times; a form
or query flag is ``true`` or ``false`` (``flag``); JSON is nested at most ``MAX_JSON_DEPTH``
levels (``Json``). A value that fails is a ``400 validation_error`` (``errors``).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import Header
from fastapi import Path as PathParam
from pydantic import AfterValidator, AwareDatetime, BeforeValidator, Field, JsonValue

from commands import validation
from commands.purge_commands import MAX_ACTOR_LENGTH, MAX_REASON_LENGTH
from schema.errors import ValidationError

MAX_JSON_DEPTH = 64
MAX_PATH_LENGTH = 4096
MAX_SEQ = 2**63 - 1

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]*$"
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def _iso_time(value: Any) -> dt.datetime:
    """A time is ISO 8601 text: pydantic would read a number, or a text of digits, as a Unix
    time (``"before": 0`` an erasure's window ending in 1970)."""
    if not isinstance(value, str):
        raise ValueError("must be an ISO 8601 time with an offset, as a string")
    try:
        return dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("must be an ISO 8601 time with an offset") from None


def flag(value: Any) -> bool:
    """A form or query flag is ``true`` or ``false``, not any text a cast would take (``1``, ``yes``, ``on``)."""
    if value not in ("true", "false"):
        raise ValueError("must be true or false")
    return value == "true"


def _utc(value: dt.datetime) -> dt.datetime:
    """In UTC and in the range of times the commands take (``validation.to_utc``)."""
    try:
        return validation.to_utc(value, "the time")
    except ValidationError as exc:  # e.g. 0001-01-01T00:00:00+01:00, 9999-12-31T23:59:59Z
        raise ValueError(exc.detail) from None


def _shallow(value: JsonValue) -> JsonValue:
    """Refuse JSON nested deeper than MAX_JSON_DEPTH, which later encoding would recurse into."""
    level: list[Any] = [value]
    for _depth in range(MAX_JSON_DEPTH):
        level = [c for v in level for c in (v.values() if isinstance(v, dict) else v if isinstance(v, list) else ())]
        if not level:
            return value
    raise ValueError(f"JSON is nested deeper than {MAX_JSON_DEPTH} levels")


def _provider_id(value: str) -> str:
    """The id another system gave an event, checked as the Python API checks it."""
    try:
        return validation.check_provider_id(value)
    except ValidationError as exc:
        raise ValueError(exc.detail) from None


Id = Annotated[str, Field(min_length=1, max_length=validation.MAX_ID_LENGTH, pattern=ID_PATTERN)]
ProviderId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=validation.MAX_PROVIDER_ID_LENGTH,
        description="printable, no whitespace: slack:T1/C1/1700000000.000100, $abc:example.org, <a@b>",
    ),
    AfterValidator(_provider_id),
]
Author = Annotated[str, Field(min_length=1, max_length=validation.MAX_AUTHOR_LENGTH)]
Actor = Annotated[str, Field(min_length=1, max_length=MAX_ACTOR_LENGTH)]
Reason = Annotated[str, Field(min_length=1, max_length=MAX_REASON_LENGTH)]
UtcTime = Annotated[AwareDatetime, BeforeValidator(_iso_time), AfterValidator(_utc)]
Json = Annotated[JsonValue, AfterValidator(_shallow)]
IdPath = Annotated[str, PathParam(min_length=1, max_length=validation.MAX_ID_LENGTH, pattern=ID_PATTERN)]
RequestId = Annotated[
    str | None,
    Header(min_length=1, max_length=validation.MAX_ID_LENGTH, pattern=ID_PATTERN, description="kept in the ledger"),
]
AttachmentName = Annotated[str, Field(min_length=1, max_length=validation.MAX_NAME_LENGTH)]
Base64Data = Annotated[
    str,
    Field(
        min_length=4,
        max_length=4 * -(-validation.MAX_ATTACHMENT_BYTES // 3),
        pattern=BASE64_PATTERN,
        description="the bytes, base64-encoded (standard alphabet, padded)",
    ),
]
