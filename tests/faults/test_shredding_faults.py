"""Crypto-shredding under real faults (PostgreSQL, Redis and ``dramatiq`` worker processes of the
test's own, as in test_worker_faults): a worker killed (``exit``, as kill -9) between destroying
a batch's keys and committing its NULLs leaves ciphertext whose key is gone, the step not done;
another worker finishes it without destroying anything new."""

from __future__ import annotations

import uuid

import purgekeeper
from purgekeeper import EventScope
from tests.helpers import body_of, scalar
from tests.helpers.processes import Processes, wait_until

Pk = purgekeeper.Purgekeeper
KILLED = 137  # failpoints exit as if killed


def _purge_one(pk: Pk) -> tuple[str, str, str]:
    conversation = f"c-{uuid.uuid4().hex[:8]}"
    pk.create_conversation(conversation)
    doomed = pk.ingest_event(conversation, author="ada", body="SECRET doomed")
    pk.ingest_event(conversation, author="ada", body="kept")
    scope = EventScope(event_ids=(doomed.id,))
    preview = pk.preview_purge(scope)
    accepted = pk.confirm_purge(scope, scope_digest=preview.scope_digest, actor="op", reason="shredding fault")
    return accepted.purge_id, doomed.id, conversation


def test_a_worker_killed_after_the_keys_are_destroyed_leaves_ciphertext_nobody_can_open(
    pk: Pk, processes: Processes
) -> None:
    """Tried: the bodies step's worker dies right after the key store destroyed the batch's keys
    and before the batch's NULLs commit. The event's body is still in the row, as ciphertext,
    and its key is gone: a read no longer returns it even by its row, the step is not done.
    A second worker takes the step over and completes it; the body is NULL."""
    purge_id, event_id, conversation = _purge_one(pk)
    key_id = scalar(pk, "SELECT key_id FROM events WHERE id = :id", id=event_id)
    assert pk.key_store.get([key_id])[key_id] is not None
    # The step was sent at the acceptance: the worker may take it, and die, before it logs ready.
    doomed = processes.worker(failpoints="bodies.shredded=exit", wait_ready=False)
    processes.scheduler()
    assert doomed.popen.wait(timeout=60) == KILLED, doomed.tail()
    assert pk.key_store.get([key_id])[key_id] is None  # destroyed, durably, before the process died
    stored = scalar(pk, "SELECT body FROM events WHERE id = :id", id=event_id)
    assert stored is not None and "SECRET" not in stored  # the NULL never committed: ciphertext only
    assert body_of(pk, event_id) == "<shredded>"
    assert pk.status(purge_id).status != "complete"
    processes.worker()
    wait_until(lambda: pk.status(purge_id).status == "complete", "another worker to finish the step")
    assert scalar(pk, "SELECT body FROM events WHERE id = :id", id=event_id) is None
    assert [e.body for e in pk.read_conversation(conversation)] == ["kept"]
