"""Ledger checkpoints: a versioned file of every ledger row (never content) and the head.

The checkpoint directory lives outside database backups, so a restored old database can be
compared with (and merged from) what it no longer remembers. Files are named after the
database's random id, so several databases can share one directory:
``<database id>-<seq, 12 digits>.json``. Each is written atomically.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schema import ledger
from schema.db import Database
from workers.files import atomic_write

FORMAT = "purgekeeper-ledger-checkpoint"
VERSION = 1
KEEP_NEWEST = 5


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
    with db.read() as conn:
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
    atomic_write(path, (ledger.canonical_json(data) + "\n").encode("utf-8"))
    return Checkpoint(path, data["database_id"], data["head"]["seq"], data["head"]["hash"])


def automatic(db: Database, directory: Path, *, keep: int = KEEP_NEWEST) -> Checkpoint | None:
    """Write a checkpoint into ``directory`` when the ledger moved past the newest one, and
    keep the newest ``keep`` of this database's. Returns the new checkpoint, if any."""
    with db.read() as conn:
        head = ledger.read_head(conn)
    existing = own_checkpoints(directory, head.database_id)
    if head.seq == 0 or (existing and existing[-1][0] >= head.seq):
        return None
    written = write(db, directory / f"{head.database_id}-{head.seq:012d}.json")
    for _seq, old in own_checkpoints(directory, head.database_id)[:-keep]:
        old.unlink(missing_ok=True)
    return written


def own_checkpoints(directory: Path, database_id: str) -> list[tuple[int, Path]]:
    """This database's checkpoint files, oldest first."""
    found = []
    for path in directory.glob(f"{database_id}-*.json"):
        seq = path.stem.rsplit("-", 1)[-1]
        if seq.isdigit():
            found.append((int(seq), path))
    return sorted(found)


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text("utf-8")))
