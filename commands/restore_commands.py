"""``merge_ledger``: restore a database's purges from the ledger kept outside it.

A merge reads any of: the checkpoint directory (this database's copy in it, else its newest
version 1 file), a copy's directory, a version 2 export (``purgectl ledger checkpoint
--out``) or a version 1 file. In docs/design.md's order:

1. Plan. Every row of every source is verified first, the rows this ledger already holds
   too (each chains from the one before it, its hash recomputes, the last is the source's
   head): a source with one forged field is damaged whatever this ledger holds. A source of
   this database whose row at this ledger's head seq has this ledger's head hash holds this
   ledger as its prefix: its rows after the head are the missing ones, appended
   **verbatim** (the same seq, hashes and origin), so the database and its copy are one
   chain again. Any other source (another database's, or a history that diverged) is read
   whole, and its purges this ledger lacks (a lookup by purge id, a chunk at a time) are
   appended re-chained, in acceptance order, with an ``origin`` that names the source
   (``{"merged_from": {database_id, seq, row_hash}, "origin": ...}``). A damaged source, a row its kind does not accept
   (``purgekeeper.commands.ledger_rows``), a purge id held with different content, or another
   database's source (unless ``allow_other_database``) is rejected with the reason
   (``ValidationError``, naming the source by its name) and nothing changes.
2. Close content reads and writes (``ledger_head.gate_reason``, durable: a merge that
   crashes leaves them closed until a rerun completes).
3. In ONE transaction (a failure there writes nothing, and the gate's flag goes back to what
   the merge found): append the rows; write the fences and tombstones of the appended rows;
   set the non-terminal runs that a restore brought back into purged scopes to
   ``abandoned``; re-create cleanup for what the appended purges find again.
4. Bring the copy up to the database (a copy whose chain this ledger no longer extends is
   moved aside, to ``<name>.diverged-<time>``, and written again from the database), then
   reopen reads and writes with the gate's O(1) verdict.

Its writes follow what is missing: the rows appended and what they re-apply, never the
whole ledger; it reads every row of its sources once (streamed, none held but the missing).
``full=True`` (``purgectl ledger merge --full``) also re-applies every purge of the whole
ledger and unlinks the files of blobs already marked ``deleted``: for a database AND its
files restored from older backups, where content of purges the ledger already held may have
come back too. A merge is idempotent: merging the same source again appends nothing.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection

from purgekeeper.commands import kinds, ledger_rows
from purgekeeper.commands.acceptance import Enqueuer
from purgekeeper.commands.gate import Gate, GateState
from purgekeeper.schema import ledger, purges, restore
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import InfrastructureError, MessagingUnavailable, ValidationError
from purgekeeper.schema.steps import PARKED_UNTIL
from purgekeeper.storage import checkpoint, failpoints, ledger_copy
from purgekeeper.storage.blobstore import BlobStore, discard_failed
from purgekeeper.storage.files import reason_of
from purgekeeper.storage.signed_log import LogRefused

log = logging.getLogger(__name__)

REARM_NOTE = "re-armed by a restore merge: content came back"
MAX_PATHS = 100


@dataclass(frozen=True)
class MergeReport:
    files: tuple[str, ...]
    sources: tuple[str, ...]  # the database ids the sources were written by, in order
    appended: tuple[str, ...]  # purge ids appended, in order
    already_known: int  # rows of the sources this ledger already held
    runs_abandoned: int
    steps_rearmed: tuple[str, ...]
    deleted_files_removed: int
    gate: GateState
    verbatim: int = 0  # of the appended rows, those this database's own copy held (same seq and hashes)


@dataclass(frozen=True)
class CopyRepair:
    """What ``repair_ledger_copy`` did: the copy (its directory's name), its head now,
    whether head.json was rebuilt from the segments, the gate's full verdict after it, and
    the signed log's tiles rebuilt from the copy (their paths in the log)."""

    copy: str
    seq: int
    row_hash: str
    head_rebuilt: bool
    gate: GateState
    tiles_rebuilt: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Plan:
    head: tuple[int, str]  # the ledger's head the plan was made against
    verbatim: list[ledger.LedgerEntry]  # this ledger's own history, appended as it was
    rechained: list[tuple[ledger.LedgerEntry, checkpoint.Source]]  # the rest, in acceptance order
    already_known: int


class RestoreCommands:
    """The restore commands of :class:`commands.Purgekeeper` (each documented there): the
    merge of ``db``'s ledger with the sources kept outside it (this database's by its
    ``database_key``), the repair of its ``copy``, the ``gate`` over reads and writes, the
    files of ``blobs`` a full merge removes, and the re-armed steps woken via ``enqueuer``."""

    def __init__(
        self,
        db: Database,
        gate: Gate,
        blobs: BlobStore,
        database_key: str,
        copy: ledger_copy.LedgerCopy,
        enqueuer: Enqueuer,
    ) -> None:
        self.db = db
        self.gate = gate
        self.blobs = blobs
        self.database_key = database_key
        self.copy = copy
        self.enqueuer = enqueuer

    def messaging_status(self, *, refresh: bool = True) -> GateState:
        """Whether content reads and writes are open, with the bounded reasons when not.
        ``refresh`` takes the full verdict again (it walks the whole ledger and its copy);
        otherwise the last verdict is returned."""
        return self.gate.evaluate() if refresh else self.gate.state

    def repair_ledger_copy(self) -> CopyRepair:
        """Bring the ledger's copy in the checkpoint directory back to a verifying state
        (``purgectl ledger repair``): a lost or unreadable head.json is rebuilt from the
        segments, a truncated open segment is re-established from the database's rows, the
        signed log's tiles missing or damaged are rebuilt from the copy's rows once they
        verify and give the signed root (``ledger_copy.repair_log``; a row that does not is
        refused by its seq, and nothing is written), and the rows the database holds beyond
        the copy are appended. Rows the copy holds and the database lacks (a restored
        database) are kept: the gate stays closed until a merge brings them back. Then the
        gate's full check (the chain and the copy walked, as ``messaging_status()``).
        ``MessagingUnavailable`` with the reason when it cannot be done."""
        name = self.copy.directory.name
        try:
            _head, rebuilt = self.copy.repair()
            tiles = ledger_copy.repair_log(self.db, self.copy)  # before the catch-up, which reads them
            head = ledger_copy.catch_up(self.db, self.copy)
        except ledger_copy.COPY_FAILED as exc:
            reason = reason_of(exc)
            raise MessagingUnavailable(
                f"the ledger's copy {name} cannot be repaired: {reason}", diagnostics=[f"{name}: {reason}"]
            ) from None
        state = self.gate.evaluate()  # the full check: it lifts what an earlier one found in the copy
        log.info("repair of the ledger's copy %s: seq %d, head rebuilt: %s", name, head.seq, rebuilt)
        return CopyRepair(name, head.seq, head.row_hash, rebuilt, state, tuple(tiles))

    def merge_ledger(self, *paths: str | Path, allow_other_database: bool = False, full: bool = False) -> MergeReport:
        """Restore: bring this ledger's missing purges back from the ledger kept outside it,
        and re-apply them before any reader sees content again (see ``purgekeeper.commands.restore_commands``).
        A source written by another database is refused unless ``allow_other_database``;
        ``full`` re-applies every purge of the ledger, not only the missing ones."""
        for name, value in (("allow_other_database", allow_other_database), ("full", full)):
            if not isinstance(value, bool):
                raise ValidationError(f"{name} must be true or false")
        sources = _opened(paths, self.database_key)
        _check_sources(sources, self.database_key, allow_other_database)
        with self.db.exclusive("merge") as alone:
            if not alone:
                raise MessagingUnavailable("another merge is under way: run this one again when it has finished")
            return self._merge(paths, sources, full)

    def _merge(self, paths: Sequence[str | Path], sources: list[checkpoint.Source], full: bool) -> MergeReport:
        """The merge itself, while this process holds the merge lock (one merge at a time:
        another could reopen reads between this one's append and its fences). The append,
        the fences and the re-armed cleanup are one transaction: a merge that fails there
        writes nothing, and the gate's flag goes back to what it was."""
        if self.gate.known_damage():
            raise MessagingUnavailable(
                "this database's own ledger does not verify", diagnostics=self.gate.known_damage()
            )
        with self.db.read(snapshot=True) as conn:
            head = ledger.read_head(conn)
            if full:
                report = ledger.verify(conn)
                if not report.ok:
                    raise MessagingUnavailable(
                        "this database's own ledger does not verify", diagnostics=report.problems
                    )
            plan = _plan(conn, sources, head, self.database_key)
        found = head.gate_reason

        self.db.transact(lambda conn: ledger.set_gate(conn, _closing_reason(conn)))
        failpoints.hit("merge.closed")
        try:
            appended, abandoned, rearmed = self.db.transact(functools.partial(_apply, plan=plan, full=full))
        except BaseException:
            self.db.transact(lambda conn: ledger.set_gate(conn, found))
            self.gate.quick()
            raise
        removed = self._remove_deleted_files() if full else 0
        failpoints.hit("merge.rearmed")
        self._reconcile_copy(replace=any(_same(source.path, self.copy.directory) for source in sources))
        self.db.transact(lambda conn: ledger.set_gate(conn, None))
        state = self.gate.evaluate() if full else self.gate.quick()
        if rearmed:
            self.enqueuer.wake(rearmed)
        log.info(
            "merge of %s: appended %d purges (%d verbatim), re-armed %d steps",
            [Path(p).name for p in paths],
            len(appended),
            len(plan.verbatim),
            len(rearmed),
        )
        return MergeReport(
            files=tuple(str(source.path) for source in sources),
            sources=tuple(source.database_id for source in sources),
            appended=tuple(appended),
            already_known=plan.already_known,
            runs_abandoned=abandoned,
            steps_rearmed=tuple(rearmed),
            deleted_files_removed=removed,
            gate=state,
            verbatim=len(plan.verbatim),
        )

    def _reconcile_copy(self, *, replace: bool) -> None:
        """The copy brought up to the merged ledger; one this ledger no longer extends is
        moved aside first, if the merge read it. A failure is logged: the next acceptance or
        sweep tries again, and until then the gate compares with what the copy holds."""
        try:
            aside = ledger_copy.reconcile(self.db, self.copy, replace=replace)
        except LogRefused as exc:  # content stays closed: the operator decides (a new origin)
            raise MessagingUnavailable(
                f"the merge is written, but the ledger's copy cannot be written again: {exc}",
                diagnostics=[str(exc)],
            ) from None
        except ledger_copy.COPY_FAILED as exc:
            log.warning("after the merge, the ledger's copy could not be brought up to date: %s", reason_of(exc))
            return
        if aside is not None:
            log.warning("the ledger's copy held another history; it was moved aside to %s and written again", aside)

    def _remove_deleted_files(self) -> int:
        with self.db.read() as conn:
            rows = restore.deleted_blobs(conn)
        removed = 0
        for row in rows:
            with contextlib.suppress(ValueError):  # a path that escapes its root is never touched
                try:
                    removed += self.blobs.discard(row.id, row.kind, row.path)
                except OSError as exc:  # by blob id: an earlier layout's path holds the attachment name
                    raise InfrastructureError(str(discard_failed(row.id, exc))) from None
        return removed


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _opened(paths: Iterable[str | Path], database_id: str) -> list[checkpoint.Source]:
    given = list(paths)
    if not given:
        raise ValidationError("merge needs at least one checkpoint file or directory")
    if len(given) > MAX_PATHS:
        raise ValidationError(f"merge takes at most {MAX_PATHS} sources at once")
    try:
        return [ledger_copy.open_source(Path(path), database_id) for path in given]
    except checkpoint.CheckpointInvalid as exc:
        raise ValidationError(f"rejected, nothing changed: {exc}") from None


def _check_sources(sources: Sequence[checkpoint.Source], database_id: str, allowed: bool) -> None:
    """A source written by another database (another database id) purges content here only
    when the operator asks for it: a fresh ``init`` after losing the database, say."""
    others = [s for s in sources if s.database_id != database_id]
    if others and not allowed:
        shown = ", ".join(f"{s.label} (database {s.database_id[:64]})" for s in others[:5])
        raise ValidationError(
            f"rejected, nothing changed: {shown} was written by another database, not this one "
            f"({database_id}); merge it only if you mean to, with --from-other-database "
            "(allow_other_database=True)"
        )


def _plan(conn: Connection, sources: Sequence[checkpoint.Source], head: ledger.Head, database_id: str) -> _Plan:
    """What the merge appends, every row of it checked, before anything is written."""
    try:
        ahead = [s for s in sources if s.database_id == database_id and _extends(s, head)]
        longest = max(ahead, key=lambda s: s.seq, default=None)
        # every row of it verified, from its first: the rows this ledger holds too
        verbatim = [entry for entry in longest.rows() if entry.seq > head.seq] if longest else []
        hashes = {entry.seq: entry.row_hash for entry in verbatim}
        hashes[head.seq] = head.head_hash
        prefixes = [s for s in ahead if hashes.get(s.seq) == s.head_hash]
        behind = [s for s in sources if s.database_id == database_id and s.seq < head.seq and _held(conn, s)]
        for source in [s for s in prefixes + behind if s is not longest]:
            _verify_whole(source)
        read = [(source, list(source.rows())) for source in sources if source not in prefixes + behind]
    except checkpoint.CheckpointInvalid as exc:
        raise ValidationError(f"rejected, nothing changed: {exc}") from None
    wanted = [entry.purge_id for entry in verbatim] + [entry.purge_id for _s, rows in read for entry in rows]
    known = ledger.entries_by_purge_id(conn, wanted)
    incoming: dict[str, tuple[ledger.LedgerEntry, checkpoint.Source]] = {}
    for entry in verbatim:
        assert longest is not None
        if entry.purge_id in known:
            raise ValidationError(
                f"rejected, nothing changed: {longest.label} holds purge {entry.purge_id} twice (at seq {entry.seq})"
            )
        incoming[entry.purge_id] = (entry, longest)
    rechained = []
    for source, rows in read:
        for entry in rows:
            prior = known.get(entry.purge_id) or incoming.get(entry.purge_id, (None, None))[0]
            if prior is None:
                incoming[entry.purge_id] = (entry, source)
                rechained.append((entry, source))
            elif prior.content() != entry.content():
                where = (
                    f"in {source.label} differs from the one this ledger holds"
                    if entry.purge_id in known
                    else f"differs between {incoming[entry.purge_id][1].label} and {source.label}"
                )
                raise ValidationError(f"rejected, nothing changed: purge {entry.purge_id} {where}")
    for entry, source in incoming.values():
        _check_row(entry, source)
    already = sum(min(s.seq, head.seq) for s in prefixes + behind) + sum(
        sum(1 for entry in rows if entry.purge_id in known) for _s, rows in read
    )
    rechained.sort(key=lambda item: (item[0].accepted_at, item[0].purge_id))
    return _Plan((head.seq, head.head_hash), verbatim, rechained, already)


def _verify_whole(source: checkpoint.Source) -> None:
    """Walk every row of ``source`` (each chains to the one before it, its hash recomputes,
    the last is its head), holding none: a row this ledger holds already is no less damaged
    for it. Raises CheckpointInvalid at the first problem."""
    for _entry in source.rows():
        pass


def _extends(source: checkpoint.Source, head: ledger.Head) -> bool:
    """Whether ``source`` holds this ledger as its prefix: its row at the head's seq is the
    head's row (one row read)."""
    if source.seq < head.seq:
        return False
    if head.seq == 0:
        return True
    row = source.row(head.seq)
    return row is not None and row.row_hash == head.head_hash


def _held(conn: Connection, source: checkpoint.Source) -> bool:
    """Whether this ledger holds all of ``source`` (shorter): its head is this ledger's row."""
    if source.seq == 0:
        return True
    mine = ledger.entry_at(conn, source.seq)
    return mine is not None and mine.row_hash == source.head_hash


def _check_row(entry: ledger.LedgerEntry, source: checkpoint.Source) -> None:
    try:
        ledger_rows.check(entry)
    except ledger_rows.RowInvalid as exc:
        raise ValidationError(
            f"rejected, nothing changed: {source.label} row {entry.seq} "
            f"(purge {entry.purge_id[: ledger_rows.MAX_PURGE_ID_LENGTH]}): {exc}"
        ) from None


def _apply(conn: Connection, *, plan: _Plan, full: bool) -> tuple[list[str], int, list[str]]:
    """Append, fence, re-arm: one transaction."""
    head = ledger.lock_head(conn)
    if (head.seq, head.head_hash) != plan.head:
        raise MessagingUnavailable("the ledger moved while the merge was being planned: run the merge again")
    appended = _append(conn, head, plan)
    failpoints.hit("merge.appended")
    abandoned = _reapply_fences(conn, ledger.entries(conn) if full else appended)
    failpoints.hit("merge.fenced")
    return (
        [entry.purge_id for entry in appended],
        abandoned,
        _rearm_cleanup(conn, ledger.entries(conn) if full else appended),
    )


def _closing_reason(conn: Connection) -> str:
    now = ledger.read_head(conn).now
    return f"a restore merge is under way (started {ledger.utc_text(now)}); rerun it if it stopped"


def _append(conn: Connection, head: ledger.Head, plan: _Plan) -> list[ledger.LedgerEntry]:
    """This ledger's own missing rows as they were, then the other sources' purges chained
    after them, inserted many to a statement."""
    rows = list(plan.verbatim)
    if rows:
        head = ledger.following(head, rows[-1])
    for entry, source in plan.rechained:
        where = {"database_id": source.database_id, "seq": entry.seq, "row_hash": entry.row_hash}
        row = ledger.next_entry(
            head,
            purge_id=entry.purge_id,
            kind=entry.kind,
            selectors=entry.selectors,
            scope_digest=entry.scope_digest,
            actor=entry.actor,
            reason=entry.reason,
            request_id=entry.request_id,
            idempotency_key=entry.idempotency_key,
            origin=ledger.canonical_json({"merged_from": where, "origin": entry.origin}),
            accepted_at=entry.accepted_at,
        )
        rows.append(row)
        head = ledger.following(head, row)
    ledger.insert_entries(conn, rows)
    return rows


def _reapply_fences(conn: Connection, entries: Iterable[ledger.LedgerEntry]) -> int:
    """Every fence and tombstone these rows imply, as each kind says (an existing one is kept
    as it is), and the conversations each names; returns the runs abandoned."""
    kinds.reapply_fences(conn, entries)
    return restore.abandon_runs_in_purged_scopes(conn)


def _rearm_cleanup(conn: Connection, entries: Iterable[ledger.LedgerEntry]) -> list[str]:
    """Pending steps for what these purges find again; returns the ids of the steps made due
    now."""
    due_now: list[str] = []
    now = ledger.clock(conn)
    for entry in entries:
        for kind, parked in kinds.cleanup_left(conn, entry):
            due = PARKED_UNTIL if parked else now
            step_id = restore.rearm_step(conn, entry.purge_id, kind.value, due=due, note=REARM_NOTE)
            if step_id is None:
                [step_id] = purges.create_steps(conn, entry.purge_id, [kind], parked=[kind] if parked else [])
            if not parked:
                due_now.append(step_id)
    return due_now
