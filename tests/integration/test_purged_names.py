"""An attachment's name is content: once a purge's cleanup is done, no name of a purged
attachment remains anywhere purgekeeper writes (issue 11, case 6). Both backends.

Tried: every table, read whole as text; the checkpoint file; the step's ``last_error`` and
``retained_reasons``; every log line; ``/status`` and ``/metrics``; and a server path in a
diagnostic (the gate names a checkpoint by its file name only).
"""

from __future__ import annotations

import errno
import logging
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import select

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.commands.http import create_app
from purgekeeper.commands.web import metrics
from purgekeeper.commands.web import status as status_page
from purgekeeper.commands.web.auth import Tokens
from purgekeeper.schema.tables import metadata
from purgekeeper.workers import runner
from tests.helpers import POLICY, all_opened, settle
from tests.helpers.backups import Backups

with warnings.catch_warnings():  # starlette warns at import when httpx2 is not installed
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

Pk = purgekeeper.Purgekeeper
NAME = "divorce-papers-7731.pdf"
CAS_NAME = "scan-of-the-passport-0042.png"
TOKENS = Tokens(api="host-token-1", operator="operator-token-1")
AS_OPERATOR = {"Authorization": "Bearer operator-token-1"}


def everything_in_the_database(pk: Pk) -> str:
    """Every row of every table as text, and every value of content opened with its key: a
    name is sealed at rest, so the rows alone hold none, purged or not."""
    with pk.db.read() as conn:
        found = [repr(row) for table in metadata.sorted_tables for row in conn.execute(select(table))]
    return "\n".join([*found, *all_opened(pk).values()])


def ingest_named(pk: Pk, conversation_id: str, event_id: str) -> purgekeeper.Event:
    return pk.ingest_event(
        conversation_id,
        author="ada",
        body="the papers",
        event_id=event_id,
        attachments=[NewAttachment.file(b"PDF", name=NAME), NewAttachment.cas(b"PNG", name=CAS_NAME)],
    )


def purge_content(pk: Pk) -> str:
    scope = EventScope(event_ids=["e1"])
    preview = pk.preview_purge(scope)
    return pk.confirm_purge(scope, scope_digest=preview.scope_digest, actor="op", reason="erase").purge_id


PURGES: dict[str, Callable[[Pk], str]] = {
    "content": purge_content,
    "conversation": lambda pk: pk.purge_conversation("c1", actor="op", reason="erase").purge_id,
}


@pytest.mark.parametrize("purge", PURGES.values(), ids=PURGES.keys())
def test_no_name_of_a_purged_attachment_remains_in_any_table(pk: Pk, purge: Callable[[Pk], str]) -> None:
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    ingest_named(pk, "c1", "e1")
    pk.ingest_event("c2", author="bob", body="kept", attachments=[NewAttachment.file(b"K", name="kept-name.txt")])
    assert NAME in everything_in_the_database(pk)  # the scan sees names while they are live
    purge_id = purge(pk)
    assert settle(pk, purge_id).status == "complete"

    stored = everything_in_the_database(pk)
    assert NAME not in stored and CAS_NAME not in stored
    assert "kept-name.txt" in stored  # live content keeps its name
    written = pk.checkpoint_ledger(pk.settings.checkpoint_dir / "export.jsonl")
    outside = [written.path, *pk.copy.directory.iterdir()]
    assert len(outside) > 2, "the copy's head and segment, and the export"
    for path in outside:
        assert NAME not in path.read_text() and CAS_NAME not in path.read_text(), path.name
    on_disk = [path.name for root in (pk.settings.blob_root, pk.settings.file_root) for path in root.rglob("*")]
    assert not [name for name in on_disk if NAME in name or CAS_NAME in name]


