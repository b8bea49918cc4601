"""``merge_ledger``: restore a database's purges from checkpoint files, in DESIGN.md's order.

1. Verify every file: an invalid, truncated, tampered or unsupported file, a row whose kind
   or selectors its kind does not accept (``commands.ledger_rows``), a purge id that two
   files (or a file and this database) hold with different content, or a file written by
   another database (unless ``allow_other_database``) is rejected with the reason
   (``ValidationError``, naming the file by its name and the row by its seq and purge id)
   and nothing changes.
2. Close content reads and writes (``ledger_head.gate_reason``, durable: a merge that
   crashes leaves them closed until a rerun completes).
3. In ONE transaction (a failure there writes nothing, and the gate's flag goes back to what
   the merge found):

   - append the unknown purges, a union keyed by ``purge_id``, in acceptance order, chained
     into this ledger. Each appended row keeps every field of its source except ``origin``,
     which names the source (``{"merged_from": {database_id, seq, row_hash}, "origin": ...}``).
     No row of this ledger is touched;
   - re-write every fence and tombstone of the whole ledger; set the non-terminal runs that a
     restore brought back into purged scopes to ``abandoned``;
   - re-create cleanup for what came back: content of fenced rows, blobs with bytes bound to
     fenced events, erased repositories present again with their recorded marker.
4. Unlink the files of blobs already marked ``deleted`` (nothing can bind to them again).
5. Reopen reads and writes, and take the gate's verdict again.

A merge is idempotent: merging the same files again appends nothing and re-arms only what
still has content. Its cost follows the size of the ledger (it reads every row once and
checks each purge for residue): a rare operator action, not a hot path.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from commands import ledger_rows
from commands.gate import Gate, GateState
from schema import ledger
from schema import purges as pq
from schema import restore as rq
from schema.db import Database
from schema.errors import InfrastructureError, MessagingUnavailable, ValidationError
from schema.states import PurgeKind, StepKind, TombstoneKind
from schema.steps import PARKED_UNTIL
from workers import checkpoint, failpoints, memory
from workers.blobstore import BlobStore, discard_failed

log = logging.getLogger(__name__)

REARM_NOTE = "re-armed by a restore merge: content came back"
MAX_PATHS = 100


@dataclass(frozen=True)
class MergeReport:
    files: tuple[str, ...]
    sources: tuple[str, ...]  # the database ids the files were written by, in file order
    appended: tuple[str, ...]  # purge ids appended, in order
    already_known: int  # rows of the files this ledger already held
    runs_abandoned: int
    steps_rearmed: tuple[str, ...]
    deleted_files_removed: int
    gate: GateState


class RestoreCommands:
    db: Database
    gate: Gate
    blobs: BlobStore
    database_key: str

    def _wake(self, step_ids: Sequence[str]) -> None:  # provided by PurgeCommands
        raise NotImplementedError

    def messaging_status(self, *, refresh: bool = True) -> GateState:
        """Whether content reads and writes are open, with the bounded reasons when not.
        ``refresh`` takes the verdict again (it reads the whole ledger and the newest
        checkpoint); otherwise the last verdict is returned."""
        return self.gate.evaluate() if refresh else self.gate.state

    def merge_ledger(self, *paths: str | Path, allow_other_database: bool = False) -> MergeReport:
        """Restore: union the files' purges into this ledger and re-apply every purge before
        any reader sees content again (see the module docstring for the order). A file
        written by another database is refused unless ``allow_other_database``."""
        if not isinstance(allow_other_database, bool):
            raise ValidationError("allow_other_database must be true or false")
        files = _verified(paths)
        _check_sources(files, self.database_key, allow_other_database)
        with self.db.exclusive("merge") as alone:
            if not alone:
                raise MessagingUnavailable("another merge is under way: run this one again when it has finished")
            return self._merge(paths, files)

    def _merge(self, paths: Sequence[str | Path], files: list[checkpoint.CheckpointFile]) -> MergeReport:
        """The merge itself, while this process holds the merge lock (one merge at a time:
        another could reopen reads between this one's append and its fences). The append,
        the fences and the re-armed cleanup are one transaction: a merge that fails there
        writes nothing, and the gate's flag goes back to what it was."""
        with self.db.read(snapshot=True) as conn:
            known: dict[str, ledger.LedgerEntry] = {}
            report = ledger.verify(conn, visit=lambda entry: known.__setitem__(entry.purge_id, entry))
            found = ledger.read_head(conn).gate_reason
        if not report.ok:
            raise MessagingUnavailable("this database's own ledger does not verify", diagnostics=report.problems)
        unknown = _unknown(files, known)

        self.db.transact(lambda conn: ledger.set_gate(conn, _closing_reason(conn)))
        failpoints.hit("merge.closed")
        try:
            appended, abandoned, rearmed = self.db.transact(functools.partial(_apply, unknown=unknown))
        except BaseException:
            self.db.transact(lambda conn: ledger.set_gate(conn, found))
            self.gate.evaluate()
            raise
        removed = self._remove_deleted_files()
        failpoints.hit("merge.rearmed")
        self.db.transact(lambda conn: ledger.set_gate(conn, None))
        state = self.gate.evaluate()
        if rearmed:
            self._wake(rearmed)
        log.info(
            "merge of %s: appended %d purges, re-armed %d steps",
            [Path(p).name for p in paths],
            len(appended),
            len(rearmed),
        )
        return MergeReport(
            files=tuple(str(f.path) for f in files),
            sources=tuple(f.database_id for f in files),
            appended=tuple(appended),
            already_known=sum(len(f.entries) for f in files) - len(unknown),
            runs_abandoned=abandoned,
            steps_rearmed=tuple(rearmed),
            deleted_files_removed=removed,
            gate=state,
        )

    def _remove_deleted_files(self) -> int:
        with self.db.read() as conn:
            rows = rq.deleted_blobs(conn)
        removed = 0
        for row in rows:
            with contextlib.suppress(ValueError):  # a path that escapes its root is never touched
                try:
                    removed += self.blobs.discard(row.id, row.kind, row.path)
                except OSError as exc:  # by blob id: an earlier layout's path holds the attachment name
                    raise InfrastructureError(str(discard_failed(row.id, exc))) from None
        return removed


def _verified(paths: Iterable[str | Path]) -> list[checkpoint.CheckpointFile]:
    """Every file read, its chain verified, and each of its rows one its kind accepts."""
    given = list(paths)
    if not given:
        raise ValidationError("merge needs at least one checkpoint file")
    if len(given) > MAX_PATHS:
        raise ValidationError(f"merge takes at most {MAX_PATHS} files at once")
    files = []
    for path in given:
        try:
            file = checkpoint.read(Path(path))
        except checkpoint.CheckpointInvalid as exc:
            raise ValidationError(f"rejected, nothing changed: {exc}") from None
        for entry in file.entries:
            try:
                ledger_rows.check(entry)
            except ledger_rows.RowInvalid as exc:
                raise ValidationError(
                    f"rejected, nothing changed: {file.path.name} row {entry.seq} "
                    f"(purge {entry.purge_id[: ledger_rows.MAX_PURGE_ID_LENGTH]}): {exc}"
                ) from None
        files.append(file)
    return files


def _check_sources(files: Sequence[checkpoint.CheckpointFile], database_id: str, allowed: bool) -> None:
    """A file written by another database (another database id) purges content here only
    when the operator asks for it: a fresh ``init`` after losing the database, say."""
    others = [f for f in files if f.database_id != database_id]
    if others and not allowed:
        shown = ", ".join(f"{f.path.name} (database {f.database_id[:64]})" for f in others[:5])
        raise ValidationError(
            f"rejected, nothing changed: {shown} was written by another database, not this one "
            f"({database_id}); merge it only if you mean to, with --from-other-database "
            "(allow_other_database=True)"
        )


def _apply(
    conn: Connection, *, unknown: Sequence[tuple[ledger.LedgerEntry, checkpoint.CheckpointFile]]
) -> tuple[list[str], int, list[str]]:
    """Append the unknown purges, re-apply every fence, re-arm cleanup: one transaction."""
    appended = _append(conn, unknown)
    failpoints.hit("merge.appended")
    abandoned = _reapply_fences(conn)
    failpoints.hit("merge.fenced")
    return appended, abandoned, _rearm_cleanup(conn)


def _unknown(
    files: Sequence[checkpoint.CheckpointFile], known: dict[str, ledger.LedgerEntry]
) -> list[tuple[ledger.LedgerEntry, checkpoint.CheckpointFile]]:
    """The files' purges this ledger lacks, in acceptance order; a purge id held with other
    content (by this ledger, or by two files) rejects the merge."""
    incoming: dict[str, tuple[ledger.LedgerEntry, checkpoint.CheckpointFile]] = {}
    for file in files:
        for entry in file.entries:
            mine = known.get(entry.purge_id)
            if mine is not None and mine.content() != entry.content():
                raise ValidationError(
                    f"rejected, nothing changed: purge {entry.purge_id} in {file.path.name} differs from the one "
                    "this ledger holds"
                )
            prior = incoming.get(entry.purge_id)
            if prior is not None and prior[0].content() != entry.content():
                raise ValidationError(
                    f"rejected, nothing changed: purge {entry.purge_id} differs between {prior[1].path.name} "
                    f"and {file.path.name}"
                )
            if mine is None and prior is None:
                incoming[entry.purge_id] = (entry, file)
    return sorted(incoming.values(), key=lambda item: (item[0].accepted_at, item[0].purge_id))


def _closing_reason(conn: Connection) -> str:
    now = ledger.read_head(conn).now
    return f"a restore merge is under way (started {ledger.utc_text(now)}); rerun it if it stopped"


def _append(conn: Connection, unknown: Sequence[tuple[ledger.LedgerEntry, checkpoint.CheckpointFile]]) -> list[str]:
    """The unknown purges chained after this ledger's head, inserted many to a statement."""
    head = ledger.lock_head(conn)
    rows = []
    for entry, file in unknown:
        source = {"database_id": file.database_id, "seq": entry.seq, "row_hash": entry.row_hash}
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
            origin=ledger.canonical_json({"merged_from": source, "origin": entry.origin}),
            accepted_at=entry.accepted_at,
        )
        rows.append(row)
        head = ledger.following(head, row)
    ledger.insert_entries(conn, rows)
    return [row.purge_id for row in rows]


