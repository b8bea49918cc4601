"""What a ledger copy is made of, below ``purgekeeper.storage.ledger_copy`` (which names all of it, and
whose docstring gives the format): its file names, its errors, its head, and a row as one
line of a segment.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from purgekeeper.schema import ledger
from purgekeeper.storage.signed_log import LogRefused

FORMAT = "purgekeeper-ledger-copy"
VERSION = 2
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


def first_of_segment(seq: int, segment_rows: int) -> int:
    """The first seq of the segment that holds ``seq``, a segment holding ``segment_rows`` rows."""
    return (seq - 1) // segment_rows * segment_rows + 1


def _identity_of(info: os.stat_result) -> tuple[int, int, int]:
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _is_segment_name(name: str) -> bool:
    return name.startswith("segment-") and name.endswith(".jsonl")


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("not a count")
    return value
