"""The ledger outside the database is durable when an acceptance returns (issue 12, item 1).

Every acceptance's row is in the checkpoint directory, flushed, before the call returns: a
restore of a backup taken before the purge closes reads at once, however soon the handle
closed. A copy that fails after the commit leaves the purge accepted and fenced and says so
(``LedgerNotCopied``); the same idempotency key, the next acceptance, or the scheduler's
sweep completes it. A child process killed between the commit and the copy is healed the
same way. Both backends.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.commands.http import create_app
from purgekeeper.commands.web.auth import Tokens
from purgekeeper.storage import failpoints
from purgekeeper.storage.ledger_copy import LedgerCopy
from tests.helpers.backups import Backups

with warnings.catch_warnings():  # starlette warns at import when httpx2 is not installed
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

Pk = purgekeeper.Purgekeeper
WHO = {"actor": "op", "reason": "outside copy test"}
SECRET = "S3CR3T-outside"


@pytest.fixture
def armed() -> Iterator[Callable[[str], None]]:
    yield failpoints.arm
    failpoints.disarm()


def copy_of(pk: Pk) -> LedgerCopy:
    return LedgerCopy(pk.settings.checkpoint_dir, pk.database_key)


def copied_seq(pk: Pk) -> int:
    head = copy_of(pk).head()
    return head.seq if head else 0


def confirm(pk: Pk, *event_ids: str, **kwargs: Any) -> purgekeeper.Acceptance:
    scope = EventScope(event_ids=list(event_ids))
    return pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO, **kwargs)


def seed(pk: Pk) -> None:
    pk.register_bot("b1", name="Bot")
    pk.create_conversation("c1")
    pk.create_conversation("ch1", kind="channel")
    pk.ingest_event(
        "c1", author="ada", body=f"{SECRET} body", event_id="e1", attachments=[NewAttachment.file(b"x", name="a")]
    )
    pk.ingest_event("c1", author="bob", body="kept", event_id="e-kept")


ACCEPTANCES: dict[str, Callable[[Pk], purgekeeper.Acceptance]] = {
    "content": lambda pk: confirm(pk, "e1"),
    "conversation": lambda pk: pk.purge_conversation("c-gone", **WHO),
    "channel": lambda pk: pk.delete_channel("ch1", **WHO),
    "bot": lambda pk: pk.delete_bot("b1", **WHO),
}


@pytest.mark.parametrize("accept", ACCEPTANCES.values(), ids=ACCEPTANCES.keys())
def test_an_acceptance_returns_once_its_row_is_in_the_copy(
    pk: Pk, accept: Callable[[Pk], purgekeeper.Acceptance]
) -> None:
    seed(pk)
    acceptance = accept(pk)
    row = copy_of(pk).row(acceptance.ledger_seq)
    assert row is not None and row.purge_id == acceptance.purge_id
    assert row.row_hash == pk.verify_ledger().head_hash
    assert copy_of(pk).verify()[2] == []


def test_a_restore_right_after_an_acceptance_keeps_reads_closed_until_merged(
    pk: Pk, open_pk: Callable[[], Pk], backups: Backups
) -> None:
    """The issue's window: the handle closes at once after the acceptance (no sweep, no
    automatic checkpoint ever ran), the database comes back from a backup taken before it.
    Reads stay closed until a merge of the checkpoint directory, which brings the purge back."""
    backups.handles.append(pk)
    seed(pk)
    backup = backups.take()
    purge_id = confirm(pk, "e1").purge_id
    pk.close()
    backups.restore(backup)
    restored = open_pk()
    backups.handles.append(restored)
    with pytest.raises(purgekeeper.MessagingUnavailable) as closed:
        restored.read_conversation("c1")
    assert any("behind" in problem for problem in closed.value.diagnostics), closed.value.diagnostics
    report = restored.merge_ledger(restored.settings.checkpoint_dir)
    assert report.appended == (purge_id,)
    assert [e.id for e in restored.read_conversation("c1")] == ["e-kept"]


@pytest.mark.sqlite_only
def test_the_embedded_default_closed_within_seconds_of_its_purge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's reproduction, on the embedded default: open, close, open again, purge,
    wait for it to complete, close at once; restore the file from before the purge."""
    import shutil

    monkeypatch.setenv("PURGEKEEPER_DATA_DIR", str(tmp_path / "data"))
    with purgekeeper.open() as first:
        seed(first)
    database = tmp_path / "data" / "purgekeeper.db"
    with purgekeeper.open() as second:
        backup = tmp_path / "before.db"
        with second.db.write() as conn:  # fold the WAL in, then copy: a consistent backup
            conn.exec_driver_sql("SELECT 1")
        shutil.copyfile(database, backup)
        purge_id = confirm(second, "e1").purge_id
        assert second.wait(purge_id, 30).status == "complete"
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(backup, database)
    with purgekeeper.open() as restored, pytest.raises(purgekeeper.MessagingUnavailable):
        restored.read_conversation("c1")


