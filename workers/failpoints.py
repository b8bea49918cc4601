"""Failpoints for fault tests: named places where a worker can be made to die or hang.

The edge (``commands.worker``) arms them from ``PURGEKEEPER_FAILPOINTS``, e.g.
``bodies.batch=exit`` or ``attachments.batch=hang``; nothing is armed otherwise, and an
unarmed failpoint costs one dict lookup.
"""

from __future__ import annotations

import os
import time

ACTIONS = ("exit", "hang")
HANG_SECONDS = 3600
_armed: dict[str, str] = {}


def arm(spec: str) -> None:
    """Arm ``name=action`` pairs, comma-separated."""
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        if action not in ACTIONS:
            raise ValueError(f"failpoint {name!r}: action must be one of {ACTIONS}, not {action!r}")
        _armed[name] = action


def disarm() -> None:
    _armed.clear()


def hit(name: str) -> None:
    action = _armed.get(name)
    if action == "exit":
        os._exit(137)  # as if killed: no cleanup, no lease released
    if action == "hang":
        time.sleep(HANG_SECONDS)
