"""Cleanup steps on SQLite and PostgreSQL: the bodies, attachments and memory actors, the step
protocol under duplicate and late deliveries, real faults, retry, resume and wait.

Most tests call the plain functions with no background worker: ``runner.run_step`` on
``pk.step_context()``, and ``purgekeeper.schema.steps`` inside ``pk.db.transact``. Two end-to-end tests
run the in-process worker and scheduler. The faults are real: a blob's file replaced by a
directory, a repository swapped for a symlink, a lease pushed into the past with raw SQL, and
a re-upload made in the window between "marked deleting" and "unlinked".

``assert_purges_leave_nothing`` is the invariant check over every table and root, run after
the purges of a test have completed. Purged content carries the marker ``SECRET``; content
that must survive never does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.schema import steps
from purgekeeper.schema.errors import InfrastructureError
from purgekeeper.schema.states import BlobKind, StepStatus
from purgekeeper.schema.tables import metadata
from purgekeeper.storage import memory
from purgekeeper.storage.blobstore import BlobStore, cas_path
from purgekeeper.workers import broker, runner
from purgekeeper.workers.cleanup import ASIDE_PREFIX
from purgekeeper.workers.scheduler import Scheduler
from tests.helpers import POLICY, SETTLE_S, all_opened, blob_bytes, body_of, opened, rows, scalar
from tests.helpers.cleanup import (
    SECRET,
    WHO,
    blob,
    blob_file,
    break_blob_file,
    claim_as,
    clean,
    expire_lease,
    lease_of,
    postpone,
    run,
    run_when_due,
    seed_content,
    set_max_attempts,
    step_of,
)
from tests.helpers.factories import purge_events

Pk = purgekeeper.Purgekeeper
Roots = dict[str, Path]


# -- reading and poking the database -------------------------------------------------------------


# -- running steps --------------------------------------------------------------------------------


def race(pk: Pk, step_id: str, deliveries: int = 2) -> list[str]:
    """The same step delivered ``deliveries`` times at once, from as many threads."""
    barrier = threading.Barrier(deliveries)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def deliver() -> None:
        try:
            barrier.wait(10)
            outcomes.append(run(pk, step_id).status)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=deliver) for _ in range(deliveries)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    return sorted(outcomes)


@dataclass(frozen=True)
class InterleavedStore(BlobStore):
    """The real blob store; ``meanwhile`` runs just before each unlink, i.e. in the window
    after the attachments step committed "deleting" and before the bytes are gone."""

    meanwhile: Callable[[], None] = lambda: None

    def discard(self, blob_id: str, kind: BlobKind | str, relative: str, **options: Any) -> bool:
        self.meanwhile()
        return super().discard(blob_id, kind, relative, **options)


def interleaved(pk: Pk, meanwhile: Callable[[], None]) -> Any:
    done: list[bool] = []

    def once() -> None:
        if not done:
            done.append(True)
            meanwhile()

    store = InterleavedStore(pk.blobs.blob_root, pk.blobs.file_root, meanwhile=once)
    # one unlink at a time: ``meanwhile`` runs once, before any file of the batch is gone (with
    # several threads, two could race into ``once`` or unlink while it runs)
    return dataclasses.replace(pk.step_context(), blobs=store, unlink_threads=1)


@contextlib.contextmanager
def in_process(database_url: str, roots: Roots) -> Iterator[Pk]:
    """A handle with the in-process worker and scheduler, on short timings."""
    pk = purgekeeper.open(
        database_url,
        blob_root=roots["blob_root"],
        file_root=roots["file_root"],
        checkpoint_dir=roots["checkpoint_dir"],
        memory_roots=[roots["memory_root"]],
        policy=POLICY,
        sweep_interval=dt.timedelta(milliseconds=50),
    )
    try:
        yield pk
    finally:
        pk.close()
        # Drain our wake-ups, so none reaches the next test's handle (clones share a key).
        broker.setup(None).join(broker.QUEUE, timeout=10_000)


# -- content ----------------------------------------------------------------------------------------


def read_attachment(pk: Pk, attachment_id: str) -> bytes:
    with pk.open_attachment(attachment_id) as handle:
        return handle.read()


# -- memory -------------------------------------------------------------------------------------------


def memory_repository(roots: Roots, name: str, *, remembers: str = f"{SECRET} what the bot remembers") -> Path:
    path = roots["memory_root"].resolve() / name
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True, capture_output=True)
    (path / "MEMORY.md").write_text(f"{remembers}\n")
    return path


def outside_directory(tmp_path: Path) -> Path:
    """Somewhere a symlink inside a repository points to; it must survive erasure."""
    path = tmp_path.resolve() / "outside"
    (path / "nested").mkdir(parents=True)
    (path / "keep.txt").write_text("outside the repository")
    (path / "nested" / "deep.txt").write_text("deeper outside")
    return path


def plant_symlinks(repository: Path, target: Path) -> None:
    (repository / "linked-dir").symlink_to(target, target_is_directory=True)
    (repository / "notes").mkdir()
    (repository / "notes" / "linked-file").symlink_to(target / "keep.txt")
    (repository / ".git" / "linked-hooks").symlink_to(target, target_is_directory=True)


def erase_bot(pk: Pk, bot_id: str) -> str:
    identity = pk.preview_bot_deletion(bot_id).memory.identity
    acceptance = pk.delete_bot(bot_id, **WHO, erase_memory=True, reviewed_repository=identity)
    assert acceptance.outcome == "accepted"
    return acceptance.purge_id


def aside_of(repository: Path, purge_id: str) -> Path:
    return repository.parent / f"{ASIDE_PREFIX}{purge_id}"


def snapshot(*paths: Path) -> dict[str, Any]:
    """Every entry under the paths, without following symlinks: kind, and target or bytes."""
    seen: dict[str, Any] = {}

    def entry(path: Path) -> Any:
        if path.is_symlink():
            return ("symlink", os.readlink(path))
        return ("dir",) if path.is_dir() else ("file", path.read_bytes())

    for top in paths:
        if os.path.lexists(top):
            seen[str(top)] = entry(top)
        if top.is_dir() and not top.is_symlink():
            for folder, dirs, files in os.walk(top):
                for name in [*dirs, *files]:
                    seen[os.path.join(folder, name)] = entry(Path(folder) / name)
    return seen


# -- the invariant check ------------------------------------------------------------------------------

FENCED = "EXISTS (SELECT 1 FROM tombstones ft WHERE ft.kind = 'event' AND ft.id = {e})"
LIVE = (
    "(NOT EXISTS (SELECT 1 FROM tombstones lt WHERE lt.kind = 'event' AND lt.id = {e})"
    " AND EXISTS (SELECT 1 FROM placements lp JOIN conversations lc ON lc.id = lp.conversation_id"
    " WHERE lp.event_id = {e} AND lc.state <> 'purged'"
    " AND NOT EXISTS (SELECT 1 FROM tombstones lct WHERE lct.kind = 'conversation' AND lct.id = lc.id)))"
)
PURGED_CONVERSATIONS = "(SELECT id FROM tombstones WHERE kind = 'conversation')"


def assert_purges_leave_nothing(pk: Pk, roots: Roots) -> None:
    """After every purge completed, over every table and root:
    - no body, payload or output of fenced content remains, nor anything of a purged
      conversation, and no row of any table holds the SECRET marker;
    - the content is sealed, so the marker search above finds ciphertext only: the keys of
      fenced content and of deleted blobs are destroyed, every live event's key still opens
      its content, and no sealed value that still opens holds the SECRET marker;
    - no file of an exclusive blob remains, every shared (live) blob's file remains intact,
      and no file under any root holds the SECRET marker;
    - no fenced content is readable through the API;
    - every erased Memory repository is gone, aside directory included."""
    unfinished = rows(pk, "SELECT purge_id, kind, status, last_error FROM cleanup_steps WHERE status <> 'done'")
    assert unfinished == [], unfinished
    _assert_fenced_content_is_null(pk)
    _assert_purged_conversations_are_empty(pk)
    _assert_no_secret_in_any_table(pk)
    _assert_purged_keys_are_destroyed(pk)
    _assert_live_keys_open(pk)
    _assert_no_secret_in_what_opens(pk)
    _assert_blob_files_follow_liveness(pk)
    _assert_no_secret_on_disk(roots)
    _assert_nothing_fenced_is_readable(pk)
    _assert_erased_repositories_are_gone(pk)


def _assert_fenced_content_is_null(pk: Pk) -> None:
    leftovers = {
        "event bodies": f"SELECT id FROM events e WHERE body IS NOT NULL AND {FENCED.format(e='e.id')}",
        "admission payloads": "SELECT id FROM admissions a WHERE payload IS NOT NULL"
        f" AND {FENCED.format(e='a.event_id')}",
        "run outputs": "SELECT id FROM runs r WHERE output IS NOT NULL AND EXISTS (SELECT 1 FROM admissions a"
        f" WHERE a.run_id = r.id AND {FENCED.format(e='a.event_id')})",
        "derivative payloads": "SELECT id FROM derivatives d WHERE payload IS NOT NULL AND EXISTS (SELECT 1"
        f" FROM derivative_sources s WHERE s.derivative_id = d.id AND {FENCED.format(e='s.event_id')})",
        "events neither live nor fenced": f"SELECT id FROM events e WHERE NOT {LIVE.format(e='e.id')}"
        f" AND NOT {FENCED.format(e='e.id')}",
    }
    for what, sql in leftovers.items():
        assert [r[0] for r in rows(pk, sql)] == [], what


def _assert_purged_conversations_are_empty(pk: Pk) -> None:
    for table in ("placements", "runs", "derivatives"):
        sql = f"SELECT conversation_id FROM {table} WHERE conversation_id IN {PURGED_CONVERSATIONS}"
        assert [r[0] for r in rows(pk, sql)] == [], table
    sql = f"SELECT id, state FROM conversations WHERE id IN {PURGED_CONVERSATIONS} AND state <> 'purged'"
    assert rows(pk, sql) == []


def _assert_no_secret_in_any_table(pk: Pk) -> None:
    with pk.db.read() as conn:
        for table in metadata.sorted_tables:
            for row in conn.execute(select(table)):
                found = [v for v in row if isinstance(v, str) and SECRET in v]
                assert found == [], f"{table.name} still holds purged content: {row}"


# The keys a completed purge must have destroyed, by what they sealed: a fenced event's (its
# body and its attachments' names), its admissions' payloads, the outputs of the runs that
# admitted it, the payloads derived from it, and a deleted blob's bytes.
PURGED_KEYS = {
    "fenced events": f"SELECT key_id FROM events e WHERE key_id IS NOT NULL AND {FENCED.format(e='e.id')}",
    "admissions of fenced events": "SELECT key_id FROM admissions a WHERE key_id IS NOT NULL"
    f" AND {FENCED.format(e='a.event_id')}",
    "runs that admitted fenced events": "SELECT key_id FROM runs r WHERE key_id IS NOT NULL AND EXISTS (SELECT 1"
    f" FROM admissions a WHERE a.run_id = r.id AND {FENCED.format(e='a.event_id')})",
    "derivatives of fenced events": "SELECT key_id FROM derivatives d WHERE key_id IS NOT NULL AND EXISTS (SELECT 1"
    f" FROM derivative_sources s WHERE s.derivative_id = d.id AND {FENCED.format(e='s.event_id')})",
    "deleted blobs": "SELECT key_id FROM blobs WHERE key_id IS NOT NULL AND state = 'deleted'",
}


def _assert_purged_keys_are_destroyed(pk: Pk) -> None:
    for what, sql in PURGED_KEYS.items():
        key_ids = [r[0] for r in rows(pk, sql)]
        kept = [key_id for key_id, key in pk.key_store.get(key_ids).items() if key is not None]
        assert kept == [], f"{what}: keys not destroyed"
        assert pk.key_store.destroyed(key_ids) == set(key_ids), f"{what}: keys never made, not destroyed"


def _assert_live_keys_open(pk: Pk) -> None:
    """A live event's key is still there, and opens its body; so does a present blob's key
    (``_assert_blob_files_follow_liveness`` opens the live blobs' files with it)."""
    live = rows(pk, f"SELECT id, key_id FROM events e WHERE key_id IS NOT NULL AND {LIVE.format(e='e.id')}")
    keys = pk.key_store.get([row.key_id for row in live])
    assert [row.id for row in live if keys[row.key_id] is None] == [], "live events whose key was destroyed"
    for row in live:
        assert body_of(pk, row.id) != "<shredded>"  # opens, or raises SealedInvalid
    present = [r[0] for r in rows(pk, "SELECT key_id FROM blobs WHERE key_id IS NOT NULL AND state = 'present'")]
    assert [k for k, key in pk.key_store.get(present).items() if key is None] == [], "present blobs without a key"


def _assert_no_secret_in_what_opens(pk: Pk) -> None:
    found = [where for where, value in all_opened(pk).items() if SECRET in value]
    assert found == [], "sealed content still holds purged content"


def _assert_blob_files_follow_liveness(pk: Pk) -> None:
    sql = (
        "SELECT b.id, b.kind, b.path, b.state, b.sha256,"
        " (SELECT COUNT(*) FROM attachments a WHERE a.blob_id = b.id) AS refs,"
        f" (SELECT COUNT(*) FROM attachments a WHERE a.blob_id = b.id AND {LIVE.format(e='a.event_id')}) AS live"
        " FROM blobs b"
    )
    present: set[Path] = set()
    for row in rows(pk, sql):
        path = pk.blobs.root(row.kind) / row.path  # not resolved: a symlink is not its target
        if row.live:
            assert (row.state, path.is_symlink()) == ("present", False), f"shared blob {row.id} is {row.state}"
            assert hashlib.sha256(blob_bytes(pk, row.id)).hexdigest() == row.sha256, f"shared blob {row.id} changed"
            present.add(path)
        elif row.refs:
            assert (row.state, os.path.lexists(path)) == ("deleted", False), f"exclusive blob {row.id} remains"
        if row.state == "deleted":
            assert not os.path.lexists(path), f"deleted blob {row.id} still has its file"
    on_disk = {
        Path(folder) / name
        for root in (pk.blobs.blob_root, pk.blobs.file_root)
        for folder, _dirs, files in os.walk(root)
        for name in files
    }
    assert on_disk == present, "files under the blob roots that no present blob owns"


def _assert_no_secret_on_disk(roots: Roots) -> None:
    for root in roots.values():
        for folder, _dirs, files in os.walk(root):
            for name in files:
                path = Path(folder) / name
                if not path.is_symlink():
                    assert SECRET.encode() not in path.read_bytes(), f"{path} still holds purged content"


def _assert_nothing_fenced_is_readable(pk: Pk) -> None:
    sql = f"SELECT id FROM attachments a WHERE NOT {LIVE.format(e='a.event_id')}"
    for (attachment_id,) in rows(pk, sql):
        with pytest.raises(purgekeeper.ContentPurged):
            read_attachment(pk, attachment_id)
    fenced = {r[0] for r in rows(pk, "SELECT id FROM tombstones WHERE kind = 'event'")}
    purged = {r[0] for r in rows(pk, PURGED_CONVERSATIONS[1:-1])}
    for (conversation_id,) in rows(pk, "SELECT id FROM conversations"):
        events = pk.read_conversation(conversation_id)
        if conversation_id in purged:
            assert (pk.get_conversation(conversation_id), events) == (None, [])
        assert not {e.id for e in events} & fenced
        for event in events:
            assert SECRET not in (event.body or "")
            for attachment in event.attachments:
                assert SECRET.encode() not in read_attachment(pk, attachment.id)
    assert not {c.id for c in pk.list_conversations()} & purged


def _assert_erased_repositories_are_gone(pk: Pk) -> None:
    sql = (
        "SELECT b.memory_path, s.purge_id FROM bots b"
        " JOIN tombstones t ON t.kind = 'bot' AND t.id = b.id"
        " JOIN cleanup_steps s ON s.purge_id = t.purge_id AND s.kind = 'memory'"
        " WHERE b.erase_memory"
    )
    for memory_path, purge_id in rows(pk, sql):
        repository = Path(memory_path)
        assert not os.path.lexists(repository), f"{repository} survived its erasure"
        assert not os.path.lexists(aside_of(repository, purge_id)), "an aside directory survived"


# -- the bodies step --------------------------------------------------------------------------------


def test_bodies_step_nulls_the_fenced_content_everywhere_and_only_once(pk: Pk) -> None:
    seed_content(pk)
    purge_id = purge_events(pk, "e-doomed")
    bodies = step_of(pk, purge_id, "bodies")
    assert run(pk, bodies.id) == runner.Outcome("done")
    assert body_of(pk, "e-doomed") is None
    assert scalar(pk, "SELECT payload FROM admissions WHERE event_id = 'e-doomed'") is None
    assert scalar(pk, "SELECT output FROM runs WHERE id = 'r1'") is None
    assert scalar(pk, "SELECT payload FROM derivatives WHERE conversation_id = 'c1'") is None
    assert body_of(pk, "e-kept") == "kept body"
    after = step_of(pk, purge_id, "bodies")
    assert (after.status, after.attempts, after.last_error) == ("done", 1, None)
    # the body, the admission's payload, the run's output, the derivative's payload and the
    # names of the event's three attachments
    assert (after.progress.removed, after.progress.remaining) == (7, 0)
    assert run(pk, bodies.id).status == "skipped"  # a late duplicate does nothing
    assert step_of(pk, purge_id, "bodies").attempts == 1


# -- the attachments step ---------------------------------------------------------------------------


def test_attachments_step_deletes_exclusive_bytes_and_keeps_the_shared_blob(pk: Pk, roots: Roots) -> None:
    seed = seed_content(pk)
    files = {b: blob_file(pk, b) for b in (seed.exclusive_cas, seed.exclusive_file, seed.shared)}
    purge_id = purge_events(pk, "e-doomed")
    attachments = step_of(pk, purge_id, "attachments")
    assert run(pk, attachments.id).status == "done"
    for gone in (seed.exclusive_cas, seed.exclusive_file):
        assert (blob(pk, gone).state, files[gone].exists()) == ("deleted", False)
    assert (blob(pk, seed.shared).state, blob_bytes(pk, seed.shared)) == ("present", b"kept shared bytes")
    assert read_attachment(pk, seed.kept_attachment) == b"kept shared bytes"
    progress = step_of(pk, purge_id, "attachments").progress
    assert (progress.removed, progress.retained_shared) == (2, 1)
    assert progress.retained_reasons == {"blob referenced by live content": {"count": 1, "examples": [seed.shared]}}
    clean(pk, purge_id)
    assert_purges_leave_nothing(pk, roots)


@pytest.mark.parametrize(
    ("first", "second_binding"),
    [("cas", "real_file"), ("file", "legacy_cas")],
    ids=["cas-blob-reused-as-real-file", "file-blob-reused-as-legacy-cas"],
)
def test_a_blob_shared_across_both_binding_kinds_keeps_its_bytes(
    pk: Pk, roots: Roots, first: str, second_binding: str
) -> None:
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    data = b"forwarded bytes"
    make = NewAttachment.cas if first == "cas" else NewAttachment.file
    original = pk.ingest_event("c1", author="ada", body=f"{SECRET} a", attachments=[make(data, name="f.bin")])
    blob_id = original.attachments[0].blob_id
    forward = NewAttachment.reuse(blob_id, name="fwd.bin", binding=second_binding)
    forwarded = pk.ingest_event("c2", author="bob", body="kept", attachments=[forward])
    assert {original.attachments[0].binding, forwarded.attachments[0].binding} == {"legacy_cas", "real_file"}
    first_purge = purge_events(pk, original.id)
    clean(pk, first_purge)
    assert (blob(pk, blob_id).state, blob_bytes(pk, blob_id)) == ("present", data)
    assert read_attachment(pk, forwarded.attachments[0].id) == data
    assert step_of(pk, first_purge, "attachments").progress.retained_shared == 1
    assert_purges_leave_nothing(pk, roots)
    second_purge = purge_events(pk, forwarded.id)  # the last reference goes: so do the bytes
    clean(pk, second_purge)
    assert (blob(pk, blob_id).state, blob_file(pk, blob_id).exists()) == ("deleted", False)
    assert_purges_leave_nothing(pk, roots)


def test_a_cas_reupload_while_the_old_blob_is_deleted_keeps_the_new_bytes(pk: Pk, roots: Roots) -> None:
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    data = b"the same bytes, uploaded twice"
    old = pk.ingest_event("c1", author="ada", body=f"{SECRET} old", attachments=[NewAttachment.cas(data, name="x")])
    old_blob = old.attachments[0].blob_id
    purge_id = purge_events(pk, old.id)
    reuploaded: list[purgekeeper.Event] = []

    def reupload() -> None:  # the old blob is "deleting" now, its file not yet unlinked
        assert blob(pk, old_blob).state == "deleting"
        reuploaded.append(
            pk.ingest_event("c2", author="bob", body="new", attachments=[NewAttachment.cas(data, name="y")])
        )

    assert run(pk, step_of(pk, purge_id, "attachments").id, interleaved(pk, reupload)).status == "done"
    new_blob = reuploaded[0].attachments[0].blob_id
    assert new_blob != old_blob  # dedupe matched no "deleting" blob
    sha = hashlib.sha256(data).hexdigest()
    assert (blob(pk, new_blob).path, blob(pk, new_blob).state) == (cas_path(sha, new_blob), "present")
    assert blob_bytes(pk, new_blob) == data
    assert read_attachment(pk, reuploaded[0].attachments[0].id) == data
    assert (blob(pk, old_blob).state, blob_file(pk, old_blob).exists()) == ("deleted", False)
    clean(pk, purge_id)
    assert_purges_leave_nothing(pk, roots)


def test_a_cas_reupload_before_cleanup_gets_its_own_blob_and_the_purged_one_goes(pk: Pk, roots: Roots) -> None:
    """A present blob bound only by purged events holds purged content: a CAS upload of the
    same bytes is no reason to keep it, so the upload gets a blob of its own (issue 11)."""
    pk.create_conversation("c1")
    data = b"uploaded again before the cleanup ran"
    old = pk.ingest_event("c1", author="ada", body=f"{SECRET} old", attachments=[NewAttachment.cas(data, name="x")])
    purge_id = purge_events(pk, old.id)
    again = pk.ingest_event("c1", author="bob", body="again", attachments=[NewAttachment.cas(data, name="y")])
    assert again.attachments[0].blob_id != old.attachments[0].blob_id
    clean(pk, purge_id)
    assert read_attachment(pk, again.attachments[0].id) == data
    attachments_step = step_of(pk, purge_id, "attachments")
    assert (attachments_step.progress.removed, attachments_step.progress.retained_shared) == (1, 0)
    assert_purges_leave_nothing(pk, roots)


def test_a_symlinked_shard_directory_makes_cleanup_touch_nothing_outside_the_root(
    pk: Pk, roots: Roots, tmp_path: Path
) -> None:
    """Tried (issue 11): the shard directory of a purged real file (``files/ab``) replaced by a
    symlink to a directory outside the root that holds a file at the same relative path. The
    attachments step unlinks nothing outside; it retries and ends incomplete, saying why by
    blob id, never by path; the purged bytes stay unreadable through the library."""
    pk.create_conversation("c1")
    doomed = pk.ingest_event("c1", author="ada", body=SECRET, attachments=[NewAttachment.file(b"doomed", name="d")])
    [attachment] = doomed.attachments
    shard = pk.settings.file_root / attachment.blob_id[:2]
    outside = tmp_path / "elsewhere"
    shutil.move(shard, outside)
    shard.symlink_to(outside, target_is_directory=True)
    target = outside / attachment.blob_id
    assert blob_bytes(pk, attachment.blob_id, target) == b"doomed"
    before = target.read_bytes()
    purge_id = purge_events(pk, doomed.id)
    clean(pk, purge_id)
    step = step_of(pk, purge_id, "attachments")
    assert (step.status, step.attempts) == ("incomplete", step.max_attempts)
    assert step.last_error and "symlink" in step.last_error and attachment.blob_id in step.last_error
    assert str(outside) not in step.last_error and str(pk.settings.file_root) not in step.last_error
    assert target.read_bytes() == before  # untouched
    assert pk.status(purge_id).status == "incomplete"
    with pytest.raises(purgekeeper.ContentPurged):
        pk.open_attachment(attachment.id)


def test_a_live_file_swapped_for_a_symlink_never_serves_the_target(pk: Pk) -> None:
    """Tried (issue 11): a live attachment's file replaced by a symlink to a fenced blob's
    file. ``open_attachment`` of the live one refuses rather than serve the fenced bytes."""
    pk.create_conversation("c1")
    live = pk.ingest_event("c1", author="ada", body="kept", attachments=[NewAttachment.file(b"live", name="l")])
    fenced = pk.ingest_event("c1", author="ada", body=SECRET, attachments=[NewAttachment.file(b"FENCED", name="f")])
    purge_events(pk, fenced.id)
    live_file = blob_file(pk, live.attachments[0].blob_id)
    live_file.unlink()
    live_file.symlink_to(blob_file(pk, fenced.attachments[0].blob_id))
    with pytest.raises(purgekeeper.InfrastructureError, match="symlink") as refused:
        pk.open_attachment(live.attachments[0].id)
    assert str(pk.settings.file_root) not in str(refused.value)


def test_a_symlink_at_a_purged_blob_path_is_removed_and_its_target_kept(pk: Pk, roots: Roots) -> None:
    pk.create_conversation("c1")
    live = pk.ingest_event("c1", author="ada", body="kept", attachments=[NewAttachment.cas(b"live bytes", name="k")])
    doomed = pk.ingest_event(
        "c1", author="ada", body=f"{SECRET} d", attachments=[NewAttachment.cas(f"{SECRET} d".encode(), name="d")]
    )
    planted = blob_file(pk, doomed.attachments[0].blob_id)
    planted.unlink()
    planted.symlink_to(blob_file(pk, live.attachments[0].blob_id))
    purge_id = purge_events(pk, doomed.id)
    clean(pk, purge_id)
    assert pk.status(purge_id).status == "complete"
    assert blob_bytes(pk, live.attachments[0].blob_id) == b"live bytes"
    assert read_attachment(pk, live.attachments[0].id) == b"live bytes"
    assert not os.path.lexists(planted)
    assert_purges_leave_nothing(pk, roots)


def test_retained_shared_blobs_are_counted_once_across_attempts(pk: Pk) -> None:
    seed = seed_content(pk)
    broken = break_blob_file(pk, seed.exclusive_cas)
    purge_id = purge_events(pk, "e-doomed")
    step_id = step_of(pk, purge_id, "attachments").id
    assert run(pk, step_id).status == "retrying"
    shutil.rmtree(broken)
    assert run_when_due(pk, step_id).status == "done"
    progress = step_of(pk, purge_id, "attachments").progress
    assert (progress.removed, progress.retained_shared) == (2, 1)
    assert progress.retained_reasons == {"blob referenced by live content": {"count": 1, "examples": [seed.shared]}}


def test_many_small_batches_clean_everything(pk: Pk, roots: Roots) -> None:
    """Batches of two: every loop of the bodies and attachments steps goes round several times."""
    ctx = dataclasses.replace(pk.step_context(), batch_size=2)
    pk.register_bot("b-run", name="Runner")
    for conversation_id in ("c1", "c2", "c3"):
        pk.create_conversation(conversation_id)
    doomed = []
    for n in range(7):
        exclusive = [
            NewAttachment.cas(f"{SECRET} cas {n}".encode(), name="a"),
            NewAttachment.file(f"{SECRET} file {n}".encode(), name="b"),
        ]
        doomed.append(pk.ingest_event("c1", author="ada", body=f"{SECRET} {n}", attachments=exclusive).id)
        kept = [NewAttachment.cas(f"kept {n}".encode(), name="k")]
        shared = pk.ingest_event("c3", author="bob", body=f"kept {n}", attachments=kept)
        pk.place_event(shared.id, "c2")
        forward = [NewAttachment.reuse(shared.attachments[0].blob_id, name="r", binding="legacy_cas")]
        pk.ingest_event("c2", author="bob", body=f"{SECRET} c2 {n}", attachments=forward)
        pk.start_run("c2", bot_id="b-run", run_id=f"r{n}")
        pk.admit(shared.id, f"r{n}", payload={"n": n})
        pk.finish_run(f"r{n}", status="succeeded", output=f"{SECRET} output {n}")
        pk.add_derivative("c2", kind="summary", payload=f"{SECRET} summary {n}", source_event_ids=[shared.id])
    purges = [purge_events(pk, *doomed), pk.purge_conversation("c2", **WHO).purge_id]
    deadline = time.monotonic() + SETTLE_S
    while waiting := [s for p in purges for s in pk.status(p).steps if s.status not in ("done", "incomplete")]:
        assert time.monotonic() < deadline, waiting
        for step in waiting:
            runner.run_step(ctx, step.id, policy=POLICY)
    content, whole = ({s.kind: s for s in pk.status(p).steps} for p in purges)
    # seven bodies and their fourteen attachment names; fourteen files
    assert (content["bodies"].progress.removed, content["attachments"].progress.removed) == (21, 14)
    assert (whole["bodies"].progress.retained_shared, whole["attachments"].progress.retained_shared) == (7, 7)
    assert [len(pk.read_conversation("c3")), scalar(pk, "SELECT COUNT(*) FROM runs")] == [7, 0]
    assert_purges_leave_nothing(pk, roots)


# -- the memory step --------------------------------------------------------------------------------


def test_memory_step_removes_the_repository_and_leaves_symlink_targets_untouched(
    pk: Pk, roots: Roots, tmp_path: Path
) -> None:
    outside = outside_directory(tmp_path)
    neighbour = memory_repository(roots, "neighbour", remembers="a memory that is kept")
    pk.register_bot("b-keep", name="Neighbour", memory_path=neighbour)
    repository = memory_repository(roots, "helper")
    plant_symlinks(repository, outside)
    (repository / "neighbour-link").symlink_to(neighbour, target_is_directory=True)
    pk.register_bot("b-mem", name="Helper", memory_path=repository)
    untouched = snapshot(outside, neighbour)
    purge_id = erase_bot(pk, "b-mem")
    assert repository.is_dir()  # acceptance removes nothing
    memory_step = step_of(pk, purge_id, "memory")
    assert run(pk, memory_step.id).status == "done"
    assert not os.path.lexists(repository)
    assert not os.path.lexists(aside_of(repository, purge_id))
    assert snapshot(outside, neighbour) == untouched
    after = step_of(pk, purge_id, "memory")
    assert (after.status, after.attempts, after.progress.removed) == ("done", 1, 1)
    assert_purges_leave_nothing(pk, roots)


def _swap_for_symlink(repository: Path, elsewhere: Path) -> Callable[[], None]:
    os.rename(repository, elsewhere)
    repository.symlink_to(elsewhere, target_is_directory=True)

    def restore() -> None:
        repository.unlink()
        os.rename(elsewhere, repository)

    return restore


def _replace_marker(repository: Path, _elsewhere: Path) -> Callable[[], None]:
    marker = memory.marker_path(repository)
    original = marker.read_text("utf-8")
    memory.write_marker(repository, "b-mem")  # a fresh marker id: not the reviewed repository
    return lambda: marker.write_text(original, "utf-8")


def _replace_with_a_file(repository: Path, elsewhere: Path) -> Callable[[], None]:
    os.rename(repository, elsewhere)
    repository.write_text("not a repository any more")

    def restore() -> None:
        repository.unlink()
        os.rename(elsewhere, repository)

    return restore


def _nest_another_bot(pk: Pk) -> Callable[[Path, Path], Callable[[], None]]:
    def nest(repository: Path, _elsewhere: Path) -> Callable[[], None]:
        inner = repository / "vendored"
        inner.mkdir()
        subprocess.run(["git", "init", "-q", str(inner)], check=True, capture_output=True)
        pk.register_bot("b-inner", name="Inner", memory_path=inner)

        def restore() -> None:  # the inner bot is deleted, erasing its Memory too
            identity = pk.preview_bot_deletion("b-inner").memory.identity
            pk.delete_bot("b-inner", **WHO, erase_memory=True, reviewed_repository=identity)

        return restore

    return nest


@pytest.mark.parametrize(
    ("lose_ownership", "reason"),
    [
        (lambda pk: _swap_for_symlink, "symlink_on_path"),
        (lambda pk: _replace_marker, "marker_changed"),
        (lambda pk: _replace_with_a_file, "unresolved"),
        (_nest_another_bot, "contains_other_bot"),
    ],
    ids=["path-swapped-for-a-symlink", "marker-replaced", "path-replaced-by-a-file", "another-bot-registered-inside"],
)
def test_memory_step_with_ownership_lost_is_incomplete_at_once_and_deletes_nothing(
    pk: Pk, roots: Roots, tmp_path: Path, lose_ownership: Callable[[Pk], Any], reason: str
) -> None:
    repository = memory_repository(roots, "helper")
    elsewhere = tmp_path.resolve() / "moved-away"
    pk.register_bot("b-mem", name="Helper", memory_path=repository)
    purge_id = erase_bot(pk, "b-mem")
    restore = lose_ownership(pk)(repository, elsewhere)  # between confirmation and removal
    before = snapshot(repository, elsewhere)
    step_id = step_of(pk, purge_id, "memory").id
    assert run(pk, step_id).status == "incomplete"
    failed = step_of(pk, purge_id, "memory")
    assert (failed.status, failed.attempts, failed.max_attempts) == ("incomplete", 1, 5)  # no retries
    assert failed.last_error is not None and reason in failed.last_error
    assert pk.status(purge_id).status == "incomplete"
    assert snapshot(repository, elsewhere) == before
    assert not os.path.lexists(aside_of(repository, purge_id))
    assert run(pk, step_id).status == "skipped"  # an incomplete step is not due
    restore()
    pk.retry(purge_id, actor="ops@example.org", reason="ownership restored")
    assert run(pk, step_id).status == "done"
    assert not os.path.lexists(repository)
    clean(pk)
    assert_purges_leave_nothing(pk, roots)


def test_a_retry_finishes_the_aside_directory_it_finds(pk: Pk, roots: Roots) -> None:
    repository = memory_repository(roots, "helper")
    pk.register_bot("b-mem", name="Helper", memory_path=repository)
    purge_id = erase_bot(pk, "b-mem")
    step_id = step_of(pk, purge_id, "memory").id
    claim_as(pk, step_id, "crashed-worker")
    aside = aside_of(repository, purge_id)
    os.rename(repository, aside)  # what the attempt did before it died
    expire_lease(pk, step_id)
    assert run(pk, step_id).status == "done"
    assert not os.path.lexists(aside) and not os.path.lexists(repository)
    after = step_of(pk, purge_id, "memory")
    assert (after.status, after.attempts, after.progress.removed) == ("done", 2, 1)
    assert_purges_leave_nothing(pk, roots)


def test_an_aside_directory_without_the_recorded_marker_is_left_alone(pk: Pk, roots: Roots) -> None:
    repository = memory_repository(roots, "helper")
    pk.register_bot("b-mem", name="Helper", memory_path=repository)
    purge_id = erase_bot(pk, "b-mem")
    step_id = step_of(pk, purge_id, "memory").id
    claim_as(pk, step_id, "crashed-worker")
    aside = aside_of(repository, purge_id)
    os.rename(repository, aside)
    memory.write_marker(aside, "b-mem")  # someone else's directory now sits where the aside was
    expire_lease(pk, step_id)
    before = snapshot(aside)
    assert run(pk, step_id).status == "incomplete"
    failed = step_of(pk, purge_id, "memory")
    assert failed.last_error is not None and "marker_changed" in failed.last_error
    assert snapshot(aside) == before


# -- the step protocol --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["bodies", "attachments", "memory"])
def test_the_same_step_delivered_twice_at_once_is_effective_once(
    pk: Pk, roots: Roots, tmp_path: Path, kind: str
) -> None:
    seed_content(pk)
    repository = memory_repository(roots, "helper")
    plant_symlinks(repository, outside_directory(tmp_path))
    pk.register_bot("b-mem", name="Helper", memory_path=repository)
    purges = [purge_events(pk, "e-doomed"), erase_bot(pk, "b-mem")]
    step = next(s for p in purges for s in pk.status(p).steps if s.kind == kind)
    assert race(pk, step.id) == ["done", "skipped"]
    after = next(s for p in purges for s in pk.status(p).steps if s.id == step.id)
    assert (after.status, after.attempts) == ("done", 1)
    assert lease_of(pk, step.id).lease_owner is None
    clean(pk, *purges)
    assert_purges_leave_nothing(pk, roots)


def test_a_stale_owner_is_refused_while_the_new_owner_is_still_running(pk: Pk) -> None:
    """Issue 11, case 16: the lease-owner guard alone. A's lease expires and B claims the step
    and is still running it (status ``running``, so only the owner check stands between A
    and the row). A's progress and A's finish both raise LeaseLost and change nothing."""
    seed_content(pk)
    purge_id = purge_events(pk, "e-doomed")
    step_id = step_of(pk, purge_id, "bodies").id
    first = claim_as(pk, step_id, "worker-a")
    expire_lease(pk, step_id)
    second = claim_as(pk, step_id, "worker-b")
    before = rows(pk, "SELECT * FROM cleanup_steps WHERE id = :id", id=step_id)
    assert before[0].status == "running" and before[0].lease_owner == "worker-b"

    def stale_batch(conn: Any) -> None:
        conn.execute(text("UPDATE events SET body = NULL WHERE id = 'e-kept'"))
        steps.progress(conn, first, lease=POLICY.lease, removed=7, remaining=0, done=True)

    with pytest.raises(steps.LeaseLost):
        pk.db.transact(stale_batch)
    with pytest.raises(steps.LeaseLost):
        pk.db.transact(lambda conn: steps.finish(conn, first, outcome=StepStatus.DONE))
    with pytest.raises(steps.LeaseLost):
        pk.db.transact(lambda conn: steps.finish(conn, first, outcome=StepStatus.INCOMPLETE, error="stale"))
    assert rows(pk, "SELECT * FROM cleanup_steps WHERE id = :id", id=step_id) == before
    assert body_of(pk, "e-kept") == "kept body"
    pk.db.transact(lambda conn: steps.progress(conn, second, lease=POLICY.lease, removed=1))  # B's own write lands
    assert rows(pk, "SELECT removed FROM cleanup_steps WHERE id = :id", id=step_id) == [(1,)]


def test_a_late_attempt_whose_lease_expired_has_its_writes_rejected(pk: Pk, roots: Roots) -> None:
    seed_content(pk)
    purge_id = purge_events(pk, "e-doomed")
    step_id = step_of(pk, purge_id, "bodies").id
    slow = claim_as(pk, step_id, "slow")
    expire_lease(pk, step_id)
    assert run(pk, step_id).status == "done"  # a fresh attempt takes the step over and finishes it
    finished = step_of(pk, purge_id, "bodies")
    assert (finished.status, finished.attempts) == ("done", 2)

    def late_batch(conn: Any) -> None:  # the slow attempt wakes up and writes one more batch
        conn.execute(text("UPDATE events SET body = NULL WHERE id = 'e-kept'"))
        steps.progress(conn, slow, lease=POLICY.lease, removed=7)

    with pytest.raises(steps.LeaseLost):
        pk.db.transact(late_batch)
    assert body_of(pk, "e-kept") == "kept body"  # the batch's write was rolled back
    with pytest.raises(steps.LeaseLost):
        pk.db.transact(lambda conn: steps.finish(conn, slow, outcome=StepStatus.INCOMPLETE, error="late"))
    assert step_of(pk, purge_id, "bodies") == finished
    clean(pk, purge_id)
    assert_purges_leave_nothing(pk, roots)


def test_an_attempt_that_loses_its_lease_mid_step_ends_lease_lost(pk: Pk, roots: Roots) -> None:
    seed = seed_content(pk)
    purge_id = purge_events(pk, "e-doomed")
    step_id = step_of(pk, purge_id, "attachments").id
    takeover: list[runner.Outcome] = []

    def lease_runs_out_and_another_worker_takes_over() -> None:
        expire_lease(pk, step_id)
        takeover.append(run(pk, step_id))

    stalled = run(pk, step_id, interleaved(pk, lease_runs_out_and_another_worker_takes_over))
    assert (stalled.status, [t.status for t in takeover]) == ("lease_lost", ["done"])
    after = step_of(pk, purge_id, "attachments")
    assert (after.status, after.attempts, after.last_error) == ("done", 2, None)
    assert lease_of(pk, step_id).lease_owner is None
    assert {blob(pk, b).state for b in (seed.exclusive_cas, seed.exclusive_file)} == {"deleted"}
    clean(pk, purge_id)
    assert_purges_leave_nothing(pk, roots)


def test_a_worker_that_dies_during_its_last_attempt_leaves_the_step_incomplete(pk: Pk) -> None:
    seed_content(pk)
    purge_id = purge_events(pk, "e-doomed")
    set_max_attempts(pk, purge_id, 1)
    step_id = step_of(pk, purge_id, "bodies").id
    claim_as(pk, step_id, "dies-every-time")
    expire_lease(pk, step_id)
    assert run(pk, step_id).status == "skipped"
    failed = step_of(pk, purge_id, "bodies")
    assert (failed.status, failed.attempts) == ("incomplete", 1)
    assert failed.last_error is not None and "lease expired" in failed.last_error
    assert body_of(pk, "e-doomed") == f"{SECRET} body"  # nothing ran (but the fence holds)
    assert pk.read_conversation("c1") == []


def test_retry_hurries_a_retrying_step_and_says_who_and_why(pk: Pk, roots: Roots) -> None:
    """Issue 26: after fixing a cause, an operator could not hurry a ``retrying`` step (retry
    said "no incomplete step" and the next attempt stayed far away). Retry re-arms it too:
    due now, fresh attempts, in the audit with its actor and reason. Tried: a step retrying
    with its next attempt pushed an hour away; then a purge with no step left to retry."""
    seed = seed_content(pk)
    broken = break_blob_file(pk, seed.exclusive_cas)
    purge_id = purge_events(pk, "e-doomed")
    step_id = step_of(pk, purge_id, "attachments").id
    assert run(pk, step_id).status == "retrying"
    postpone(pk, step_id)
    assert run(pk, step_id).status == "skipped"  # not due for an hour
    shutil.rmtree(broken)
    rearmed = pk.retry(purge_id, actor="oncall@example.org", reason="freed the blob path")
    assert [(s.status, s.attempts) for s in rearmed.steps if s.kind == "attachments"] == [("pending", 0)]
    audit = rows(pk, "SELECT action, actor, reason, step_ids FROM purge_audit WHERE purge_id = :p", p=purge_id)
    assert [(a.action, a.actor, a.reason, json.loads(a.step_ids)) for a in audit] == [
        ("retry", "oncall@example.org", "freed the blob path", [step_id])
    ]
    assert run(pk, step_id).status == "done"  # due now
    clean(pk, purge_id)
    with pytest.raises(purgekeeper.Conflict, match="no incomplete or retrying step"):
        pk.retry(purge_id, actor="oncall@example.org", reason="again")
    assert_purges_leave_nothing(pk, roots)


def test_an_actor_that_always_fails_ends_incomplete_and_retry_rearms_it(pk: Pk, roots: Roots) -> None:
    seed = seed_content(pk)
    broken = break_blob_file(pk, seed.exclusive_cas)
    purge_id = purge_events(pk, "e-doomed")
    set_max_attempts(pk, purge_id, 2)
    step_id = step_of(pk, purge_id, "attachments").id
    assert run(pk, step_id).status == "retrying"
    retrying = step_of(pk, purge_id, "attachments")
    assert retrying.attempts == 1 and "IsADirectoryError" in (retrying.last_error or "")
    assert run_when_due(pk, step_id).status == "incomplete"
    clean(pk, purge_id)  # the bodies step is unaffected
    status = pk.status(purge_id)
    failed = step_of(pk, purge_id, "attachments")
    assert (status.status, failed.status, failed.attempts) == ("incomplete", "incomplete", 2)
    assert failed.last_error is not None and "IsADirectoryError" in failed.last_error
    assert purge_id in {p.purge_id for p in pk.list_purges("incomplete").purges}
    assert run(pk, step_id).status == "skipped" and pk.resume() == 0  # no longer due
    assert rows(pk, "SELECT id FROM purge_audit") == []

    shutil.rmtree(broken)
    rearmed = pk.retry(purge_id, actor="oncall@example.org", reason="freed the blob path")
    assert [(s.kind, s.status, s.attempts) for s in rearmed.steps if s.kind == "attachments"] == [
        ("attachments", "pending", 0)
    ]
    audit = rows(pk, "SELECT action, actor, reason, step_ids FROM purge_audit WHERE purge_id = :p", p=purge_id)
    assert [(a.action, a.actor, a.reason, json.loads(a.step_ids)) for a in audit] == [
        ("retry", "oncall@example.org", "freed the blob path", [step_id])
    ]
    assert run(pk, step_id).status == "done"
    assert pk.status(purge_id).status == "complete"
    with pytest.raises(purgekeeper.Conflict):
        pk.retry(purge_id, actor="oncall@example.org", reason="again")  # nothing incomplete now
    assert len(rows(pk, "SELECT id FROM purge_audit")) == 1
    assert_purges_leave_nothing(pk, roots)


# -- conversation purges ------------------------------------------------------------------------------


def test_conversation_purge_fences_what_lived_only_there_and_keeps_what_lives_elsewhere(pk: Pk, roots: Roots) -> None:
    pk.register_bot("b-run", name="Runner")
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    only = pk.ingest_event(
        "c1",
        author="ada",
        body=f"{SECRET} only here",
        event_id="e-only",
        provider_event_id="p-only",
        attachments=[NewAttachment.file(f"{SECRET} only file".encode(), name="o.txt")],
    )
    both = pk.ingest_event(
        "c1", author="ada", body="in both", event_id="e-both", attachments=[NewAttachment.cas(b"both", name="b")]
    )
    pk.place_event("e-both", "c2")
    pk.start_run("c1", bot_id="b-run", run_id="r-c1")
    pk.admit("e-only", "r-c1", payload={"text": f"{SECRET} admitted"})
    pk.admit("e-both", "r-c1", payload={"text": "both, admitted in c1"})
    pk.finish_run("r-c1", status="succeeded", output=f"{SECRET} c1 output")
    pk.start_run("c2", bot_id="b-run", run_id="r-c2")
    pk.admit("e-both", "r-c2", payload={"text": "kept payload"})
    pk.finish_run("r-c2", status="succeeded", output="kept output")
    pk.add_derivative("c1", kind="summary", payload=f"{SECRET} c1 summary", source_event_ids=["e-only", "e-both"])
    kept_index = pk.add_derivative("c2", kind="index", payload="kept index", source_event_ids=["e-both"])
    quote = pk.add_derivative("c2", kind="quote", payload=f"{SECRET} quoted", source_event_ids=["e-only"])

    purge_id = pk.purge_conversation("c1", **WHO).purge_id
    bodies, attachments = step_of(pk, purge_id, "bodies"), step_of(pk, purge_id, "attachments")
    assert attachments.next_attempt_at == steps.PARKED_UNTIL
    assert run(pk, attachments.id).status == "skipped"  # parked until the bodies step ran
    with pk.db.read() as conn:
        assert attachments.id not in steps.due_steps(conn, limit=100)
    assert step_of(pk, purge_id, "attachments").attempts == 0

    assert run(pk, bodies.id) == runner.Outcome("done", (attachments.id,))
    assert body_of(pk, "e-only") is None and body_of(pk, "e-both") == "in both"
    fences = rows(pk, "SELECT kind, id, purge_id FROM tombstones WHERE purge_id = :p ORDER BY kind, id", p=purge_id)
    assert [tuple(f) for f in fences] == [  # p-only is fenced through e-only (migration 0005)
        ("conversation", "c1", purge_id),
        ("event", "e-only", purge_id),
    ]
    for table in ("placements", "runs", "derivatives"):
        assert scalar(pk, f"SELECT COUNT(*) FROM {table} WHERE conversation_id = 'c1'") == 0, table
    assert scalar(pk, "SELECT COUNT(*) FROM admissions WHERE run_id = 'r-c1'") == 0
    assert scalar(pk, "SELECT payload FROM derivatives WHERE id = :id", id=quote.id) is None
    assert opened(pk, "derivative", kept_index.id) == '"kept index"'
    assert opened(pk, "output", "r-c2") == '"kept output"'
    progress = step_of(pk, purge_id, "bodies").progress
    assert progress.retained_shared == 1
    assert progress.retained_reasons == {"event placed in a live conversation": {"count": 1, "examples": ["e-both"]}}
    assert step_of(pk, purge_id, "attachments").next_attempt_at < steps.PARKED_UNTIL

    assert run(pk, attachments.id).status == "done"
    assert (blob(pk, only.attachments[0].blob_id).state, blob(pk, both.attachments[0].blob_id).state) == (
        "deleted",
        "present",
    )
    [kept] = pk.read_conversation("c2")
    assert (kept.id, kept.body) == ("e-both", "in both")
    assert read_attachment(pk, kept.attachments[0].id) == b"both"
    with pytest.raises(purgekeeper.ContentPurged):
        pk.ingest_event("c2", author="ada", body="redelivered", provider_event_id="p-only")
    assert pk.status(purge_id).status == "complete"
    assert_purges_leave_nothing(pk, roots)


@pytest.mark.parametrize("order", ["both-accepted-before-cleanup", "one-after-the-other"])
def test_two_conversations_sharing_an_event_both_purged_null_it(pk: Pk, roots: Roots, order: str) -> None:
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    shared = pk.ingest_event(
        "c1",
        author="ada",
        body=f"{SECRET} shared",
        event_id="e-shared",
        attachments=[NewAttachment.cas(f"{SECRET} shared bytes".encode(), name="s")],
    )
    pk.place_event("e-shared", "c2")
    first = pk.purge_conversation("c1", **WHO).purge_id
    if order == "one-after-the-other":
        clean(pk, first)  # c2 was live then: the event was rightly kept, in c2
        assert body_of(pk, "e-shared") is not None
        assert step_of(pk, first, "bodies").progress.retained_shared == 1
    second = pk.purge_conversation("c2", **WHO).purge_id
    clean(pk, first, second)
    assert body_of(pk, "e-shared") is None
    assert scalar(pk, "SELECT COUNT(*) FROM tombstones WHERE kind = 'event' AND id = 'e-shared'") == 1
    assert blob(pk, shared.attachments[0].blob_id).state == "deleted"
    if order == "both-accepted-before-cleanup":
        assert [step_of(pk, p, "bodies").progress.retained_shared for p in (first, second)] == [0, 0]
    assert_purges_leave_nothing(pk, roots)


def test_a_deleted_channel_is_purged_too(pk: Pk, roots: Roots) -> None:
    pk.register_bot("b-run", name="Runner")
    pk.create_conversation("ch", kind="channel")
    pk.create_conversation("c2")
    only = pk.ingest_event(
        "ch", author="ada", body=f"{SECRET} ch", attachments=[NewAttachment.file(f"{SECRET} f".encode(), name="f")]
    )
    both = pk.ingest_event("ch", author="ada", body="in both")
    pk.place_event(both.id, "c2")
    pk.start_run("ch", bot_id="b-run", run_id="r1")
    pk.admit(only.id, "r1", payload={"text": f"{SECRET} payload"})
    pk.finish_run("r1", status="succeeded", output=f"{SECRET} output")
    pk.add_derivative("ch", kind="summary", payload=f"{SECRET} summary", source_event_ids=[only.id])
    pk.delete_channel("ch", **WHO)
    assert [e.id for e in pk.read_conversation("ch")] == [only.id, both.id]  # history stays readable
    purge_id = pk.purge_conversation("ch", **WHO).purge_id
    clean(pk, purge_id)
    assert pk.status(purge_id).status == "complete"
    assert (body_of(pk, only.id), body_of(pk, both.id)) == (None, "in both")
    assert blob(pk, only.attachments[0].blob_id).state == "deleted"
    assert_purges_leave_nothing(pk, roots)


# -- operator commands: wait and resume ------------------------------------------------------------------


def test_wait_returns_the_status_on_timeout(pk: Pk, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a purge nobody works on, ``wait`` looks more than once and then gives the status it
    saw; on one that a worker finishes meanwhile, it returns complete, and only after the
    worker is done (states and order, no timings)."""
    pk.create_conversation("c1")
    event = pk.ingest_event("c1", author="ada", body=f"{SECRET} body")
    purge_id = purge_events(pk, event.id)
    looks: list[str] = []  # the status each look of wait saw
    real_status = pk.status

    def look(purge: str) -> purgekeeper.PurgeStatus:
        seen = real_status(purge)
        looks.append(seen.status)
        return seen

    monkeypatch.setattr(pk, "status", look)
    status = pk.wait(purge_id, 0.3)
    assert (status.purge_id, status.status, [s.status for s in status.steps]) == (purge_id, "accepted", ["pending"])
    assert len(looks) >= 2 and set(looks) == {"accepted"}
    assert pk.wait(purge_id, 0).status == "accepted"

    def worker() -> None:
        while len(looks) < 2:  # wait has looked, and found it accepted
            time.sleep(0.01)
        clean(pk, purge_id)

    looks.clear()
    thread = threading.Thread(target=worker)
    thread.start()
    finished = pk.wait(purge_id, 120)
    thread.join()
    assert finished.status == "complete"
    assert looks[0] == "accepted" and looks[-1] == "complete"  # it waited through the cleanup


def test_resume_resends_due_and_lease_expired_steps_and_counts_them(database_url: str, roots: Roots) -> None:
    sent: list[str] = []
    pk = purgekeeper.open(
        database_url,
        blob_root=roots["blob_root"],
        file_root=roots["file_root"],
        checkpoint_dir=roots["checkpoint_dir"],
        memory_roots=[roots["memory_root"]],
        workers="none",
        enqueue=sent.extend,
    )
    try:
        pk.create_conversation("c1")
        pk.create_conversation("c-whole")
        pk.ingest_event("c-whole", author="ada", body="whole")
        ids = [pk.ingest_event("c1", author="ada", body=f"{SECRET} {n}").id for n in range(5)]
        due, leased, expired, done, backing_off = (step_of(pk, purge_events(pk, e), "bodies").id for e in ids)
        whole = pk.purge_conversation("c-whole", **WHO).purge_id
        claim_as(pk, leased, "alive", lease=dt.timedelta(hours=1))
        claim_as(pk, expired, "dead")
        expire_lease(pk, expired)
        assert run(pk, done).status == "done"
        held = claim_as(pk, backing_off, "failing")
        pk.db.transact(
            lambda conn: steps.finish(conn, held, outcome=StepStatus.RETRYING, retry_in=dt.timedelta(hours=1))
        )
        sent.clear()

        expected = sorted([due, expired, step_of(pk, whole, "bodies").id])  # its attachments step is parked
        assert pk.resume() == 3
        assert sorted(sent) == expected
        assert pk.resume() == 3  # a repeat re-sends: duplicates are harmless
        assert sorted(sent) == sorted(expected * 2)
        assert step_of(pk, purge_id_of(pk, leased), "bodies").status == "running"  # still leased to "alive"
    finally:
        pk.close()


def purge_id_of(pk: Pk, step_id: str) -> str:
    return str(scalar(pk, "SELECT purge_id FROM cleanup_steps WHERE id = :id", id=step_id))


# -- end to end, with the in-process worker and scheduler ---------------------------------------------


def test_end_to_end_every_actor_with_the_in_process_worker(database_url: str, roots: Roots, tmp_path: Path) -> None:
    outside = outside_directory(tmp_path)
    untouched = snapshot(outside)
    with in_process(database_url, roots) as pk:
        seed = seed_content(pk)
        repository = memory_repository(roots, "helper")
        plant_symlinks(repository, outside)
        pk.register_bot("b-mem", name="Helper", memory_path=repository)
        pk.create_conversation("c3")
        pk.ingest_event(
            "c3",
            author="ada",
            body=f"{SECRET} c3 only",
            attachments=[NewAttachment.file(f"{SECRET} c3 file".encode(), name="c.txt")],
        )
        pk.place_event("e-kept", "c3")  # live in c2 too: retained-shared when c3 goes
        purges = [purge_events(pk, "e-doomed"), pk.purge_conversation("c3", **WHO).purge_id, erase_bot(pk, "b-mem")]
        every_step = [s.id for p in purges for s in pk.status(p).steps]
        pk.enqueue(every_step)  # duplicate deliveries, on top of the acceptance's own
        pk.enqueue(every_step)

        statuses = [pk.wait(p, 30) for p in purges]
        assert [s.status for s in statuses] == ["complete"] * 3, statuses
        assert sorted((s.kind, s.attempts) for status in statuses for s in status.steps) == [
            ("attachments", 1),
            ("attachments", 1),
            ("bodies", 1),
            ("bodies", 1),
            ("memory", 1),
        ]
        assert step_of(pk, purges[1], "bodies").progress.retained_shared == 1
        assert read_attachment(pk, seed.kept_attachment) == b"kept shared bytes"
        assert [e.body for e in pk.read_conversation("c2")] == ["kept body"]
        assert not os.path.lexists(repository)
        assert snapshot(outside) == untouched
        assert_purges_leave_nothing(pk, roots)


def test_end_to_end_an_actor_that_always_fails_then_a_retry(database_url: str, roots: Roots) -> None:
    with in_process(database_url, roots) as pk:
        pk.create_conversation("c1")
        event = pk.ingest_event(
            "c1", author="ada", body=f"{SECRET} body", attachments=[NewAttachment.cas(f"{SECRET} x".encode(), name="x")]
        )
        broken = break_blob_file(pk, event.attachments[0].blob_id)
        purge_id = purge_events(pk, event.id)
        status = pk.wait(purge_id, 30)
        assert status.status == "incomplete", status
        failed = step_of(pk, purge_id, "attachments")
        assert (failed.attempts, failed.max_attempts) == (5, 5)
        assert failed.last_error is not None and "IsADirectoryError" in failed.last_error
        assert step_of(pk, purge_id, "bodies").status == "done"

        shutil.rmtree(broken)
        pk.retry(purge_id, actor="oncall@example.org", reason="freed the blob path")
        assert pk.wait(purge_id, 30).status == "complete"
        audit = rows(pk, "SELECT actor, reason FROM purge_audit WHERE purge_id = :p", p=purge_id)
        assert [tuple(a) for a in audit] == [("oncall@example.org", "freed the blob path")]
        assert_purges_leave_nothing(pk, roots)


def test_a_repository_gone_before_erasure_is_not_reported_erased(pk: Pk, roots: Roots, tmp_path: Path) -> None:
    """Moved away after the confirmation, before the step ran: the step cannot claim it
    erased anything, so it ends incomplete at once (the moved copy still exists)."""
    repository = tmp_path / "memory-moved" / "repo"
    repository.parent.mkdir()
    subprocess.run(["git", "init", "-q", str(repository)], check=True)
    pk.register_bot("b-moved", name="Moved", memory_path=repository)
    identity = pk.preview_bot_deletion("b-moved").memory.identity
    purge_id = pk.delete_bot(
        "b-moved", actor="op", reason="r", erase_memory=True, reviewed_repository=identity
    ).purge_id
    repository.rename(tmp_path / "memory-moved" / "elsewhere")
    clean(pk, purge_id)
    [step] = pk.status(purge_id).steps
    assert (step.status, step.attempts) == ("incomplete", 1)
    assert "unresolved" in (step.last_error or "")
    assert (tmp_path / "memory-moved" / "elsewhere" / ".git").is_dir()


def test_the_scheduler_does_not_pile_up_wake_ups_for_a_step_still_due(pk: Pk) -> None:
    """While no worker runs, a due step is re-sent once per resend interval, not every sweep."""
    pk.create_conversation("c-due")
    event = pk.ingest_event("c-due", author="ada", body="x")
    purge_events(pk, event.id)
    sent: list[str] = []
    loop = Scheduler(pk.db, sent.extend, resend_after=dt.timedelta(hours=1))
    for _ in range(5):
        loop.tick()
    assert len(sent) == 1
    assert pk.resume() == 1  # the operator's resume always sends


def test_a_due_step_whose_wake_up_waits_in_the_broker_is_never_sent_again(pk: Pk) -> None:
    """Issue 26: while no worker runs, the Redis queue grew by a wake-up per resend interval
    (6, 8, 10 in a minute with one purge pending). When the broker can say what it holds, a
    step with a wake-up waiting is not sent again, however long it waits: at most one queued
    wake-up per due step. Tried: ten sweeps with the resend interval over at each."""
    pk.create_conversation("c-due")
    event = pk.ingest_event("c-due", author="ada", body="x")
    purge_events(pk, event.id)
    sent: list[str] = []
    in_broker: set[str] = set()
    loop = Scheduler(pk.db, sent.extend, resend_after=dt.timedelta(0), queued=lambda: set(in_broker))
    loop.tick()
    in_broker.update(sent)
    for _ in range(10):
        loop.tick()
    assert len(sent) == 1


def test_the_scheduler_resends_a_due_step_whose_wake_up_is_gone(pk: Pk) -> None:
    """Issue 11, case 8: within ``resend_after``, a due step is sent again when the broker
    says no wake-up for it is queued any more (a worker took it and could not claim the step,
    the database being down), and not while one is; a sweep that failed forgets what it
    sent, so the next one sends everything due."""
    pk.create_conversation("c-due")
    event = pk.ingest_event("c-due", author="ada", body="x")
    purge_events(pk, event.id)
    sent: list[str] = []
    in_broker: set[str] = set()
    loop = Scheduler(pk.db, sent.extend, resend_after=dt.timedelta(hours=1), queued=lambda: set(in_broker))
    loop.tick()
    in_broker.update(sent)  # the wake-up waits in the queue
    loop.tick()
    loop.tick()
    assert len(sent) == 1
    in_broker.clear()  # a worker took it, and it came to nothing
    loop.tick()
    assert len(sent) == 2

    loop.queued = None  # a broker that cannot say (the in-process StubBroker)
    loop.tick()
    assert len(sent) == 2

    def database_down() -> bool:
        raise InfrastructureError("the database is down")

    loop.lead = database_down  # type: ignore[method-assign]
    loop.tick()
    del loop.lead
    loop.tick()
    assert len(sent) == 3  # sent again after the failed round, not an hour later


def test_a_steps_last_batch_finishes_it_in_the_same_commit(pk: Pk, roots: Roots) -> None:
    """The last batch of each step sets it ``done`` (lease released) in its own UPDATE and
    commit, so no separate finish is needed and a crash right after it cannot leave the step
    running. Tried: the bodies and then the attachments step of a conversation purge, each
    claimed and carried out by ``grouped.run`` directly, with no finish call afterwards; and a
    content purge's bodies step the same way."""
    from purgekeeper.workers import cleanup, grouped

    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body=f"{SECRET} gone", attachments=[NewAttachment.file(b"gone", name="g")])
    second = pk.ingest_event("c1", author="ada", body=f"{SECRET} also gone")
    purge_id = pk.purge_conversation("c1", **WHO).purge_id

    def claim_and_run(step_id: str) -> cleanup.Ran:
        return grouped.run(pk.step_context(), claim_as(pk, step_id, "test-owner"))

    bodies, attachments = step_of(pk, purge_id, "bodies"), step_of(pk, purge_id, "attachments")
    assert claim_and_run(bodies.id) == cleanup.Ran((attachments.id,), finished=True)
    assert step_of(pk, purge_id, "bodies").status == "done" and lease_of(pk, bodies.id) == (None, None)
    assert claim_and_run(attachments.id) == cleanup.Ran(finished=True)
    assert step_of(pk, purge_id, "attachments").status == "done" and lease_of(pk, attachments.id) == (None, None)
    assert pk.status(purge_id).status == "complete"
    assert_purges_leave_nothing(pk, roots)

    pk.create_conversation("c2")
    other = pk.ingest_event("c2", author="ada", body=f"{SECRET} selected")
    scope = EventScope(event_ids=[other.id])
    content = pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO).purge_id
    assert claim_and_run(step_of(pk, content, "bodies").id).finished
    assert step_of(pk, content, "bodies").status == "done"
    assert body_of(pk, other.id) is None and body_of(pk, second.id) is None
