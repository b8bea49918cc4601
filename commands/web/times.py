"""Times as the console shows them: relative to the database's now ("3 min ago", "in 40 s"),
a due time that has passed as "overdue by 27 s", with the absolute UTC time alongside, and
spans ("1.4 s", "2 h 5 min").

The console takes ``now`` from the database clock, the clock every stored time comes from, so
a web server whose own clock drifts still says how long ago a step ran.
"""

from __future__ import annotations

import datetime as dt

# The unit a span is told in: the largest that fits, and the next one down for precision.
UNITS = (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1))
JUST_NOW = dt.timedelta(seconds=1)


def utc(moment: dt.datetime) -> str:
    """ISO 8601 in UTC with a ``Z``, to the second: ``2026-12-01T09:30:00Z``."""
    return moment.astimezone(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def relative(moment: dt.datetime, now: dt.datetime) -> str:
    """``moment`` seen from ``now``, in its largest whole unit: "3 min ago", "in 40 s", "now"."""
    delta = moment - now
    if abs(delta) < JUST_NOW:
        return "now"
    told = _largest_unit(abs(delta))
    return f"in {told}" if delta > dt.timedelta(0) else f"{told} ago"


def due(moment: dt.datetime, now: dt.datetime) -> str:
    """When something is due, seen from ``now``: "in 40 s", "now", or, once its time has
    passed and nobody has taken it, "overdue by 27 s" (never "27 s ago", which reads as done)."""
    delta = moment - now
    if abs(delta) < JUST_NOW:
        return "now"
    told = _largest_unit(abs(delta))
    return f"in {told}" if delta > dt.timedelta(0) else f"overdue by {told}"


def span(delta: dt.timedelta) -> str:
    """A duration: "0.35 s", "2.4 s", "40 s", "3 min 20 s", "2 h 5 min" (two units at most)."""
    seconds = delta.total_seconds()
    if seconds < 0:
        return "-" + span(-delta)
    if seconds == 0:
        return "0 s"
    if seconds < 1:
        return f"{seconds:.2f} s"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    counts: list[tuple[int, str]] = []
    for name, size in UNITS:
        count, whole = divmod(whole, size)
        counts.append((count, name))
    first = next(index for index, (count, _name) in enumerate(counts) if count)
    return " ".join(f"{count} {name}" for count, name in counts[first : first + 2] if count)


def _largest_unit(delta: dt.timedelta) -> str:
    seconds = int(delta.total_seconds())
    name, size = next((name, size) for name, size in UNITS if seconds >= size)
    return f"{seconds // size} {name}"
