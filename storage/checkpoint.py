"""Ledger checkpoints of format version 1 (one JSON document of every ledger row, never
content, and the head), and what a merge reads (``Source``).

Earlier versions wrote these into the checkpoint directory after each sweep, named after the
database's random id (``<database id>-<seq, 12 digits>.json``). The ledger's copy
(``purgekeeper.storage.ledger_copy``, version 2) replaced them; they are still read: by the gate until a
database's first copy exists, and by a merge. ``write`` makes one (tests, and hosts that
still want the old format).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from purgekeeper.schema import ledger
from purgekeeper.schema.db import Database
from purgekeeper.storage import failpoints
from purgekeeper.storage.files import atomic_write

FORMAT = "purgekeeper-ledger-checkpoint"
VERSION = 1


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    database_id: str
    seq: int
    head_hash: str


def snapshot(db: Database) -> dict[str, Any]:
    """A consistent snapshot: the head first, then the rows up to it. The ledger is gapless
    and append-only, and the head moves in the transaction that adds its row, so the rows up
    to a committed head never change."""
    with db.read(snapshot=True) as conn:
        head = ledger.read_head(conn)
        rows = [_row(entry) for entry in ledger.entries(conn) if entry.seq <= head.seq]
    return {
        "format": FORMAT,
        "version": VERSION,
        "database_id": head.database_id,
        "head": {"seq": head.seq, "hash": head.head_hash},
        "written_at": ledger.utc_text(head.now),
        "rows": rows,
    }


def _row(entry: ledger.LedgerEntry) -> dict[str, Any]:
    fields = entry.hashed_fields()
    fields["accepted_at"] = ledger.utc_text(entry.accepted_at)
    return {**fields, "prev_hash": entry.prev_hash, "row_hash": entry.row_hash}


def write(db: Database, path: Path) -> Checkpoint:
    data = snapshot(db)
    failpoints.hit("checkpoint.write")
    atomic_write(path, (ledger.canonical_json(data) + "\n").encode("utf-8"))
    return Checkpoint(path, data["database_id"], data["head"]["seq"], data["head"]["hash"])


PROBE_PREFIX = ".purgekeeper-probe-"


def unwritable(directory: Path) -> str | None:
    """Why a checkpoint cannot be written into ``directory`` now (the system's reason, never
    the path), or None when it can: a small probe file is created, written and removed."""
    probe = directory / f"{PROBE_PREFIX}{secrets.token_hex(6)}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        failpoints.hit("checkpoint.write")
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, b"probe")
        finally:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(probe)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def own_checkpoints(directory: Path, database_id: str) -> list[tuple[int, Path]]:
    """This database's checkpoint files, oldest first."""
    found = []
    for path in directory.glob(f"{database_id}-*.json"):
        seq = path.stem.rsplit("-", 1)[-1]
        if seq.isdigit():
            found.append((int(seq), path))
    return sorted(found)


class CheckpointInvalid(ValueError):
    """A checkpoint file that cannot be trusted: unreadable, truncated, tampered, of another
    format or version. The message says why (the file's name, ids and positions only, never
    content or a server path)."""


@dataclass(frozen=True)
class CheckpointFile:
    """A checkpoint file that verified: its rows form a whole chain ending at its head."""

    path: Path
    database_id: str
    seq: int
    head_hash: str
    entries: tuple[ledger.LedgerEntry, ...]


