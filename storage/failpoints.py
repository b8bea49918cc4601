"""Failpoints for fault tests: named places where a worker can be made to die, hang or meet a
file-system error.

The edge (``purgekeeper.commands.worker``) arms them from ``PURGEKEEPER_FAILPOINTS``, e.g.
``bodies.batch=exit``, ``attachments.batch=hang`` or ``blobs.unlink=EIO`` (the call fails as
the system call would, with that errno); nothing is armed otherwise, and an unarmed
failpoint costs one dict lookup.
"""

from __future__ import annotations

import errno
import os
import time

ACTIONS = ("exit", "hang")
HANG_SECONDS = 3600
_armed: dict[str, str] = {}


def arm(spec: str) -> None:
    """Arm ``name=action`` pairs, comma-separated; an action is one of ``ACTIONS`` or the
    name of an errno (``EIO``, ``ENOSPC``, ``EACCES``, ``EROFS``, ...)."""
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        if action not in ACTIONS and not isinstance(getattr(errno, action, None), int):
            raise ValueError(f"failpoint {name!r}: action must be one of {ACTIONS} or an errno name, not {action!r}")
        _armed[name] = action


def disarm() -> None:
    _armed.clear()


def hit(name: str) -> None:
    action = _armed.get(name)
    if action is None:
        return
    if action == "exit":
        os._exit(137)  # as if killed: no cleanup, no lease released
    if action == "hang":
        time.sleep(HANG_SECONDS)
    else:
        code = getattr(errno, action)
        raise OSError(code, os.strerror(code))
