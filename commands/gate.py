"""The gate on content reads and writes: closed while the ledger cannot be trusted.

A restore of an old database backup brings back purged content AND an older, shorter ledger
(it lives in the same database). The checkpoint directory, outside any backup, remembers
more. The gate is closed (content reads and writes raise ``MessagingUnavailable``, with at
most ``MAX_PROBLEMS`` diagnostics that never hold content) while:

- a restore merge is under way, or one crashed before finishing (``ledger_head.gate_reason``,
  durable, seen by every process);
- the ledger's own chain does not verify;
- the ledger lacks a purge that this database's newest valid checkpoint holds, or holds it
  with different content (a restored old database);
- the ledger head went back since this process last saw it, or is below the seq in the
  name of the newest checkpoint file (the database was restored underneath a running
  process); this holds until a merge or an operator's re-check (``messaging_status``).

A closed gate takes its verdict again when content is asked for and the head row moved or
its flag changed since the verdict (a merge by another process, a cleared flag): it reopens
as soon as its cause is gone, and a flood of refused calls costs no ledger walks.

The verdict is taken when a handle opens, after every merge, and again in the background
once it is older than ``RECHECK_AFTER`` (a ledger tampered with later closes the gate within
about that long); each content call costs one primary-key read of ``ledger_head`` (purge
acceptances reuse the head row they lock anyway). Purge status, the operator commands and
the cleanup workers never wait on the gate: cleanup only removes, and the operator needs
them to repair.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Connection, select

from schema import ledger
from schema.db import Database
from schema.errors import MessagingUnavailable
from schema.tables import ledger_head
from workers import checkpoint

log = logging.getLogger(__name__)

MAX_PROBLEMS = MessagingUnavailable.MAX_DIAGNOSTICS
RECHECK_AFTER = dt.timedelta(seconds=60)
MAX_KNOWN_FILES = 64
_UNSEEN = object()
EXAMPLES = 5


@dataclass(frozen=True)
class GateState:
    """Whether content reads and writes are open, and why not."""

    open: bool
    problems: tuple[str, ...] = ()
    ledger_rows: int = 0
    checkpoint: str | None = None  # the name of the checkpoint file compared with, if any
    warnings: tuple[str, ...] = field(default=())  # newer checkpoint files that did not verify
    checked_at: dt.datetime | None = None


_HEAD_GATE = select(ledger_head.c.seq, ledger_head.c.gate_reason).where(ledger_head.c.id == 1)


class Gate:
    """One handle's view of the gate (thread-safe)."""

    def __init__(
        self, db: Database, checkpoint_dir: Path, database_id: str, *, recheck_after: dt.timedelta = RECHECK_AFTER
    ) -> None:
        self.db = db
        self.checkpoint_dir = checkpoint_dir
        self.database_id = database_id
        self.recheck_after = recheck_after.total_seconds()
        self._lock = threading.Lock()
        self._state = GateState(open=True)
        self._seen_seq = 0
        self._evaluated_at = time.monotonic()
        self._rechecking = False
        self._sticky = False
        self._basis: tuple[int, str | None] = (-1, None)  # the head the verdict was taken on
        self._verified: dict[tuple[str, int, int], object] = {}  # checkpoint file -> its seq, or None

    @property
    def state(self) -> GateState:
        with self._lock:
            return self._state

    def evaluate(self, *, lift_sticky: bool = True) -> GateState:
        """Verify the ledger against its chain and against the newest checkpoint; remember.
        The checkpoint is read first: the database can only be ahead of its own checkpoints,
        so an acceptance and a checkpoint written in between never look like a missing purge.
        ``lift_sticky=False`` (the background re-check) keeps a "restored underneath" verdict:
        only a merge or an operator's re-check lifts that."""
        newest, skipped = checkpoint.newest(self.checkpoint_dir, self.database_id)
        for warning in skipped:
            log.warning("skipped a checkpoint that does not verify: %s", warning)
        with self.db.read(snapshot=True) as conn:
            head = ledger.read_head(conn)
            known: dict[str, dict[str, object]] = {}
            report = ledger.verify(conn, visit=lambda entry: known.__setitem__(entry.purge_id, entry.content()))
        problems: list[str] = []
        if head.gate_reason:
            problems.append(head.gate_reason)
        problems.extend(f"the ledger does not verify: {problem}" for problem in report.problems)
        if newest is not None:
            problems.extend(_behind(known, newest))
        with self._lock:
            if not lift_sticky and self._sticky:
                problems.extend(p for p in self._state.problems if p not in problems)
            state = GateState(
                open=not problems,
                problems=tuple(problems[:MAX_PROBLEMS]),
                ledger_rows=report.rows,
                checkpoint=newest.path.name if newest else None,
                warnings=tuple(skipped[:MAX_PROBLEMS]),
                checked_at=head.now,
            )
            self._state, self._basis = state, (head.seq, head.gate_reason)
            self._seen_seq = max(self._seen_seq, head.seq) if not lift_sticky else head.seq
            self._evaluated_at = time.monotonic()
            self._sticky = self._sticky and not lift_sticky
        if not state.open:
            log.error("content reads and writes are closed: %s", "; ".join(state.problems))
        return state

    def require_open(self, conn: Connection) -> None:
        """For a content read or write: one primary-key read of the head, in its transaction.
        The checkpoint directory is listed before the head is read, so a checkpoint written
        meanwhile (of an acceptance committed after the head read) is never mistaken for a
        restore."""
        listing = self._listing()
        row = conn.execute(_HEAD_GATE).one()
        self._check(int(row.seq), row.gate_reason, self._floor(listing, int(row.seq)))

    def check_head(self, head: ledger.Head) -> None:
        """For a purge acceptance, with the head row it has locked anyway (no checkpoint can
        be ahead of a locked head)."""
        self._check(head.seq, head.gate_reason, self._floor(self._listing(), head.seq))

    def _recheck(self) -> None:
        try:
            self.evaluate(lift_sticky=False)
        except Exception:  # the next content call tries again; the current verdict stands
            log.exception("re-checking the ledger failed")
        finally:
            with self._lock:
                self._rechecking = False

    def _check(self, seq: int, gate_reason: str | None, floor: tuple[int, str]) -> None:
        if gate_reason:
            raise MessagingUnavailable(f"content reads and writes are closed: {gate_reason}", diagnostics=[gate_reason])
        with self._lock:
            if not self._rechecking and time.monotonic() - self._evaluated_at > self.recheck_after:
                self._rechecking = True
                threading.Thread(target=self._recheck, name="purgekeeper-gate", daemon=True).start()
            went_back = _went_back(seq, self._seen_seq, floor)
            if went_back and not self._sticky:
                problems = (*self._state.problems, went_back) if not self._state.open else (went_back,)
                self._state = GateState(open=False, problems=problems[:MAX_PROBLEMS], ledger_rows=seq)
                self._sticky = True  # until the head is no longer behind (a merge), or an operator re-checks
            elif not went_back and self._sticky:
                self._sticky = False  # the head caught up with what was seen and checkpointed: re-check below
            self._seen_seq = max(self._seen_seq, seq)
            state = self._state
            stale = not state.open and not self._sticky and (seq, gate_reason) != self._basis
        if stale:  # the head moved or the flag changed since: a merge elsewhere? take the verdict again
            state = self.evaluate(lift_sticky=False)
        if not state.open:
            raise MessagingUnavailable(
                f"content reads and writes are closed: {state.problems[0]}", diagnostics=state.problems
            )

    def _listing(self) -> list[tuple[int, Path]]:
        """This database's checkpoint files, newest first, by name (one directory listing)."""
        try:
            return list(reversed(checkpoint.own_checkpoints(self.checkpoint_dir, self.database_id)))
        except OSError:
            return []

    def _floor(self, listing: list[tuple[int, Path]], head_seq: int) -> tuple[int, str]:
        """The newest checkpoint listed (BEFORE the head was read) that holds more rows than
        the head: the database was restored underneath. A checkpoint is written from
        committed rows, so one listed before the head was read can only be ahead of it after
        a restore. Only files named above the head are read, each once (cached by size and
        mtime), and only a file that verifies counts: a stray or damaged one never keeps the
        gate closed."""
        for named_seq, path in listing:
            if named_seq <= head_seq:
                return 0, ""
            try:
                stat = path.stat()
            except OSError:
                continue
            key = (str(path), stat.st_mtime_ns, stat.st_size)
            with self._lock:
                known = self._verified.get(key, _UNSEEN)
            if known is _UNSEEN:
                try:
                    read = checkpoint.read(path)
                    known = read.seq if read.database_id == self.database_id else None
                except checkpoint.CheckpointInvalid as exc:
                    log.warning("a checkpoint file does not verify and is not trusted: %s", exc)
                    known = None
                with self._lock:
                    if len(self._verified) >= MAX_KNOWN_FILES:
                        self._verified.clear()
                    self._verified[key] = known
            if isinstance(known, int) and known > head_seq:
                return known, str(path)
        return 0, ""


def _went_back(seq: int, seen: int, floor: tuple[int, str]) -> str | None:
    if seq < floor[0]:
        return (
            f"the ledger head is at seq {seq}, behind checkpoint {Path(floor[1]).name} (seq {floor[0]}): "
            "the database was restored underneath this process; run: purgectl ledger merge with that file "
            "from the checkpoint directory"
        )
    if seq < seen:
        return (
            f"the ledger head went back from seq {seen} to {seq}: the database was restored "
            "underneath this process; merge the newest checkpoint (purgectl ledger merge)"
        )
    return None


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
            f"run: purgectl ledger merge with that file from the checkpoint directory"
        )
    if differing:
        problems.append(
            f"{len(differing)} purge(s) differ from checkpoint {newest.path.name} "
            f"(e.g. {', '.join(differing[:EXAMPLES])})"
        )
    return problems
