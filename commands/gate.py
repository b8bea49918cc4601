"""The gate on content reads and writes: closed while the ledger cannot be trusted.

A restore of an old database backup brings purged content back AND an older, shorter ledger
(it lives in the same database). The ledger's copy outside the database
(``purgekeeper.storage.ledger_copy``, in the checkpoint directory, outside any backup) remembers more:
every acceptance is in it before its call returns. The gate is closed (content reads and
writes raise ``MessagingUnavailable``, with at most ``MAX_PROBLEMS`` diagnostics that never
hold content or a server path) while:

- a restore merge is under way, or one crashed before finishing (``ledger_head.gate_reason``,
  durable, seen by every process);
- the ledger is behind its copy (the database was restored), or differs from it at the
  copy's head (another history); or its head went back since this process last saw it
  (until a merge brings it back up, or an operator's full check);
- the background audit found the ledger's own chain, or the copy, damaged;
- the copy cannot be read: any file-system error of it (named by its file name, with the
  system's reason, never a path), or a head.json lost while its segments hold rows (they
  may hold purges a restored database lacks: ``purgectl ledger repair`` rebuilds the head
  from them, or a merge of the checkpoint directory reads them alone);
- before the first copy exists: a checkpoint file of the earlier format (version 1) holds
  rows the ledger lacks.

**Cost.** Every content call compares the database's head with the copy's in O(1): the one
primary-key read of ``ledger_head`` it makes anyway, and a ``stat`` of the copy's head file,
which is read again only when it changed. While the copy is behind the database (an
acceptance between its commit and its copy, or a copy that failed), the row at the copy's
head is read once by its key and the verdict kept. A copy ahead of the read's snapshot (an
acceptance committed and copied after the snapshot was taken) is checked once more against
the head in a fresh transaction before the gate closes. Nothing on the request path walks the
ledger; a directory is listed only while head.json is missing and the copy's directory is
there, and then only when the directory changed. A handle's start does the same O(1) check.

**The audit** walks the whole chain again in the background, ``audit_rows`` rows at a time
every ``audit_interval`` (it remembers the prefix it verified; a new round starts once it
reached the head and ``audit_cycle`` passed), recomputing every row's hash and comparing it
with the copy's row. It never blocks a call; what it finds closes the gate until an
operator's full check (``messaging_status()``, ``purgectl ledger verify``) or a merge finds
the ledger sound. Purge status, the operator commands and the cleanup workers never wait on
the gate: cleanup only removes, and the operator needs them to repair.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Executable, Row

from purgekeeper.schema import ledger
from purgekeeper.schema.db import Database
from purgekeeper.schema.driver import Reader
from purgekeeper.schema.errors import MessagingUnavailable
from purgekeeper.storage import checkpoint
from purgekeeper.storage.ledger_copy import CopyHead, CopyInvalid, LedgerCopy
from purgekeeper.storage.signed_log import SignedLog

log = logging.getLogger(__name__)

MAX_PROBLEMS = MessagingUnavailable.MAX_DIAGNOSTICS
# Small steps, and few: a step holds the interpreter while it hashes its rows, so a long one
# would stall every request thread of the process for that long, and the audit of a large
# ledger runs all the time. After each step the audit pauses AUDIT_INTERVAL, or longer, so
# that it takes at most AUDIT_SHARE of one core (the step's own CPU time counted): on this
# machine a step of 500 rows takes about 10 ms, so about 1,000 rows a second, a million
# rows in about 17 minutes; a new walk from the first row starts at most every AUDIT_CYCLE.
AUDIT_INTERVAL = dt.timedelta(seconds=0.25)
AUDIT_ROWS = 500
AUDIT_SHARE = 0.02
AUDIT_CYCLE = dt.timedelta(minutes=30)
EXAMPLES = 5
MERGE_HINT = "run: purgectl ledger merge with the checkpoint directory"


@dataclass(frozen=True)
class GateState:
    """Whether content reads and writes are open, and why not."""

    open: bool
    problems: tuple[str, ...] = ()
    ledger_rows: int = 0
    checkpoint: str | None = None  # the copy (or version 1 file) compared with, by name
    warnings: tuple[str, ...] = field(default=())  # version 1 checkpoint files that did not verify
    checked_at: dt.datetime | None = None


class Gate:
    """One handle's view of the gate (thread-safe)."""

    def __init__(
        self,
        db: Database,
        checkpoint_dir: Path,
        database_id: str,
        *,
        audit_interval: dt.timedelta = AUDIT_INTERVAL,
        audit_rows: int = AUDIT_ROWS,
        audit_cycle: dt.timedelta = AUDIT_CYCLE,
        log: SignedLog | None = None,
    ) -> None:
        self.db = db
        self.checkpoint_dir = checkpoint_dir
        self.database_id = database_id
        self.copy = LedgerCopy(checkpoint_dir, database_id, log=log)
        self.audit_interval = audit_interval.total_seconds()
        self.audit_rows = audit_rows
        self.audit_cycle = audit_cycle.total_seconds()
        self._lock = threading.Lock()
        self._state = GateState(open=True)
        self._legacy: tuple[str, ...] = ()  # a version 1 checkpoint ahead of the ledger (no copy yet)
        self._legacy_checked = False
        self._legacy_file: tuple[str | None, tuple[str, ...]] = (None, ())  # its name, the newer ones skipped
        self._verified_copy: tuple[int, str] | None = None  # the copy's head, found in the ledger
        self._seen = (0, ledger.GENESIS_HASH)  # the newest head (seq, hash) this process saw
        self._audit_problems: tuple[str, ...] = ()
        self._damage: tuple[str, ...] = ()  # what is wrong with the ledger's own chain, as walk_chain says
        self._audited = (0, ledger.GENESIS_HASH)  # the prefix the audit verified
        self._checks = 0  # full checks so far: an audit step that one overtook keeps none of its verdict
        self._audit_started_at = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def state(self) -> GateState:
        with self._lock:
            return self._state

    # -- the O(1) check ----------------------------------------------------------------------

    def require_open(
        self, conn: Connection, statement: Executable = ledger.HEAD_GATE, params: dict[str, Any] | None = None
    ) -> Row[Any]:
        """For a content read or write: one primary-key read of the head, in its transaction,
        and a stat of the copy's head file. ``statement`` may read more in the same row (its
        first columns are the head's ``seq``, ``head_hash`` and ``gate_reason``); the row is
        returned."""
        row = conn.execute(statement, params).one()
        self._check(conn, int(row.seq), row.head_hash, row.gate_reason)
        return row

    def check_values(self, conn: Reader, seq: int, head_hash: str, gate_reason: str | None) -> None:
        """For a content read whose own statement read the head too, in the same snapshot
        as the content (the content is returned only if this passes)."""
        self._check(conn, int(seq), head_hash, gate_reason)

    def check_head(self, conn: Connection, head: ledger.Head) -> None:
        """For a purge acceptance, with the head row it has locked anyway."""
        self._check(conn, head.seq, head.head_hash, head.gate_reason)

    def quick(self) -> GateState:
        """The O(1) verdict now (a handle's start): what the next content call would meet."""
        with self.db.read() as conn:
            head = ledger.read_head(conn)
            problems = self._problems(conn, head.seq, head.head_hash, head.gate_reason)
        return self._set(problems, head)

    def _check(self, conn: Reader, seq: int, head_hash: str, gate_reason: str | None) -> None:
        problems = self._problems(conn, seq, head_hash, gate_reason)
        if problems:
            with self._lock:
                self._state = GateState(False, tuple(problems[:MAX_PROBLEMS]), seq, self._copy_name())
            raise MessagingUnavailable(f"content reads and writes are closed: {problems[0]}", diagnostics=problems)
        with self._lock:
            if not self._state.open:
                self._state = GateState(True, (), seq, self._copy_name())

    def _problems(self, conn: Reader, seq: int, head_hash: str, gate_reason: str | None) -> list[str]:
        if gate_reason:
            return [gate_reason]
        problems = list(self._audit_problems)
        with self._lock:
            seen = self._seen
            if seq >= seen[0]:
                self._seen = (seq, head_hash)
        # until a merge brings it back up, or an operator's full check; a read whose snapshot
        # began before a head this process saw since is no restore (``_still_holds``)
        if seq < seen[0] and not self._still_holds(seen):
            with self._lock:
                self._verified_copy = None
            problems.append(
                f"the ledger head went back from seq {seen[0]} to {seq}: the database was restored "
                f"underneath this process; {MERGE_HINT}"
            )
        try:
            copy_head = self.copy.head()
        except CopyInvalid as exc:
            return [*problems, f"the ledger's copy in the checkpoint directory cannot be read: {exc}"]
        if copy_head is None:
            return [*problems, *self._legacy_problems(seq)]
        return [*problems, *self._against_copy(conn, seq, head_hash, copy_head)]

    def _against_copy(self, conn: Reader, seq: int, head_hash: str, copy_head: CopyHead) -> list[str]:
        name = self.copy.directory.name
        if copy_head.seq > seq:
            if not self._committed_since(copy_head):
                return [
                    f"the ledger head is at seq {seq}, behind its copy {name} (seq {copy_head.seq}): "
                    f"the database was restored from an older backup; {MERGE_HINT}"
                ]
            # the fresh transaction found the copy's head in the database: that settles it (this
            # read's snapshot, taken before that row committed, cannot show it)
            return self._verified(copy_head)
        if copy_head.seq == seq:
            return [] if copy_head.row_hash == head_hash else [f"the ledger differs from its copy {name} at seq {seq}"]
        if self._verified_copy == (copy_head.seq, copy_head.row_hash):
            return []
        entry = ledger.entry_at(conn, copy_head.seq) if copy_head.seq else None
        found = entry.row_hash if entry else ledger.GENESIS_HASH
        if found != copy_head.row_hash:
            return [f"the ledger differs from its copy {name} at seq {copy_head.seq}"]
        return self._verified(copy_head)

    def _verified(self, copy_head: CopyHead) -> list[str]:
        """The copy's head is found in the ledger: no problem, and not asked again."""
        with self._lock:
            self._verified_copy = (copy_head.seq, copy_head.row_hash)
        return []

    def _still_holds(self, seen: tuple[int, str]) -> bool:
        """Whether the database still holds the head this process saw (its seq and hash): a
        read whose snapshot was taken before another thread here saw a newer head shows an
        older one, and that is not a restore. Asked in a transaction of its own, only when a
        read shows a head older than the one seen."""
        seq, head_hash = seen
        with self.db.read() as fresh:
            entry = ledger.entry_at(fresh, seq) if seq else None
        return entry is not None and entry.row_hash == head_hash

    def _committed_since(self, copy_head: CopyHead) -> bool:
        """Whether the database holds the copy's head after all: an acceptance committed and
        copied after this read's snapshot was taken puts the copy ahead of that snapshot, and
        that is not a restore. Asked in a transaction of its own, only when the copy is ahead."""
        with self.db.read() as fresh:
            head = ledger.read_head(fresh)
            if head.seq < copy_head.seq:
                return False
            entry = ledger.entry_at(fresh, copy_head.seq)
        return entry is not None and entry.row_hash == copy_head.row_hash

    def _legacy_problems(self, seq: int) -> list[str]:
        """No copy yet: a version 1 checkpoint of this database ahead of the ledger (read and
        verified once per handle; a copy is made at the first acceptance or sweep)."""
        if not self._legacy_checked:
            self._legacy = tuple(self._legacy_verdict())
            self._legacy_checked = True
        return list(self._legacy)

    def _legacy_verdict(self) -> list[str]:
        newest, skipped = checkpoint.newest(self.checkpoint_dir, self.database_id)
        for warning in skipped:
            log.warning("skipped a checkpoint that does not verify: %s", warning)
        with self._lock:
            self._legacy_file = (newest.path.name if newest else None, tuple(skipped[:MAX_PROBLEMS]))
        if newest is None:
            return []
        with self.db.read() as conn:
            mine = ledger.entries_by_purge_id(conn, [entry.purge_id for entry in newest.entries])
        return _behind({purge_id: entry.content() for purge_id, entry in mine.items()}, newest)

    # -- the full check ----------------------------------------------------------------------

    def evaluate(self, *, lift_sticky: bool = True) -> GateState:
        """The full verdict (an operator's re-check, a merge with ``full``, ``purgectl
        health``): the whole chain, the whole copy, then the O(1) comparison. What it finds
        stays until the next full check (as what the audit finds does); with
        ``lift_sticky``, what was found before is lifted when the walk finds it sound."""
        with self.db.read(snapshot=True) as conn:
            head = ledger.read_head(conn)
            report = ledger.verify(conn)
        # the copy's walk reads files only: outside any transaction, which a server ends once
        # it sits idle for longer than its timeout (a million rows take longer)
        _seq, _hash, copy_problems = self.copy.verify()
        damage = report.problems
        found = tuple(f"the ledger does not verify: {problem}" for problem in damage) + tuple(
            f"the ledger's copy does not verify: {problem}" for problem in copy_problems
        )
        self._legacy_checked = False
        with self._lock:
            self._checks += 1
            self._verified_copy = None
            if lift_sticky:
                self._audit_problems, self._damage = found[:MAX_PROBLEMS], damage[:MAX_PROBLEMS]
                self._seen = (head.seq, head.head_hash)
            else:
                self._audit_problems = tuple(dict.fromkeys([*self._audit_problems, *found]))[:MAX_PROBLEMS]
                self._damage = tuple(dict.fromkeys([*self._damage, *damage]))[:MAX_PROBLEMS]
            if not found:
                self._audited = (report.rows, report.head_hash)
        with self.db.read() as conn:  # the head now: acceptances may have come meanwhile
            head = ledger.read_head(conn)
            problems = self._problems(conn, head.seq, head.head_hash, head.gate_reason)
        state = self._set(problems, head)
        if not state.open:
            log.error("content reads and writes are closed: %s", "; ".join(state.problems))
        return state

    def _set(self, problems: list[str], head: ledger.Head) -> GateState:
        name, skipped = (self._copy_name(), ()) if self.copy.exists() else self._legacy_file
        state = GateState(
            open=not problems,
            problems=tuple(problems[:MAX_PROBLEMS]),
            ledger_rows=head.seq,
            checkpoint=name,
            warnings=skipped,
            checked_at=head.now,
        )
        with self._lock:
            self._state = state
        return state

    def _copy_name(self) -> str | None:
        return self.copy.directory.name if self.copy.exists() else None

    def audit_state(self) -> tuple[int, str, tuple[str, ...]]:
        """(the seq the audit's round verified to, that row's hash, the damage it found)."""
        with self._lock:
            return (*self._audited, self._damage)

    def known_damage(self) -> tuple[str, ...]:
        """What the audit found wrong with the ledger's own chain (until a full check finds
        it sound): a merge does not build on it."""
        with self._lock:
            return self._damage

    # -- the audit ---------------------------------------------------------------------------

    def start_audit(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._audit_loop, name="purgekeeper-audit", daemon=True)
            self._thread.start()

    def stop_audit(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _audit_loop(self) -> None:
        pause = self.audit_interval
        while not self._stop.wait(pause):
            began = time.thread_time()
            try:
                self.audit_step()
            except Exception:  # the next round tries again; a call never waits for the audit
                log.warning("the ledger audit could not run", exc_info=True)
            spent = time.thread_time() - began
            pause = max(self.audit_interval, spent * (1 - AUDIT_SHARE) / AUDIT_SHARE)

    def audit_step(self) -> tuple[int, tuple[str, ...]]:
        """Verify the next ``audit_rows`` rows after the prefix already verified, each against
        the row before it and against the copy's row at its seq. Returns (the seq verified
        to, the problems found so far)."""
        with self._lock:
            seq, prev = self._audited
            checks = self._checks
            if seq and time.monotonic() - self._audit_started_at >= self.audit_cycle:
                seq, prev = self._audited = (0, ledger.GENESIS_HASH)  # a new round from the first row
                self._audit_started_at = time.monotonic()
        with self.db.read() as conn:
            rows = list(itertools.islice(ledger.entries(conn, after=seq, batch=self.audit_rows), self.audit_rows))
        count, last, damage = ledger.walk_chain(rows, start=seq + 1, prev_hash=prev)
        problems = [f"the ledger does not verify: {problem}" for problem in damage] + self._copy_mismatches(rows)
        with self._lock:
            if checks != self._checks:  # a full check (a merge's) came meanwhile: its verdict replaces ours
                return self._audited[0], self._audit_problems
            if problems:
                self._audit_problems = tuple(dict.fromkeys([*self._audit_problems, *problems]))[:MAX_PROBLEMS]
                self._damage = tuple(dict.fromkeys([*self._damage, *damage]))[:MAX_PROBLEMS]
            else:
                self._audited = (seq + count, last)
            return self._audited[0], self._audit_problems

    def _copy_mismatches(self, rows: list[ledger.LedgerEntry]) -> list[str]:
        if not rows:
            return []
        try:
            copied = self.copy.row_hashes(after=rows[0].seq - 1, upto=rows[-1].seq)
        except CopyInvalid as exc:
            return [f"the ledger's copy does not verify: {exc}"]
        return [
            f"the ledger differs from its copy at seq {entry.seq}"
            for entry in rows
            if entry.seq in copied and copied[entry.seq] != entry.row_hash
        ][:EXAMPLES]


def _behind(known: dict[str, dict[str, object]], newest: checkpoint.CheckpointFile) -> list[str]:
    missing = [entry.purge_id for entry in newest.entries if entry.purge_id not in known]
    differing = [
        entry.purge_id
        for entry in newest.entries
        if entry.purge_id in known and known[entry.purge_id] != entry.content()
    ]
    problems = []
    if missing:
        problems.append(
            f"the ledger lacks {len(missing)} purge(s) that checkpoint {newest.path.name} holds "
            f"(e.g. {', '.join(missing[:EXAMPLES])}): a restored older database? "
            "run: purgectl ledger merge with that file from the checkpoint directory"
        )
    if differing:
        problems.append(
            f"{len(differing)} purge(s) differ from checkpoint {newest.path.name} "
            f"(e.g. {', '.join(differing[:EXAMPLES])})"
        )
    return problems
