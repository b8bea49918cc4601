"""The three cleanup steps as plain functions: bodies, attachments and memory.

Each works in small batches; each batch is its own transaction, which also records progress
and renews the lease (``schema.steps.progress``): a lost lease rolls the batch back. Every
batch is idempotent, so an attempt that dies half-way is simply run again. Liveness is
decided when the step runs, never earlier.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from schema import authors, cleanup, ledger, purges, retention, retry_policy, steps
from schema.db import Database, bound_lock_waits, commit_without_flush
from schema.errors import LockTimeout
from schema.states import StepKind
from storage import failpoints, memory
from storage.blobstore import BlobStore

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 500
DEFAULT_UNLINK_THREADS = 4  # a batch's files are unlinked this many at a time
DEFAULT_MAX_LOCK_WAIT = retry_policy.MAX_LOCK_WAIT
PROGRESS_FIELDS = frozenset({"removed", "retained", "reasons", "remaining", "restart_retained", "kept_by_hold", "done"})
ASIDE_PREFIX = ".purgekeeper-aside-"


class NotProvable(Exception):
    """Memory ownership is no longer provable: no retry can fix that, nothing is deleted."""

    def __init__(self, reason: str, detail: str | None) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail or memory.OWNERSHIP_REASONS.get(reason, reason)}")


@dataclass(frozen=True)
class StepContext:
    """What a step needs: the database, the roots, and its knobs.

    ``lock_timeout``: a batch waits at most this long for a row lock (default a third of the
    lease), then renews its lease and tries again, up to ``max_lock_wait`` in all: waiting on
    a lock (a frozen session's, until the server ends it) burns no attempt."""

    db: Database
    blobs: BlobStore
    memory_roots: tuple[Path, ...]
    lease: dt.timedelta
    batch_size: int = DEFAULT_BATCH_SIZE
    unlink_threads: int = DEFAULT_UNLINK_THREADS
    lock_timeout: dt.timedelta | None = None
    max_lock_wait: dt.timedelta = DEFAULT_MAX_LOCK_WAIT

    @property
    def batch_lock_timeout(self) -> dt.timedelta:
        return self.lock_timeout or self.lease * retry_policy.LOCK_TIMEOUT_SHARE


@dataclass(frozen=True)
class Ran:
    """What an attempt did: the steps to wake after it (a parked follower), and whether its
    last batch already finished the step (``done`` in the same commit)."""

    wake: tuple[str, ...] = ()
    finished: bool = False


def log_fields(held: steps.Claim) -> dict[str, str]:
    """The ``extra=`` fields of a log line about a claimed step."""
    return {"purge_id": held.purge_id, "step_id": held.step_id, "step_kind": held.kind}


def run(ctx: StepContext, held: steps.Claim, entry: ledger.LedgerEntry | None = None) -> Ran:
    """Carry out one claimed step (of the ledger row ``entry``, read here when not given)."""
    entry = entry or _entry(ctx, held.purge_id)
    handler: Callable[[StepContext, steps.Claim, ledger.LedgerEntry], Ran] = {
        StepKind.BODIES.value: remove_bodies,
        StepKind.ATTACHMENTS.value: remove_attachments,
        StepKind.MEMORY.value: remove_memory,
    }[held.kind]
    return handler(ctx, held, entry)


def _entry(ctx: StepContext, purge_id: str) -> ledger.LedgerEntry:
    with ctx.db.read() as conn:
        entry = ledger.entry_by_purge_id(conn, purge_id)
    if entry is None:
        raise LookupError(f"purge {purge_id} has cleanup steps but no ledger row")
    return entry


def _batch(
    ctx: StepContext, held: steps.Claim, work: Callable[[Connection], dict[str, Any]], *, durable: bool = False
) -> dict[str, Any]:
    """One committed batch: the work and its progress (which renews the lease) together.
    When the work says ``"done": True`` it was the step's last batch, and the same UPDATE
    finishes the step. Batches are idempotent, so their commits need not wait for the WAL
    flush (a server crash makes the step do them again), except where ``durable`` says a file
    is touched next, and for a batch that finishes the step (a shown status never reverts)."""

    def transaction(conn: Connection) -> dict[str, Any]:
        bound_lock_waits(conn, ctx.batch_lock_timeout)
        done = work(conn)
        failpoints.hit(f"{held.kind}.batch")
        steps.progress(conn, held, lease=ctx.lease, **{k: v for k, v in done.items() if k in PROGRESS_FIELDS})
        if not (durable or done.get("done")):
            commit_without_flush(conn)
        return done

    waited = dt.timedelta(0)
    while True:
        try:
            return ctx.db.transact(transaction)
        except LockTimeout:
            waited += ctx.batch_lock_timeout
            if waited >= ctx.max_lock_wait:
                raise LockTimeout(f"a row stayed locked by another session for {waited.total_seconds():g}s") from None
            log.info(
                "step waiting for a row lock (%gs so far); the lease is renewed",
                waited.total_seconds(),
                extra=log_fields(held),
            )
            ctx.db.transact(functools.partial(steps.progress, held=held, lease=ctx.lease))  # LeaseLost if taken over


# -- bodies -------------------------------------------------------------------------------------

BodiesStep = Callable[[StepContext, steps.Claim, ledger.LedgerEntry], Ran]

# The bodies step of each purge kind, registered by the kind's module (``commands.kinds``):
# a kind this process knows no bodies step for fails the attempt, with the reason, rather than
# falling through to another kind's.
_BODIES: dict[str, BodiesStep] = {}


def register_bodies(kind: str, step: BodiesStep) -> None:
    _BODIES[kind] = step


def remove_bodies(ctx: StepContext, held: steps.Claim, entry: ledger.LedgerEntry) -> Ran:
    step = _BODIES.get(entry.kind)
    if step is None:
        raise LookupError(f"no bodies step is registered for purge kind {entry.kind!r} (purge {entry.purge_id})")
    return step(ctx, held, entry)


def null_fenced_content(ctx: StepContext, held: steps.Claim, entry: ledger.LedgerEntry) -> Ran:
    """NULL the content of the events the ledger row lists (they were fenced at acceptance)."""
    event_ids = list(entry.selectors.get("event_ids", []))
    for start in range(0, len(event_ids), ctx.batch_size):
        batch = event_ids[start : start + ctx.batch_size]
        remaining = max(len(event_ids) - start - len(batch), 0)
        _batch(ctx, held, functools.partial(_null_batch, event_ids=batch, remaining=remaining))
    return Ran(finished=bool(event_ids))


def _null_batch(conn: Connection, *, event_ids: list[str], remaining: int) -> dict[str, Any]:
    return {"removed": cleanup.null_content_of(conn, event_ids), "remaining": remaining, "done": remaining == 0}


def empty_conversation(ctx: StepContext, held: steps.Claim, entry: ledger.LedgerEntry) -> Ran:
    """Events placed only here lose their content and are fenced; events live elsewhere keep
    it there and are reported retained-shared. Then runs, admissions and derivatives go (the
    last events batch goes on with them in its own transaction), and the batch that finds
    none left unparks the attachments step, which waits for this one, and finishes the step."""
    purge_id, conversation_id = entry.purge_id, str(entry.selectors["conversation_id"])
    batch = functools.partial(_empty_batch, purge_id=purge_id, conversation_id=conversation_id, limit=ctx.batch_size)
    while not (done := _batch(ctx, held, batch)).get("done"):
        pass
    return Ran(tuple(done["wake"]), finished=True)


def _empty_batch(conn: Connection, *, purge_id: str, conversation_id: str, limit: int) -> dict[str, Any]:
    """The next events of the conversation; once its events are all done, its runs and
    derivatives in the same transaction."""
    placed = cleanup.placed_events(conn, conversation_id, limit=limit + 1)  # one more: is there a next batch?
    if len(placed) > limit:
        return _empty_events(conn, placed[:limit], purge_id=purge_id, conversation_id=conversation_id)
    done = _empty_events(conn, placed, purge_id=purge_id, conversation_id=conversation_id)
    rows = _delete_rows(conn, purge_id=purge_id, conversation_id=conversation_id, limit=limit)
    return {**done, "removed": done["removed"] + rows["removed"], "done": not rows["more"], "wake": rows["wake"]}


def _empty_events(conn: Connection, placed: list[str], *, purge_id: str, conversation_id: str) -> dict[str, Any]:
    if not placed:
        return {"removed": 0}
    live_elsewhere = cleanup.live_elsewhere(conn, placed, conversation_id)
    shared = sorted(live_elsewhere)
    only_here = [event_id for event_id in placed if event_id not in live_elsewhere]
    cleanup.tombstone_events(conn, purge_id, only_here)
    removed = cleanup.null_content_of(conn, only_here) + cleanup.remove_placements(conn, conversation_id, placed)
    return {
        "removed": removed,
        "retained": len(shared),
        "reasons": {"event placed in a live conversation": shared} if shared else None,
    }


def _delete_rows(conn: Connection, *, purge_id: str, conversation_id: str, limit: int) -> dict[str, Any]:
    """A batch of the conversation's runs (with their admissions) and derivatives; once none
    are left, the attachments step is unparked in the same transaction."""
    runs = cleanup.delete_runs_batch(conn, conversation_id, limit=limit)
    derived = cleanup.delete_derivatives_batch(conn, conversation_id, limit=limit)
    more = runs >= limit or derived >= limit
    wake = [] if more else steps.unpark(conn, purge_id, StepKind.ATTACHMENTS.value)
    return {"removed": runs + derived, "more": more, "wake": wake}


def erase_author_events(ctx: StepContext, held: steps.Claim, entry: ledger.LedgerEntry) -> Ran:
    """An author erasure: the author's events in the window, a batch at a time in
    (occurred_at, id) order, get their ``event`` tombstones and lose their content; the batch
    that finds none left unparks the attachments step and finishes this one. A rerun walks
    them again from the start (tombstones and NULLs are idempotent)."""
    selectors = entry.selectors
    window_end = ledger.from_utc_text(str(selectors["window_end"]))
    batch = functools.partial(
        _erase_batch, purge_id=entry.purge_id, author=str(selectors["author"]), window_end=window_end
    )
    after: tuple[Any, ...] | None = None
    while not (done := _batch(ctx, held, functools.partial(batch, after=after, limit=ctx.batch_size))).get("done"):
        after = done["after"]
    return Ran(tuple(done["wake"]), finished=True)


def _erase_batch(
    conn: Connection, *, purge_id: str, author: str, window_end: dt.datetime, after: Any, limit: int
) -> dict[str, Any]:
    erased, last = authors.erase_batch(
        conn, purge_id=purge_id, author=author, window_end=window_end, after=after, limit=limit
    )
    if last is not None:
        return {"removed": len(erased), "after": last}
    return {"removed": len(erased), "done": True, "wake": steps.unpark(conn, purge_id, StepKind.ATTACHMENTS.value)}


MAX_RETENTION_WALKS = 3  # walks of a run's window before an attempt gives up (a writer racing it)
KEPT_ELSEWHERE = "event placed in a conversation it has not expired from"


def expire_retention(ctx: StepContext, held: steps.Claim, entry: ledger.LedgerEntry) -> Ran:
    """A retention run: its window, a batch at a time, loses its expiring placements; the
    events then live nowhere are fenced (``event`` tombstones, for this run) and emptied, the
    others are reported kept elsewhere, and what holds kept is counted (``held``). The batch
    that finds the walk done and nothing expiring left deletes the run's fence, unparks the
    attachments step and finishes this one; if a writer placed something behind the walk, it
    walks again. A rerun walks from the start (every batch is idempotent)."""
    fence = retention.Fence.of(entry.purge_id, entry.selectors)
    first = True
    for _walk in range(MAX_RETENTION_WALKS):
        after: tuple[Any, ...] | None = None
        while True:
            work = functools.partial(_expire_batch, fence=fence, after=after, limit=ctx.batch_size, first=first)
            done = _batch(ctx, held, work)
            first = False
            if done.get("done"):
                return Ran(tuple(done["wake"]), finished=True)
            if done.get("walked"):
                break
            after = done["after"]
    raise RuntimeError(
        f"retention run {entry.purge_id}: content it expires is still placed after {MAX_RETENTION_WALKS} walks"
    )


def _expire_batch(conn: Connection, *, fence: retention.Fence, after: Any, limit: int, first: bool) -> dict[str, Any]:
    batch = retention.expire_batch(conn, fence, after=after, limit=limit)
    progress = {
        "removed": len(batch.expired),
        "retained": len(batch.kept_elsewhere),
        "kept_by_hold": len(batch.held),  # counted in the step's own ``held`` column
        "reasons": {KEPT_ELSEWHERE: batch.kept_elsewhere} if batch.kept_elsewhere else None,
        "restart_retained": first,
    }
    if batch.after is not None:
        return {**progress, "after": batch.after}
    if retention.expiring_left(conn, fence):  # placed behind the walk meanwhile: walk again
        return {**progress, "walked": True}
    if retention.fence_exists(conn, fence.purge_id):
        retention.drop_fence(conn, fence.purge_id)
    return {**progress, "done": True, "wake": steps.unpark(conn, fence.purge_id, StepKind.ATTACHMENTS.value)}


# -- attachments --------------------------------------------------------------------------------


def remove_attachments(ctx: StepContext, held: steps.Claim, entry: ledger.LedgerEntry) -> Ran:
    """Per batch: find and lock the blobs, count live references of both binding kinds, mark
    the unreferenced ones deleting and commit; unlink them (a missing file is fine), a few at
    a time; mark them deleted (the last batch finishes the step in that commit). Shared blobs
    are recorded as retained, with the reason: each attempt walks every candidate again, so
    its first batch starts the count afresh."""
    after, first = "", True
    while True:
        marked = _batch(
            ctx,
            held,
            functools.partial(
                _mark_unreferenced, purge_id=entry.purge_id, after=after, limit=ctx.batch_size, first=first
            ),
            durable=True,  # "deleting" is on disk before any unlink: else a present blob could lack its bytes
        )
        first = False
        ctx.blobs.discard_all(marked["doomed"], threads=ctx.unlink_threads)  # a missing file counts as done
        gone = [blob_id for blob_id, _kind, _path in marked["doomed"]]
        last = marked["last"] is None
        if gone:
            _batch(ctx, held, functools.partial(_mark_deleted, blob_ids=gone, last=last))
        if last:
            return Ran(finished=True)
        after = marked["last"]


def _mark_unreferenced(conn: Connection, *, purge_id: str, after: str, limit: int, first: bool) -> dict[str, Any]:
    rows = cleanup.lock_candidate_blobs(conn, purge_id, after=after, limit=limit)
    ids = [row.id for row in rows]
    live = cleanup.live_referenced(conn, ids) if ids else set()
    shared = sorted(blob_id for blob_id in ids if blob_id in live)
    doomed = [row for row in rows if row.id not in live]
    cleanup.mark_deleting(conn, [row.id for row in doomed])
    last = len(ids) < limit  # a short batch is the last one
    return {
        "retained": len(shared),
        "reasons": {"blob referenced by live content": shared} if shared else None,
        "restart_retained": first,
        "doomed": [(row.id, row.kind, row.path) for row in doomed],
        "last": None if last else ids[-1],
        "done": last and not doomed,  # nothing to unlink: this batch finishes the step
    }


def _mark_deleted(conn: Connection, *, blob_ids: list[str], last: bool) -> dict[str, Any]:
    marked = cleanup.mark_deleted(conn, blob_ids)
    return {"removed": marked, "done": last}


# -- memory -------------------------------------------------------------------------------------


def remove_memory(ctx: StepContext, held: steps.Claim, entry: ledger.LedgerEntry) -> Ran:
    """Prove ownership, rename aside, prove the marker there, remove without following
    symlinks, verify. A retry finishes an aside directory it finds."""
    selectors = entry.selectors
    repository = Path(str(selectors["memory_path"]))
    aside = repository.parent / f"{ASIDE_PREFIX}{entry.purge_id}"
    bot_id, marker_id = str(selectors["bot_id"]), selectors.get("marker_id")
    if not _exists(aside):
        if not _exists(repository):
            return _nothing_left(ctx, held, repository)
        _prove(ctx, repository, bot_id, marker_id)
        failpoints.hit("memory.rename")
        os.rename(repository, aside)
        _batch(ctx, held, lambda _conn: {"remaining": 1}, durable=True)  # one directory set aside, to remove
    marker = memory.read_marker(aside)
    if marker != memory.Marker(bot_id, str(marker_id)):
        raise NotProvable("marker_changed", f"the directory set aside at {aside} does not carry the recorded marker")
    _remove_tree(aside)
    if _exists(aside):
        raise OSError(f"{aside} is still there after removal")
    return _memory_done(ctx, held, removed=1)


def _nothing_left(ctx: StepContext, held: steps.Claim, repository: Path) -> Ran:
    """Nothing at the path and no aside: done if an earlier attempt set it aside (and then
    removed it), or if it lay inside another repository purgekeeper erased; otherwise the
    repository went elsewhere before purgekeeper touched it, and claiming it erased would be
    false."""
    with ctx.db.read() as conn:
        set_aside = steps.remaining_of(conn, held.step_id) == 1
        erased_around = any(Path(path) in repository.parents for path in purges.erased_repositories(conn))
    if not (set_aside or erased_around):
        raise NotProvable("unresolved", f"{repository} is gone, and purgekeeper did not remove it")
    return _memory_done(ctx, held, removed=1)


def _memory_done(ctx: StepContext, held: steps.Claim, *, removed: int) -> Ran:
    _batch(ctx, held, lambda _conn: {"removed": removed, "remaining": 0, "done": True})
    return Ran(finished=True)


def _prove(ctx: StepContext, repository: Path, bot_id: str, marker_id: Any) -> None:
    with ctx.db.read() as conn:
        others = purges.kept_repositories(conn, except_bot=bot_id)
    verdict = memory.prove_ownership(
        repository,
        bot_id=bot_id,
        marker_id=str(marker_id) if marker_id else None,
        memory_roots=ctx.memory_roots,
        other_repositories=others,
    )
    if not verdict.provable:
        raise NotProvable(verdict.reason or "unprovable", verdict.detail)


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _remove_tree(path: Path) -> None:
    """shutil.rmtree with fd-based traversal never follows a symlink: a link inside is
    unlinked and its target is left untouched; the top directory itself must not be a link."""
    if path.is_symlink():
        raise NotProvable("symlink_on_path", f"{path} became a symlink")
    if not shutil.rmtree.avoids_symlink_attacks:  # pragma: no cover - Linux has the fd functions
        raise OSError("this platform cannot remove a tree without following symlinks")
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)