def test_a_failing_unlink_is_reported_by_its_reason_never_by_its_path(
    pk: Pk, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The unlink fails the way the system call does (an OSError carrying the file's name and
    path); the step's error, its reasons, every log line, /status and /metrics name neither."""
    pk.create_conversation("c1")
    ingest_named(pk, "c1", "e1")
    real_unlink = os.unlink

    def refused(path: Any, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", f"{pk.settings.file_root}/ab/cd/{NAME}")

    purge_id = purge_content(pk)
    monkeypatch.setattr(os, "unlink", refused)
    caplog.set_level(logging.DEBUG)
    status = settle(pk, purge_id)
    monkeypatch.setattr(os, "unlink", real_unlink)
    [attachments] = [step for step in status.steps if step.kind == "attachments"]
    assert attachments.status == "incomplete"
    assert attachments.last_error and "Permission denied" in attachments.last_error

    server_path = str(pk.settings.file_root)
    shown = [
        str(attachments.last_error),
        repr(attachments.progress),
        everything_in_the_database(pk),
        "\n".join(f"{record.getMessage()} {record.exc_text or ''}" for record in caplog.records),
    ]
    app = FastAPI()
    app.include_router(status_page.router(pk, TOKENS))
    app.include_router(metrics.router(pk, TOKENS))
    with TestClient(app) as client:
        shown.append(client.get("/status", headers=AS_OPERATOR).text)
        shown.append(client.get("/metrics", headers=AS_OPERATOR).text)
    for text in shown:
        assert NAME not in text and server_path not in text, text[:2000]


# -- a diagnostic names a checkpoint by its file name only -----------------------------------------


@pytest.fixture
def restored(pk: Pk, open_pk: Callable[[], Pk], database_url: str, tmp_path: Path) -> Any:
    """A database restored from a backup taken before a purge that the ledger's copy holds:
    content reads are closed, and the diagnostics name that copy."""
    backups = Backups(database_url, tmp_path / "backups", handles=[pk])
    pk.create_conversation("c1")
    backup = backups.take()
    pk.purge_conversation("c1", actor="op", reason="erase")
    made = pk.copy.directory  # the acceptance added its row to the copy
    assert made.is_dir()
    pk.close()
    backups.restore(backup)
    yield open_pk(), made
    backups.drop_copies()


def test_a_closed_gate_names_its_checkpoint_by_file_name_only(restored: Any) -> None:
    handle, made = restored
    directory = str(handle.settings.checkpoint_dir)
    with pytest.raises(purgekeeper.MessagingUnavailable) as closed:
        handle.read_conversation("c1")
    said = " ".join([str(closed.value), *closed.value.diagnostics, *handle.messaging_status().problems])
    assert made.name in said and directory not in said
    state = handle.messaging_status()
    assert state.checkpoint == made.name

    with TestClient(create_app(handle, tokens=TOKENS)) as client:
        response = client.get("/v1/conversations/c1/events", headers={"Authorization": "Bearer host-token-1"})
    assert response.status_code == 503
    assert made.name in response.text and directory not in response.text


def test_a_bad_checkpoint_is_named_by_its_file_name(pk: Pk, tmp_path: Path) -> None:
    damaged = tmp_path / "somewhere" / "private" / "damaged.json"
    damaged.parent.mkdir(parents=True)
    damaged.write_text("{not json")
    with pytest.raises(purgekeeper.ValidationError) as refused:
        pk.merge_ledger(damaged)
    assert "damaged.json" in str(refused.value) and str(damaged.parent) not in str(refused.value)


def test_run_step_logs_name_no_path(pk: Pk, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The runner's warning on a failed attempt describes the error the way ``last_error``
    does: an OSError's file names are withheld."""
    pk.create_conversation("c1")
    ingest_named(pk, "c1", "e1")
    purge_id = purge_content(pk)
    [bodies] = [step for step in pk.status(purge_id).steps if step.kind == "bodies"]

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", f"/srv/files/{NAME}")

    monkeypatch.setattr("purgekeeper.workers.cleanup.remove_bodies", failing)
    caplog.set_level(logging.DEBUG)
    assert runner.run_step(pk.step_context(), bodies.id, policy=POLICY).status == "retrying"
    logged = "\n".join(f"{record.getMessage()} {record.exc_text or ''}" for record in caplog.records)
    assert "No such file or directory" in logged and NAME not in logged
