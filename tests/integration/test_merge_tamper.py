"""A merge verifies every row of every source it reads, the rows the destination already
holds too (issue 23, item 1). Both backends.

A checkpoint whose row no longer hashes to its ``row_hash`` is damaged whatever the
destination holds: one field of a row (its actor or its reason) changed, its ``row_hash``
kept, is refused with the reason and nothing changes, whether the destination's ledger is
as long as the source (the source is its own history), longer (the source is behind it) or
shorter (the source's rows after the head are appended verbatim). The same holds for the
checkpoint directory (the ledger's copy outside the database), not only an export.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import purgekeeper
from purgekeeper.schema import ledger
from purgekeeper.storage import ledger_copy

Pk = purgekeeper.Purgekeeper
WHO = {"actor": "ops@example.org", "reason": "the user asked"}
# Same length as the original, so the copy's segment keeps its byte count: only the hash tells.
FORGED = {"actor": "ops@example.net", "reason": "the user ASKED"}
PURGE_TABLES = ("purge_ledger", "tombstones", "cleanup_steps", "ledger_head")


def snapshot(pk: Pk) -> dict[str, list[tuple[Any, ...]]]:
    with pk.db.read() as conn:
        return {
            table: sorted((tuple(row) for row in conn.execute(text(f"SELECT * FROM {table}"))), key=repr)
            for table in PURGE_TABLES
        }


def forge(line: bytes, field: str) -> bytes:
    """The row with one field changed and its ``row_hash`` kept."""
    row = json.loads(line)
    assert row[field] == WHO[field]
    row[field] = FORGED[field]
    return (ledger.canonical_json(row) + "\n").encode()


def forged_export(pk: Pk, path: Path, field: str, *, seq: int = 1) -> Path:
    written = pk.checkpoint_ledger(path).path
    lines = written.read_bytes().splitlines(keepends=True)
    lines[seq] = forge(lines[seq], field)  # line 0 is the header
    written.write_bytes(b"".join(lines))
    return written


def forged_copy(pk: Pk, field: str, *, seq: int = 1) -> Path:
    segment = pk.copy.directory / ledger_copy.segment_name(1)
    lines = segment.read_bytes().splitlines(keepends=True)
    lines[seq - 1] = forge(lines[seq - 1], field)
    segment.write_bytes(b"".join(lines))
    return pk.settings.checkpoint_dir


def purge(pk: Pk, *conversation_ids: str) -> None:
    for conversation_id in conversation_ids:
        pk.purge_conversation(conversation_id, **WHO)


def assert_refused(pk: Pk, source: Path, seq: int) -> None:
    before = snapshot(pk)
    with pytest.raises(purgekeeper.ValidationError) as refused:
        pk.merge_ledger(source)
    said = str(refused.value)
    assert f"tampered row at seq {seq}" in said and "nothing changed" in said, said
    assert str(source.parent) not in said  # the source by its name, never a server path
    assert snapshot(pk) == before


@pytest.mark.parametrize("field", ["actor", "reason"])
def test_an_export_of_this_very_ledger_with_a_forged_row_is_refused(pk: Pk, tmp_path: Path, field: str) -> None:
    """The issue's reproduction: the destination holds every row of the export."""
    purge(pk, "c-1", "c-2")
    assert_refused(pk, forged_export(pk, tmp_path / "own.jsonl", field), 1)
    assert pk.messaging_status().open  # the destination's own ledger is sound


def test_an_export_behind_the_ledger_with_a_forged_row_is_refused(pk: Pk, tmp_path: Path) -> None:
    purge(pk, "c-1", "c-2")
    export = forged_export(pk, tmp_path / "older.jsonl", "actor", seq=2)
    purge(pk, "c-3")
    assert_refused(pk, export, 2)


def test_an_export_ahead_of_the_ledger_with_a_forged_known_row_is_refused(
    pk: Pk, open_pk: Callable[[], Pk], tmp_path: Path, backups: Any
) -> None:
    """Rows after the head are appended verbatim: the known rows before them are checked too."""
    backups.handles.append(pk)
    purge(pk, "c-1")
    backup = backups.take()
    purge(pk, "c-2")
    export = forged_export(pk, tmp_path / "newer.jsonl", "reason", seq=1)
    pk.close()
    backups.restore(backup)
    restored = open_pk()
    backups.handles.append(restored)
    before = snapshot(restored)
    with pytest.raises(purgekeeper.ValidationError) as refused:
        restored.merge_ledger(export)
    assert "tampered row at seq 1" in str(refused.value), refused.value
    assert snapshot(restored) == before


@pytest.mark.parametrize("field", ["actor", "reason"])
def test_the_checkpoint_directory_with_a_forged_row_is_refused(pk: Pk, field: str) -> None:
    """The outside copy, merged as the checkpoint directory, whose rows the ledger holds."""
    purge(pk, "c-1", "c-2")
    assert_refused(pk, forged_copy(pk, field), 1)
    state = pk.messaging_status()  # the full check walks the copy too: it stays closed
    assert not state.open and any("tampered row in the copy at seq 1" in p for p in state.problems), state


def test_a_sound_export_of_this_very_ledger_still_merges_as_already_known(pk: Pk, tmp_path: Path) -> None:
    purge(pk, "c-1", "c-2")
    report = pk.merge_ledger(pk.checkpoint_ledger(tmp_path / "own.jsonl").path)
    assert (report.appended, report.already_known) == ((), 2)
    report = pk.merge_ledger(pk.settings.checkpoint_dir)
    assert (report.appended, report.already_known) == ((), 2)
