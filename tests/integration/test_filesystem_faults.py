"""File-system faults (issue 11, case 9): an unlink or a rename that fails with ENOSPC,
EACCES, EROFS or EIO, and a checkpoint directory that cannot be written. Both backends.

The failures are injected at the call (the failpoints ``blobs.unlink``, ``memory.rename`` and
``checkpoint.write`` raise the OSError the system call would), and one is real: a read-only
bind mount (EROFS) where the machine allows mounting. Each failure is retried, shown with its
reason and never a path, and ends ``incomplete`` if it persists, never ``complete``. A
checkpoint directory that cannot be written shows in ``purgectl health``, ``/status`` and
``/metrics``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.commands.web import metrics
from purgekeeper.commands.web import status as status_page
from purgekeeper.commands.web.auth import Tokens
from purgekeeper.storage import checkpoint, failpoints
from tests.helpers import settle

with warnings.catch_warnings():  # starlette warns at import when httpx2 is not installed
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

Pk = purgekeeper.Purgekeeper
ERRNOS = ["ENOSPC", "EACCES", "EROFS", "EIO"]
TOKENS = Tokens(api="host-token-2", operator="operator-token-2")
AS_OPERATOR = {"Authorization": "Bearer operator-token-2"}


@pytest.fixture
def armed() -> Iterator[Callable[[str], None]]:
    yield failpoints.arm
    failpoints.disarm()


def purge_with_a_file(pk: Pk) -> tuple[str, str]:
    pk.create_conversation("c1")
    event = pk.ingest_event("c1", author="ada", body="x", attachments=[NewAttachment.file(b"bytes", name="n.pdf")])
    scope = EventScope(event_ids=[event.id])
    purge_id = pk.confirm_purge(
        scope, scope_digest=pk.preview_purge(scope).scope_digest, actor="op", reason="r"
    ).purge_id
    return purge_id, event.attachments[0].blob_id


@pytest.mark.parametrize("name", ERRNOS)
def test_an_unlink_that_keeps_failing_ends_incomplete_with_its_reason(
    pk: Pk, armed: Callable[[str], None], name: str
) -> None:
    purge_id, blob_id = purge_with_a_file(pk)
    armed(f"blobs.unlink={name}")
    status = settle(pk, purge_id)
    [step] = [s for s in status.steps if s.kind == "attachments"]
    assert (status.status, step.status, step.attempts) == ("incomplete", "incomplete", step.max_attempts)
    reason = os.strerror(getattr(errno, name))
    assert step.last_error and reason in step.last_error and blob_id in step.last_error
    assert str(pk.settings.file_root) not in step.last_error and "n.pdf" not in step.last_error
    assert pk.blobs.exists("file", f"{blob_id[:2]}/{blob_id}")  # nothing claimed gone

    failpoints.disarm()  # the disk is fixed; the operator retries
    assert pk.retry(purge_id, actor="op", reason="disk fixed").status != "complete"
    assert settle(pk, purge_id).status == "complete"


def test_an_unlink_that_fails_once_is_retried_and_completes(pk: Pk, armed: Callable[[str], None]) -> None:
    purge_id, _blob_id = purge_with_a_file(pk)
    armed("blobs.unlink=EIO")
    from purgekeeper.workers import runner
    from tests.helpers import POLICY

    [step] = [s for s in pk.status(purge_id).steps if s.kind == "attachments"]
    assert runner.run_step(pk.step_context(), step.id, policy=POLICY).status == "retrying"
    failpoints.disarm()
    status = settle(pk, purge_id)
    [step] = [s for s in status.steps if s.kind == "attachments"]
    assert (status.status, step.attempts) == ("complete", 2)


def test_unlinks_failing_in_a_group_fail_each_purge_with_its_own_blob(pk: Pk, armed: Callable[[str], None]) -> None:
    """Three purges' attachments steps worked as one group (``purgekeeper.workers.grouped``)
    while every unlink fails with EIO: each step is retrying, with its own blob in its error
    and one attempt; once the disk is fixed, each completes on its own retry."""
    from purgekeeper.workers import runner
    from tests.helpers import POLICY

    purged = {}
    for name in ("c1", "c2", "c3"):
        pk.create_conversation(name)
        event = pk.ingest_event(name, author="ada", body="x", attachments=[NewAttachment.file(name.encode(), name="n")])
        purged[pk.purge_conversation(name, actor="op", reason="r").purge_id] = event.attachments[0].blob_id
    first = next(iter(purged))
    [bodies] = [s for s in pk.status(first).steps if s.kind == "bodies"]
    assert runner.run_step(pk.step_context(), bodies.id, policy=POLICY).status == "done"  # all three, grouped
    armed("blobs.unlink=EIO")
    [attachments] = [s for s in pk.status(first).steps if s.kind == "attachments"]
    assert runner.run_step(pk.step_context(), attachments.id, policy=POLICY).status == "retrying"
    for purge_id, blob_id in purged.items():
        [step] = [s for s in pk.status(purge_id).steps if s.kind == "attachments"]
        assert (step.status, step.attempts) == ("retrying", 1)
        assert step.last_error and blob_id in step.last_error
        assert not any(other in step.last_error for other in purged.values() if other != blob_id)
    failpoints.disarm()
    for purge_id in purged:
        assert settle(pk, purge_id).status == "complete"


@pytest.mark.parametrize("name", ERRNOS)
def test_a_memory_rename_that_keeps_failing_ends_incomplete(
    pk: Pk, armed: Callable[[str], None], roots: dict[str, Path], name: str
) -> None:
    repository = roots["memory_root"] / "bot-memory"
    (repository / ".git").mkdir(parents=True)
    pk.register_bot("b1", name="Bot", memory_path=repository)
    preview = pk.preview_bot_deletion("b1")
    armed(f"memory.rename={name}")
    purge_id = pk.delete_bot(
        "b1", actor="op", reason="r", erase_memory=True, reviewed_repository=preview.memory.identity
    ).purge_id
    status = settle(pk, purge_id)
    [step] = status.steps
    assert (status.status, step.status, step.attempts) == ("incomplete", "incomplete", step.max_attempts)
    assert step.last_error and os.strerror(getattr(errno, name)) in step.last_error
    assert str(repository) not in step.last_error
    assert repository.is_dir()


# -- a checkpoint directory that cannot be written ------------------------------------------------


def surfaces(pk: Pk) -> tuple[str, str]:
    app = FastAPI()
    app.include_router(status_page.router(pk, TOKENS))
    app.include_router(metrics.router(pk, TOKENS))
    with TestClient(app) as client:
        return client.get("/status", headers=AS_OPERATOR).text, client.get("/metrics", headers=AS_OPERATOR).text


def health(pk: Pk) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PURGEKEEPER_DATABASE_URL": pk.settings.database_url,
        "PURGEKEEPER_CHECKPOINT_DIR": str(pk.settings.checkpoint_dir),
        "PURGEKEEPER_DATA_DIR": str(pk.settings.checkpoint_dir.parent / "data"),
        "PURGEKEEPER_SIGNING_KEY_FILE": str(pk.settings.signing_key_path),  # the log's own key: none is made for it
    }
    return subprocess.run(
        [sys.executable, "-m", "purgekeeper.commands.cli", "health", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_unwritable_is_shown(pk: Pk, reason: str) -> None:
    assert checkpoint.unwritable(pk.settings.checkpoint_dir) == reason
    page, scraped = surfaces(pk)
    assert "checkpoint directory cannot be written" in page and reason in page
    assert "purgekeeper_checkpoint_dir_writable 0.0" in scraped
    assert str(pk.settings.checkpoint_dir) not in page
    checked = health(pk)
    assert checked.returncode == 4, (checked.stdout, checked.stderr)
    assert "checkpoint directory cannot be written" in checked.stdout and reason in checked.stdout


@pytest.mark.parametrize("name", ERRNOS)
def test_an_unwritable_checkpoint_directory_shows_everywhere(pk: Pk, armed: Callable[[str], None], name: str) -> None:
    pk.purge_conversation("c-gone", actor="op", reason="r")
    armed(f"checkpoint.write={name}")
    armed(f"ledger.copy={name}")
    with pytest.raises(purgekeeper.LedgerNotCopied) as refused:  # accepted and fenced, not yet outside
        pk.purge_conversation("c-also-gone", actor="op", reason="r")
    assert os.strerror(getattr(errno, name)) in str(refused.value) and refused.value.ledger_seq == 2
    assert pk.copy.head().seq == 1  # type: ignore[union-attr]
    reason = os.strerror(getattr(errno, name))
    assert checkpoint.unwritable(pk.settings.checkpoint_dir) == reason
    page, scraped = surfaces(pk)
    assert "checkpoint directory cannot be written" in page and reason in page
    assert "purgekeeper_checkpoint_dir_writable 0.0" in scraped
    failpoints.disarm()
    page, scraped = surfaces(pk)
    assert "checkpoint directory cannot be written" not in page
    assert "purgekeeper_checkpoint_dir_writable 1.0" in scraped
    assert pk.copy_ledger() == 2  # what the scheduler does after a sweep
    assert health(pk).returncode == 0


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """A read-only bind mount of ``directory`` over itself (EROFS for every write below it)."""
    try:
        subprocess.run(["mount", "--bind", str(directory), str(directory)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"this machine does not allow a bind mount: {exc}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(directory)], check=True, capture_output=True)
        yield
    finally:
        subprocess.run(["umount", str(directory)], check=False, capture_output=True)


def test_a_read_only_file_root_and_checkpoint_directory(pk: Pk) -> None:
    """The real thing: a read-only bind mount (EROFS) over the file root and over the
    checkpoint directory."""
    purge_id, _blob_id = purge_with_a_file(pk)
    reason = os.strerror(errno.EROFS)
    with read_only(pk.settings.file_root):
        status = settle(pk, purge_id)
    [step] = [s for s in status.steps if s.kind == "attachments"]
    assert (status.status, step.status) == ("incomplete", "incomplete")
    assert step.last_error and reason in step.last_error and str(pk.settings.file_root) not in step.last_error
    pk.retry(purge_id, actor="op", reason="remounted read-write")
    assert settle(pk, purge_id).status == "complete"
    with read_only(pk.settings.checkpoint_dir):
        assert_unwritable_is_shown(pk, reason)
    assert checkpoint.unwritable(pk.settings.checkpoint_dir) is None
