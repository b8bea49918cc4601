"""Steps of one kind worked together: a group.

A host that deletes an account purges hundreds of small conversations at once. Alone, each of
their steps pays for its own claim, its own commits, its own write of the key store and its
own directory fsyncs, and that fixed cost, not the rows, is what a small purge's cleanup
costs. So a worker that claims a step that can be grouped (an attachments step, or the
bodies step of a kind made of :class:`~purgekeeper.workers.cleanup.Batched` batches) claims
up to ``ctx.group_steps - 1`` more waiting, due steps of the same kind in the same
transaction (``purgekeeper.schema.steps.claim_more``), and works them together:

- Each batch is one transaction for the group. Each member's part runs inside a SAVEPOINT
  of its own, the members taking turns, up to ``ctx.batch_size`` rows or files for the whole
  batch (a member that had its part goes to the back). The keys of the content the batch
  NULLed are destroyed in one durable write of the key store. Then, as for a step alone,
  each member's progress is recorded, exactly its own (its counts, retained reasons and
  remaining, and ``done`` for a member whose last batch this was), and the waiting members'
  leases are renewed, so step rows are locked only at the end of the batch. A lease found
  lost there rolls the batch back, and it runs again without that member.
- An attachments batch destroys its blobs' keys after its commit and unlinks the files of
  every member at once, fsyncing each directory once for all of them; a committed batch's
  files go before anything else, so an attempt retried after a fault counts nothing twice.
- A member's part that raises its own error is rolled back to its savepoint, and that member
  alone ends its attempt (retrying, or incomplete at its maximum: ``purgekeeper.workers.runner``).
  A row lock that does not come is waited for again at the next batch, up to
  ``ctx.max_lock_wait`` per member. A file that cannot be unlinked fails each member whose
  blob it is (two members may share one), and a key the store never held fails its member.
- A fault of the whole transaction (a deadlock, a lost connection, a key store that cannot
  be written) runs it again or is retried as a step's is, and past that ends the attempt of
  each member still in the group, each recorded on its own step.

Each step keeps its own attempts, counts, status and log lines: the group is only how they
share their commits. A step alone is a group of one (:func:`run`).
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from purgekeeper.schema import cleanup_queries, ledger, steps
from purgekeeper.schema.db import bound_lock_waits, commit_without_flush
from purgekeeper.schema.errors import (
    InfrastructureError,
    LockTimeout,
    connection_lost,
    is_retryable,
    translate_db_error,
)
from purgekeeper.schema.states import StepKind
from purgekeeper.storage import failpoints
from purgekeeper.storage.blobstore import Doomed
from purgekeeper.storage.keystore import KeyStoreUnusable
from purgekeeper.workers import cleanup
from purgekeeper.workers.cleanup import PROGRESS_FIELDS, Batched, Ran, StepContext, Stopping

log = logging.getLogger(__name__)

# Where the attachments step's walk is: after which fenced event its window starts, and
# after which blob of that window it goes on ("" for none).
Cursor = tuple[str, str]
WINDOWS_PER_BATCH = 16
# A member's part gets at least 1/MIN_PART_SHARE of the batch size; with less left, the batch
# ends there (a sliver of work costs a part its statements all the same).
MIN_PART_SHARE = 16

DONE, FAILED, LEASE_LOST, STOPPED = "done", "failed", "lease_lost", "stopped"
SAVEPOINT = "pk_member"


@dataclass
class Member:
    """One step of a group, and where its walk is (the attachments step's: its cursor, whether
    its next batch is its attempt's first, the blobs it unlinked in the batch before, the shared
    blobs it counted, and the blobs its last committed batch marked deleting, whose keys and
    files are still to go)."""

    held: steps.Claim
    entry: ledger.LedgerEntry
    after: Cursor | None = ("", "")
    first: bool = True
    gone: list[str] = field(default_factory=list)
    kept: set[str] = field(default_factory=set)
    waited: dt.timedelta = dt.timedelta(0)
    unlinking: list[Doomed] = field(default_factory=list)  # marked deleting, committed; not yet unlinked
    unlinking_keys: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Ended:
    """How a member's attempt ended: ``done`` (its last batch finished it), ``failed`` (with
    the error), ``lease_lost``, or ``stopped`` (its process is stopping: the step is to be
    given back)."""

    how: str
    error: BaseException | None = None
    wake: tuple[str, ...] = ()


@dataclass
class Group:
    """The members still at work, and how the others ended (by step id). A transient fault
    runs :func:`work` again with what is left. ``on_end`` is told of each member as it ends,
    at once (the runner records a failure on its step then, before its lease runs out while
    the others go on)."""

    active: list[Member]
    ended: dict[str, Ended] = field(default_factory=dict)
    on_end: Callable[[Member, Ended], None] | None = None
    progressed_at: float = field(default_factory=time.monotonic)  # the last batch committed then

    def end(self, member: Member, ended: Ended) -> None:
        self.active.remove(member)
        self.ended[member.held.step_id] = ended
        if self.on_end is not None:
            self.on_end(member, ended)

    def fail_all(self, error: BaseException) -> None:
        for member in list(self.active):
            self.end(member, Ended(FAILED, error))


def groupable(ctx: StepContext, kind: str, entry: ledger.LedgerEntry) -> bool:
    """Whether a step of ``kind`` of the purge ``entry`` runs in a group: an attachments step
    always, a bodies step when its purge kind's is :class:`Batched`."""
    return kind == StepKind.ATTACHMENTS.value or (
        kind == StepKind.BODIES.value and isinstance(ctx.bodies.get(entry.kind), Batched)
    )


