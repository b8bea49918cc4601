"""Writing a ledger copy (``purgekeeper.storage.ledger_copy.LedgerCopy`` is this class): appending rows
(a group commit of the rows every thread hands in, under the flock every process takes),
growing and signing the signed log with them, the open segment's tail checked and
re-established, and head.json rebuilt from the segments (``repair``).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from purgekeeper.schema import ledger
from purgekeeper.storage import failpoints
from purgekeeper.storage.copy_layout import (
    _DIRECTORY,
    FORMAT,
    HEAD_FILE,
    LOCK_FILE,
    VERSION,
    CopyDiverged,
    CopyGap,
    CopyHead,
    CopyHeadLost,
    CopyInvalid,
    CopyTruncated,
    first_of_segment,
    parse_line,
    row_line,
    segment_name,
)
from purgekeeper.storage.copy_reading import CopyReader
from purgekeeper.storage.files import atomic_write_at, flocked
from purgekeeper.storage.signed_log import ForeignKey

log = logging.getLogger("purgekeeper.storage.ledger_copy")  # the name its warnings always had


class CopyWriter(CopyReader):
    """One database's copy, written: several processes may append to the same copy (they take
    turns under an flock). Thread-safe."""

    # -- appending -------------------------------------------------------------------------

    def append_committed(self, entry: ledger.LedgerEntry) -> CopyHead:
        """Add a row its caller committed, with every row other threads of this process
        committed and handed in meanwhile (a group commit: threads that accept at once share
        one write and its flushes, instead of queueing for one each). Returns once ``entry``
        is in the copy, flushed. Raises CopyGap when a row before it is missing that no
        thread here handed in (the caller reads it from the database), CopyDiverged as
        ``append``."""
        with self._pending_lock:
            self._pending[entry.seq] = entry
        with self._lock:
            written = self._written
            if written is not None and written.seq >= entry.seq:
                return written  # another thread's write took it along
            with self._pending_lock:
                batch = sorted(self._pending.values(), key=lambda row: row.seq)
            try:
                head = self._append_locked(batch)
            finally:
                with self._pending_lock:
                    done = self._written.seq if self._written is not None else 0
                    for seq in [seq for seq in self._pending if seq <= done]:
                        del self._pending[seq]
            if head.seq < entry.seq:
                raise CopyGap(head.seq)
            return head

    def append(self, entries: Sequence[ledger.LedgerEntry]) -> CopyHead:
        """Add the rows the copy lacks, in order, and flush them to disk before returning.
        Rows the copy holds already are skipped (the one at its head must be the same row).
        Raises CopyGap when the rows start beyond the copy's head + 1, and CopyDiverged when
        they do not extend its chain."""
        with self._lock:
            return self._append_locked(entries)

    def _append_locked(self, entries: Sequence[ledger.LedgerEntry]) -> CopyHead:
        with self._flocked() as directory:
            head = self._head_now()
            for entry in entries:
                if entry.seq == head.seq and entry.row_hash != head.row_hash:
                    raise CopyDiverged(f"row {entry.seq} differs from the copy's")
            self._written = head
            new = _chained_after(head, [entry for entry in entries if entry.seq > head.seq])
            if not new:
                return self._sign_lagging(directory, head)
            if new[0].seq != head.seq + 1:
                raise CopyGap(head.seq)
            if new[0].prev_hash != head.row_hash:
                raise CopyDiverged(f"row {new[0].seq} does not extend the copy's head (seq {head.seq})")
            self._check_tail(directory, head)
            failpoints.hit("ledger.copy")
            if head.seq == 0 and not os.path.lexists(self._head_path):
                # the head before any segment: segments without a head are a lost head
                atomic_write_at(directory, HEAD_FILE, _head_bytes(head, self.segment_rows))
            written = self._signed(head, new, self._write_rows(directory, head, new))
            atomic_write_at(directory, HEAD_FILE, _head_bytes(written, self.segment_rows))
            self._cached = None
            self._written = written
            return written

    def _signed(self, head: CopyHead, rows: Sequence[ledger.LedgerEntry], written: CopyHead) -> CopyHead:
        """The log grown to ``written`` (tiles, then the signed checkpoint) before the head
        says so; LogRefused (the head not written) rather than a fork."""
        if self.log is None:
            return written
        link = None
        if head.tree_size is not None and head.tree_root is not None:
            link = (head.tree_size, base64.b64decode(head.tree_root))
        try:
            tree = self.log.extend(
                copy_seq=head.seq,
                link=link,
                rows=rows,
                rows_between=lambda after, upto: self.rows(after=after, head=head, upto=upto),
            )
        except ForeignKey as exc:  # the copy's durability never waits on a key (another's, or unusable)
            log.warning("the ledger's copy is written, its log not signed: %s", exc)
            # the head keeps the older tree it links (still true of the copy's first rows): a copy
            # whose rows were signed says so, and no key is made for it (receipts.signed_before)
            return dataclasses.replace(written, tree_size=head.tree_size, tree_root=head.tree_root)
        return dataclasses.replace(written, tree_size=tree.size, tree_root=base64.b64encode(tree.root).decode())

    def sign_lagging(self) -> CopyHead:
        """``_sign_lagging`` on the copy as it is now."""
        with self._lock, self._flocked() as directory:
            return self._sign_lagging(directory, self._head_now())

    def _sign_lagging(self, directory: int, head: CopyHead) -> CopyHead:
        """A copy whose head records no tree of its size (written unsigned, or before the log
        existed): the log brought up to it. One that does: the tree's right edge written
        again when a crash lost it (``SignedLog.repair_edge``)."""
        if self.log is None or head.seq == 0:
            return head
        if head.tree_size == head.seq:
            try:
                self.log.repair_edge(lambda after, upto: self.rows(after=after, head=head, upto=upto))
            except ForeignKey as exc:  # another data directory's key: its owner checks its log
                log.warning("the ledger's log is not checked: %s", exc)
            return head
        written = self._signed(head, [], head)
        if written.tree_size == head.tree_size:  # not signed
            return head
        atomic_write_at(directory, HEAD_FILE, _head_bytes(written, self.segment_rows))
        self._cached = None
        self._written = written
        return written

    def _write_rows(self, directory: int, head: CopyHead, rows: Sequence[ledger.LedgerEntry]) -> CopyHead:
        segment, size = head.segment, head.segment_bytes
        for first, group in _by_segment(rows, self.segment_rows):
            fd = os.open(
                segment_name(first), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=directory
            )
            try:
                start = size if first == segment else 0  # a new segment starts empty
                os.ftruncate(fd, start)  # bytes beyond the head are no part of the copy
                os.lseek(fd, start, os.SEEK_SET)
                data = b"".join(row_line(entry) for entry in group)
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            if first != segment:
                os.fsync(directory)  # the new segment's name is durable too
            segment, size = first, start + len(data)
        last = rows[-1]
        return CopyHead(self.database_id, last.seq, last.row_hash, segment, size)

    def _check_tail(self, directory: int, head: CopyHead) -> None:
        """The open segment holds at least the head's bytes, and its last row ends with its
        newline (an ``fstat`` and a one-byte read): an append never writes past damage it has
        not checked (``ftruncate`` would pad a short segment with NUL bytes). Bytes beyond the
        head (a writer that died before its head) are no damage. Raises CopyTruncated."""
        if head.segment_bytes == 0:
            return
        name = segment_name(head.segment)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
        except FileNotFoundError:
            raise CopyTruncated(f"{self.directory.name}/{name} is missing") from None
        try:
            size = os.fstat(fd).st_size
            last = os.pread(fd, 1, head.segment_bytes - 1) if size >= head.segment_bytes else b""
        finally:
            os.close(fd)
        if last != b"\n":
            raise CopyTruncated(
                f"{self.directory.name}/{name} is truncated ({size} bytes, its head says {head.segment_bytes})"
            )

    def check_tail(self) -> None:
        """``_check_tail`` on the copy as it is now (nothing when there is no copy)."""
        if self.head() is None:
            return
        with self._lock, self._flocked() as directory:
            self._check_tail(directory, self._head_now())

    def restore_tail(self, rows: Sequence[ledger.LedgerEntry]) -> CopyHead:
        """Re-write the open segment's lost tail from ``rows``: the database's rows of it, from
        its first seq to the copy's head at least (the database holds every row the copy
        does: the commit comes first). The bytes still there must be the start of those rows'
        lines, and the last of them must be the head's row; else CopyInvalid and nothing is
        written (another history, or damage that is no truncation)."""
        with self._lock, self._flocked() as directory:
            head = self._head_now()
            try:
                self._check_tail(directory, head)
                return head  # sound (another writer re-established it meanwhile): nothing to do
            except CopyTruncated:
                pass
            name = segment_name(head.segment)
            expected = self._tail_bytes(head, rows)
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=directory)
            try:
                kept = os.pread(fd, len(expected), 0)
                if not expected.startswith(kept):
                    raise CopyInvalid(
                        f"{self.directory.name}/{name} holds rows the database does not: it cannot be "
                        "re-established from the database (merge it, or move it aside)"
                    )
                if kept != expected:
                    _write_all_at(fd, expected[len(kept) :], len(kept))
                    os.fsync(fd)
            finally:
                os.close(fd)
            self._sealed = None
            return head

    def _tail_bytes(self, head: CopyHead, rows: Sequence[ledger.LedgerEntry]) -> bytes:
        wanted = [entry for entry in rows if head.segment <= entry.seq <= head.seq]
        whole = [entry.seq for entry in wanted] == list(range(head.segment, head.seq + 1))
        expected = b"".join(row_line(entry) for entry in wanted)
        if not whole or wanted[-1].row_hash != head.row_hash or len(expected) != head.segment_bytes:
            raise CopyInvalid(
                f"{self.directory.name}/{segment_name(head.segment)} cannot be re-established: the database "
                f"does not hold its rows {head.segment} to {head.seq} as the copy's head says"
            )
        return expected

    def repair(self) -> tuple[CopyHead, bool]:
        """Rebuild head.json from the segments when it is missing, cannot be read, or claims
        what they do not hold (a row past them, another hash at its seq: the segments alone
        say it, every row verified from the first, up to the last whole one). A head whose
        open segment was cut short is left for the database to re-establish (``restore_tail``),
        and one the segments bear out is left as it is. Returns (the head, whether it was
        written). Raises CopyInvalid when a segment does not verify (the head is not guessed
        past it). It walks the whole copy: an operator's repair, never a request's."""
        with self._lock, self._flocked() as directory:
            try:
                found = self._head_now()
                self._check_tail(directory, found)
            except CopyHeadLost:
                found = None
            except CopyTruncated:
                return self._head_now(), False
            if found is not None and self._holds(found):
                return found, False
            head = self.rebuilt_head()
            atomic_write_at(directory, HEAD_FILE, _head_bytes(head, self.segment_rows))
            self._cached = self._headless = None
            self._written = head
            return head, True

    def _holds(self, head: CopyHead) -> bool:
        """Whether the segments bear the head out: its row is there, with its hash, ending at
        its open segment's length."""
        if head.seq == 0:
            return head.row_hash == ledger.GENESIS_HASH
        lines = self._whole_lines(head.segment) or []
        upto = head.seq - head.segment + 1
        if not 0 < upto <= len(lines) or sum(len(line) + 1 for line in lines[:upto]) != head.segment_bytes:
            return False
        return (
            parse_line(lines[upto - 1], f"{self.directory.name}/{segment_name(head.segment)}").row_hash == head.row_hash
        )

    @contextlib.contextmanager
    def writers_kept_out(self) -> Iterator[None]:
        """No writer of this process or another appends (nor signs) while the block runs: an
        operator's act on the log, such as a key rotation."""
        with self._lock, self._flocked():
            yield

    @contextlib.contextmanager
    def _flocked(self) -> Iterator[int]:
        """The copy's directory (created if missing), open, with every other writer kept out."""
        self.directory.mkdir(parents=True, exist_ok=True)
        directory = os.open(self.directory, _DIRECTORY)
        try:
            with flocked(LOCK_FILE, dir_fd=directory):
                yield directory
        finally:
            os.close(directory)

    def move_aside(self) -> Path:
        """Rename the copy to ``<name>.diverged-<UTC time>`` (kept, never deleted: an
        operator may want it), so a new copy can be written from the database."""
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
        aside = self.directory.with_name(f"{self.directory.name}.diverged-{stamp}")
        with self._lock, self._flocked():
            os.rename(self.directory, aside)
            self._cached = self._written = None
        return aside


