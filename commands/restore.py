"""``merge_ledger``: restore a database's purges from checkpoint files, in DESIGN.md's order.

1. Verify every file: an invalid, truncated, tampered or unsupported file, a purge id that
   two files (or a file and this database) hold with different content, is rejected with the
   reason (``ValidationError``) and nothing changes.
2. Close content reads and writes (``ledger_head.gate_reason``, durable: a merge that
   crashes leaves them closed until a rerun completes).
3. Append the unknown purges, a union keyed by ``purge_id``, in acceptance order, chained into
   this ledger. Each appended row keeps every field of its source except ``origin``, which
   names the source (``{"merged_from": {database_id, seq, row_hash}, "origin": ...}``). No row
   of this ledger is touched.
4. Re-write every fence and tombstone of the whole ledger; set the non-terminal runs that a
   restore brought back into purged scopes to ``abandoned``.
5. Re-create cleanup for what came back: content of fenced rows, blobs with bytes bound to
   fenced events, erased repositories present again with their recorded marker. Files of
   blobs already marked ``deleted`` are unlinked at once (nothing can bind to them again).
6. Reopen reads and writes, and take the gate's verdict again.

A merge is idempotent: merging the same files again appends nothing and re-arms only what
still has content. Its cost follows the size of the ledger (it reads every row once and
checks each purge for residue): a rare operator action, not a hot path.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

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

    def _wake(self, step_ids: Sequence[str]) -> None:  # provided by PurgeCommands
        raise NotImplementedError

    def messaging_status(self, *, refresh: bool = True) -> GateState:
        """Whether content reads and writes are open, with the bounded reasons when not.
        ``refresh`` takes the verdict again (it reads the whole ledger and the newest
        checkpoint); otherwise the last verdict is returned."""
        return self.gate.evaluate() if refresh else self.gate.state

    def merge_ledger(self, *paths: str | Path) -> MergeReport:
        """Restore: union the files' purges into this ledger and re-apply every purge before
        any reader sees content again (see the module docstring for the order)."""
        files = _verified(paths)
        with self.db.exclusive("merge") as alone:
            if not alone:
                raise MessagingUnavailable("another merge is under way: run this one again when it has finished")
            return self._merge(paths, files)

    def _merge(self, paths: Sequence[str | Path], files: list[checkpoint.CheckpointFile]) -> MergeReport:
        """The merge itself, while this process holds the merge lock (one merge at a time:
        another could reopen reads between this one's append and its fences)."""
        with self.db.read(snapshot=True) as conn:
            known: dict[str, ledger.LedgerEntry] = {}
            report = ledger.verify(conn, visit=lambda entry: known.__setitem__(entry.purge_id, entry))
        if not report.ok:
            raise MessagingUnavailable("this database's own ledger does not verify", diagnostics=report.problems)
        unknown = _unknown(files, known)

        self.db.transact(lambda conn: ledger.set_gate(conn, _closing_reason(conn)))
        failpoints.hit("merge.closed")
        appended = self.db.transact(lambda conn: _append(conn, unknown))
        failpoints.hit("merge.appended")
        abandoned = self.db.transact(_reapply_fences)
        failpoints.hit("merge.fenced")
        rearmed = self.db.transact(_rearm_cleanup)
        removed = self._remove_deleted_files()
        failpoints.hit("merge.rearmed")
        self.db.transact(lambda conn: ledger.set_gate(conn, None))
        state = self.gate.evaluate()
        if rearmed:
            self._wake(rearmed)
        log.info(
            "merge of %s: appended %d purges, re-armed %d steps", [str(p) for p in paths], len(appended), len(rearmed)
        )
        return MergeReport(
            files=tuple(str(f.path) for f in files),
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
    given = list(paths)
    if not given:
        raise ValidationError("merge needs at least one checkpoint file")
    if len(given) > MAX_PATHS:
        raise ValidationError(f"merge takes at most {MAX_PATHS} files at once")
    files = []
    for path in given:
        try:
            files.append(checkpoint.read(Path(path)))
        except checkpoint.CheckpointInvalid as exc:
            raise ValidationError(f"rejected, nothing changed: {exc}") from None
    return files


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
    head = ledger.lock_head(conn)
    appended = []
    for entry, file in unknown:
        source = {"database_id": file.database_id, "seq": entry.seq, "row_hash": entry.row_hash}
        row = ledger.append(
            conn,
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
        head = ledger.Head(row.seq, row.row_hash, head.database_id, head.now, head.gate_reason)
        appended.append(entry.purge_id)
    return appended


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
