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

Here: the segment size, ``LedgerCopy`` and the merge sources a path names. What a copy is
made of (its errors, its head, a row's line) is in ``copy_layout``, its reading in
``copy_reading``, its writing in ``copy_writing``, keeping it up to the database in
``copy_sync`` and the version 2 export in ``copy_export``. Every name is importable from here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from purgekeeper.schema import ledger
from purgekeeper.storage import checkpoint
from purgekeeper.storage.copy_export import _is_export_header, export_lines, export_source, write_export
from purgekeeper.storage.copy_layout import (
    COPY_FAILED,
    FORMAT,
    HEAD_FILE,
    LOCK_FILE,
    MAX_PROBLEMS,
    SUFFIX,
    VERSION,
    CopyDiverged,
    CopyGap,
    CopyHead,
    CopyHeadLost,
    CopyInvalid,
    CopyTruncated,
    _is_segment_name,
    first_of_segment,
    parse_line,
    row_line,
    segment_name,
)
from purgekeeper.storage.copy_reading import CopyReader
from purgekeeper.storage.copy_sync import (
    CATCH_UP_BATCH,
    BehindLegacyCheckpoint,
    catch_up,
    reconcile,
    repair,
    repair_log,
    restore_tail,
)
from purgekeeper.storage.copy_writing import CopyWriter

SEGMENT_ROWS = 4096


def segment_of(seq: int) -> int:
    """The first seq of the segment that holds ``seq``."""
    return first_of_segment(seq, SEGMENT_ROWS)


class LedgerCopy(CopyWriter):
    """One database's copy in one checkpoint directory. Thread-safe; several processes may
    append to the same copy (they take turns under an flock)."""

    @property
    def segment_rows(self) -> int:
        return SEGMENT_ROWS  # this module's, read at every use (a test makes segments small)


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
        {p.name for p in directory.glob(f"*{SUFFIX}") if p.is_dir() and p != own}
        | {p.name for p in directory.glob("*-*.json")}
    )
    shown = ", ".join(others[:5]) or "none"
    reason = f"; skipped: {skipped[0]}" if skipped else ""
    empty = f" (this database's copy holds no rows yet: {own.name})" if own.is_dir() else ""
    raise checkpoint.CheckpointInvalid(
        f"{directory.name}: holds no ledger of this database ({database_id}){empty}{reason}; "
        f"of other databases: {shown} (name one to merge it, with --from-other-database)"
    )


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


__all__ = [
    "CATCH_UP_BATCH",
    "COPY_FAILED",
    "FORMAT",
    "HEAD_FILE",
    "LOCK_FILE",
    "MAX_PROBLEMS",
    "SEGMENT_ROWS",
    "SUFFIX",
    "VERSION",
    "BehindLegacyCheckpoint",
    "CopyDiverged",
    "CopyGap",
    "CopyHead",
    "CopyHeadLost",
    "CopyInvalid",
    "CopyReader",
    "CopyTruncated",
    "CopyWriter",
    "LedgerCopy",
    "catch_up",
    "export_lines",
    "export_source",
    "first_of_segment",
    "open_source",
    "parse_line",
    "rebuilt_source",
    "reconcile",
    "repair",
    "repair_log",
    "restore_tail",
    "row_line",
    "segment_name",
    "segment_of",
    "source",
    "write_export",
]
