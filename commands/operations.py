"""The operator's commands: purge status and the paginated purge list (``purgekeeper.commands.purge_reads``,
which a one-shot command opens alone), the worker processes, ledger verification, retry,
wait and resume.

A purge is stalled when a step of it has been due for longer than ``stall_after`` (10
minutes), or at once when nobody is there to do the work: processes that run steps have sent
heartbeats, and none of them is alive now (:func:`stall_bound`, the one place that says so).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from purgekeeper.commands import validation
from purgekeeper.commands.acceptance import Enqueuer
from purgekeeper.commands.purge_commands import MAX_ACTOR_LENGTH, MAX_REASON_LENGTH
from purgekeeper.commands.purge_reads import FINISHED, MAX_PAGE, PurgeReads, check_limit, stall_bound
from purgekeeper.commands.records import (
    Attempt,
    AuditEntry,
    HeldStep,
    LedgerReport,
    PurgeDetail,
    PurgeStatus,
    WorkerLeases,
)
from purgekeeper.commands.retention_commands import RetentionCommands
from purgekeeper.commands.worker_records import WorkerProcess
from purgekeeper.schema import heartbeats, ledger, overview, purges, steps
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import Conflict, InfrastructureError, NotFound, ValidationError
from purgekeeper.storage import checkpoint, ledger_copy
from purgekeeper.workers import scheduler

WAIT_POLL_S = 0.05


class OperatorCommands(PurgeReads):
    """The operator's commands of :class:`commands.Purgekeeper` (each documented there):
    statuses read from ``db`` (stalled after ``stall_after``), steps woken through
    ``enqueuer``, and ``resume`` takes the due turns of ``retention`` first."""

    def __init__(
        self, db: Database, stall_after: dt.timedelta, enqueuer: Enqueuer, retention: RetentionCommands
    ) -> None:
        super().__init__(db, stall_after)
        self.enqueuer = enqueuer
        self.retention = retention

    def resume(self) -> int:
        """Run every retention policy that is due, then re-send every step that is due or
        whose lease expired (one sweep); returns how many steps were sent."""
        self.retention.run_retention()
        return scheduler.sweep(self.db, self.enqueuer.wake)

    def retry(self, purge_id: str, *, actor: str, reason: str) -> PurgeStatus:
        """Re-arm the purge's incomplete and retrying steps, due now with fresh attempts, and
        record who and why.
        It never re-reads or re-creates content: the steps only ever remove."""
        validation.check_id(purge_id, "purge_id")
        validation.check_text(actor, "actor", max_length=MAX_ACTOR_LENGTH)
        validation.check_text(reason, "reason", max_length=MAX_REASON_LENGTH)

        def work(conn: Connection) -> list[str]:
            if ledger.entry_by_purge_id(conn, purge_id) is None:
                raise NotFound(f"no purge {purge_id}")
            step_ids = steps.rearm_for_retry(conn, purge_id)
            if not step_ids:
                raise Conflict(f"purge {purge_id} has no incomplete or retrying step to retry")
            purges.record_audit(conn, purge_id, action="retry", actor=actor, reason=reason, step_ids=step_ids)
            return step_ids

        self.enqueuer.wake(self.db.transact(work))
        return self.status(purge_id)

    def wait(
        self,
        purge_id: str,
        timeout: float,
        *,
        on_progress: Callable[[PurgeStatus], None] | None = None,
        look: Callable[[str], PurgeStatus] | None = None,
    ) -> PurgeStatus:
        """Polls ``look`` (the handle's ``status``: a wrapper of it sees every look), by
        default this service's own ``status``."""
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 <= timeout < math.inf:
            raise ValidationError("timeout must be a finite number of seconds, zero or more")
        deadline = time.monotonic() + timeout
        seen: PurgeStatus | None = None
        look = look or self.status
        while True:
            status = look(purge_id)
            if on_progress is not None and status != seen:
                on_progress(status)
            seen = status
            if status.status in FINISHED or time.monotonic() >= deadline:
                return status
            time.sleep(min(WAIT_POLL_S, max(deadline - time.monotonic(), 0)))

    def purge_detail(self, purge_id: str) -> PurgeDetail:
        """A purge's status with every attempt of its steps (owner, start, finish, error) and
        the operators' actions on it (who retried it, and why): the console's page of it."""
        validation.check_id(purge_id, "purge_id")
        with self.db.read() as conn:
            entry = ledger.entry_by_purge_id(conn, purge_id)
            if entry is None:
                raise NotFound(f"no purge {purge_id}")
            return PurgeDetail(
                status=self._statuses(conn, [entry])[0],
                attempts=tuple(Attempt.from_row(row) for row in purges.attempts_of(conn, purge_id)),
                audit=tuple(AuditEntry.from_row(row) for row in purges.audit_of(conn, purge_id)),
            )

    def worker_leases(self, *, limit: int = MAX_PAGE) -> list[WorkerLeases]:
        """The live lease owners (a worker's attempt each), and the steps each one holds now."""
        check_limit(limit)
        with self.db.read() as conn:
            held = _held_by_owner(purges.live_leases(conn, limit=limit))
        return [WorkerLeases(owner, tuple(steps)) for owner, steps in held.items()]

    def list_workers(self, *, limit: int = MAX_PAGE) -> list[WorkerProcess]:
        """The worker, scheduler and embedded processes that sent heartbeats, the alive first,
        then the most recently seen (a dead or stopped one is kept for a day), each with the
        steps it holds now. A process is dead once 3 of its heartbeat intervals pass without
        one."""
        check_limit(limit)
        with self.db.read() as conn:
            now = ledger.database_now(conn)
            rows = heartbeats.processes(conn, limit=limit)
            held = _held_by_owner(purges.live_leases(conn, limit=MAX_PAGE))
        return [WorkerProcess.from_row(row, now=now, held=held) for row in rows]

    def stalled_purge_ids(self, *, limit: int = MAX_PAGE) -> list[str]:
        """Purges with a step due (or whose lease expired) for longer than ``stall_after``, or
        due at all while no worker is alive (:func:`stall_bound`), longest due first, at most
        ``limit``."""
        with self.db.read() as conn:
            now = ledger.database_now(conn)
            bound = stall_bound(heartbeats.presence(conn, now), self.stall_after)
            return overview.stalled_purge_ids(conn, now, bound, limit=limit)

    def database_now(self) -> dt.datetime:
        """The database clock, which every stored time comes from (for telling times relative
        to it)."""
        with self.db.read() as conn:
            return ledger.database_now(conn)

    def verify_ledger(self) -> LedgerReport:
        """Walk the hash chain; report at most a bounded number of problems."""
        with self.db.read(snapshot=True) as conn:
            return ledger.verify(conn)

    def checkpoint_ledger(self, path: str | Path) -> checkpoint.Checkpoint:
        """Export the whole ledger as one self-contained file (format version 2: a header
        line, then one row per line), atomically; ``merge_ledger`` reads it back."""
        if not isinstance(path, str | Path) or not str(path).strip():
            raise ValidationError("path must name a file")
        target = Path(path).expanduser().absolute()
        if target.is_dir():
            raise ValidationError(f"{target} is a directory; name a file")
        try:
            return ledger_copy.write_export(self.db, target)
        except OSError as exc:
            raise InfrastructureError(f"could not write the checkpoint: {exc.strerror}") from exc


def _held_by_owner(rows: Sequence[Any]) -> dict[str, list[HeldStep]]:
    """Live leases' rows (``purges.live_leases``) as the steps each lease owner holds."""
    held: dict[str, list[HeldStep]] = defaultdict(list)
    for row in rows:
        held[row.lease_owner].append(HeldStep(row.id, row.purge_id, row.kind, int(row.attempts), row.lease_expires_at))
    return held
