"""Input checks: bad input raises ``ValidationError`` before anything is written.

The limits are part of the contract and are listed in the manual (docs/reference/errors.md):

=============================  ==========================================================
value                          limit
=============================  ==========================================================
ids (conversation, event, …)   1 to 200 characters of ``A-Z a-z 0-9 . _ : @ + -``, starting
                               with a letter or digit
provider event id              1 to 200 printable characters: any letter, digit, punctuation
                               or symbol (``slack:T1/C1/1700000000.000100``,
                               ``$abc:example.org``, ``<CAF=x+y@mail.gmail.com>``, a URL); no
                               whitespace, control or format characters, lone surrogates
author, bot name               1 to 200 characters, no NUL
body                           ``None``, or 1 byte to 256 KiB of UTF-8 text, no NUL
attachment name                1 to 255 characters (and bytes of UTF-8); no ``/``, ``\\``, ``..``,
                               NUL or control characters
attachment bytes               at most 64 MiB each, at most 32 attachments per event
payload, run output            JSON-serialisable, at most 256 KiB once serialised
derivative kind                1 to 64 characters; at most 1,000 source events
times (occurred_at, after,     timezone-aware, and once in UTC from ``EARLIEST_MOMENT``
before, since, until)          (0002-01-01T00:00:00Z) to ``LATEST_MOMENT``
                               (9998-12-31T23:59:59.999999Z)
=============================  ==========================================================

The range of times leaves a year of room at both ends of what a ``datetime`` holds (years 1
to 9999): an erasure's window ends one microsecond after the author's latest event, and a
time is shown in any local zone (an offset of up to a day), so no arithmetic on a time that
came from input can overflow. Every time a command takes goes through ``to_utc``: the
Python API, HTTP and the CLI refuse the same times with the same ``ValidationError``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Sequence
from typing import Any

from purgekeeper.schema.errors import ValidationError

MAX_ID_LENGTH = 200
MAX_PROVIDER_ID_LENGTH = 200  # purgekeeper.schema.tables.ID_LENGTH: the events and tombstones columns
MAX_AUTHOR_LENGTH = 200
MAX_BOT_NAME_LENGTH = 200
MAX_BODY_BYTES = 256 * 1024
MAX_NAME_LENGTH = 255
MAX_ATTACHMENT_BYTES = 64 * 1024 * 1024
MAX_ATTACHMENTS_PER_EVENT = 32
MAX_PAYLOAD_BYTES = 256 * 1024
MAX_OUTPUT_BYTES = 256 * 1024
MAX_DERIVATIVE_KIND_LENGTH = 64
MAX_DERIVATIVE_SOURCES = 1000
EARLIEST_MOMENT = dt.datetime(2, 1, 1, tzinfo=dt.UTC)  # the accepted range of times: see above
LATEST_MOMENT = dt.datetime(9998, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC)

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1


def check_id(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string, not {type(value).__name__}")
    if not value:
        raise ValidationError(f"{field} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise ValidationError(f"{field} is longer than {MAX_ID_LENGTH} characters")
    if not _ID.fullmatch(value):
        raise ValidationError(
            f"{field} may hold only letters, digits and . _ : @ + -, and must start with a letter or digit"
        )
    return value


def check_optional_id(value: Any, field: str) -> str | None:
    return None if value is None else check_id(value, field)


def check_provider_id(value: Any, field: str = "provider_event_id") -> str:
    """An id another system gave the event, kept as it came: Slack's ``T1/C1/<ts>``, Matrix's
    ``$id:server``, an email ``<Message-ID>``, a URL. Any printable text without whitespace
    (one token: a trailing space would make two ids look alike), so no control, format or
    separator character, and no lone surrogate."""
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string, not {type(value).__name__}")
    if not value:
        raise ValidationError(f"{field} must not be empty")
    if len(value) > MAX_PROVIDER_ID_LENGTH:
        raise ValidationError(f"{field} is longer than {MAX_PROVIDER_ID_LENGTH} characters")
    _check_encodable(value, field)
    if not value.isprintable() or any(character.isspace() for character in value):
        raise ValidationError(f"{field} must be printable text without whitespace or control characters")
    return value


def check_optional_provider_id(value: Any, field: str = "provider_event_id") -> str | None:
    return None if value is None else check_provider_id(value, field)


def check_text(value: Any, field: str, *, max_length: int) -> str:
    """A required short text: not empty, no NUL, at most ``max_length`` characters."""
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string, not {type(value).__name__}")
    _check_encodable(value, field)
    if not value.strip():
        raise ValidationError(f"{field} must not be empty")
    if len(value) > max_length:
        raise ValidationError(f"{field} is longer than {max_length} characters")
    if "\x00" in value:
        raise ValidationError(f"{field} must not contain NUL")
    return value


def check_body(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"body must be a string or None, not {type(value).__name__}")
    if not value:
        raise ValidationError("body must not be empty; pass None for an event without a body")
    _check_encodable(value, "body")
    if "\x00" in value:
        raise ValidationError("body must not contain NUL")
    if len(value.encode("utf-8")) > MAX_BODY_BYTES:
        raise ValidationError(f"body is larger than {MAX_BODY_BYTES} bytes")
    return value


def check_name(value: Any) -> str:
    """An attachment name: a single path component a file system can hold."""
    name = check_text(value, "attachment name", max_length=MAX_NAME_LENGTH)
    if "/" in name or "\\" in name:
        raise ValidationError("attachment name must not contain a path separator")
    if ".." in name or name in (".",):
        raise ValidationError("attachment name must not contain '..' or be '.'")
    if _CONTROL.search(name):
        raise ValidationError("attachment name must not contain control characters")
    if name != name.strip():
        raise ValidationError("attachment name must not start or end with whitespace")
    if len(name.encode("utf-8")) > MAX_NAME_LENGTH:
        raise ValidationError(f"attachment name is longer than {MAX_NAME_LENGTH} bytes of UTF-8")
    return name


def check_data(value: Any) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise ValidationError(f"attachment data must be bytes, not {type(value).__name__}")
    data = bytes(value)
    if not data:
        raise ValidationError("attachment data must not be empty")
    if len(data) > MAX_ATTACHMENT_BYTES:
        raise ValidationError(f"attachment is larger than {MAX_ATTACHMENT_BYTES} bytes")
    return data


def check_occurred_at(value: Any) -> dt.datetime | None:
    return check_optional_moment(value, "occurred_at")


def check_optional_moment(value: Any, field: str) -> dt.datetime | None:
    """None, or a timezone-aware datetime in the accepted range (``to_utc``), in UTC."""
    if value is None:
        return None
    if not isinstance(value, dt.datetime):
        raise ValidationError(f"{field} must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(f"{field} must be timezone-aware")
    return to_utc(value, field)


def to_utc(value: dt.datetime, field: str) -> dt.datetime:
    """An aware datetime in UTC, from ``EARLIEST_MOMENT`` to ``LATEST_MOMENT``; one outside
    that range (or that UTC cannot hold at all: year 1 or 9999 at the edge) is bad input."""
    try:
        utc = value.astimezone(dt.UTC)
    except OverflowError:
        utc = None
    if utc is None or not EARLIEST_MOMENT <= utc <= LATEST_MOMENT:
        raise ValidationError(f"{field} must lie from {_iso(EARLIEST_MOMENT)} to {_iso(LATEST_MOMENT)} (UTC)")
    return utc


def _iso(moment: dt.datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def check_json(value: Any, field: str, *, max_bytes: int) -> str:
    """A JSON-serialisable value, returned as its compact JSON text."""
    if value is None:
        raise ValidationError(f"{field} must not be None")
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{field} must be JSON-serialisable: {exc}") from exc
    except RecursionError:
        raise ValidationError(f"{field} is nested too deeply") from None
    if text in ('""', "{}", "[]"):
        raise ValidationError(f"{field} must not be empty")
    _check_encodable(text, field)
    # A NUL inside a string is stored escaped (\u0000) in the JSON text, which both backends hold.
    if len(text.encode("utf-8")) > max_bytes:
        raise ValidationError(f"{field} is larger than {max_bytes} bytes once serialised")
    return text


def check_optional_json(value: Any, field: str, *, max_bytes: int) -> str | None:
    return None if value is None else check_json(value, field, max_bytes=max_bytes)


def check_id_list(values: Any, field: str, *, max_count: int) -> list[str]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | set | frozenset):
        raise ValidationError(f"{field} must be a list of ids")
    ids = [check_id(v, field) for v in values]
    if len(ids) > max_count:
        raise ValidationError(f"{field} holds more than {max_count} ids")
    return list(dict.fromkeys(ids))


def _check_encodable(value: str, field: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{field} is not valid Unicode text (a lone surrogate?)") from exc


def check_choice(value: Any, field: str, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValidationError(f"{field} must be one of {', '.join(choices)}; got {value!r}")
    return value
