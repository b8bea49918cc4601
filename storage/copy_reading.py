"""Reading a ledger copy (``purgekeeper.storage.ledger_copy.LedgerCopy`` extends it to write one): its
head, read again only when head.json changed; its rows, from the segment that holds the
first one asked for; the chain verified from any row; and the head the segments alone give
(``rebuilt_head``).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from purgekeeper.schema import ledger
from purgekeeper.storage.copy_layout import (
    FORMAT,
    HEAD_FILE,
    MAX_PROBLEMS,
    SUFFIX,
    VERSION,
    CopyHead,
    CopyHeadLost,
    CopyInvalid,
    _count,
    _identity_of,
    _is_segment_name,
    first_of_segment,
    parse_line,
    segment_name,
)
from purgekeeper.storage.files import reason_of
from purgekeeper.storage.signed_log import SignedLog


class CopyReader:
    """One database's copy in one checkpoint directory, as its readers find it. Thread-safe."""

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

    @property
    def segment_rows(self) -> int:
        """The rows a segment holds: ``purgekeeper.storage.ledger_copy.SEGMENT_ROWS``, read at every use
        (``LedgerCopy`` says it)."""
        raise NotImplementedError

    def _segment_of(self, seq: int) -> int:
        """The first seq of the segment that holds ``seq``."""
        return first_of_segment(seq, self.segment_rows)

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
            if len(lines) != self.segment_rows:
                break
            first += self.segment_rows
        if lines is not None and os.path.lexists(self.directory / segment_name(first + self.segment_rows)):
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
        if len(lines) > self.segment_rows:
            raise CopyInvalid(f"{self.directory.name}/{name} holds more than {self.segment_rows} rows")
        return lines

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
        first = self._segment_of(after + 1)
        while first <= last:
            yield from self._segment_rows(first, head, after=after, upto=last)
            first += self.segment_rows

    def row_hashes(self, *, after: int, upto: int) -> dict[int, str]:
        """``{seq: row_hash}`` of the rows ``after < seq <= upto`` (what the audit compares
        with the database), each line parsed as JSON only."""
        head = self.head()
        last = min(head.seq if head is not None else 0, upto)
        found: dict[int, str] = {}
        first = self._segment_of(after + 1)
        while head is not None and first <= last:
            where = f"{self.directory.name}/{segment_name(first)}"
            for seq, line in self._segment_lines(first, head, after=after, upto=last):
                try:
                    found[seq] = str(json.loads(line)["row_hash"])
                except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise CopyInvalid(f"{where}: a row is malformed ({type(exc).__name__})") from None
            first += self.segment_rows
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
        expected = min(self.segment_rows, head.seq - first + 1)
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