def test_a_copy_that_fails_after_the_commit_says_so_and_is_completed_later(
    pk: Pk, armed: Callable[[str], None]
) -> None:
    seed(pk)
    armed("ledger.copy=EIO")
    with pytest.raises(purgekeeper.LedgerNotCopied) as failed:
        confirm(pk, "e1", idempotency_key="k-1")
    assert failed.value.ledger_seq == 1 and failed.value.purge_id
    assert "accepted" in str(failed.value) and str(pk.settings.checkpoint_dir) not in str(failed.value)
    assert [e.id for e in pk.read_conversation("c1")] == ["e-kept"]  # accepted and fenced
    assert pk.status(failed.value.purge_id).purge_id == failed.value.purge_id
    assert copied_seq(pk) == 0
    failpoints.disarm()
    again = confirm(pk, "e1", idempotency_key="k-1")  # the same request, retried
    assert (again.purge_id, again.ledger_seq) == (failed.value.purge_id, 1)
    assert copied_seq(pk) == 1


def test_over_http_a_copy_that_failed_is_a_503_that_names_the_accepted_purge(
    pk: Pk, armed: Callable[[str], None]
) -> None:
    armed("ledger.copy=EIO")
    with TestClient(create_app(pk, tokens=Tokens(api="host-token-1", operator="operator-token-1"))) as client:
        response = client.post(
            "/v1/conversations/c-one/purge", json=WHO, headers={"Authorization": "Bearer host-token-1"}
        )
    body = response.json()
    assert (response.status_code, body["error"], body["ledger_seq"]) == (503, "ledger_not_copied", 1), body
    assert pk.status(body["purge_id"]).purge_id == body["purge_id"]  # accepted, and its id is the host's to keep


def test_the_next_acceptance_or_a_sweep_completes_a_copy_that_failed(pk: Pk, armed: Callable[[str], None]) -> None:
    seed(pk)
    armed("ledger.copy=ENOSPC")
    with pytest.raises(purgekeeper.LedgerNotCopied):
        pk.purge_conversation("c-one", **WHO)
    failpoints.disarm()
    pk.purge_conversation("c-two", **WHO)
    assert copied_seq(pk) == 2
    armed("ledger.copy=ENOSPC")
    with pytest.raises(purgekeeper.LedgerNotCopied):
        pk.purge_conversation("c-three", **WHO)
    failpoints.disarm()
    assert pk.copy_ledger() == 3  # what the scheduler's sweep calls
    assert copied_seq(pk) == 3


CHILD = """
import sys
import purgekeeper
from purgekeeper import EventScope
from purgekeeper.storage import failpoints
failpoints.arm("ledger.copy=exit")
url, checkpoints, blobs, files = sys.argv[1:5]
pk = purgekeeper.open(url, checkpoint_dir=checkpoints, blob_root=blobs, file_root=files, workers="none")
scope = EventScope(event_ids=["e1"])
pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, actor="op", reason="killed")
print("the copy was written")
"""


def test_a_process_killed_between_its_commit_and_its_copy_is_healed(
    pk: Pk, open_pk: Callable[[], Pk], backups: Backups, database_url: str
) -> None:
    """A child process confirms a purge and dies at the failpoint between the commit and the
    copy. The next acceptance copies its row too; a restore from a backup taken before the
    purge then keeps reads closed until a merge brings it back."""
    backups.handles.append(pk)
    seed(pk)
    backup = backups.take()
    settings = pk.settings
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            database_url,
            str(settings.checkpoint_dir),
            str(settings.blob_root),
            str(settings.file_root),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert child.returncode == 137 and "the copy was written" not in child.stdout, child.stderr
    assert copied_seq(pk) == 0 and pk.verify_ledger().rows == 1  # committed, not copied
    pk.purge_conversation("c-next", **WHO)
    assert copied_seq(pk) == 2  # the next acceptance healed the copy
    pk.close()
    backups.restore(backup)
    restored = open_pk()
    backups.handles.append(restored)
    with pytest.raises(purgekeeper.MessagingUnavailable):
        restored.read_conversation("c1")
    assert len(restored.merge_ledger(restored.settings.checkpoint_dir).appended) == 2
    assert [e.id for e in restored.read_conversation("c1")] == ["e-kept"]


def test_close_gives_up_the_scheduler_lease(database_url: str, roots: dict[str, Path]) -> None:
    """An embedded handle leads the scheduler; once it is closed, the next handle leads at
    its first sweep, instead of waiting for the old lease to run out."""
    from sqlalchemy import text

    def embedded() -> Pk:
        return purgekeeper.open(
            database_url,
            blob_root=roots["blob_root"],
            file_root=roots["file_root"],
            checkpoint_dir=roots["checkpoint_dir"],
        )

    first = embedded()
    try:
        assert first._scheduler is not None and first._scheduler.lead()
    finally:
        first.close()
    second = embedded()
    try:
        assert second._scheduler is not None and second._scheduler.lead()
        with second.db.read() as conn:
            owner = conn.execute(text("SELECT owner FROM leader_leases WHERE name = 'scheduler'")).scalar()
        assert owner == second._scheduler.owner
    finally:
        second.close()
