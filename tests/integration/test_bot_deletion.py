"""Bot deletion through ``pk``, on SQLite and on PostgreSQL, with real Git repositories.

``delete_bot`` tombstones the id and keeps a durable locator of the Memory repository. With
``erase_memory`` it accepts only the repository that was reviewed, and only while ownership
is provable; the repository itself is removed later by a ``memory`` step, never during the
command. Each unprovable situation is built on disk after registration, and both the
preview and the deletion must refuse it with the same reason, writing nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import purgekeeper
from purgekeeper import RepositoryIdentity
from purgekeeper.storage.memory import MARKER_NAME, OWNERSHIP_REASONS, write_marker
from tests.helpers import scalar

Pk = purgekeeper.Purgekeeper
Roots = dict[str, Path]
WHO = {"actor": "ops@example.org", "reason": "bot retired"}


# -- helpers ------------------------------------------------------------------------------


def git_repository(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True, capture_output=True)
    return path


def marker_file(repository: Path) -> Path:
    return repository / ".git" / "purgekeeper-owner.json"


def marker_of(repository: Path) -> dict[str, Any]:
    return dict(json.loads(marker_file(repository).read_text("utf-8")))


def register(pk: Pk, bot_id: str, repository: Path) -> purgekeeper.Bot:
    return pk.register_bot(bot_id, name=f"Bot {bot_id}", memory_path=repository)


def count(pk: Pk, table: str) -> int:
    return int(scalar(pk, f"SELECT COUNT(*) FROM {table}"))


def bot_row(pk: Pk, bot_id: str) -> Any:
    with pk.db.read() as conn:
        sql = "SELECT state, memory_path, marker_id, erase_memory FROM bots WHERE id = :id"
        return conn.execute(text(sql), {"id": bot_id}).one()


def ledger_selectors(pk: Pk, purge_id: str) -> dict[str, Any]:
    return dict(json.loads(scalar(pk, "SELECT selectors FROM purge_ledger WHERE purge_id = :p", p=purge_id)))


def written(pk: Pk) -> tuple[int, int, int]:
    """What an acceptance writes: ledger rows, tombstones and cleanup steps."""
    return count(pk, "purge_ledger"), count(pk, "tombstones"), count(pk, "cleanup_steps")


def snapshot(*roots: Path) -> dict[str, Any]:
    """Every entry under the roots, without following symlinks: kind, target or bytes."""
    seen: dict[str, Any] = {}
    for root in roots:
        if os.path.lexists(root):
            seen[str(root)] = _entry(root)
        for folder, dirs, files in os.walk(root):
            for name in [*dirs, *files]:
                path = os.path.join(folder, name)
                seen[path] = _entry(Path(path))
    return seen


def _entry(path: Path) -> Any:
    if path.is_symlink():
        return ("symlink", os.readlink(path))
    if path.is_dir():
        return ("dir",)
    return ("file", path.read_bytes())


def delete(pk: Pk, bot_id: str, **kwargs: Any) -> purgekeeper.Acceptance:
    return pk.delete_bot(bot_id, **WHO, **kwargs)


def delete_erasing(pk: Pk, bot_id: str) -> purgekeeper.Acceptance:
    identity = pk.preview_bot_deletion(bot_id).memory.identity
    return delete(pk, bot_id, erase_memory=True, reviewed_repository=identity)


def assert_erasure_refused(pk: Pk, bot_id: str, reason: str, *watched: Path) -> None:
    """The preview and the deletion give the same verdict, and the deletion writes nothing."""
    assert reason in OWNERSHIP_REASONS
    preview = pk.preview_bot_deletion(bot_id)
    assert (preview.memory.erasable, preview.memory.reason) == (False, reason), preview.memory.detail
    assert preview.memory.detail
    assert preview.memory.identity == RepositoryIdentity(bot_row(pk, bot_id).memory_path, bot_row(pk, bot_id).marker_id)
    before, files = written(pk), snapshot(*watched)
    with pytest.raises(purgekeeper.MemoryErasureUnavailable) as refused:
        delete(pk, bot_id, erase_memory=True, reviewed_repository=preview.memory.identity)
    assert refused.value.reason == reason
    assert written(pk) == before
    row = bot_row(pk, bot_id)
    assert (row.state, bool(row.erase_memory)) == ("active", False)
    assert snapshot(*watched) == files


@pytest.fixture
def disk(tmp_path: Path) -> Path:
    """Where the repositories live: no symlink above it (``/tmp`` is one on some systems)."""
    path = tmp_path.resolve() / "disk"
    path.mkdir()
    return path


@pytest.fixture
def memory_root(roots: Roots) -> Path:
    return roots["memory_root"].resolve()


# -- the preview --------------------------------------------------------------------------


def test_preview_offers_erasure_of_the_reviewed_repository(pk: Pk, memory_root: Path) -> None:
    repository = git_repository(memory_root / "helper")
    register(pk, "b1", repository)
    preview = pk.preview_bot_deletion("b1")
    assert (preview.bot_id, preview.name, preview.state, preview.blocking_runs) == ("b1", "Bot b1", "active", ())
    assert (preview.memory.path, preview.memory.erasable, preview.memory.reason) == (str(repository), True, None)
    assert preview.memory.identity == RepositoryIdentity(str(repository), marker_of(repository)["marker_id"])
    assert preview.disclosures


def test_preview_of_a_bot_without_memory_has_no_repository(pk: Pk) -> None:
    pk.register_bot("b1", name="Plain")
    memory = pk.preview_bot_deletion("b1").memory
    assert (memory.path, memory.erasable, memory.reason, memory.identity) == (None, False, "no_repository", None)
    made_up = RepositoryIdentity("/srv/memory/b1", "0" * 32)
    with pytest.raises(purgekeeper.MemoryErasureUnavailable) as refused:
        pk.delete_bot("b1", actor="op", reason="r", erase_memory=True, reviewed_repository=made_up)
    assert refused.value.reason == "no_repository"
    assert pk.delete_bot("b1", actor="op", reason="r").outcome == "accepted"


def test_preview_and_delete_of_an_unknown_bot_are_not_found(pk: Pk) -> None:
    with pytest.raises(purgekeeper.NotFound):
        pk.preview_bot_deletion("nobody")
    with pytest.raises(purgekeeper.NotFound):
        delete(pk, "nobody")
    assert written(pk) == (0, 0, 0)


# -- deleting with and without erasure ----------------------------------------------------


def test_delete_with_erasure_is_accepted_and_leaves_removal_to_a_memory_step(pk: Pk, memory_root: Path) -> None:
    repository = git_repository(memory_root / "helper")
    bot = register(pk, "b1", repository)
    identity = pk.preview_bot_deletion("b1").memory.identity
    acceptance = delete(pk, "b1", erase_memory=True, reviewed_repository=identity)
    assert acceptance.outcome == "accepted"
    row = bot_row(pk, "b1")
    assert (row.state, row.memory_path, row.marker_id, bool(row.erase_memory)) == (
        "deleted",
        str(repository),
        bot.marker_id,
        True,
    )
    assert repository.is_dir() and marker_of(repository)["marker_id"] == bot.marker_id
    steps = pk.status(acceptance.purge_id).steps
    assert [(s.kind, s.status) for s in steps] == [("memory", "pending")]
    selectors = ledger_selectors(pk, acceptance.purge_id)
    assert (selectors["memory_path"], selectors["marker_id"], selectors["erase_memory"]) == (
        str(repository),
        bot.marker_id,
        True,
    )


def test_delete_keeping_memory_keeps_a_durable_locator(pk: Pk, memory_root: Path) -> None:
    repository = git_repository(memory_root / "helper")
    bot = register(pk, "b1", repository)
    files = snapshot(repository)
    acceptance = delete(pk, "b1")
    assert acceptance.outcome == "accepted"
    status = pk.status(acceptance.purge_id)
    assert (status.kind, status.status, status.steps) == ("bot", "complete", ())
    assert snapshot(repository) == files
    assert marker_of(repository) == {"format": 1, "bot_id": "b1", "marker_id": bot.marker_id}
    row = bot_row(pk, "b1")
    assert (row.state, row.memory_path, row.marker_id, bool(row.erase_memory)) == (
        "deleted",
        str(repository),
        bot.marker_id,
        False,
    )
    selectors = ledger_selectors(pk, acceptance.purge_id)
    assert (selectors["bot_id"], selectors["memory_path"], selectors["marker_id"], selectors["erase_memory"]) == (
        "b1",
        str(repository),
        bot.marker_id,
        False,
    )


def test_delete_of_a_bot_without_memory_is_complete_at_once(pk: Pk) -> None:
    pk.register_bot("b1", name="Plain")
    acceptance = delete(pk, "b1")
    assert acceptance.outcome == "accepted"
    assert pk.status(acceptance.purge_id).status == "complete"
    assert bot_row(pk, "b1").state == "deleted"


@pytest.mark.parametrize("erase", [False, True], ids=["keeping-memory", "erasing-memory"])
def test_repeating_delete_is_already_purged_by_the_same_purge(pk: Pk, memory_root: Path, erase: bool) -> None:
    register(pk, "b1", git_repository(memory_root / "helper"))
    identity = pk.preview_bot_deletion("b1").memory.identity
    first = delete(pk, "b1", erase_memory=erase, reviewed_repository=identity if erase else None)
    before = written(pk)
    for again in (delete(pk, "b1"), delete(pk, "b1", erase_memory=True, reviewed_repository=identity)):
        assert (again.outcome, again.purge_id, again.ledger_seq) == ("already_purged", first.purge_id, first.ledger_seq)
    assert written(pk) == before


def test_a_deleted_bot_id_is_reserved_and_closed_to_runs(pk: Pk, memory_root: Path, disk: Path) -> None:
    register(pk, "b1", git_repository(memory_root / "helper"))
    pk.create_conversation("c1")
    delete(pk, "b1")
    with pytest.raises(purgekeeper.IdReserved):
        pk.register_bot("b1", name="Again")
    with pytest.raises(purgekeeper.IdReserved):
        register(pk, "b1", git_repository(disk / "fresh"))
    assert not marker_file(disk / "fresh").exists()
    with pytest.raises(purgekeeper.BotDeleted):
        pk.start_run("c1", bot_id="b1")
    assert count(pk, "runs") == 0


@pytest.mark.parametrize("erase", [False, True], ids=["keeping-memory", "erasing-memory"])
def test_a_non_terminal_run_refuses_deletion_and_writes_nothing(pk: Pk, memory_root: Path, erase: bool) -> None:
    repository = git_repository(memory_root / "helper")
    register(pk, "b1", repository)
    pk.create_conversation("c1", bot_id="b1")
    pk.start_run("c1", bot_id="b1", run_id="r1")
    preview = pk.preview_bot_deletion("b1")
    assert preview.blocking_runs == ("r1",)
    before, files = written(pk), snapshot(repository)
    with pytest.raises(purgekeeper.ActiveRuns) as refused:
        delete(pk, "b1", erase_memory=erase, reviewed_repository=preview.memory.identity if erase else None)
    assert refused.value.run_ids == ("r1",)
    assert written(pk) == before
    row = bot_row(pk, "b1")
    assert (row.state, bool(row.erase_memory)) == ("active", False)
    assert snapshot(repository) == files
    pk.finish_run("r1", status="succeeded")
    assert delete(pk, "b1", erase_memory=erase, reviewed_repository=preview.memory.identity).outcome == "accepted"


def test_erasure_without_the_reviewed_repository_is_invalid(pk: Pk, memory_root: Path) -> None:
    register(pk, "b1", git_repository(memory_root / "helper"))
    with pytest.raises(purgekeeper.ValidationError):
        delete(pk, "b1", erase_memory=True)
    with pytest.raises(purgekeeper.ValidationError):
        delete(pk, "b1", erase_memory=True, reviewed_repository=str(memory_root / "helper"))  # type: ignore[arg-type]
    assert written(pk) == (0, 0, 0)
    assert bot_row(pk, "b1").state == "active"


@pytest.mark.parametrize("wrong", ["marker_id", "path"], ids=["wrong-marker-id", "wrong-path"])
def test_a_reviewed_identity_that_no_longer_matches_is_refused(
    pk: Pk, memory_root: Path, disk: Path, wrong: str
) -> None:
    repository = git_repository(memory_root / "helper")
    bot = register(pk, "b1", repository)
    other = register(pk, "b2", git_repository(disk / "other"))
    reviewed = {
        "marker_id": RepositoryIdentity(str(repository), "f" * 32),
        "path": RepositoryIdentity(str(disk / "other"), bot.marker_id or ""),
    }[wrong]
    files = snapshot(repository, disk)
    with pytest.raises(purgekeeper.MemoryErasureUnavailable) as refused:
        delete(pk, "b1", erase_memory=True, reviewed_repository=reviewed)
    assert refused.value.reason == "identity_changed"
    assert written(pk) == (0, 0, 0)
    assert bot_row(pk, "b1").state == "active"
    assert snapshot(repository, disk) == files
    assert other.marker_id == marker_of(disk / "other")["marker_id"]


# -- unprovable ownership: the corpus, built on disk after registration -------------------
# Each builder registers "b1" (and maybe others), changes the disk, and returns the reason.

Build = Callable[[Pk, Path, Path, pytest.MonkeyPatch], None]


def repo_replaced_by_a_symlink(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    repository = register_b1(pk, disk / "helper")
    (disk / "elsewhere").mkdir()
    repository.rename(disk / "elsewhere" / "helper")
    repository.symlink_to(disk / "elsewhere" / "helper", target_is_directory=True)


def parent_moved_behind_a_symlink(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    register_b1(pk, disk / "parent" / "helper")
    (disk / "parent").rename(disk / "moved")
    (disk / "parent").symlink_to(disk / "moved", target_is_directory=True)


def dot_git_replaced_by_a_symlink(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    repository = register_b1(pk, disk / "helper")
    (repository / ".git").rename(disk / "helper.git")
    (repository / ".git").symlink_to(disk / "helper.git", target_is_directory=True)


def repo_removed(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    shutil.rmtree(register_b1(pk, disk / "helper"))


def dot_git_removed(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    shutil.rmtree(register_b1(pk, disk / "helper") / ".git")


def marker_deleted(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    marker_file(register_b1(pk, disk / "helper")).unlink()


def marker_rewritten_for_another_bot(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    repository = register_b1(pk, disk / "helper")
    marker = marker_of(repository)
    marker_file(repository).write_text(json.dumps({**marker, "bot_id": "b2"}), "utf-8")


def marker_replaced_by_a_fresh_one(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    write_marker(register_b1(pk, disk / "helper"), "b1")


def nested_in_an_active_bot(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    register(pk, "outer", git_repository(disk / "outer"))
    register_b1(pk, disk / "outer" / "notes" / "helper")


def containing_an_active_bot(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    register_b1(pk, disk / "helper")
    register(pk, "inner", git_repository(disk / "helper" / "vendor" / "inner"))


def containing_a_bot_registered_first(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    register(pk, "inner", git_repository(disk / "helper" / "vendor" / "inner"))
    register_b1(pk, disk / "helper")


def same_directory_as_an_active_bot(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    """b2 takes the directory while b1's marker is away; b1's marker is then put back."""
    repository = register_b1(pk, disk / "helper")
    share_with(pk, repository, "b2", repository)


def same_directory_through_a_symlink(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    repository = register_b1(pk, disk / "helper")
    (disk / "alias").symlink_to(repository, target_is_directory=True)
    share_with(pk, repository, "b2", disk / "alias")


def repo_is_the_memory_root(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    register_b1(pk, memory_root)


def repo_is_the_home_directory(pk: Pk, disk: Path, memory_root: Path, mp: pytest.MonkeyPatch) -> None:
    mp.setenv("HOME", str(register_b1(pk, disk / "home" / "ada")))


def register_b1(pk: Pk, path: Path) -> Path:
    register(pk, "b1", git_repository(path))
    return path


def share_with(pk: Pk, repository: Path, bot_id: str, path: Path) -> None:
    """Register ``bot_id`` on ``path`` (which is ``repository``), keeping b1's marker valid."""
    original = marker_file(repository).read_bytes()
    marker_file(repository).unlink()
    register(pk, bot_id, path)
    marker_file(repository).write_bytes(original)


