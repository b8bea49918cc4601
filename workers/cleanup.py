"""The cleanup steps as plain functions, bodies and memory, and the batch they are made of
(the attachments step, and the bodies steps of :class:`Batched` kinds, run in groups of steps
worked together: ``purgekeeper.workers.grouped``).

Each works in small batches; each batch is its own transaction, which also records progress
and renews the lease (``purgekeeper.schema.steps.progress``): a lost lease rolls the batch back. Every
batch is idempotent, so an attempt that dies half-way is simply run again. Liveness is
decided when the step runs, never earlier.

Between two batches is a safe point: once the process is stopping (``StepContext.stopping``)
the next batch does not begin, and the attempt ends there (:class:`Stopping`), with its step
given back (``purgekeeper.workers.runner``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from purgekeeper.schema import cleanup_queries, ledger, purges, retry_policy, steps
from purgekeeper.schema.db import Database, bound_lock_waits, commit_without_flush
from purgekeeper.schema.errors import LockTimeout
from purgekeeper.schema.states import StepKind
from purgekeeper.storage import failpoints, memory
from purgekeeper.storage.blobstore import BlobStore
from purgekeeper.storage.content_keys import ContentKeys

log = logging.getLogger(__name__)

# Where the bodies step's rows/s stops rising (bench/cleanup.py --batch-sizes 500,2000,10000:
# 2,000 is about 1.3x 500, and 10,000 is no faster), while one batch holds its row locks for
# a fraction of a second.
DEFAULT_BATCH_SIZE = 2000
DEFAULT_UNLINK_THREADS = 4  # a batch's files are unlinked this many at a time
# At most this many steps of one kind are claimed and worked together (purgekeeper.workers.grouped):
# a batch still holds at most batch_size rows or files, so this only bounds how many purges one
# attempt's lease covers. 1 works every step alone.
DEFAULT_GROUP_STEPS = 64
DEFAULT_MAX_LOCK_WAIT = retry_policy.MAX_LOCK_WAIT
# After a batch that ran while other sessions of the database were running statements, the
# step pauses this share of the batch's time (at most DEFAULT_MAX_YIELD): the foreground
# gets the CPU and the disk back between batches. Alone on the database, no pause.
DEFAULT_YIELD_SHARE = 1.0
DEFAULT_MAX_YIELD = dt.timedelta(seconds=1)
PROGRESS_FIELDS = frozenset({"removed", "retained", "reasons", "remaining", "restart_retained", "kept_by_hold", "done"})
ASIDE_PREFIX = ".purgekeeper-aside-"


class Stopping(Exception):
    """The process is stopping: the attempt ends at a safe point, before its next batch."""


class NotProvable(Exception):
    """Memory ownership is no longer provable: no retry can fix that, nothing is deleted."""

    def __init__(self, reason: str, detail: str | None) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail or memory.OWNERSHIP_REASONS.get(reason, reason)}")


@dataclass(frozen=True)
class StepContext:
    """What a step needs: the database, the roots, the keys that seal the content (the
    bodies and attachments steps destroy those of what they purge), each purge kind's
    bodies step, and its knobs. ``bodies`` is what the process gives the workers at start-up
    (``purgekeeper.commands.kinds.bodies_steps()``): importing ``workers`` registers nothing.

    ``lock_timeout``: a batch waits at most this long for a row lock (default a third of the
    lease), then renews its lease and tries again, up to ``max_lock_wait`` in all: waiting on
    a lock (a frozen session's, until the server ends it) burns no attempt.

    ``yield_share``: after a batch that met other busy sessions, the step pauses that share
    of the batch's time, at most ``max_yield`` (0 never pauses; see ``run_batch``).

    ``group_steps``: how many steps of one kind an attempt may claim and work together, at
    most (``purgekeeper.workers.grouped``; 1: each alone).

    ``stopping``: set when the process that serves with this context stops; each attempt
    then ends before its next batch (``purgekeeper.workers.runner.wind_down``)."""

    db: Database
    blobs: BlobStore
    keys: ContentKeys
    memory_roots: tuple[Path, ...]
    lease: dt.timedelta
    bodies: Mapping[str, BodiesStep]
    batch_size: int = DEFAULT_BATCH_SIZE
    unlink_threads: int = DEFAULT_UNLINK_THREADS
    lock_timeout: dt.timedelta | None = None
    max_lock_wait: dt.timedelta = DEFAULT_MAX_LOCK_WAIT
    yield_share: float = DEFAULT_YIELD_SHARE
    max_yield: dt.timedelta = DEFAULT_MAX_YIELD
    group_steps: int = DEFAULT_GROUP_STEPS
    stopping: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

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


def run(ctx: StepContext, held: steps.Claim, entry: ledger.LedgerEntry) -> Ran:
    """Carry out one claimed bodies or memory step of the ledger row ``entry`` (the
    attachments step, and bodies steps of :class:`Batched` kinds, run in groups:
    ``purgekeeper.workers.grouped``, whose ``run`` is the one to call for any step)."""
    handler: Callable[[StepContext, steps.Claim, ledger.LedgerEntry], Ran] = {
        StepKind.BODIES.value: remove_bodies,
        StepKind.MEMORY.value: remove_memory,
    }[held.kind]
    return handler(ctx, held, entry)


def run_batch(
    ctx: StepContext, held: steps.Claim, work: Callable[[Connection], dict[str, Any]], *, durable: bool = False
) -> dict[str, Any]:
    """One committed batch: the work and its progress (which renews the lease) together.
    When the work says ``"done": True`` it was the step's last batch, and the same UPDATE
    finishes the step. Batches are idempotent, so their commits need not wait for the WAL
    flush (a server crash makes the step do them again), except where ``durable`` says a file
    is touched next, and for a batch that finishes the step (a shown status never reverts).

    A batch that ran while other sessions of the database were running statements is
    followed by a pause of ``ctx.yield_share`` of its time (at most ``ctx.max_yield``): the
    foreground's latency pays for the cleanup only while a batch runs, and the cleanup runs
    at full speed when nothing else does.

    A batch does not begin, nor wait on a lock again, once ``ctx.stopping`` is set: it raises
    :class:`Stopping` instead, at that safe point.

    The keys of the content the work NULLs (``cleanup_queries.null_content_of`` lists them)
    are destroyed, durably, before the batch commits: a crash between the two leaves
    ciphertext whose key is gone, and the batch, done again, destroys nothing new."""
    busy = 0

    def transaction(conn: Connection) -> dict[str, Any]:
        nonlocal busy
        bound_lock_waits(conn, ctx.batch_lock_timeout)
        done = _shredding(ctx, held, conn, work)
        failpoints.hit(f"{held.kind}.batch")
        steps.progress(conn, held, lease=ctx.lease, **{k: v for k, v in done.items() if k in PROGRESS_FIELDS})
        if not (durable or done.get("done")):
            commit_without_flush(conn)
        busy = cleanup_queries.others_active(conn) if ctx.yield_share > 0 and not done.get("done") else 0
        return done

    waited = dt.timedelta(0)
    while True:
        if ctx.stopping.is_set():
            raise Stopping(f"the process is stopping: step {held.step_id} is given back before its next batch")
        try:
            began = time.monotonic()
            done = ctx.db.transact(transaction)
            if busy:
                pause(ctx, time.monotonic() - began)
            return done
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


def _shredding(
    ctx: StepContext, held: steps.Claim, conn: Connection, work: Callable[[Connection], dict[str, Any]]
) -> dict[str, Any]:
    """``work`` in the batch's transaction, then the keys of the content it NULLed destroyed,
    durably, before the batch commits: a crash between the two leaves ciphertext whose key
    is gone."""
    with collecting_keys(conn) as shred:
        done = work(conn)
    if shred:
        ctx.keys.destroy(shred)
        failpoints.hit(f"{held.kind}.shredded")
    return done


@contextlib.contextmanager
def collecting_keys(conn: Connection) -> Iterator[list[str]]:
    """The list the content removed meanwhile adds its keys to (``cleanup_queries.null_content_of``
    and the deletes read ``conn.info[SHRED]``), for the caller to destroy before the commit."""
    keys: list[str] = []
    info = conn.info  # read once: on a connection the server ended, reading it again raises
    info[cleanup_queries.SHRED] = keys
    try:
        yield keys
    finally:
        del info[cleanup_queries.SHRED]  # the DBAPI connection's: it outlives the batch


def pause(ctx: StepContext, batch_s: float) -> None:
    """Pause a share of the batch's time (outside any transaction: nothing stays locked), so
    the foreground that met the batch has the CPU and the disk to itself for a while."""
    time.sleep(min(ctx.yield_share * batch_s, ctx.max_yield.total_seconds()))


# -- bodies -------------------------------------------------------------------------------------

BodiesStep = Callable[[StepContext, steps.Claim, ledger.LedgerEntry], Ran]
BodiesBatch = Callable[[Connection, ledger.LedgerEntry, int], dict[str, Any]]


@dataclass(frozen=True)
class Batched:
    """A bodies step made of batches that each find what is left by themselves:
    ``batch(conn, entry, limit)`` does the next ``limit`` items or so of the purge ``entry``,
    says what it did (``removed``, ``retained``, ...; ``cost``: the items it took, toward a
    group's budget; ``wake``: the steps it unparked) and ``"done": True`` on the last. A
    worker may run several purges' steps of such a kind together, in shared batches
    (``purgekeeper.workers.grouped``); called, it is the plain loop of one step."""

    batch: BodiesBatch

    def __call__(self, ctx: StepContext, held: steps.Claim, entry: ledger.LedgerEntry) -> Ran:
        while not (done := run_batch(ctx, held, lambda conn: self.batch(conn, entry, ctx.batch_size))).get("done"):
            pass
        return Ran(tuple(done.get("wake", ())), finished=True)


def remove_bodies(ctx: StepContext, held: steps.Claim, entry: ledger.LedgerEntry) -> Ran:
    """The bodies step of the row's kind, from the ones the process gave its StepContext: a
    kind it knows no bodies step for fails the attempt, with the reason, rather than falling
    through to another kind's."""
    step = ctx.bodies.get(entry.kind)
    if step is None:
        raise LookupError(f"no bodies step is given for purge kind {entry.kind!r} (purge {entry.purge_id})")
    return step(ctx, held, entry)


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
        run_batch(ctx, held, lambda _conn: {"remaining": 1}, durable=True)  # one directory set aside, to remove
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
    run_batch(ctx, held, lambda _conn: {"removed": removed, "remaining": 0, "done": True})
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
