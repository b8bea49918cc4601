"""The ledger outside the database: an append-only copy in the checkpoint directory, written
at every acceptance, after its commit and before the call returns (format version 2).

Layout, for the database whose random id is ``D``, in the checkpoint directory::

    D.ledger/
        head.json                      the head: seq, row_hash, and where the open segment ends
        segment-000000000001.jsonl     rows 1 .. 4096, one row per line
        segment-000000004097.jsonl     rows 4097 .. 8192
        ...
        .lock                          serialises the writers of every process (flock)

- A **row** is one line: the canonical JSON (sorted keys, compact separators, UTC timestamps
  with microseconds and a ``Z``) of the row's hashed fields with ``prev_hash`` and
  ``row_hash``, exactly as a version 1 checkpoint file holds it, then ``\\n``.
- A **segment** holds ``SEGMENT_ROWS`` rows, seq ``k * SEGMENT_ROWS + 1`` onwards, and is
  named after its first seq. Only the last one (open) ever grows; once full it is sealed and
  never written again. An append writes its lines at the end of the open segment and
  fsyncs it, so writing costs the same at a million rows as at ten, and no file is ever
  rewritten whole: rsync and object-store backups copy only what is new.
- **head.json** (small; replaced atomically and fsynced after every append) holds
  ``format``, ``version``, ``database_id``, ``seq``, ``row_hash``, ``segment`` (the first seq
  of the open segment), ``segment_bytes`` (the open segment's length at ``seq``),
  ``segment_rows`` and ``written_at``. Bytes of the open segment beyond ``segment_bytes`` (a
  writer that died between its segment and its head) are not part of the copy; the next
  writer truncates them and appends the rows again from the database. The first writer
  writes an empty head before the first segment, so a head.json is always there while a
  segment is: **segments without a head are damage, not absence** (``CopyHeadLost``; the
  gate stays closed: they may hold purges a restored database lacks). ``repair`` rebuilds
  the head from the segments alone; a merge of the directory reads them without it.
- **A short open segment** (fewer bytes than ``segment_bytes``, or a last row without its
  newline) is never written past: ``ftruncate`` would pad it with NUL bytes. An append
  raises ``CopyTruncated``; ``catch_up`` (an acceptance's, the scheduler's sweep) then
  re-establishes the tail from the database's rows of that segment (``restore_tail``: the
  bytes still there must be the start of those rows' lines), or refuses.
- **Every row chains** to the row before it through ``prev_hash`` (the first to 64 zeros),
  across segments, and its ``row_hash`` is recomputed on reading, so a changed byte, a
  truncated segment, a missing segment or a head that is not the last row is found.
- **Ready for a Merkle tree** (RFC 6962, the C2SP tlog-tiles layout): rows are the leaves,
  numbered ``seq - 1``; a segment is 16 full tiles of 256 leaves. A later version can add
  leaf hashes ``SHA-256(0x00 || line without its newline)``, a tree head in head.json
  (``tree_size``, ``root_hash``) and tile files beside the segments; a reader of version 2
  ignores the fields and files it does not know.

The commit comes first, then the copy: a row may be outside and not yet in a database that
was later restored (the gate then closes reads until a merge), never the reverse.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import fcntl
import itertools
import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schema import ledger
from schema.db import Database
from storage import checkpoint, failpoints
from storage.files import atomic_write, atomic_write_at, reason_of
from storage.signed_log import ForeignKey, LogRefused, SignedLog

log = logging.getLogger(__name__)

FORMAT = "purgekeeper-ledger-copy"
VERSION = 2
SEGMENT_ROWS = 4096
SUFFIX = ".ledger"
HEAD_FILE = "head.json"
LOCK_FILE = ".lock"
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
MAX_PROBLEMS = ledger.MAX_PROBLEMS


class CopyInvalid(ValueError):
    """The copy cannot be trusted: a damaged head, a missing or truncated segment, a row that
    does not verify. The message says where (file names, seqs), never content."""


class CopyHeadLost(CopyInvalid):
    """head.json is missing or cannot be read while segments hold rows: the copy is damaged,
    not absent (its rows may be purges a restored database lacks). ``repair`` rebuilds the
    head from the segments; a merge of the directory reads the segments alone."""


class CopyTruncated(CopyInvalid):
    """The open segment is shorter than its head says (or its last row lost its newline):
    nothing is written past it until its tail is re-established from the database's rows
    (``restore_tail``)."""


class CopyGap(Exception):
    """The rows given do not start right after the copy's head: the rows in between are
    needed first (``after`` is the copy's head seq)."""

    def __init__(self, after: int) -> None:
        self.after = after
        super().__init__(f"the copy ends at seq {after}")


class CopyDiverged(Exception):
    """The rows given do not extend the copy's chain: the database is not the one the copy
    was written from, or it was restored behind it."""


# What writing the copy can fail with (the callers turn it into their own error)
COPY_FAILED: tuple[type[Exception], ...] = (OSError, CopyInvalid, CopyDiverged, LogRefused)


@dataclass(frozen=True)
class CopyHead:
    database_id: str
    seq: int
    row_hash: str
    segment: int  # the first seq of the open segment (0 while the copy is empty)
    segment_bytes: int
    tree_size: int | None = None  # the signed log's tree as this head's writer left it
    tree_root: str | None = None  # its root, base64

    @classmethod
    def empty(cls, database_id: str) -> CopyHead:
        return cls(database_id, 0, ledger.GENESIS_HASH, 0, 0)


def segment_of(seq: int) -> int:
    """The first seq of the segment that holds ``seq``."""
    return (seq - 1) // SEGMENT_ROWS * SEGMENT_ROWS + 1


def segment_name(first: int) -> str:
    return f"segment-{first:012d}.jsonl"


def row_line(entry: ledger.LedgerEntry) -> bytes:
    """A row as one line of a segment (or of a version 2 export)."""
    fields = entry.hashed_fields()
    fields["accepted_at"] = ledger.utc_text(entry.accepted_at)
    return (ledger.canonical_json({**fields, "prev_hash": entry.prev_hash, "row_hash": entry.row_hash}) + "\n").encode()


def parse_line(line: bytes, where: str) -> ledger.LedgerEntry:
    try:
        return ledger.LedgerEntry.from_checkpoint(json.loads(line.decode("utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CopyInvalid(f"{where}: a row is malformed ({type(exc).__name__})") from None


class LedgerCopy:
    """One database's copy in one checkpoint directory. Thread-safe; several processes may
    append to the same copy (they take turns under an flock)."""

    def __init__(
        self, checkpoint_dir: Path, database_id: str, *, directory: Path | None = None, log: SignedLog | None = None
    ) -> None:
        self.checkpoint_dir = Path(checkpoint_dir)
        self.database_id = database_id
        self.directory = directory or self.checkpoint_dir / f"{database_id}{SUFFIX}"
        self.log = log  # the signed Merkle log grown with every append (None: not signed)
        self._head_path = os.fspath(self.directory / HEAD_FILE)  # stat()ed on every content call
        self._lock = threading.Lock()
        self._cached: tuple[tuple[int, int, int], CopyHead] | None = None
        self._pending_lock = threading.Lock()
        self._pending: dict[int, ledger.LedgerEntry] = {}  # committed rows handed in, not yet written
        self._written: CopyHead | None = None  # the head as this process last found or wrote it
        self._sealed: tuple[int, tuple[int, int, int], list[bytes]] | None = None  # see _segment_lines
        self._headless: tuple[tuple[int, int, int], bool] | None = None  # see _absent_or_headless

    # -- reading the head ------------------------------------------------------------------

    def exists(self) -> bool:
        return (self.directory / HEAD_FILE).is_file()

    def head(self) -> CopyHead | None:
        """The head, or None while there is no copy. One ``stat`` of head.json; the file is
        read again only when it changed since the last call. A head.json that is missing
        while segments are there raises CopyHeadLost; any other file-system error of the
        copy, CopyInvalid (its file name and the system's reason, never a path)."""
        try:
            info = os.stat(self._head_path)
        except FileNotFoundError:
            self._absent_or_headless()
            return None
        except OSError as exc:
            raise CopyHeadLost(f"{self.directory.name}/{HEAD_FILE} cannot be read ({reason_of(exc)})") from None
        key = (info.st_ino, info.st_size, info.st_mtime_ns)
        cached = self._cached
        if cached is not None and cached[0] == key:
            return cached[1]
        head = self._read_head()
        self._cached = (key, head)
        return head

    def _absent_or_headless(self) -> None:
        """head.json is missing: the copy is absent, unless a segment is there (then its head
        is lost). The directory is listed again only when it changed (its inode, size and
        mtime; one ``stat`` otherwise), and only while head.json is missing."""
        try:
            key = _identity_of(os.stat(self.directory))
            known = self._headless
            if known is None or known[0] != key:
                found = any(_is_segment_name(name) for name in os.listdir(self.directory))
                known = self._headless = (key, found)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise CopyHeadLost(f"{self.directory.name} cannot be read ({reason_of(exc)})") from None
        if known[1] and not os.path.lexists(self._head_path):  # a first writer's head came meanwhile
            raise CopyHeadLost(
                f"{self.directory.name}/{HEAD_FILE} is missing while its segments hold rows: "
                "run purgectl ledger repair, or merge the checkpoint directory"
            )

    def _head_now(self) -> CopyHead:
        """The head read afresh (a writer, under the flock), or the empty head of no copy."""
        try:
            os.stat(self._head_path)
        except FileNotFoundError:
            self._headless = None
            self._absent_or_headless()
            return CopyHead.empty(self.database_id)
        except OSError as exc:
            raise CopyHeadLost(f"{self.directory.name}/{HEAD_FILE} cannot be read ({reason_of(exc)})") from None
        return self._read_head()

    def _read_head(self) -> CopyHead:
        try:
            data = json.loads((self.directory / HEAD_FILE).read_bytes().decode("utf-8"))
        except OSError as exc:
            raise CopyHeadLost(f"{self.directory.name}/{HEAD_FILE} cannot be read ({reason_of(exc)})") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CopyHeadLost(f"{self.directory.name}/{HEAD_FILE} cannot be read ({type(exc).__name__})") from None
        try:
            if data["format"] != FORMAT or data["version"] != VERSION:
                raise CopyInvalid(f"{self.directory.name}/{HEAD_FILE}: not a version {VERSION} ledger copy")
            head = CopyHead(
                str(data["database_id"]),
                _count(data["seq"]),
                str(data["row_hash"]),
                _count(data["segment"]),
                _count(data["segment_bytes"]),
                _count(data["tree_size"]) if "tree_size" in data else None,
                str(data["tree_root"]) if "tree_root" in data else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, CopyInvalid):
                raise
            raise CopyInvalid(f"{self.directory.name}/{HEAD_FILE} is malformed ({type(exc).__name__})") from None
        if head.database_id != self.database_id:
            raise CopyInvalid(f"{self.directory.name}/{HEAD_FILE} belongs to database {head.database_id[:64]}")
        return head

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
                atomic_write_at(directory, HEAD_FILE, _head_bytes(head))
            written = self._signed(head, new, self._write_rows(directory, head, new))
            atomic_write_at(directory, HEAD_FILE, _head_bytes(written))
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
        except ForeignKey as exc:  # the copy's durability never waits on a key: its owner signs later
            log.warning("the ledger's copy is written, its log not signed: %s", exc)
            return dataclasses.replace(written, tree_size=None, tree_root=None)
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
            self.log.repair_edge(lambda after, upto: self.rows(after=after, head=head, upto=upto))
            return head
        written = self._signed(head, [], head)
        if written.tree_size is None:
            return head
        atomic_write_at(directory, HEAD_FILE, _head_bytes(written))
        self._cached = None
        self._written = written
        return written

    def _write_rows(self, directory: int, head: CopyHead, rows: Sequence[ledger.LedgerEntry]) -> CopyHead:
        segment, size = head.segment, head.segment_bytes
        for first, group in _by_segment(rows):
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
            atomic_write_at(directory, HEAD_FILE, _head_bytes(head))
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

    def rebuilt_head(self) -> CopyHead:
        """The head the segments alone give, without head.json: their rows walked from the
        first, each checked (seq, link, hash), to the last whole row. A partial line at the
        end of the last segment is no part of it; one anywhere else, or a row that does not
        verify, raises CopyInvalid."""
        seq, prev, segment, size, first = 0, ledger.GENESIS_HASH, 0, 0, 1
        while True:
            lines = self._whole_lines(first)
            if lines is None:
                break
            for line in lines:
                entry = parse_line(line, f"{self.directory.name}/{segment_name(first)}")
                if (entry.seq, entry.prev_hash) != (seq + 1, prev) or entry.expected_hash() != entry.row_hash:
                    raise CopyInvalid(
                        f"{self.directory.name}/{segment_name(first)}: row {seq + 1} does not verify; "
                        "the head cannot be rebuilt past it"
                    )
                seq, prev = entry.seq, entry.row_hash
            if lines:
                segment, size = first, sum(len(line) + 1 for line in lines)
            if len(lines) != SEGMENT_ROWS:
                break
            first += SEGMENT_ROWS
        if lines is not None and os.path.lexists(self.directory / segment_name(first + SEGMENT_ROWS)):
            raise CopyInvalid(f"{self.directory.name}/{segment_name(first)} is truncated")
        return CopyHead(self.database_id, seq, prev, segment, size)

    def _whole_lines(self, first: int) -> list[bytes] | None:
        """The whole lines of segment ``first`` (None when it is not there)."""
        name = segment_name(first)
        try:
            data = (self.directory / name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CopyInvalid(f"{self.directory.name}/{name} cannot be read ({reason_of(exc)})") from None
        lines = data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]
        if len(lines) > SEGMENT_ROWS:
            raise CopyInvalid(f"{self.directory.name}/{name} holds more than {SEGMENT_ROWS} rows")
        return lines

    @contextlib.contextmanager
    def _flocked(self) -> Iterator[int]:
        """The copy's directory (created if missing), open, with every other writer kept out."""
        self.directory.mkdir(parents=True, exist_ok=True)
        directory = os.open(self.directory, _DIRECTORY)
        try:
            lock = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=directory)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
                yield directory
            finally:
                os.close(lock)  # releases the flock
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

    # -- reading the rows ------------------------------------------------------------------

    def rows(
        self, *, after: int = 0, head: CopyHead | None = None, upto: int | None = None
    ) -> Iterator[ledger.LedgerEntry]:
        """The rows after seq ``after``, up to ``upto`` (default: the head), reading from the
        segment that holds ``after + 1`` (the rows before it are never parsed, nor those
        after ``upto``)."""
        head = head or self.head()
        last = head.seq if head is not None else 0
        if upto is not None:
            last = min(last, upto)
        if head is None or last <= after:
            return
        first = segment_of(after + 1)
        while first <= last:
            yield from self._segment_rows(first, head, after=after, upto=last)
            first += SEGMENT_ROWS

    def row_hashes(self, *, after: int, upto: int) -> dict[int, str]:
        """``{seq: row_hash}`` of the rows ``after < seq <= upto`` (what the audit compares
        with the database), each line parsed as JSON only."""
        head = self.head()
        last = min(head.seq if head is not None else 0, upto)
        found: dict[int, str] = {}
        first = segment_of(after + 1)
        while head is not None and first <= last:
            where = f"{self.directory.name}/{segment_name(first)}"
            for seq, line in self._segment_lines(first, head, after=after, upto=last):
                try:
                    found[seq] = str(json.loads(line)["row_hash"])
                except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise CopyInvalid(f"{where}: a row is malformed ({type(exc).__name__})") from None
            first += SEGMENT_ROWS
        return found

    def row(self, seq: int, *, head: CopyHead | None = None) -> ledger.LedgerEntry | None:
        """Row ``seq`` (reading its segment only), or None beyond the head."""
        return next(self.rows(after=seq - 1, head=head, upto=seq), None) if seq >= 1 else None

    def _segment_rows(
        self, first: int, head: CopyHead, *, after: int = 0, upto: int | None = None
    ) -> Iterator[ledger.LedgerEntry]:
        where = f"{self.directory.name}/{segment_name(first)}"
        for _seq, line in self._segment_lines(first, head, after=after, upto=upto):
            yield parse_line(line, where)

    def _segment_lines(
        self, first: int, head: CopyHead, *, after: int = 0, upto: int | None = None
    ) -> Iterator[tuple[int, bytes]]:
        """(seq, line) of the segment's rows ``after < seq <= upto``, its whole length
        checked. A sealed segment read last is kept, with its file's identity (inode, size,
        mtime; a ``stat`` each time), for the next read of it: the audit walks a segment 500
        rows at a time."""
        name = segment_name(first)
        limit = head.segment_bytes if first == head.segment else None
        lines = self._sealed_lines(first, name) if limit is None else None
        if lines is None:
            try:
                with (self.directory / name).open("rb") as handle:
                    identity = _identity_of(os.fstat(handle.fileno()))  # before the read: a later change shows
                    data = handle.read(limit) if limit is not None else handle.read()
            except FileNotFoundError:
                raise CopyInvalid(f"{self.directory.name}/{name} is missing") from None
            except OSError as exc:
                raise CopyInvalid(f"{self.directory.name}/{name} cannot be read ({exc.strerror})") from None
            if (limit is not None and len(data) < limit) or not data.endswith(b"\n"):
                raise CopyInvalid(f"{self.directory.name}/{name} is truncated")
            lines = data.split(b"\n")[:-1]
            if limit is None:
                self._sealed = (first, identity, lines)
        expected = min(SEGMENT_ROWS, head.seq - first + 1)
        if len(lines) != expected:
            raise CopyInvalid(f"{self.directory.name}/{name} holds {len(lines)} rows, not {expected}")
        start = max(after - first + 1, 0)  # line i holds seq first + i
        stop = len(lines) if upto is None else max(min(upto - first + 1, len(lines)), 0)
        for index in range(start, stop):
            yield first + index, lines[index]

    def _sealed_lines(self, first: int, name: str) -> list[bytes] | None:
        kept = self._sealed
        if kept is None or kept[0] != first:
            return None
        try:
            identity = _identity_of(os.stat(self.directory / name))
        except OSError:
            return None  # read it, and say what is wrong with it
        return kept[2] if kept[1] == identity else None

    def verify(self, *, after: int = 0, after_hash: str = ledger.GENESIS_HASH) -> tuple[int, str, list[str]]:
        """Walk the chain from seq ``after`` (whose row_hash is ``after_hash``) to the head:
        (the last seq, its row_hash, the problems found, at most ``MAX_PROBLEMS``)."""
        try:
            head = self.head()
        except CopyInvalid as exc:
            return after, after_hash, [str(exc)]
        if head is None:
            return 0, ledger.GENESIS_HASH, []
        problems: list[str] = []
        seq, prev = after, after_hash
        try:
            for entry in self.rows(after=after, head=head):
                if entry.seq != seq + 1:
                    problems.append(f"gap in the copy: expected seq {seq + 1}, found {entry.seq}")
                if entry.prev_hash != prev:
                    problems.append(f"broken link in the copy at seq {entry.seq}")
                if entry.expected_hash() != entry.row_hash:
                    problems.append(f"tampered row in the copy at seq {entry.seq} (purge {entry.purge_id})")
                seq, prev = entry.seq, entry.row_hash
                if len(problems) >= MAX_PROBLEMS:
                    break
        except CopyInvalid as exc:
            problems.append(str(exc))
        if not problems and (seq, prev) != (head.seq, head.row_hash):
            problems.append(f"the copy's head (seq {head.seq}) is not its last row (seq {seq})")
        return seq, prev, problems[:MAX_PROBLEMS]


def _identity_of(info: os.stat_result) -> tuple[int, int, int]:
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _is_segment_name(name: str) -> bool:
    return name.startswith("segment-") and name.endswith(".jsonl")


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


def export_lines(
    database_id: str, head_seq: int, head_hash: str, entries: Iterable[ledger.LedgerEntry]
) -> Iterator[bytes]:
    """A version 2 export: a header line, then one row per line (a whole ledger in one
    self-contained file that never has to be held in memory)."""
    header = {
        "format": checkpoint.FORMAT,
        "version": VERSION,
        "database_id": database_id,
        "head": {"seq": head_seq, "hash": head_hash},
        "written_at": ledger.utc_text(dt.datetime.now(dt.UTC)),
    }
    yield (ledger.canonical_json(header) + "\n").encode()
    for entry in entries:
        yield row_line(entry)


def open_source(path: Path, database_id: str) -> checkpoint.Source:
    """What ``path`` names: a version 1 file, a version 2 export, a ledger copy (a directory
    with a head.json) or a checkpoint directory (this database's copy in it, else its newest
    version 1 file that verifies). Raises checkpoint.CheckpointInvalid with the reason."""
    path = Path(path)
    if path.is_dir():
        if (path / HEAD_FILE).is_file():
            return source(path)
        if path.name.endswith(SUFFIX) and _has_segments(path):
            return rebuilt_source(path, path.name.removesuffix(SUFFIX))
        return _in_directory(path, database_id)
    try:
        with path.open("rb") as handle:
            first = handle.readline(4096)
    except FileNotFoundError:
        raise checkpoint.CheckpointInvalid(f"{path.name}: no such file") from None
    except OSError as exc:
        raise checkpoint.CheckpointInvalid(f"{path.name}: cannot be read ({exc.strerror})") from None
    if _is_export_header(first):
        return export_source(path)
    return checkpoint.from_file(checkpoint.read(path))


def _in_directory(directory: Path, database_id: str) -> checkpoint.Source:
    own = directory / f"{database_id}{SUFFIX}"
    if (own / HEAD_FILE).is_file():
        return source(own)
    if _has_segments(own):
        return rebuilt_source(own, database_id)
    newest_file, skipped = checkpoint.newest(directory, database_id)
    if newest_file is not None:
        return checkpoint.from_file(newest_file)
    others = sorted(
        {p.name for p in directory.glob(f"*{SUFFIX}") if p.is_dir()} | {p.name for p in directory.glob("*-*.json")}
    )
    shown = ", ".join(others[:5]) or "none"
    reason = f"; skipped: {skipped[0]}" if skipped else ""
    raise checkpoint.CheckpointInvalid(
        f"{directory.name}: holds no ledger of this database ({database_id}){reason}; "
        f"of other databases: {shown} (name one to merge it, with --from-other-database)"
    )


def _is_export_header(line: bytes) -> bool:
    """A version 2 export begins with a header line of its own; a version 1 file is one JSON
    document that holds its rows."""
    if not line.endswith(b"\n"):
        return False
    try:
        header = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(header, dict) and header.get("version") == VERSION and "rows" not in header


def source(directory: Path) -> checkpoint.Source:
    """A ledger copy as a merge source: its database id from its head, rows read from the
    segment that holds the first one asked for."""
    label = directory.name
    try:
        data = json.loads((directory / HEAD_FILE).read_bytes().decode("utf-8"))
        database_id = str(data["database_id"])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise checkpoint.CheckpointInvalid(f"{label}/{HEAD_FILE} cannot be read ({type(exc).__name__})") from None
    copy = LedgerCopy(directory.parent, database_id, directory=directory)
    try:
        head = copy.head()
    except CopyInvalid as exc:
        raise checkpoint.CheckpointInvalid(str(exc)) from None
    assert head is not None
    return _copy_source(copy, head)


def rebuilt_source(directory: Path, database_id: str) -> checkpoint.Source:
    """A copy whose head.json is lost (or cannot be read) as a merge source: its head
    rebuilt, in memory, from its segments (nothing is written)."""
    copy = LedgerCopy(directory.parent, database_id, directory=directory)
    try:
        head = copy.rebuilt_head()
    except CopyInvalid as exc:
        raise checkpoint.CheckpointInvalid(str(exc)) from None
    return _copy_source(copy, head)


def _copy_source(copy: LedgerCopy, head: CopyHead) -> checkpoint.Source:
    def rows(after: int) -> Iterator[ledger.LedgerEntry]:
        try:
            yield from copy.rows(after=after, head=head)
        except CopyInvalid as exc:
            raise checkpoint.CheckpointInvalid(str(exc)) from None

    directory = copy.directory
    return checkpoint.Source(directory.name, directory, copy.database_id, head.seq, head.row_hash, rows)


def _has_segments(directory: Path) -> bool:
    try:
        return any(_is_segment_name(name) for name in os.listdir(directory))
    except OSError:
        return False


def export_source(path: Path) -> checkpoint.Source:
    """A version 2 export as a merge source. Its header says the head; the rows are read
    line by line (line n + 1 holds seq n), parsed only from the first one asked for."""
    label = path.name
    with path.open("rb") as handle:
        try:
            header = json.loads(handle.readline())
            database_id, head = str(header["database_id"]), header["head"]
            seq, head_hash = _count(head["seq"]), str(head["hash"])
            if header.get("format") != checkpoint.FORMAT:
                raise ValueError("not a ledger checkpoint")
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise checkpoint.CheckpointInvalid(f"{label}: its header is malformed") from None

    def rows(after: int) -> Iterator[ledger.LedgerEntry]:
        with path.open("rb") as handle:
            handle.readline()
            for number, line in enumerate(handle, start=1):
                if number <= after:
                    continue
                if not line.endswith(b"\n"):
                    raise checkpoint.CheckpointInvalid(f"{label}: truncated at row {number}")
                try:
                    yield parse_line(line, label)
                except CopyInvalid as exc:
                    raise checkpoint.CheckpointInvalid(str(exc)) from None

    return checkpoint.Source(label, path, database_id, seq, head_hash, rows)


def write_export(db: Database, path: Path) -> checkpoint.Checkpoint:
    """The whole ledger as one version 2 export at ``path``, written atomically from one
    snapshot and streamed (never held in memory whole)."""
    with db.read(snapshot=True) as conn:
        head = ledger.read_head(conn)
        lines = export_lines(head.database_id, head.seq, head.head_hash, ledger.entries(conn, upto=head.seq))
        failpoints.hit("checkpoint.write")
        atomic_write(path, lines)
    return checkpoint.Checkpoint(path, head.database_id, head.seq, head.head_hash)


def _chained_after(head: CopyHead, rows: Sequence[ledger.LedgerEntry]) -> list[ledger.LedgerEntry]:
    """The rows that follow on from the head without a gap (the others wait for theirs)."""
    taken: list[ledger.LedgerEntry] = []
    for entry in rows:
        if entry.seq != (taken[-1].seq if taken else head.seq) + 1:
            break
        taken.append(entry)
    return taken or list(rows[:1])


def _by_segment(rows: Sequence[ledger.LedgerEntry]) -> Iterator[tuple[int, list[ledger.LedgerEntry]]]:
    group: list[ledger.LedgerEntry] = []
    for entry in rows:
        if group and segment_of(entry.seq) != segment_of(group[0].seq):
            yield segment_of(group[0].seq), group
            group = []
        group.append(entry)
    if group:
        yield segment_of(group[0].seq), group


def _head_bytes(head: CopyHead) -> bytes:
    data: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "database_id": head.database_id,
        "seq": head.seq,
        "row_hash": head.row_hash,
        "segment": head.segment,
        "segment_bytes": head.segment_bytes,
        "segment_rows": SEGMENT_ROWS,
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


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("not a count")
    return value