UNPROVABLE = [
    pytest.param(repo_replaced_by_a_symlink, "symlink_on_path", id="repo-replaced-by-a-symlink"),
    pytest.param(parent_moved_behind_a_symlink, "symlink_on_path", id="parent-moved-behind-a-symlink"),
    pytest.param(dot_git_replaced_by_a_symlink, "symlink_on_path", id="dot-git-replaced-by-a-symlink"),
    pytest.param(repo_removed, "unresolved", id="repo-removed"),
    pytest.param(dot_git_removed, "unresolved", id="dot-git-removed"),
    pytest.param(marker_deleted, "marker_missing", id="marker-deleted"),
    pytest.param(marker_rewritten_for_another_bot, "marker_names_other_bot", id="marker-names-another-bot"),
    pytest.param(marker_replaced_by_a_fresh_one, "marker_changed", id="marker-replaced-by-a-fresh-one"),
    pytest.param(nested_in_an_active_bot, "nested_in_other_bot", id="nested-in-an-active-bot"),
    pytest.param(containing_an_active_bot, "contains_other_bot", id="contains-an-active-bot"),
    pytest.param(containing_a_bot_registered_first, "contains_other_bot", id="contains-a-bot-registered-first"),
    pytest.param(same_directory_as_an_active_bot, "shared_with_other_bot", id="same-directory-as-an-active-bot"),
    pytest.param(same_directory_through_a_symlink, "shared_with_other_bot", id="same-directory-via-symlink-alias"),
    pytest.param(repo_is_the_memory_root, "memory_root", id="repo-is-the-memory-root"),
    pytest.param(repo_is_the_home_directory, "home_directory", id="repo-is-the-home-directory"),
]


