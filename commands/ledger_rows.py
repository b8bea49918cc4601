"""What each purge kind accepts in a ledger row, checked before a merge writes anything.

A checkpoint file whose hashes verify can still carry a row that no acceptance would have
written: an unknown kind, selectors that lack what the kind needs, an id longer than its
column. Appending such a row and then failing to re-apply it would leave reads closed for
good (every later merge walks the same row). ``check`` says what is wrong with a row, in ids
and field names only, or returns quietly.

The rules follow what the acceptances in ``commands/purges.py`` write; fields they do not
write are allowed (a later version may add some) but never needed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from commands import validation
from schema.errors import ValidationError
from schema.ledger import LedgerEntry
from schema.states import ConversationKind, PurgeKind
from schema.tables import ID_LENGTH

MAX_PURGE_ID_LENGTH = 64  # the lengths of purge_ledger's String(64) columns
MAX_DIGEST_LENGTH = 64
MAX_MARKER_LENGTH = 64
MAX_LISTED_IDS = 1_000_000


class RowInvalid(ValueError):
    """A ledger row that its kind does not accept; the message says which field and why."""


def check(entry: LedgerEntry) -> None:
    """Raise RowInvalid unless every field of the row is one its kind accepts."""
    _text(entry.purge_id, "purge_id", MAX_PURGE_ID_LENGTH)
    _text(entry.scope_digest, "scope_digest", MAX_DIGEST_LENGTH, empty=True)
    for name in ("request_id", "idempotency_key"):
        value = getattr(entry, name)
        if value is not None:
            _text(value, name, ID_LENGTH)
    try:
        kind = PurgeKind(entry.kind)
    except ValueError:
        raise RowInvalid(f"unknown purge kind {entry.kind[:40]!r}") from None
    SELECTORS[kind](entry.selectors)


def _content(selectors: Mapping[str, Any]) -> None:
    _ids(selectors, "event_ids", required=True)
    _ids(selectors, "already_fenced")
    for provider_id in _list(selectors, "provider_event_ids"):
        _text(provider_id, "provider_event_ids", ID_LENGTH)


def _conversation(selectors: Mapping[str, Any]) -> None:
    _id(selectors, "conversation_id")
    kind = selectors.get("conversation_kind")
    if kind is not None and kind not in {k.value for k in ConversationKind}:
        raise RowInvalid("conversation_kind is neither conversation nor channel")
    _flag(selectors, "reserved_absent_id")


def _channel(selectors: Mapping[str, Any]) -> None:
    _id(selectors, "channel_id")


def _bot(selectors: Mapping[str, Any]) -> None:
    _id(selectors, "bot_id")
    _flag(selectors, "erase_memory")
    for name, limit in (("memory_path", None), ("marker_id", MAX_MARKER_LENGTH)):
        value = selectors.get(name)
        if value is not None:
            _text(value, name, limit)
    if selectors.get("erase_memory") and not (selectors.get("memory_path") and selectors.get("marker_id")):
        raise RowInvalid("a bot row with erase_memory needs its memory_path and marker_id")


SELECTORS: dict[PurgeKind, Callable[[Mapping[str, Any]], None]] = {
    PurgeKind.CONTENT: _content,
    PurgeKind.CONVERSATION: _conversation,
    PurgeKind.CHANNEL: _channel,
    PurgeKind.BOT: _bot,
}


def _id(selectors: Mapping[str, Any], name: str) -> None:
    if name not in selectors:
        raise RowInvalid(f"the selectors lack {name}")
    try:
        validation.check_id(selectors[name], name)
    except ValidationError as exc:
        raise RowInvalid(exc.detail) from None


def _ids(selectors: Mapping[str, Any], name: str, *, required: bool = False) -> None:
    listed = _list(selectors, name, required=required)
    if required and not listed:
        raise RowInvalid(f"{name} is empty")
    for value in listed:
        try:
            validation.check_id(value, name)
        except ValidationError as exc:
            raise RowInvalid(exc.detail) from None


def _list(selectors: Mapping[str, Any], name: str, *, required: bool = False) -> list[Any]:
    if name not in selectors:
        if required:
            raise RowInvalid(f"the selectors lack {name}")
        return []
    value = selectors[name]
    if not isinstance(value, list) or len(value) > MAX_LISTED_IDS:
        raise RowInvalid(f"{name} is not a list of ids")
    return value


def _flag(selectors: Mapping[str, Any], name: str) -> None:
    if name in selectors and not isinstance(selectors[name], bool):
        raise RowInvalid(f"{name} is not true or false")


def _text(value: Any, name: str, limit: int | None, *, empty: bool = False) -> None:
    if not isinstance(value, str) or (not value and not empty) or "\x00" in value:
        raise RowInvalid(f"{name} is not a text")
    if limit is not None and len(value) > limit:
        raise RowInvalid(f"{name} is longer than {limit} characters")
