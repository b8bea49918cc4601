"""The attachments step's batch on both backends (issue 27): its database work does not grow
with its files (one transition to ``deleting`` and one to ``deleted`` per batch), and a worker
that dies mid-batch, or between the unlinks and the ``deleted`` commit, is healed by the next
attempt: the files already gone count as gone, and no blob keeps a file or loses a live one."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import event, text

import purgekeeper
from purgekeeper import NewAttachment
from purgekeeper.schema import cleanup_queries
from purgekeeper.schema.states import BlobKind
from purgekeeper.storage.blobstore import BlobStore
from tests.helpers.cleanup import SECRET, blob, blob_file, expire_lease, run, run_when_due, step_of
from tests.helpers.factories import purge_events

Pk = purgekeeper.Purgekeeper


def doomed_event(pk: Pk, files: int, *, shared: bool = True) -> tuple[str, list[str]]:
    """An event with ``files`` attachments of its own (both kinds), and (``shared``) one
    shared with a live event: its id and its exclusive blobs."""
    pk.create_conversation(f"c{files}")
    attachments = [
        NewAttachment.file(f"{SECRET} {files} {n}".encode(), name=f"{n}.txt")
        if n % 2
        else NewAttachment.cas(f"{SECRET} {files} {n}".encode(), name=f"{n}.txt")
        for n in range(files)
    ]
    kept = pk.ingest_event(f"c{files}", author="bob", body="kept", attachments=[NewAttachment.cas(b"k", name="k")])
    forward = NewAttachment.reuse(kept.attachments[0].blob_id, name="fwd", binding="real_file")
    doomed = pk.ingest_event(
        f"c{files}", author="ada", body=SECRET, attachments=[*attachments, forward][: files + shared]
    )
    return doomed.id, [a.blob_id for a in doomed.attachments[:files]]


@contextmanager
def statements(pk: Pk) -> Iterator[list[str]]:
    """The SQL statements the database runs meanwhile."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(" ".join(statement.split()))

    event.listen(pk.db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(pk.db.engine, "before_cursor_execute", record)


def assert_gone(pk: Pk, blob_ids: list[str]) -> None:
    for blob_id in blob_ids:
        assert (blob(pk, blob_id).state, blob_file(pk, blob_id).exists()) == ("deleted", False)


def test_a_batch_runs_the_same_statements_for_2_files_as_for_12(pk: Pk) -> None:
    """Tried: the attachments step of a purge of 2 files and of one of 12 (each with a shared
    blob kept), one batch each. The same statements on blobs and attachments, in the same
    number; two of them change blobs (to deleting, to deleted)."""
    seen = {}
    for files in (2, 12):
        event_id, exclusive = doomed_event(pk, files)
        purge_id = purge_events(pk, event_id)
        with statements(pk) as seen[files]:
            assert run(pk, step_of(pk, purge_id, "attachments").id).status == "done"
        assert_gone(pk, exclusive)
    on_blobs = {
        files: [s for s in statements if " blobs" in s or " attachments" in s] for files, statements in seen.items()
    }
    assert len(on_blobs[2]) == len(on_blobs[12])
    assert [s.split(" SET ")[0] for s in on_blobs[12] if s.startswith("UPDATE blobs")] == ["UPDATE blobs"] * 2


class WorkerDied(BaseException):
    """Not an Exception: nothing in the step handles it, as nothing handles a killed worker."""


def test_each_further_batch_is_one_transaction(pk: Pk) -> None:
    """Tried, in batches of 2: a step of 2 files (a full batch, then an empty one) and a step of
    6 (three full batches, then an empty one), none shared. A transaction per batch (each
    records its progress once): a batch marks its files deleting in the transaction that marks
    the batch before it deleted, and the empty last one finishes the step."""
    ctx = dataclasses.replace(pk.step_context(), batch_size=2)
    seen = {}
    for files in (2, 6):
        event_id, exclusive = doomed_event(pk, files, shared=False)
        purge_id = purge_events(pk, event_id)
        with statements(pk) as seen[files]:
            assert run(pk, step_of(pk, purge_id, "attachments").id, ctx).status == "done"
        assert_gone(pk, exclusive)
        assert step_of(pk, purge_id, "attachments").progress.removed == files
    progress = {files: sum("removed=(cleanup_steps.removed" in s for s in seen[files]) for files in seen}
    assert progress == {2: 2, 6: 4}


@dataclass(frozen=True)
class DyingStore(BlobStore):
    """The real blob store, whose worker dies (``WorkerDied``) at the
    ``dies_at``-th unlink, after the ones before it were done."""

    dies_at: int = 0
    unlinks: list[str] = dataclasses.field(default_factory=list)

    def discard(self, blob_id: str, kind: BlobKind | str, relative: str, **options: Any) -> bool:
        self.unlinks.append(blob_id)
        if len(self.unlinks) == self.dies_at:
            raise WorkerDied()
        return super().discard(blob_id, kind, relative, **options)


def test_a_worker_that_dies_mid_batch_is_healed_by_the_next_attempt(pk: Pk) -> None:
    """Tried: 6 files; the worker dies at the 4th unlink (one at a time), with 3 files gone
    and every blob of the batch ``deleting``. The next attempt unlinks the rest, counts the 3
    as gone, and marks all 6 deleted; the shared blob keeps its file."""
    event_id, exclusive = doomed_event(pk, 6)
    purge_id = purge_events(pk, event_id)
    step_id = step_of(pk, purge_id, "attachments").id
    dying = DyingStore(pk.blobs.blob_root, pk.blobs.file_root, dies_at=4)
    with pytest.raises(WorkerDied):
        run(pk, step_id, dataclasses.replace(pk.step_context(), blobs=dying, unlink_threads=1))
    assert {blob(pk, b).state for b in exclusive} == {"deleting"}
    assert sum(blob_file(pk, b).exists() for b in exclusive) == 3
    expire_lease(pk, step_id)  # the dead worker's lease runs out
    assert run_when_due(pk, step_id).status == "done"
    assert_gone(pk, exclusive)
    step = step_of(pk, purge_id, "attachments")
    assert (step.progress.removed, step.progress.retained_shared) == (6, 1)


def test_a_crash_between_the_unlinks_and_the_deleted_commit_is_healed(pk: Pk, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tried: every file of the batch unlinked and its directory fsynced, then the transaction
    that marks them deleted fails. The step retries; the next attempt finds every file
    missing, counts each as gone, and marks them deleted."""
    event_id, exclusive = doomed_event(pk, 4)
    purge_id = purge_events(pk, event_id)
    step_id = step_of(pk, purge_id, "attachments").id
    real = cleanup_queries.mark_deleted

    def lost(conn: Any, blob_ids: Any) -> int:
        if blob_ids:
            raise ConnectionAbortedError("the server went away before the commit")
        return 0

    monkeypatch.setattr(cleanup_queries, "mark_deleted", lost)
    assert run(pk, step_id).status == "retrying"
    assert ({blob(pk, b).state for b in exclusive}, any(blob_file(pk, b).exists() for b in exclusive)) == (
        {"deleting"},
        False,
    )
    monkeypatch.setattr(cleanup_queries, "mark_deleted", real)
    assert run_when_due(pk, step_id).status == "done"
    assert_gone(pk, exclusive)
    assert step_of(pk, purge_id, "attachments").progress.removed == 4


def windowed_purge(pk: Pk) -> tuple[str, str, list[str]]:
    """Events w0..w4 of conversation cw, purged together. Blob S: bound by w0 and w4, and by
    a live event of another conversation. Blob D: bound by w1 and w3 only. w0, w2, w3 and w4
    each have a blob of their own too. Returns the purge's id, S, and the blobs that go (D
    and the four own ones)."""
    pk.create_conversation("cw")
    pk.create_conversation("live")
    kept = pk.ingest_event("live", author="bob", body="kept", attachments=[NewAttachment.cas(b"shared", name="s")])
    shared = kept.attachments[0].blob_id
    first = pk.ingest_event(
        "cw", author="ada", body=SECRET, event_id="w1", attachments=[NewAttachment.file(b"d", name="d")]
    )
    double = first.attachments[0].blob_id
    forwards = {
        "w0": [NewAttachment.reuse(shared, name="fwd", binding="legacy_cas")],
        "w3": [NewAttachment.reuse(double, name="again")],
        "w4": [NewAttachment.reuse(shared, name="fwd again", binding="legacy_cas")],
    }
    gone = [double]
    for event_id in ("w0", "w2", "w3", "w4"):
        own = NewAttachment.cas(f"{SECRET} {event_id}".encode(), name=f"{event_id}.txt")
        ingested = pk.ingest_event(
            "cw", author="ada", body=SECRET, event_id=event_id, attachments=[own, *forwards.get(event_id, [])]
        )
        gone.append(ingested.attachments[0].blob_id)
    return purge_events(pk, "w0", "w1", "w2", "w3", "w4"), shared, gone


def test_a_blob_that_several_windows_bind_is_decided_once(pk: Pk) -> None:
    """The step walks the purge's fenced events a window of ``batch_size`` at a time (so a
    batch costs what it holds, not the purge's size: see the next test). Tried, with windows
    of 2 (w0 w1, w2 w3, w4): a shared blob bound by the first and the last window is kept and
    counted once; a blob bound by the first two windows only is deleted once."""
    purge_id, shared, gone = windowed_purge(pk)
    ctx = dataclasses.replace(pk.step_context(), batch_size=2)
    assert run(pk, step_of(pk, purge_id, "attachments").id, ctx).status == "done"
    assert_gone(pk, gone)
    assert (blob(pk, shared).state, blob_file(pk, shared).exists()) == ("present", True)
    progress = step_of(pk, purge_id, "attachments").progress
    assert (progress.removed, progress.retained_shared) == (len(gone), 1)
    assert progress.retained_reasons == {"blob referenced by live content": {"count": 1, "examples": [shared]}}


def test_a_window_reads_its_own_events_not_the_purge_s(pk: Pk) -> None:
    """PostgreSQL, which counts the index entries a transaction read
    (``pg_stat_get_xact_tuples_returned``). Tried: a purge of 60 events with an attachment
    each; the window of 5 events after the 30th, and its blobs, read in one transaction. It
    reads about its 5 tombstones, not the purge's 60 (each batch found its blobs among all
    of the purge's, again: 31 ms a batch at 10,000 events, 4.4 ms at 1,000)."""
    if pk.db.is_sqlite:
        pytest.skip("PostgreSQL only: SQLite keeps no such counters")
    pk.create_conversation("many")
    ids = [f"m{n:03d}" for n in range(60)]
    for event_id in ids:
        pk.ingest_event("many", author="ada", body=SECRET, event_id=event_id,
                        attachments=[NewAttachment.cas(f"{SECRET} {event_id}".encode(), name="a")])  # fmt: skip
    purge_id = purge_events(pk, *ids)
    read = text("SELECT pg_stat_get_xact_tuples_returned('ix_tombstones_event_purge_id'::regclass)")
    with pk.db.read() as conn:
        before = conn.scalar(read)
        window = cleanup_queries.fenced_events_after(conn, purge_id, after=ids[29], limit=5)
        blobs = cleanup_queries.blobs_of_events(conn, window, after="", limit=5)
        entries = conn.scalar(read) - before
    assert window == ids[30:35]
    assert len(blobs) == 5
    assert 5 <= entries <= 6, entries


def test_events_without_attachments_cost_windows_not_batches(pk: Pk) -> None:
    """A batch takes its blobs from as many windows as it needs (at most
    ``WINDOWS_PER_BATCH``). Tried, with windows of 2: 40 purged events of which only the last
    has an attachment (20 windows, more than 16 in one batch), and the same with the
    attachment on the first event. Each step ends done, the file gone, one blob removed."""
    ctx = dataclasses.replace(pk.step_context(), batch_size=2)
    for where in (39, 0):
        conversation = f"sparse-{where}"
        pk.create_conversation(conversation)
        event_ids = [f"{conversation}-{n:02d}" for n in range(40)]
        attached = []
        for n, event_id in enumerate(event_ids):
            files = [NewAttachment.cas(f"{SECRET} {conversation}".encode(), name="a")] if n == where else []
            ingested = pk.ingest_event(conversation, author="ada", body=SECRET, event_id=event_id, attachments=files)
            attached += [a.blob_id for a in ingested.attachments]
        purge_id = purge_events(pk, *event_ids)
        assert run(pk, step_of(pk, purge_id, "attachments").id, ctx).status == "done"
        assert_gone(pk, attached)
        assert step_of(pk, purge_id, "attachments").progress.removed == 1