def _reapply_fences(conn: Connection) -> int:
    """Every tombstone the ledger implies (an existing one is kept as it is); returns the
    runs abandoned."""
    for entry in ledger.entries(conn):
        selectors = entry.selectors
        if entry.kind == PurgeKind.CONTENT.value:
            pq.insert_tombstones(
                conn,
                entry.purge_id,
                {
                    TombstoneKind.EVENT: selectors.get("event_ids", []),
                    TombstoneKind.PROVIDER_EVENT: selectors.get("provider_event_ids", []),
                },
            )
        elif entry.kind == PurgeKind.CONVERSATION.value:
            pq.insert_tombstones(conn, entry.purge_id, {TombstoneKind.CONVERSATION: [selectors["conversation_id"]]})
        elif entry.kind == PurgeKind.CHANNEL.value:
            pq.insert_tombstones(conn, entry.purge_id, {TombstoneKind.CHANNEL: [selectors["channel_id"]]})
        elif entry.kind == PurgeKind.BOT.value:
            if selectors.get("erase_memory"):  # first: once the tombstone is in, the bot row is final
                pq.mark_memory_erasure(conn, str(selectors["bot_id"]))
            pq.insert_tombstones(conn, entry.purge_id, {TombstoneKind.BOT: [selectors["bot_id"]]})
    return rq.abandon_runs_in_purged_scopes(conn)


