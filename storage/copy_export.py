"""A whole ledger as one version 2 export: a header line, then one row per line, written from
one snapshot and streamed (``write_export``), and read back as a merge source
(``export_source``). ``purgekeeper.storage.ledger_copy`` names all of it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from purgekeeper.schema import ledger
from purgekeeper.schema.db import Database
from purgekeeper.storage import checkpoint, failpoints
from purgekeeper.storage.copy_layout import (
    VERSION,
    CopyInvalid,
    _count,
    parse_line,
    row_line,
)
from purgekeeper.storage.files import atomic_write


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
