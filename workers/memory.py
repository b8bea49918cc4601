"""A bot's Memory repository on disk, and the ownership marker that proves it is the bot's.

``register_bot`` writes the marker inside the repository's ``.git/`` directory, so
``git clean`` cannot remove it. It names the bot and holds a random marker id.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from workers.files import atomic_write

MARKER_NAME = "purgekeeper-owner.json"
MARKER_FORMAT = 1


@dataclass(frozen=True)
class Marker:
    bot_id: str
    marker_id: str


def git_dir(repository: Path) -> Path:
    return repository / ".git"


def marker_path(repository: Path) -> Path:
    return git_dir(repository) / MARKER_NAME


def read_marker(repository: Path) -> Marker | None:
    """The marker in the repository, or None if it is missing or unreadable."""
    try:
        data = json.loads(marker_path(repository).read_text("utf-8"))
        return Marker(bot_id=str(data["bot_id"]), marker_id=str(data["marker_id"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_marker(repository: Path, bot_id: str) -> Marker:
    """Write a fresh marker for ``bot_id`` atomically; returns it."""
    marker = Marker(bot_id=bot_id, marker_id=secrets.token_hex(16))
    payload = {"format": MARKER_FORMAT, "bot_id": marker.bot_id, "marker_id": marker.marker_id}
    atomic_write(marker_path(repository), json.dumps(payload).encode("utf-8"), prefix=".purgekeeper-owner-")
    return marker


def remove_marker(repository: Path, marker: Marker) -> None:
    """Remove the marker if it is still this one (undoing a registration that failed)."""
    if read_marker(repository) == marker:
        with contextlib.suppress(FileNotFoundError):
            marker_path(repository).unlink()
