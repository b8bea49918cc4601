"""A deployment whose processes share a key server (``purgectl keys serve``) rather than a
file key store: the handle (the API's side) and a real worker process (the Procfile's) both
set ``PURGEKEEPER_KEY_STORE_URL`` and its token, as processes on several machines would. The
content is sealed with the server's keys, the worker's purge destroys them there, and no file
key store is made beside the ledger's copy."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from tests.helpers import scalar
from tests.helpers.key_server import running_key_server
from tests.helpers.processes import Processes, wait_until

Pk = purgekeeper.Purgekeeper


def test_processes_sharing_a_key_server_seal_and_shred_through_it(
    open_handle: Callable[..., Pk],
    processes: Processes,
    roots: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tried: an event with an attachment ingested through a handle on the key server, then a
    content purge carried out by a worker process on the same server. The keys are the
    server's (it returns them before, and None after), the event and its bytes read back
    before, and nothing of a file key store exists in the checkpoint directory."""
    with running_key_server(tmp_path / "keys") as server, contextlib.ExitStack() as stack:
        served = {"PURGEKEEPER_KEY_STORE_URL": server.url, "PURGEKEEPER_KEY_STORE_TOKEN": server.token}
        for name, value in served.items():
            monkeypatch.setenv(name, value)
        pk = open_handle()
        conversation = f"c-{uuid.uuid4().hex[:8]}"
        pk.create_conversation(conversation)
        event = pk.ingest_event(
            conversation, author="ada", body="SECRET body", attachments=[NewAttachment.file(b"SECRET bytes", name="f")]
        )
        event_key = scalar(pk, "SELECT key_id FROM events WHERE id = :id", id=event.id)
        blob_key = scalar(pk, "SELECT key_id FROM blobs WHERE id = :id", id=event.attachments[0].blob_id)
        client = stack.enter_context(contextlib.closing(server.client()))
        assert client.get([event_key, blob_key])[event_key] is not None
        assert pk.open_attachment(event.attachments[0].id).read() == b"SECRET bytes"
        scope = EventScope(event_ids=(event.id,))
        preview = pk.preview_purge(scope)
        accepted = pk.confirm_purge(scope, scope_digest=preview.scope_digest, actor="op", reason="key server")
        processes.worker(env=served)
        processes.scheduler(env=served)
        wait_until(lambda: pk.status(accepted.purge_id).status == "complete", "the worker to finish the purge")
        assert client.get([event_key, blob_key]) == {event_key: None, blob_key: None}
        assert client.destroyed([event_key, blob_key]) == {event_key, blob_key}
    assert not list(roots["checkpoint_dir"].glob("*.keys"))
