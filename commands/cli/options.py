"""purgectl's option types and shared options."""

from __future__ import annotations

import datetime as dt
import decimal
import re
import shlex
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from purgekeeper.commands import surface
from purgekeeper.schema.errors import (
    ValidationError,
)

if TYPE_CHECKING:
    from purgekeeper.commands.scope import EventScope

# -- options --------------------------------------------------------------------------------------


class Timestamp(click.ParamType):
    """An ISO 8601 time with a timezone (``2024-05-01T12:00:00Z``)."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> dt.datetime:
        if isinstance(value, dt.datetime):
            return value
        try:
            parsed = dt.datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(f"{value!r} is not an ISO 8601 time", param, ctx)
        if parsed.tzinfo is None:
            self.fail(f"{value!r} has no timezone; add Z or an offset such as +02:00", param, ctx)
        return parsed


DURATION_UNITS = {"w": 604_800, "d": 86_400, "h": 3600, "m": 60, "s": 1}
NUMBER = r"[0-9]{1,12}(?:\.[0-9]{1,6})?"
DURATION = re.compile(rf"({NUMBER})|(?:{NUMBER}[wdhms])+")
DURATION_PART = re.compile(rf"({NUMBER})([wdhms])")
DURATION_SYNTAX = (
    "a number of seconds (90, 0.5), or numbers with a unit s, m, h, d or w, largest first (90s, 5m, 12h, 30d, 1h30m)"
)


class Duration(click.ParamType):
    """A duration: a plain number is seconds (``90``, ``0.5``); otherwise numbers each with
    a unit s, m, h, d or w, largest unit first, each unit once (``90s``, ``5m``, ``12h``,
    ``30d``, ``2w``, ``1h30m``). Every purgectl option that takes a duration takes this."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> dt.timedelta:
        if isinstance(value, dt.timedelta):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(f"{value!r} {exc}", param, ctx)


def parse_duration(text: str) -> dt.timedelta:
    """``text`` as ``Duration`` reads it; ValueError (saying why) if it is not one."""
    match = DURATION.fullmatch(text)
    parts = [(text, "s")] if match and match.group(1) else DURATION_PART.findall(text)
    units = [unit for _, unit in parts]
    if match is None or units != sorted(set(units), key=list(DURATION_UNITS).index):
        raise ValueError(f"is not a duration: {DURATION_SYNTAX}")
    microseconds = sum(decimal.Decimal(number) * DURATION_UNITS[unit] * 1_000_000 for number, unit in parts)
    try:
        return dt.timedelta(microseconds=int(microseconds))
    except OverflowError:
        raise ValueError("is too long a duration") from None


def duration_text(duration: dt.timedelta) -> str:
    """The duration in its largest whole unit, as ``Duration`` reads it back (``30d``)."""

    seconds = int(duration.total_seconds())
    unit = next(u for u in "wdhms" if seconds % DURATION_UNITS[u] == 0)
    return f"{seconds // DURATION_UNITS[unit]}{unit}"


def scope_options(function: Callable[..., None]) -> Callable[..., None]:
    options = [
        click.option("--event", "events", multiple=True, metavar="ID", help="An event to purge (repeatable)."),
        click.option("--conversation", metavar="ID", help="Select events in this conversation."),
        click.option("--after", type=Timestamp(), help="With --conversation: occurred_at >= TIME."),
        click.option("--before", type=Timestamp(), help="With --conversation: occurred_at < TIME."),
        click.option("--author", help="With --conversation: only this author's events."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def build_scope(
    events: Sequence[str],
    conversation: str | None,
    after: dt.datetime | None,
    before: dt.datetime | None,
    author: str | None,
) -> EventScope:
    from purgekeeper.commands.scope import EventScope  # lazy: see commands/cli/__init__.py

    if events and any(v is not None for v in (conversation, after, before, author)):
        raise ValidationError("name events with --event, or a conversation with --conversation, not both")
    if events:
        return EventScope(event_ids=tuple(events))
    if conversation is None:
        raise ValidationError("name events with --event ID, or --conversation ID with --after/--before/--author")
    return EventScope(conversation_id=conversation, after=after, before=before, author=author)


def scope_arguments(scope: EventScope) -> str:
    """The options that select ``scope`` again, for the confirm hint."""
    if scope.event_ids is not None:
        return " ".join(f"--event {shlex.quote(e)}" for e in scope.event_ids)
    parts = [f"--conversation {shlex.quote(scope.conversation_id or '')}"]
    for name, value in (("after", scope.after), ("before", scope.before)):
        if value is not None:
            parts.append(f"--{name} {surface.plain(value)}")
    if scope.author is not None:
        parts.append(f"--author {shlex.quote(scope.author)}")
    return " ".join(parts)


def who_options(function: Callable[..., None]) -> Callable[..., None]:
    function = click.option("--reason", required=True, help="Why; recorded in the ledger.")(function)
    return click.option("--actor", required=True, help="Who asks; recorded in the ledger.")(function)


idempotency_option = click.option(
    "--idempotency-key", metavar="KEY", help="Repeat safely: the same key returns the original acceptance."
)