@pytest.mark.parametrize(("build", "reason"), UNPROVABLE)
def test_unprovable_ownership_refuses_erasure_with_the_reason(
    pk: Pk, disk: Path, memory_root: Path, monkeypatch: pytest.MonkeyPatch, build: Build, reason: str
) -> None:
    memory_root.mkdir(parents=True, exist_ok=True)
    build(pk, disk, memory_root, monkeypatch)
    assert_erasure_refused(pk, "b1", reason, disk, memory_root)


@pytest.mark.parametrize(("build", "reason"), UNPROVABLE)
def test_unprovable_ownership_still_allows_deletion_keeping_memory(
    pk: Pk, disk: Path, memory_root: Path, monkeypatch: pytest.MonkeyPatch, build: Build, reason: str
) -> None:
    memory_root.mkdir(parents=True, exist_ok=True)
    build(pk, disk, memory_root, monkeypatch)
    files = snapshot(disk, memory_root)
    acceptance = delete(pk, "b1")
    assert pk.status(acceptance.purge_id).steps == ()
    assert bot_row(pk, "b1").state == "deleted"
    assert snapshot(disk, memory_root) == files


# -- deleted bots: kept Memory still counts, chosen erasure does not -----------------------

LAYOUTS = {
    # the deleted bot's repository, and b1's
    "nested": ("outer", "outer/notes/helper", "nested_in_other_bot"),
    "containing": ("helper/vendor/inner", "helper", "contains_other_bot"),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_deleted_bot_whose_memory_is_kept_still_blocks_erasure(pk: Pk, disk: Path, layout: str) -> None:
    deleted, ours, reason = LAYOUTS[layout]
    register(pk, "gone", git_repository(disk / deleted))
    register(pk, "b1", git_repository(disk / ours))
    assert delete(pk, "gone").outcome == "accepted"
    assert_erasure_refused(pk, "b1", reason, disk)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_deleted_bot_whose_erasure_was_chosen_does_not_block(pk: Pk, disk: Path, layout: str) -> None:
    deleted, ours, _ = LAYOUTS[layout]
    register(pk, "gone", git_repository(disk / deleted))
    assert delete_erasing(pk, "gone").outcome == "accepted"
    register(pk, "b1", git_repository(disk / ours))
    memory = pk.preview_bot_deletion("b1").memory
    assert (memory.erasable, memory.reason) == (True, None)
    acceptance = delete(pk, "b1", erase_memory=True, reviewed_repository=memory.identity)
    assert acceptance.outcome == "accepted"
    assert [(s.kind, s.status) for s in pk.status(acceptance.purge_id).steps] == [("memory", "pending")]
    assert (disk / deleted).is_dir() and (disk / ours).is_dir()


def test_erasing_one_bot_leaves_an_unrelated_bot_erasable(pk: Pk, memory_root: Path) -> None:
    register(pk, "b1", git_repository(memory_root / "helper"))
    register(pk, "b2", git_repository(memory_root / "helper-2"))
    assert delete_erasing(pk, "b1").outcome == "accepted"
    memory = pk.preview_bot_deletion("b2").memory
    assert (memory.erasable, memory.reason) == (True, None)
    assert delete_erasing(pk, "b2").outcome == "accepted"


# -- symlinks that a lexical check does not see -------------------------------------------


def dotdot_after_a_symlink(disk: Path) -> Path:
    """``a/link/../repo``: lexically ``a/repo``, but the kernel follows ``link`` to ``elsewhere/x``
    first and reaches ``elsewhere/repo``."""
    git_repository(disk / "elsewhere" / "repo")
    (disk / "elsewhere" / "x").mkdir()
    (disk / "a").mkdir()
    (disk / "a" / "link").symlink_to(disk / "elsewhere" / "x", target_is_directory=True)
    return Path(f"{disk}/a/link/../repo")


def test_a_memory_path_with_dotdot_is_refused_at_registration(pk: Pk, disk: Path) -> None:
    """`a/link/../repo` reaches `elsewhere/repo` through the symlink, while its lexical form
    names `a/repo`: the path is refused, so no proof can be fooled by it later."""
    path = dotdot_after_a_symlink(disk)
    git_repository(disk / "a" / "repo")
    with pytest.raises(purgekeeper.ValidationError, match=r"\.\."):
        register(pk, "b1", path)
    assert count(pk, "bots") == 0
    assert not (disk / "elsewhere" / "repo" / ".git" / MARKER_NAME).exists()
    assert not (disk / "a" / "repo" / ".git" / MARKER_NAME).exists()


def test_a_memory_root_configured_through_a_symlink_is_not_erasable(
    database_url: str, roots: Roots, disk: Path
) -> None:
    root = git_repository(disk / "memory")
    (disk / "alias").symlink_to(disk, target_is_directory=True)
    settings = {k: v for k, v in roots.items() if k != "memory_root"}
    with purgekeeper.open(database_url, **settings, memory_roots=[disk / "alias" / "memory"]) as handle:
        register(handle, "b1", root)
        assert_erasure_refused(handle, "b1", "memory_root", disk)
