"""``purgekeeper.storage.memory.prove_ownership`` on a corpus of real directories and symlinks.

Each case builds its situation under ``tmp_path`` (real ``git init``, real markers, real
symlinks) and names what it tried. This touches the filesystem but no database. Home
directories are always passed explicitly, so no verdict depends on the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from purgekeeper.storage.memory import (
    MARKER_NAME,
    OWNERSHIP_REASONS,
    PROVEN,
    marker_path,
    prove_ownership,
    write_marker,
)

BOT = "bot-1"
OTHER_BOT = "bot-2"


@dataclass(frozen=True)
class Case:
    """The arguments of one ``prove_ownership`` call."""

    path: str | Path
    marker_id: str | None
    others: tuple[Path, ...] = ()
    memory_roots: tuple[Path, ...] = ()
    homes: tuple[Path, ...] = ()


def repository(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True, capture_output=True)
    return path


def owned(path: Path, bot_id: str = BOT) -> tuple[Path, str]:
    """A Git repository with a fresh marker for ``bot_id``; returns it and the marker id."""
    repo = repository(path)
    return repo, write_marker(repo, bot_id).marker_id


# -- cases that prove ownership ----------------------------------------------------------


def plain_owned_repository(disk: Path) -> Case:
    repo, marker_id = owned(disk / "memory" / "helper")
    return Case(repo, marker_id)


def path_with_redundant_dots_and_no_symlink(disk: Path) -> Case:
    _, marker_id = owned(disk / "memory" / "helper")
    (disk / "memory" / "spare").mkdir()
    return Case(f"{disk}/memory/spare/../helper/.", marker_id)


def sibling_sharing_a_name_prefix(disk: Path) -> Case:
    repo, marker_id = owned(disk / "repo")
    sibling, _ = owned(disk / "repo-old", OTHER_BOT)
    return Case(repo, marker_id, others=(sibling,))


def repository_inside_a_memory_root(disk: Path) -> Case:
    repo, marker_id = owned(disk / "memory" / "helper")
    return Case(repo, marker_id, memory_roots=(disk / "memory",))


def repository_inside_a_home_directory(disk: Path) -> Case:
    repo, marker_id = owned(disk / "home" / "ada" / "helper")
    return Case(repo, marker_id, homes=(disk / "home" / "ada",))


# -- symlinks -------------------------------------------------------------------------------


def parent_component_is_a_symlink(disk: Path) -> Case:
    _, marker_id = owned(disk / "real" / "helper")
    (disk / "alias").symlink_to(disk / "real", target_is_directory=True)
    return Case(disk / "alias" / "helper", marker_id)


def repository_itself_is_a_symlink(disk: Path) -> Case:
    _, marker_id = owned(disk / "real" / "helper")
    (disk / "helper").symlink_to(disk / "real" / "helper", target_is_directory=True)
    return Case(disk / "helper", marker_id)


def repository_is_a_dangling_symlink(disk: Path) -> Case:
    (disk / "helper").symlink_to(disk / "gone", target_is_directory=True)
    return Case(disk / "helper", "0" * 32)


def dot_git_is_a_symlink(disk: Path) -> Case:
    repo, marker_id = owned(disk / "helper")
    (repo / ".git").rename(disk / "elsewhere.git")
    (repo / ".git").symlink_to(disk / "elsewhere.git", target_is_directory=True)
    return Case(repo, marker_id)


def dotdot_after_a_symlink_component(disk: Path) -> Case:
    """``a/link/../repo`` is ``a/repo`` lexically, but the kernel follows ``link`` first and
    reaches ``elsewhere/repo``: a copy (``cp -a``) of the owned repository, marker included."""
    repo, marker_id = owned(disk / "a" / "repo")
    (disk / "elsewhere" / "x").mkdir(parents=True)
    shutil.copytree(repo, disk / "elsewhere" / "repo", symlinks=True)
    (disk / "a" / "link").symlink_to(disk / "elsewhere" / "x", target_is_directory=True)
    path = f"{disk}/a/link/../repo"
    assert os.path.realpath(path) == str(disk / "elsewhere" / "repo")
    return Case(path, marker_id)


# -- paths that do not resolve to a working tree ---------------------------------------------


def path_does_not_exist(disk: Path) -> Case:
    return Case(disk / "missing" / "helper", "0" * 32)


def path_is_a_regular_file(disk: Path) -> Case:
    (disk / "helper").write_text("not a directory", "utf-8")
    return Case(disk / "helper", "0" * 32)


def directory_without_dot_git(disk: Path) -> Case:
    (disk / "helper").mkdir()
    return Case(disk / "helper", "0" * 32)


def dot_git_is_a_gitfile(disk: Path) -> Case:
    """A worktree or submodule: ``.git`` is a file pointing at a Git directory elsewhere."""
    repo, marker_id = owned(disk / "helper")
    (repo / ".git").rename(disk / "elsewhere.git")
    (repo / ".git").write_text(f"gitdir: {disk / 'elsewhere.git'}\n", "utf-8")
    return Case(repo, marker_id)


# -- special directories ------------------------------------------------------------------


def filesystem_root(disk: Path) -> Case:
    return Case(Path("/"), "0" * 32)


def path_listed_as_a_home_directory(disk: Path) -> Case:
    repo, marker_id = owned(disk / "home" / "ada")
    return Case(repo, marker_id, homes=(repo,))


def path_is_a_memory_root(disk: Path) -> Case:
    repo, marker_id = owned(disk / "memory")
    return Case(repo, marker_id, memory_roots=(disk / "memory",))


def memory_root_listed_with_a_trailing_dot(disk: Path) -> Case:
    repo, marker_id = owned(disk / "memory")
    return Case(repo, marker_id, memory_roots=(Path(f"{disk}/memory/."),))


def memory_root_configured_through_a_symlink(disk: Path) -> Case:
    """The configured root is ``alias/memory`` and ``alias`` links to ``disk``: the repository
    at ``disk/memory`` is that Memory root, whatever spelling the settings use."""
    repo, marker_id = owned(disk / "memory")
    (disk.parent / "alias").symlink_to(disk, target_is_directory=True)
    return Case(repo, marker_id, memory_roots=(disk.parent / "alias" / "memory",))


def home_directory_listed_through_a_symlink(disk: Path) -> Case:
    """``/home -> /usr/home`` style: the passwd entry goes through a symlink, the path does not."""
    repo, marker_id = owned(disk / "usr" / "home" / "ada")
    (disk / "home").symlink_to(disk / "usr" / "home", target_is_directory=True)
    return Case(repo, marker_id, homes=(disk / "home" / "ada",))


# -- other bots' repositories -------------------------------------------------------------


def same_path_as_another_repository(disk: Path) -> Case:
    repo, marker_id = owned(disk / "helper")
    return Case(repo, marker_id, others=(repo,))


def nested_inside_another_repository(disk: Path) -> Case:
    outer, _ = owned(disk / "outer", OTHER_BOT)
    repo, marker_id = owned(outer / "notes" / "helper")
    return Case(repo, marker_id, others=(outer,))


def containing_another_repository(disk: Path) -> Case:
    repo, marker_id = owned(disk / "helper")
    inner, _ = owned(repo / "vendor" / "other", OTHER_BOT)
    return Case(repo, marker_id, others=(inner,))


def another_repository_is_a_symlink_to_ours(disk: Path) -> Case:
    repo, marker_id = owned(disk / "helper")
    (disk / "alias").symlink_to(repo, target_is_directory=True)
    return Case(repo, marker_id, others=(disk / "alias",))


def another_repository_is_a_symlink_into_ours(disk: Path) -> Case:
    repo, marker_id = owned(disk / "helper")
    repository(repo / "sub")
    (disk / "alias").symlink_to(repo / "sub", target_is_directory=True)
    return Case(repo, marker_id, others=(disk / "alias",))


def another_repository_is_a_symlink_to_our_parent(disk: Path) -> Case:
    outer = repository(disk / "outer")
    repo, marker_id = owned(outer / "helper")
    (disk / "alias").symlink_to(outer, target_is_directory=True)
    return Case(repo, marker_id, others=(disk / "alias",))


# -- the marker ---------------------------------------------------------------------------


def marker_missing(disk: Path) -> Case:
    repo = repository(disk / "helper")
    return Case(repo, "0" * 32)


def marker_unreadable(disk: Path) -> Case:
    repo, marker_id = owned(disk / "helper")
    marker_path(repo).write_text("{not json", "utf-8")
    return Case(repo, marker_id)


def marker_names_another_bot(disk: Path) -> Case:
    repo, _ = owned(disk / "helper", OTHER_BOT)
    marker_id = json.loads(marker_path(repo).read_text("utf-8"))["marker_id"]
    return Case(repo, marker_id)


def marker_id_differs_from_the_recorded_one(disk: Path) -> Case:
    repo, recorded = owned(disk / "helper")
    write_marker(repo, BOT)
    return Case(repo, recorded)


def no_marker_id_was_recorded(disk: Path) -> Case:
    repo, _ = owned(disk / "helper")
    return Case(repo, None)


CORPUS = [
    pytest.param(plain_owned_repository, None, id="plain-owned-repository-is-provable"),
    pytest.param(path_with_redundant_dots_and_no_symlink, None, id="redundant-dots-without-symlinks-is-provable"),
    pytest.param(sibling_sharing_a_name_prefix, None, id="sibling-repo-sharing-a-name-prefix-is-provable"),
    pytest.param(repository_inside_a_memory_root, None, id="repo-inside-a-memory-root-is-provable"),
    pytest.param(repository_inside_a_home_directory, None, id="repo-inside-a-home-directory-is-provable"),
    pytest.param(parent_component_is_a_symlink, "symlink_on_path", id="parent-component-is-a-symlink"),
    pytest.param(repository_itself_is_a_symlink, "symlink_on_path", id="repo-itself-is-a-symlink"),
    pytest.param(repository_is_a_dangling_symlink, "symlink_on_path", id="repo-is-a-dangling-symlink"),
    pytest.param(dot_git_is_a_symlink, "symlink_on_path", id="dot-git-is-a-symlink"),
    pytest.param(
        dotdot_after_a_symlink_component,
        "symlink_on_path",
        id="dotdot-after-a-symlink-component",
    ),
    pytest.param(path_does_not_exist, "unresolved", id="path-does-not-exist"),
    pytest.param(path_is_a_regular_file, "unresolved", id="path-is-a-regular-file"),
    pytest.param(directory_without_dot_git, "unresolved", id="directory-without-dot-git"),
    pytest.param(dot_git_is_a_gitfile, "unresolved", id="dot-git-is-a-gitfile-not-a-directory"),
    pytest.param(
        filesystem_root,
        "filesystem_root",
        id="filesystem-root",
    ),
    pytest.param(path_listed_as_a_home_directory, "home_directory", id="path-is-a-listed-home-directory"),
    pytest.param(path_is_a_memory_root, "memory_root", id="path-is-a-memory-root"),
    pytest.param(memory_root_listed_with_a_trailing_dot, "memory_root", id="memory-root-listed-as-root-slash-dot"),
    pytest.param(
        memory_root_configured_through_a_symlink,
        "memory_root",
        id="memory-root-configured-through-a-symlink",
    ),
    pytest.param(
        home_directory_listed_through_a_symlink,
        "home_directory",
        id="home-directory-listed-through-a-symlink",
    ),
    pytest.param(same_path_as_another_repository, "shared_with_other_bot", id="same-path-as-another-repo"),
    pytest.param(nested_inside_another_repository, "nested_in_other_bot", id="nested-inside-another-repo"),
    pytest.param(containing_another_repository, "contains_other_bot", id="contains-another-repo"),
    pytest.param(
        another_repository_is_a_symlink_to_ours, "shared_with_other_bot", id="other-repo-is-a-symlink-to-ours"
    ),
    pytest.param(
        another_repository_is_a_symlink_into_ours, "contains_other_bot", id="other-repo-is-a-symlink-into-ours"
    ),
    pytest.param(
        another_repository_is_a_symlink_to_our_parent,
        "nested_in_other_bot",
        id="other-repo-is-a-symlink-to-our-parent",
    ),
    pytest.param(marker_missing, "marker_missing", id="marker-missing"),
    pytest.param(marker_unreadable, "marker_missing", id="marker-unreadable"),
    pytest.param(marker_names_another_bot, "marker_names_other_bot", id="marker-names-another-bot"),
    pytest.param(marker_id_differs_from_the_recorded_one, "marker_changed", id="marker-id-differs-from-recorded"),
    pytest.param(no_marker_id_was_recorded, "marker_changed", id="no-marker-id-was-recorded"),
]


@pytest.fixture
def disk(tmp_path: Path) -> Path:
    """A directory with no symlink above it (``/tmp`` is one on some systems)."""
    path = tmp_path.resolve() / "disk"
    path.mkdir()
    return path


@pytest.mark.parametrize(("build", "expected"), CORPUS)
def test_ownership_corpus(disk: Path, build: Callable[[Path], Case], expected: str | None) -> None:
    case = build(disk)
    verdict = prove_ownership(
        case.path,
        bot_id=BOT,
        marker_id=case.marker_id,
        memory_roots=case.memory_roots,
        other_repositories=case.others,
        home_directories=case.homes,
    )
    if expected is None:
        assert verdict == PROVEN
        return
    assert expected in OWNERSHIP_REASONS
    assert (verdict.provable, verdict.reason) == (False, expected), verdict.detail
    assert verdict.detail


def test_the_corpus_reaches_every_path_reason() -> None:
    reached = {param.values[1] for param in CORPUS}
    # no_repository and identity_changed are decided by the commands, not from a path
    assert reached | {None, "no_repository", "identity_changed"} == {*OWNERSHIP_REASONS, None}


def test_proving_ownership_writes_nothing(disk: Path) -> None:
    repo, marker_id = owned(disk / "helper")
    before = sorted((p, p.read_bytes() if p.is_file() else b"") for p in repo.rglob("*"))
    assert prove_ownership(repo, bot_id=BOT, marker_id=marker_id, home_directories=()) == PROVEN
    assert prove_ownership(repo, bot_id=OTHER_BOT, marker_id=marker_id, home_directories=()).provable is False
    assert sorted((p, p.read_bytes() if p.is_file() else b"") for p in repo.rglob("*")) == before
    assert (repo / ".git" / MARKER_NAME).is_file()


def test_the_default_home_directories_include_home(disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, marker_id = owned(disk / "ada")
    monkeypatch.setenv("HOME", str(repo))
    verdict = prove_ownership(repo, bot_id=BOT, marker_id=marker_id)
    assert (verdict.provable, verdict.reason) == (False, "home_directory")


def test_a_relative_path_is_taken_from_the_working_directory(disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, marker_id = owned(disk / "memory" / "helper")
    monkeypatch.chdir(disk / "memory")
    assert prove_ownership("helper", bot_id=BOT, marker_id=marker_id, home_directories=()) == PROVEN
    (disk / "alias").symlink_to(disk / "memory", target_is_directory=True)
    monkeypatch.chdir(disk)
    verdict = prove_ownership("alias/helper", bot_id=BOT, marker_id=marker_id, home_directories=())
    assert verdict.reason == "symlink_on_path"