def batched_kinds(ctx: StepContext) -> list[str]:
    """The purge kinds whose bodies steps may share a group."""
    return sorted(kind for kind, step in ctx.bodies.items() if isinstance(step, Batched))


def run(ctx: StepContext, held: steps.Claim, entry: ledger.LedgerEntry | None = None) -> Ran:
    """Carry out one claimed step (of the ledger row ``entry``, read here when not given): a
    group of one, or the plain step of a kind that is not grouped. A failure is raised."""
    entry = entry or _entry(ctx, held.purge_id)
    if not groupable(ctx, held.kind, entry):
        return cleanup.run(ctx, held, entry)
    group = Group([Member(held, entry)])
    work(ctx, group)
    ended = group.ended[held.step_id]
    if ended.how == FAILED and ended.error is not None:
        raise ended.error
    if ended.how == LEASE_LOST:
        raise steps.LeaseLost(f"step {held.step_id} is no longer leased to {held.owner}")
    if ended.how == STOPPED:
        raise Stopping(f"the process is stopping: step {held.step_id} is given back before its next batch")
    return Ran(ended.wake, finished=True)


def _entry(ctx: StepContext, purge_id: str) -> ledger.LedgerEntry:
    with ctx.db.read() as conn:
        entry = ledger.entry_by_purge_id(conn, purge_id)
    if entry is None:
        raise LookupError(f"purge {purge_id} has cleanup steps but no ledger row")
    return entry


def work(ctx: StepContext, group: Group) -> None:
    """Batches until every member has ended (:class:`Group`). A fault of a whole batch is
    raised, with the group as it stands: running it again goes on from there (first with the
    files of a batch that committed before the fault)."""
    while group.active:
        _unlink(ctx, group)
        if not group.active:
            return
        if ctx.stopping.is_set():
            for member in list(group.active):
                group.end(member, Ended(STOPPED))
            return
        _batch(ctx, group)


class _Refused(Exception):
    """Members a batch cannot go on with (a lease found lost, a key the store never held): the
    batch's transaction rolls back, they end as they must, and the batch runs again without
    them."""

    def __init__(self, ended: dict[str, Ended]) -> None:
        self.ended = ended
        super().__init__(f"{len(ended)} member(s) refused")


