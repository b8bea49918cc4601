"""Keeping a ledger copy up to the database: the rows it lacks appended (``catch_up``), its
lost tail re-established (``restore_tail``), a damaged copy repaired (``repair``), the signed
log's tiles rebuilt from it (``repair_log``), and after a
merge a copy the ledger does not extend moved aside (``reconcile``), never a row the signed
log or a version 1 checkpoint holds that the ledger lacks. ``purgekeeper.storage.ledger_copy`` names all of it.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from purgekeeper.schema import ledger
from purgekeeper.schema.db import Database
from purgekeeper.storage import checkpoint
from purgekeeper.storage.copy_layout import (
    CopyDiverged,
    CopyGap,
    CopyHead,
    CopyHeadLost,
    CopyInvalid,
    CopyTruncated,
)
from purgekeeper.storage.signed_log import ForeignKey, RowUnverified

if TYPE_CHECKING:
    from purgekeeper.storage.ledger_copy import LedgerCopy

log = logging.getLogger("purgekeeper.storage.ledger_copy")  # the name its warnings always had


CATCH_UP_BATCH = 4096  # rows read from the database and appended at a time


def catch_up(
    db: Database, copy: LedgerCopy, *, upto: int | None = None, committed: ledger.LedgerEntry | None = None
) -> CopyHead:
    """Append every committed row the copy lacks, up to seq ``upto`` (default: the
    database's head). One stat when the copy is there already; else the missing rows, read
    by the primary key from the copy's head on (the first time, the whole ledger).
    ``committed`` is a row the caller knows is committed (its own acceptance's): when it is
    the only one missing, it is appended without reading the database. An open segment
    found truncated (at an append, or at every sweep: ``upto`` None) has its tail
    re-established from the database's rows first; CopyInvalid when the database does not
    hold them."""
    try:
        if upto is None:
            copy.check_tail()
        return _catch_up(db, copy, upto=upto, committed=committed)
    except CopyTruncated as exc:
        log.warning("re-establishing the ledger copy's tail from the database: %s", exc)
        restore_tail(db, copy)
        return _catch_up(db, copy, upto=upto, committed=committed)


def restore_tail(db: Database, copy: LedgerCopy) -> CopyHead:
    """The open segment's lost tail written again from the database's rows of it."""
    head = copy.head()
    if head is None or head.segment_bytes == 0:
        return head or CopyHead.empty(copy.database_id)
    with db.read() as conn:
        rows = list(ledger.entries(conn, after=head.segment - 1, upto=head.seq))
    return copy.restore_tail(rows)


def repair(db: Database, copy: LedgerCopy) -> CopyHead:
    """Bring a damaged copy back to a verifying state, as far as it can be without guessing:
    head.json rebuilt from the segments when it is lost, the open segment's tail
    re-established from the database, then the rows the database holds beyond it appended.
    A copy ahead of the database (a restored one) keeps its rows: a merge brings them back."""
    copy.repair()
    return catch_up(db, copy)


def repair_log(db: Database, copy: LedgerCopy) -> list[str]:
    """The signed log's tiles missing or damaged, rebuilt from the copy's rows once each of them
    verifies and is the database's row at its seq (where the database holds it), and once
    they give the signed root (``SignedLog.rebuild_tiles``). The paths of the tiles written."""
    if copy.log is None or copy.head() is None:
        return []
    try:
        copy.check_tail()
    except CopyTruncated:
        restore_tail(db, copy)
    try:
        with db.read() as conn:
            return copy.log.rebuild_tiles(_as_in_database(copy.rows(), ledger.entries(conn)))
    except ForeignKey as exc:  # another data directory's key: its owner repairs its log
        log.warning("the ledger's log is not repaired: %s", exc)
        return []


def _as_in_database(
    rows: Iterable[ledger.LedgerEntry], in_database: Iterable[ledger.LedgerEntry]
) -> Iterator[ledger.LedgerEntry]:
    """``rows`` (from seq 1), each compared with the database's row at its seq first; rows
    beyond the database's head (a restored database) are given as they are."""
    theirs = iter(in_database)
    for row in rows:
        other = next(theirs, None)
        if other is not None and (other.seq, other.row_hash) != (row.seq, row.row_hash):
            raise RowUnverified(row.seq, "is not the database's row at its seq")
        yield row


def _repaired(copy: LedgerCopy) -> CopyHead | None:
    """A lost head rebuilt from the segments (the merge read them: the database holds their
    rows), or None when the segments do not verify."""
    try:
        return copy.repair()[0]
    except CopyInvalid:
        return None


def _catch_up(db: Database, copy: LedgerCopy, *, upto: int | None, committed: ledger.LedgerEntry | None) -> CopyHead:
    head = copy.head()
    if head is None:
        _refuse_a_bootstrap_behind(db, copy)
        head = CopyHead.empty(copy.database_id)
    if upto is not None and head.seq >= upto:
        return head
    if committed is not None:
        try:
            return copy.append_committed(committed)
        except (CopyGap, CopyDiverged):
            pass  # a row before it that no thread here handed in: read what is missing instead
    while True:
        with db.read() as conn:
            rows = list(
                itertools.islice(ledger.entries(conn, after=head.seq, upto=upto, batch=CATCH_UP_BATCH), CATCH_UP_BATCH)
            )
        if not rows:
            return copy.sign_lagging() if copy.log is not None else head
        try:
            head = copy.append(rows)
        except CopyGap as gap:  # another writer is behind us: take it from where the copy is
            head = dataclasses.replace(head, seq=gap.after)
            continue
        if len(rows) < CATCH_UP_BATCH:
            return head


def reconcile(db: Database, copy: LedgerCopy, *, replace: bool) -> Path | None:
    """After a merge: bring the copy up to the database. A copy that the database's ledger
    does not extend (another history, or a damaged head) is moved aside and written again,
    but only when ``replace`` (the merge read it, so the database holds all its purges);
    otherwise it raises CopyDiverged and the gate stays closed. Returns where it was moved."""
    moved: Path | None = None
    try:
        head = copy.head()
    except CopyInvalid as exc:
        if not replace:
            raise
        head = _repaired(copy) if isinstance(exc, CopyHeadLost) else None
        if head is None:
            _refuse_a_fork(db, copy)
            moved = copy.move_aside()
    if head is not None:
        with db.read() as conn:
            db_seq = ledger.read_head(conn).seq
            row = ledger.entry_at(conn, head.seq) if 0 < head.seq <= db_seq else None
        found = ledger.GENESIS_HASH if head.seq == 0 else (row.row_hash if row else None)
        if found != head.row_hash:
            if not replace:
                raise CopyDiverged(f"the ledger does not extend its copy at seq {head.seq}")
            _refuse_a_fork(db, copy)
            moved = copy.move_aside()
    catch_up(db, copy)
    return moved


def _refuse_a_fork(db: Database, copy: LedgerCopy) -> None:
    """A copy is written again only from a ledger that holds the signed log's leaves: else
    LogRefused, before the copy is moved aside (a new origin starts a new log)."""
    if copy.log is None:
        return
    try:
        tree = copy.log.head()
    except ForeignKey:
        return  # the key's owner compares the copy written again with the log before it signs
    if tree is None:
        return
    with db.read() as conn:
        db_seq = ledger.read_head(conn).seq
        copy.log.check_ledger(ledger.entries(conn, upto=min(tree.size, db_seq)), db_seq)


class BehindLegacyCheckpoint(CopyInvalid):
    """There is no copy yet, and a checkpoint file of the earlier format holds more rows than
    the database: a copy made now would forget them. Merge that file first."""


def _refuse_a_bootstrap_behind(db: Database, copy: LedgerCopy) -> None:
    """The first copy is made from the database's ledger, unless this database's newest
    version 1 checkpoint that verifies (written before the copy existed) holds a purge the
    ledger lacks: the database was restored, and only a merge may bring those rows back. Read
    once, when the copy is first made."""
    newest, _skipped = checkpoint.newest(copy.checkpoint_dir, copy.database_id)
    if newest is None:
        return
    with db.read() as conn:
        known = ledger.entries_by_purge_id(conn, [entry.purge_id for entry in newest.entries])
    missing = [entry.purge_id for entry in newest.entries if entry.purge_id not in known]
    if missing:
        raise BehindLegacyCheckpoint(
            f"checkpoint {newest.path.name} holds {len(missing)} purge(s) the ledger lacks "
            f"(e.g. {missing[0]}): merge it before the ledger is copied"
        )