def _rearm_cleanup(conn: Connection) -> list[str]:
    """Pending steps for what came back; returns the ids of the steps made due now."""
    due_now: list[str] = []
    now = ledger.clock(conn)
    for entry in ledger.entries(conn):
        for kind, parked in _cleanup_needed(conn, entry):
            due = PARKED_UNTIL if parked else now
            step_id = rq.rearm_step(conn, entry.purge_id, kind.value, due=due, note=REARM_NOTE)
            if step_id is None:
                [step_id] = pq.create_steps(conn, entry.purge_id, [kind], parked=[kind] if parked else [])
            if not parked:
                due_now.append(step_id)
    return due_now


def _cleanup_needed(conn: Connection, entry: ledger.LedgerEntry) -> list[tuple[StepKind, bool]]:
    """(kind, parked) of the steps this purge needs again."""
    selectors = entry.selectors
    if entry.kind == PurgeKind.CONTENT.value:
        needed = []
        if rq.content_left(conn, list(selectors.get("event_ids", []))):
            needed.append((StepKind.BODIES, False))
        if rq.bytes_left(conn, entry.purge_id):
            needed.append((StepKind.ATTACHMENTS, False))
        return needed
    if entry.kind == PurgeKind.CONVERSATION.value:
        if rq.conversation_left(conn, str(selectors["conversation_id"]), entry.purge_id):
            # the bodies step fences the events placed only here, then unparks attachments
            return [(StepKind.BODIES, False), (StepKind.ATTACHMENTS, True)]
        return [(StepKind.ATTACHMENTS, False)] if rq.bytes_left(conn, entry.purge_id) else []
    if entry.kind == PurgeKind.BOT.value and selectors.get("erase_memory") and selectors.get("memory_path"):
        if _repository_back(Path(str(selectors["memory_path"])), str(selectors["bot_id"]), selectors.get("marker_id")):
            return [(StepKind.MEMORY, False)]
    return []


def _repository_back(path: Path, bot_id: str, marker_id: Any) -> bool:
    """An erased repository that is present again, carrying the marker the ledger recorded."""
    if not os.path.lexists(path) or path.is_symlink():
        return False
    return memory.read_marker(path) == memory.Marker(bot_id, str(marker_id))
