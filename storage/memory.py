"""A bot's Memory repository on disk, and the ownership marker that proves it is the bot's.

``register_bot`` writes the marker inside the repository's ``.git/`` directory, so
``git clean`` cannot remove it. It names the bot and holds a random marker id.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from purgekeeper.storage.files import atomic_write

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


# -- proving ownership --------------------------------------------------------------------
# Each reason is machine-readable (MemoryErasureUnavailable.reason); the text explains it.
OWNERSHIP_REASONS = {
    "no_repository": "the bot has no Memory repository",
    "unresolved": "the path does not resolve to an existing directory",
    "symlink_on_path": "there is a symlink on the path (or .git is one)",
    "filesystem_root": "the path is a filesystem root",
    "home_directory": "the path is a home directory",
    "memory_root": "the path is a Memory root itself",
    "shared_with_other_bot": "another bot's repository is at the same path",
    "nested_in_other_bot": "the path is inside another bot's repository",
    "contains_other_bot": "the path contains another bot's repository",
    "marker_missing": "the ownership marker is missing or unreadable",
    "marker_names_other_bot": "the ownership marker names another bot",
    "marker_changed": "the ownership marker is not the one recorded at registration",
    "identity_changed": "the repository is not the one that was reviewed",
}


@dataclass(frozen=True)
class Ownership:
    """Whether the repository provably belongs to the bot alone, and if not, why."""

    provable: bool
    reason: str | None = None
    detail: str | None = None

    @classmethod
    def refused(cls, reason: str, detail: str | None = None) -> Ownership:
        return cls(provable=False, reason=reason, detail=detail or OWNERSHIP_REASONS[reason])


PROVEN = Ownership(provable=True)


def prove_ownership(
    path: str | Path,
    *,
    bot_id: str,
    marker_id: str | None,
    memory_roots: Iterable[str | Path] = (),
    other_repositories: Iterable[str | Path] = (),
    home_directories: Iterable[str | Path] | None = None,
) -> Ownership:
    """Prove that ``path`` is ``bot_id``'s dedicated repository, or say why it cannot be."""
    literal = Path(os.getcwd()) / path  # no lexical normalisation: `link/..` must meet `link`
    repository = _normal(literal)
    checks = (
        lambda: _check_not_special(repository, memory_roots, home_directories),
        lambda: _check_path_is_plain(literal, repository),
        lambda: _check_no_overlap(repository, other_repositories),
        lambda: _check_marker(repository, bot_id, marker_id),
    )
    for check in checks:
        verdict = check()
        if verdict is not None:
            return verdict
    return PROVEN


def _check_path_is_plain(literal: Path, repository: Path) -> Ownership | None:
    """Every component of the path as written, from / down, and .git, exists and none is a
    symlink; the path then resolves to itself."""
    components = [Path(*literal.parts[:n]) for n in range(1, len(literal.parts) + 1)]
    for component in [*components, git_dir(literal)]:
        try:
            mode = os.lstat(component).st_mode
        except OSError:
            return Ownership.refused("unresolved", f"{component} does not exist")
        if stat.S_ISLNK(mode):
            return Ownership.refused("symlink_on_path", f"{component} is a symlink")
    if not repository.is_dir() or not git_dir(repository).is_dir():
        return Ownership.refused("unresolved", f"{repository} is not a Git working tree")
    if Path(os.path.realpath(literal)) != repository:
        return Ownership.refused("unresolved", f"{literal} does not resolve to {repository}")
    return None


def _check_not_special(
    repository: Path, memory_roots: Iterable[str | Path], home_directories: Iterable[str | Path] | None
) -> Ownership | None:
    spellings = {repository, Path(os.path.realpath(repository))}
    if any(path == Path(path.anchor) for path in spellings):
        return Ownership.refused("filesystem_root")
    homes = _home_directories() if home_directories is None else set(home_directories)
    if spellings & _both_spellings(homes):
        return Ownership.refused("home_directory", f"{repository} is a home directory")
    if spellings & _both_spellings(memory_roots):
        return Ownership.refused("memory_root", f"{repository} is a Memory root")
    return None


def _both_spellings(paths: Iterable[str | Path]) -> set[Path]:
    """Each path as written (normalised) and as it resolves through symlinks."""
    return {spelling for path in paths for spelling in (_normal(path), Path(os.path.realpath(path)))}


def _check_no_overlap(repository: Path, other_repositories: Iterable[str | Path]) -> Ownership | None:
    real = Path(os.path.realpath(repository))
    for other in other_repositories:
        others = {_normal(other), Path(os.path.realpath(other))}
        if real in others or repository in others:
            return Ownership.refused("shared_with_other_bot", f"another bot's repository is {other}")
        if any(o in repository.parents or o in real.parents for o in others):
            return Ownership.refused("nested_in_other_bot", f"{repository} is inside {other}")
        if any(repository in o.parents or real in o.parents for o in others):
            return Ownership.refused("contains_other_bot", f"{repository} contains {other}")
    return None


def _check_marker(repository: Path, bot_id: str, marker_id: str | None) -> Ownership | None:
    marker = read_marker(repository)
    if marker is None:
        return Ownership.refused("marker_missing")
    if marker.bot_id != bot_id:
        return Ownership.refused("marker_names_other_bot", f"the marker names bot {marker.bot_id}")
    if marker_id is None or marker.marker_id != marker_id:
        return Ownership.refused("marker_changed")
    return None


def _normal(path: str | Path) -> Path:
    return Path(os.path.normpath(os.path.abspath(path)))


def _home_directories() -> set[str | Path]:
    homes: set[str | Path] = {Path.home()}
    with contextlib.suppress(OSError):
        homes |= {entry.pw_dir for entry in pwd.getpwall() if entry.pw_dir not in ("", "/")}
    return homes