def _batch(ctx: StepContext, group: Group) -> None:
    """One transaction: each member's part in a SAVEPOINT of its own, the batch's keys
    destroyed, then each member's progress (its own counts; which renews its lease), the
    waiting members' leases renewed, and the commit. As for a step alone, step rows are
    locked only at the end of the batch; a lease found lost there rolls the batch back, and it
    runs again without that member."""
    kind = group.active[0].held.kind
    attachments = kind == StepKind.ATTACHMENTS.value
    part = _attachments_part if attachments else _bodies_part
    parts: dict[str, dict[str, Any]] = {}
    failed: dict[str, BaseException] = {}
    lost: set[str] = set()
    busy = 0

    def transaction(conn: Connection) -> None:
        nonlocal busy
        parts.clear()  # a transaction tried again starts afresh
        failed.clear()
        lost.clear()
        bound_lock_waits(conn, ctx.batch_lock_timeout)
        shreds: dict[str, list[str]] = {}
        budget = ctx.batch_size
        for member in group.active:
            if budget < max(ctx.batch_size // MIN_PART_SHARE, 1) and (parts or failed):
                break  # too little left to be worth a part: the others go first next batch
            done, error, keys = _in_savepoint(conn, functools.partial(part, ctx, member=member, limit=budget))
            if error is not None:
                failed[member.held.step_id] = error
                continue
            parts[member.held.step_id], shreds[member.held.step_id] = done, keys
            budget -= max(int(done.get("cost", 0)), 1)
        _destroy(ctx, shreds, after=f"{kind}.shredded")
        failpoints.hit(f"{kind}.batch")
        _record(ctx, conn, group, parts)
        waiting = [m.held.step_id for m in group.active if m.held.step_id not in parts]
        lost.update(set(waiting) - steps.renew(conn, group.active[0].held.owner, waiting, lease=ctx.lease))
        finishing = any(done.get("done") for done in parts.values())
        if not (attachments or finishing):
            commit_without_flush(conn)
        busy = cleanup_queries.others_active(conn) if ctx.yield_share > 0 and not finishing else 0

    began = time.monotonic()
    try:
        ctx.db.transact(transaction)
    except _Refused as refused:
        for member in [m for m in group.active if m.held.step_id in refused.ended]:
            group.end(member, refused.ended[member.held.step_id])
        return
    group.progressed_at = time.monotonic()
    _settle(ctx, group, parts, failed, lost, attachments=attachments)
    if busy:
        cleanup.pause(ctx, time.monotonic() - began)


def _record(ctx: StepContext, conn: Connection, group: Group, parts: dict[str, dict[str, Any]]) -> None:
    """Each member's progress, which renews its lease; :class:`_Refused` for the members whose
    lease was lost (their parts must not commit)."""
    lost: dict[str, Ended] = {}
    for member in group.active:
        done = parts.get(member.held.step_id)
        if done is None:
            continue
        fields = {k: v for k, v in done.items() if k in PROGRESS_FIELDS}
        try:
            steps.progress(conn, member.held, lease=ctx.lease, **fields)
        except steps.LeaseLost:
            lost[member.held.step_id] = Ended(LEASE_LOST)
    if lost:
        raise _Refused(lost)


def _in_savepoint(
    conn: Connection, part: Callable[[Connection], dict[str, Any]]
) -> tuple[dict[str, Any], BaseException | None, list[str]]:
    """A member's part in a SAVEPOINT of its own: what it did and the keys of the content it
    NULLed, or the error it was rolled back for. A fault of the whole transaction (a deadlock,
    a serialization failure, a lost connection) is raised: the transaction runs again, or the
    attempt retries it. A row lock that did not come is the member's (it waits for it again at
    the next batch), and so is any other error (a trigger's refusal), as its domain error."""
    # Plain SQL, not SQLAlchemy's nested transaction: on a connection the server ended, its
    # savepoint could not be rolled back and would hide the error the retries must see.
    conn.exec_driver_sql(f"SAVEPOINT {SAVEPOINT}")
    with cleanup.collecting_keys(conn) as mine:
        try:
            done = part(conn)
        except Exception as exc:
            own = _own_failure(exc)
            if own is None:
                raise  # as it is: the whole transaction rolls back, and runs again or fails the attempt
            conn.exec_driver_sql(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
            return {}, own, []
    conn.exec_driver_sql(f"RELEASE SAVEPOINT {SAVEPOINT}")
    return done, None, mine


def _own_failure(exc: BaseException) -> BaseException | None:
    """What a member's part raised, as that member's own failure; None for a fault of the
    whole transaction."""
    if is_retryable(exc) or connection_lost(exc):
        return None
    domain = translate_db_error(exc)
    if isinstance(domain, LockTimeout):
        return domain
    if isinstance(domain, InfrastructureError) or isinstance(exc, InfrastructureError):
        return None
    return domain or exc


def _destroy(ctx: StepContext, shreds: dict[str, list[str]], *, after: str) -> None:
    """The keys of every member's content, destroyed in one durable write of the key store.
    A member with a key the store never held is refused (:class:`_Refused`) rather than fail
    the others; a store that cannot be written fails the batch."""
    if not any(shreds.values()):
        return
    refused = _destroy_each_or_refuse(ctx, shreds)
    if refused:
        raise _Refused({step_id: Ended(FAILED, error) for step_id, error in refused.items()})
    failpoints.hit(after)


def _destroy_each_or_refuse(ctx: StepContext, keys: dict[str, list[str]]) -> dict[str, BaseException]:
    """Destroy all these keys (by member) in one write; if the store refuses them, each
    member's apart, to find whose the store refuses (a key it never held: one restored from
    an older copy lacks it). The members refused, with the error; raised when every member
    with keys is refused (the store itself is wrong, or cannot be written)."""
    try:
        ctx.keys.destroy([key for mine in keys.values() for key in mine])
        return {}
    except KeyStoreUnusable as exc:
        refused: dict[str, BaseException] = {}
        for owner, mine in keys.items():
            try:
                ctx.keys.destroy(mine)
            except KeyStoreUnusable as own:
                refused[owner] = own
        if len(refused) == sum(1 for mine in keys.values() if mine):
            raise exc from None
        return refused


def _settle(
    ctx: StepContext,
    group: Group,
    parts: dict[str, dict[str, Any]],
    failed: dict[str, BaseException],
    lost: set[str],
    *,
    attachments: bool,
) -> None:
    """After the batch's commit: members whose lease was lost, whose last batch this was, or
    whose part failed for good, ended; the others moved on (an attachments member with the
    files of its batch to unlink), those that had a part to the back."""
    worked: list[Member] = []
    for member in list(group.active):
        step_id = member.held.step_id
        done = parts.get(step_id, {})
        if step_id in lost:
            group.end(member, Ended(LEASE_LOST))
        elif done.get("done"):
            group.end(member, Ended(DONE, wake=tuple(done.get("wake", ()))))
        elif step_id in failed:
            _failed(ctx, group, member, failed[step_id])
        elif step_id in parts:
            if attachments:
                _moved_on(member, done)
            worked.append(member)
    group.active = [m for m in group.active if m not in worked] + worked


def _failed(ctx: StepContext, group: Group, member: Member, error: BaseException) -> None:
    """A member's part failed: a lock that did not come is waited for again at the next batch
    (up to ``ctx.max_lock_wait``); anything else ends its attempt."""
    if isinstance(error, LockTimeout):
        member.waited += ctx.batch_lock_timeout
        if member.waited < ctx.max_lock_wait:
            log.info(
                "step waiting for a row lock (%gs so far); the lease is renewed",
                member.waited.total_seconds(),
                extra=cleanup.log_fields(member.held),
            )
            return
        error = LockTimeout(f"a row stayed locked by another session for {member.waited.total_seconds():g}s")
    group.end(member, Ended(FAILED, error))


# -- bodies -------------------------------------------------------------------------------------


def _bodies_part(ctx: StepContext, conn: Connection, *, member: Member, limit: int) -> dict[str, Any]:
    """The next batch of the member's purge kind's :class:`Batched` bodies step."""
    step = ctx.bodies[member.entry.kind]
    assert isinstance(step, Batched)  # groupable() admitted only these
    return step.batch(conn, member.entry, limit)


# -- attachments --------------------------------------------------------------------------------


def _attachments_part(ctx: StepContext, conn: Connection, *, member: Member, limit: int) -> dict[str, Any]:
    """The purge's fenced events, ``limit`` at a time in id order (a window: its cost follows
    the window, not the purge), and their blobs, up to ``limit`` (taken from the next windows).
    The blobs of the member's batch before (``member.gone``: unlinked, on disk) are marked
    deleted; the next ones that still have bytes are locked in id order, the live references
    of both binding kinds counted, and the unreferenced ones marked deleting (a blob two
    members of a batch find is each one's: either's failure to unlink it fails both, and
    neither is done before it is gone). Once the walk is over
    and its last blobs are deleted, the step is done. Shared blobs are recorded as retained,
    with the reason, once per attempt however many windows bind them: each attempt walks every
    event again, so its first batch starts the count afresh."""
    removed = cleanup_queries.mark_deleted(conn, member.gone)
    if member.after is None:
        return {"removed": removed, "done": True, "cost": len(member.gone)}
    candidates, following = _next_blobs(conn, member.entry.purge_id, member.after, limit)
    locked = cleanup_queries.lock_blobs(conn, candidates) if candidates else []
    rows = [row for row in locked if row.id not in member.kept]
    ids = [row.id for row in rows]
    live = cleanup_queries.live_referenced(conn, ids) if ids else set()
    shared = sorted(blob_id for blob_id in ids if blob_id in live)
    doomed = [row for row in rows if row.id not in live]
    cleanup_queries.mark_deleting(conn, [row.id for row in doomed])
    return {
        "removed": removed,
        "retained": len(shared),
        "reasons": {"blob referenced by live content": shared} if shared else None,
        "restart_retained": member.first,
        "shared": shared,
        "doomed": [(row.id, row.kind, row.path) for row in doomed],
        "keys": [row.key_id for row in doomed if row.key_id],
        "next": following,
        "done": following is None and not doomed,  # nothing to unlink: this batch finishes the step
        "cost": len(candidates),
    }


def _next_blobs(conn: Connection, purge_id: str, after: Cursor, limit: int) -> tuple[list[str], Cursor | None]:
    """Up to ``limit`` blobs with bytes of the purge's fenced events, from the window at
    ``after`` on, a window of ``limit`` events at a time (at most ``WINDOWS_PER_BATCH`` of
    them: events without attachments cost a batch its windows, not its blobs); and where the
    walk goes on (None: the last window is done)."""
    found: list[str] = []
    event_after, blob_after = after
    for _ in range(WINDOWS_PER_BATCH):
        window = cleanup_queries.fenced_events_after(conn, purge_id, after=event_after, limit=limit)
        wanted = limit - len(found)
        more = cleanup_queries.blobs_of_events(conn, window, after=blob_after, limit=wanted) if window else []
        found += more
        if len(more) == wanted:
            return found, (event_after, more[-1])  # this window may hold more blobs
        if len(window) < limit:
            return found, None  # a short window: the last one
        event_after, blob_after = window[-1], ""
    return found, (event_after, "")


def _unlink(ctx: StepContext, group: Group) -> None:
    """The files of the members' last committed batch: their keys destroyed (durably: from
    then on their bytes are unreadable wherever a copy is), then the files unlinked, a few at
    a time, each directory fsynced once for all of them. A blob whose file could not be
    unlinked fails each member whose blob it is (two purges of a group may share one), and a
    key the store never held fails the member it is of; the others' blobs are deleted at their
    next batch. A fault of the key store is raised, and the files wait for the next try."""
    pending = [m for m in group.active if m.unlinking]
    by_member = {m.held.step_id: m.unlinking_keys for m in pending}
    if any(by_member.values()):
        refused = _destroy_each_or_refuse(ctx, by_member)
        for member in [m for m in pending if m.held.step_id in refused]:
            member.unlinking, member.unlinking_keys = [], []  # its blobs stay deleting, for its retry
            group.end(member, Ended(FAILED, refused[member.held.step_id]))
        pending = [m for m in pending if m.held.step_id not in refused]
        failpoints.hit("attachments.shredded")  # shredded before unlinked: the freed blocks hold ciphertext only
    doomed = list({blob[0]: blob for m in pending for blob in m.unlinking}.values())
    failures = ctx.blobs.discard_each(doomed, threads=ctx.unlink_threads) if doomed else {}
    for member in pending:
        errors = [failures[blob_id] for blob_id, _kind, _path in member.unlinking if blob_id in failures]
        member.gone = [blob_id for blob_id, _kind, _path in member.unlinking]
        member.unlinking, member.unlinking_keys = [], []
        if errors:
            group.end(member, Ended(FAILED, errors[0]))


def _moved_on(member: Member, done: dict[str, Any]) -> None:
    """After a member's committed batch: where its walk goes on, and the files to unlink
    before its next batch marks them deleted."""
    member.kept.update(done["shared"])
    member.gone = []
    member.unlinking, member.unlinking_keys = list(done["doomed"]), list(done["keys"])
    member.after = done["next"]
    member.first = False