def _chained_after(head: CopyHead, rows: Sequence[ledger.LedgerEntry]) -> list[ledger.LedgerEntry]:
    """The rows that follow on from the head without a gap (the others wait for theirs)."""
    taken: list[ledger.LedgerEntry] = []
    for entry in rows:
        if entry.seq != (taken[-1].seq if taken else head.seq) + 1:
            break
        taken.append(entry)
    return taken or list(rows[:1])


def _by_segment(
    rows: Sequence[ledger.LedgerEntry], segment_rows: int
) -> Iterator[tuple[int, list[ledger.LedgerEntry]]]:
    group: list[ledger.LedgerEntry] = []
    for entry in rows:
        if group and first_of_segment(entry.seq, segment_rows) != first_of_segment(group[0].seq, segment_rows):
            yield first_of_segment(group[0].seq, segment_rows), group
            group = []
        group.append(entry)
    if group:
        yield first_of_segment(group[0].seq, segment_rows), group


def _head_bytes(head: CopyHead, segment_rows: int) -> bytes:
    data: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "database_id": head.database_id,
        "seq": head.seq,
        "row_hash": head.row_hash,
        "segment": head.segment,
        "segment_bytes": head.segment_bytes,
        "segment_rows": segment_rows,
        "written_at": ledger.utc_text(dt.datetime.now(dt.UTC)),
    }
    if head.tree_size is not None:
        data.update(tree_size=head.tree_size, tree_root=head.tree_root)
    return (ledger.canonical_json(data) + "\n").encode()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_all_at(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
