"""The constrained field types of the HTTP API's requests, and the checks behind them.

Types are strict (``bodies._Body``): a value is never converted to the type declared. A time
is ISO 8601 text with an offset (``UtcTime``), within ``validation``'s range of times; a form
or query flag is ``true`` or ``false`` (``flag``); JSON is nested at most ``MAX_JSON_DEPTH``
levels (``Json``), and a payload is not null or empty (``Payload``, ``Output``); an integer may
be written ``3.0``, which JSON Schema counts as an integer (``whole``, after its ``Field``). A value that
fails is a ``400 validation_error`` (``errors``).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import Header
from fastapi import Path as PathParam
from pydantic import AfterValidator, AwareDatetime, BeforeValidator, Field, JsonValue

from purgekeeper.commands import validation
from purgekeeper.commands.purge_commands import MAX_ACTOR_LENGTH, MAX_REASON_LENGTH
from purgekeeper.schema.errors import ValidationError

MAX_JSON_DEPTH = 64
MAX_PATH_LENGTH = 4096
MAX_SEQ = 2**53 - 1  # the largest integer a JSON number holds exactly (a float64, as most clients read it)
EMPTY_JSON: tuple[JsonValue, ...] = ("", {}, [])

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]*$"
# What the commands check of a text (``validation``), stated in the document: each is checked
# by the command the route calls, with its own message, and so is not enforced here twice.
TEXT_PATTERN = r"^[^\x00]*[^\s\x00][^\x00]*$"  # check_text: not blank, no NUL
NUL = r"\x00"  # check_body: a body holds no NUL (as a "not", which a pattern and a length 262144 would not be)
PROVIDER_ID_PATTERN = r"^[^\s\x00-\x1f\x7f-\x9f]+$"  # check_provider_id, as far as a pattern can say
# check_name: not "." and no "..", no separator, no control character, no space at either end
NAME_PATTERN = r"^(?!\.$)(?!.*\.\.)[^\s\x00-\x1f\x7f-\x9f/\\](?:[^\x00-\x1f\x7f-\x9f/\\]*[^\s\x00-\x1f\x7f-\x9f/\\])?$"
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


def whole(value: Any) -> Any:
    """A JSON number with no fraction is an integer, as JSON Schema counts it (``3.0`` is 3);
    any other value is left to the strict ``int`` (``true`` and ``"3"`` are not)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _not_empty(value: JsonValue) -> JsonValue:
    """A payload or an output is some JSON, not an empty string, object or list (as the Python
    API checks it)."""
    if value in EMPTY_JSON:
        raise ValueError("must not be empty")
    return value


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


def stated(pattern: str) -> dict[str, Any]:
    """A ``pattern`` for the document alone (the command checks it)."""
    return {"pattern": pattern}


def text(max_length: int) -> Any:
    """A short text as ``validation.check_text`` takes it: 1 to ``max_length`` characters,
    not blank, no NUL."""
    return Field(min_length=1, max_length=max_length, json_schema_extra=stated(TEXT_PATTERN))


Id = Annotated[str, Field(min_length=1, max_length=validation.MAX_ID_LENGTH, pattern=ID_PATTERN)]
ProviderId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=validation.MAX_PROVIDER_ID_LENGTH,
        description="printable, no whitespace: slack:T1/C1/1700000000.000100, $abc:example.org, <a@b>",
        json_schema_extra=stated(PROVIDER_ID_PATTERN),
    ),
    AfterValidator(_provider_id),
]
Author = Annotated[str, text(validation.MAX_AUTHOR_LENGTH)]
EventBody = Annotated[
    str, Field(min_length=1, max_length=validation.MAX_BODY_BYTES, json_schema_extra={"not": {"pattern": NUL}})
]
Actor = Annotated[str, text(MAX_ACTOR_LENGTH)]
Reason = Annotated[str, text(MAX_REASON_LENGTH)]
UtcTime = Annotated[AwareDatetime, BeforeValidator(_iso_time), AfterValidator(_utc)]
Json = Annotated[JsonValue, AfterValidator(_shallow)]
Payload = Annotated[
    JsonValue,
    Field(json_schema_extra={"not": {"enum": [None, *EMPTY_JSON]}}, description="any JSON but null, '', {} or []"),
    AfterValidator(_shallow),
    AfterValidator(_not_empty),
]
Output = Annotated[
    JsonValue,
    Field(json_schema_extra={"not": {"enum": list(EMPTY_JSON)}}, description="any JSON but '', {} or []"),
    AfterValidator(_shallow),
    AfterValidator(_not_empty),
]
IdPath = Annotated[str, PathParam(min_length=1, max_length=validation.MAX_ID_LENGTH, pattern=ID_PATTERN)]
RequestId = Annotated[
    str | None,
    Header(min_length=1, max_length=validation.MAX_ID_LENGTH, pattern=ID_PATTERN, description="kept in the ledger"),
]
AttachmentName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=validation.MAX_NAME_LENGTH,
        description=f"one file name: at most {validation.MAX_NAME_LENGTH} bytes of UTF-8, no / or \\, not . or ..",
        json_schema_extra=stated(NAME_PATTERN),
    ),
]
Base64Data = Annotated[
    str,
    Field(
        min_length=4,
        max_length=4 * -(-validation.MAX_ATTACHMENT_BYTES // 3),
        pattern=BASE64_PATTERN,
        description="the bytes, base64-encoded (standard alphabet, padded)",
    ),
]