def read(path: Path) -> CheckpointFile:
    """Read and verify one checkpoint file; raises CheckpointInvalid with the reason. The
    reason names the file by its name only: a server path in a diagnostic is a leak."""
    label = Path(path).name
    try:
        data = json.loads(Path(path).read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise CheckpointInvalid(f"{label}: no such file") from None
    except OSError as exc:
        raise CheckpointInvalid(f"{label}: cannot be read ({exc.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointInvalid(f"{label}: not a JSON document (truncated or damaged)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointInvalid(f"{label}: not a purgekeeper ledger checkpoint")
    if data.get("version") != VERSION:
        raise CheckpointInvalid(
            f"{label}: unsupported checkpoint version {data.get('version')!r} (this code reads version {VERSION})"
        )
    head, rows, database_id = data.get("head"), data.get("rows"), data.get("database_id")
    if not isinstance(head, dict) or not isinstance(rows, list) or not isinstance(database_id, str):
        raise CheckpointInvalid(f"{label}: the head, the rows or the database id is missing")
    entries = []
    for index, row in enumerate(rows):
        try:
            entries.append(ledger.LedgerEntry.from_checkpoint(row))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointInvalid(f"{label}: row {index + 1} is malformed ({type(exc).__name__}: {exc})") from None
    count, last_hash, problems = ledger.walk_chain(entries)
    if problems:
        shown = "; ".join(problems[: ledger.MAX_PROBLEMS])
        raise CheckpointInvalid(f"{label}: its chain does not verify: {shown}")
    if head.get("seq") != count or head.get("hash") != last_hash:
        raise CheckpointInvalid(
            f"{label}: its head (seq {head.get('seq')!r}) does not match its last row (seq {count})"
        )
    ids = [entry.purge_id for entry in entries]
    if len(set(ids)) != len(ids):
        raise CheckpointInvalid(f"{label}: a purge id appears twice")
    return CheckpointFile(Path(path), database_id, count, last_hash, tuple(entries))


def newest(directory: Path, database_id: str) -> tuple[CheckpointFile | None, list[str]]:
    """This database's newest checkpoint that verifies, and what was wrong with any newer
    ones (they are skipped, and reported)."""
    skipped: list[str] = []
    for _seq, path in reversed(own_checkpoints(directory, database_id)):
        try:
            return read(path), skipped
        except CheckpointInvalid as exc:
            skipped.append(str(exc))
    return None, skipped


# -- what a merge reads: a version 1 file, a version 2 export, a copy, a checkpoint directory --


@dataclass(frozen=True)
class Source:
    """One ledger a merge reads, whatever its form. ``rows(after, after_hash)`` streams the
    rows after seq ``after`` and checks, as it goes, that they chain from ``after_hash``, that
    every ``row_hash`` recomputes and that the last one is the head; it raises
    CheckpointInvalid at the first problem. ``row(seq)`` is one row, unchecked."""

    label: str  # the file's or the directory's name, never a server path
    path: Path
    database_id: str
    seq: int
    head_hash: str
    _rows: Callable[[int], Iterator[ledger.LedgerEntry]]

    def rows(self, *, after: int = 0, after_hash: str = ledger.GENESIS_HASH) -> Iterator[ledger.LedgerEntry]:
        expected, prev = after + 1, after_hash
        for entry in self._rows(after):
            if entry.seq != expected:
                raise CheckpointInvalid(f"{self.label}: gap: expected seq {expected}, found {entry.seq}")
            if entry.prev_hash != prev:
                raise CheckpointInvalid(f"{self.label}: broken link at seq {entry.seq}")
            if entry.expected_hash() != entry.row_hash:
                raise CheckpointInvalid(f"{self.label}: tampered row at seq {entry.seq} (purge {entry.purge_id})")
            yield entry
            expected, prev = entry.seq + 1, entry.row_hash
        if (expected - 1, prev) != (self.seq, self.head_hash) and after < self.seq:
            raise CheckpointInvalid(f"{self.label}: its head (seq {self.seq}) does not match its last row")

    def row(self, seq: int) -> ledger.LedgerEntry | None:
        if not 1 <= seq <= self.seq:
            return None
        return next(self._rows(seq - 1), None)


def from_file(file: CheckpointFile) -> Source:
    entries = file.entries
    return Source(
        file.path.name, file.path, file.database_id, file.seq, file.head_hash, lambda after: iter(entries[after:])
    )
