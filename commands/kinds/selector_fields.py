"""The checks of a ledger row's fields, shared by every kind's ``check_selectors``.

A checkpoint file whose hashes verify can still carry a row that no acceptance would have
written. Each check names the field and what is wrong with it, in ids and field names only.
Fields an acceptance does not write are allowed (a later version may add some), never needed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from purgekeeper.commands import validation
from purgekeeper.schema.errors import ValidationError
from purgekeeper.schema.ledger import from_utc_text, utc_text

MAX_LISTED_IDS = 1_000_000


class RowInvalid(ValueError):
    """A ledger row that its kind does not accept; the message says which field and why."""


def require_id(selectors: Mapping[str, Any], name: str) -> None:
    if name not in selectors:
        raise RowInvalid(f"the selectors lack {name}")
    try:
        validation.check_id(selectors[name], name)
    except ValidationError as exc:
        raise RowInvalid(exc.detail) from None


def ids(selectors: Mapping[str, Any], name: str, *, required: bool = False) -> None:
    listed = listed_values(selectors, name, required=required)
    if required and not listed:
        raise RowInvalid(f"{name} is empty")
    for value in listed:
        try:
            validation.check_id(value, name)
        except ValidationError as exc:
            raise RowInvalid(exc.detail) from None


def provider_ids(selectors: Mapping[str, Any], name: str) -> None:
    """Provider event ids as an ingest accepts them (``validation.check_provider_id``)."""
    for provider_id in listed_values(selectors, name):
        try:
            validation.check_provider_id(provider_id, name)
        except ValidationError as exc:
            raise RowInvalid(exc.detail) from None


def listed_values(selectors: Mapping[str, Any], name: str, *, required: bool = False) -> list[Any]:
    if name not in selectors:
        if required:
            raise RowInvalid(f"the selectors lack {name}")
        return []
    value = selectors[name]
    if not isinstance(value, list) or len(value) > MAX_LISTED_IDS:
        raise RowInvalid(f"{name} is not a list of ids")
    return value


def flag(selectors: Mapping[str, Any], name: str) -> None:
    if name in selectors and not isinstance(selectors[name], bool):
        raise RowInvalid(f"{name} is not true or false")


def text(value: Any, name: str, limit: int | None, *, empty: bool = False) -> None:
    if not isinstance(value, str) or (not value and not empty) or "\x00" in value:
        raise RowInvalid(f"{name} is not a text")
    if limit is not None and len(value) > limit:
        raise RowInvalid(f"{name} is longer than {limit} characters")


def optional_text(selectors: Mapping[str, Any], name: str, limit: int | None) -> None:
    value = selectors.get(name)
    if value is not None:
        text(value, name, limit)


def timestamp(selectors: Mapping[str, Any], name: str, *, required: bool = False) -> dt.datetime | None:
    """A UTC timestamp as the ledger writes it (``...Z``), parsed; or None when absent."""
    value = selectors.get(name)
    if value is None:
        if required:
            raise RowInvalid(f"the selectors lack {name}")
        return None
    if not isinstance(value, str):
        raise RowInvalid(f"{name} is not a timestamp")
    try:
        parsed = from_utc_text(value)
    except ValueError:
        raise RowInvalid(f"{name} is not a timestamp") from None
    if parsed.tzinfo is None or utc_text(parsed) != value:
        raise RowInvalid(f"{name} is not a UTC timestamp as the ledger writes it")
    return parsed
