"""Ledger exports (``checkpoint_ledger``): one self-contained file of every ledger row and
the head (format version 2: a header line, then one row per line), written atomically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import purgekeeper
from purgekeeper.schema import ledger
from purgekeeper.storage import checkpoint, ledger_copy


def purge(pk: purgekeeper.Purgekeeper, conversation_id: str) -> purgekeeper.Acceptance:
    return pk.purge_conversation(conversation_id, actor="op", reason="checkpoint test")


def test_an_export_holds_every_row_and_the_head_and_no_content(pk: purgekeeper.Purgekeeper, tmp_path: Path) -> None:
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="TOP-SECRET", event_id="e1")
    for i in range(3):
        purge(pk, f"gone-{i}")
    written = pk.checkpoint_ledger(tmp_path / "out" / "ledger.jsonl")
    header, *lines = written.path.read_bytes().splitlines()
    data = json.loads(header)
    assert (data["format"], data["version"], data["database_id"]) == (checkpoint.FORMAT, 2, pk.database_key)
    assert data["head"] == {"seq": 3, "hash": pk.verify_ledger().head_hash}
    assert "TOP-SECRET" not in written.path.read_text()
    rows = [json.loads(line) for line in lines]
    assert [row["seq"] for row in rows] == [1, 2, 3]
    for row in rows:  # each row carries what its hash covers
        fields = {name: row[name] for name in ledger.HASHED_FIELDS}
        assert ledger.row_hash(row["prev_hash"], fields) == row["row_hash"]
    assert lines == [
        line.rstrip(b"\n") for line in (pk.copy.directory / ledger_copy.segment_name(1)).read_bytes().splitlines(True)
    ]
    assert not list((tmp_path / "out").glob(".incoming-*")), "no temporary file is left behind"
    assert ledger_copy.open_source(written.path, pk.database_key).seq == 3


def test_checkpoint_refuses_a_directory_as_its_path(pk: purgekeeper.Purgekeeper, tmp_path: Path) -> None:
    with pytest.raises(purgekeeper.ValidationError):
        pk.checkpoint_ledger(tmp_path)


@pytest.mark.parametrize("own_directory", [False, True], ids=["no-copy-yet", "empty-copy"])
def test_a_directory_without_this_database_s_rows_never_names_its_own_copy_as_another_s(
    tmp_path: Path, own_directory: bool
) -> None:
    """Tried: a fresh database's checkpoint directory, before any acceptance, with and without
    its (empty) copy's directory: the refusal said "of other databases: <its own id>.ledger",
    and advised --from-other-database for the database's own copy."""
    database_id = "f64e5abac433480a85beca64a9f0ec71"
    if own_directory:
        (tmp_path / f"{database_id}{ledger_copy.SUFFIX}").mkdir()
    (tmp_path / f"0ther{ledger_copy.SUFFIX}").mkdir()
    with pytest.raises(checkpoint.CheckpointInvalid) as refused:
        ledger_copy.open_source(tmp_path, database_id)
    message = str(refused.value)
    assert f"of other databases: 0ther{ledger_copy.SUFFIX} " in message
    assert ("this database's copy holds no rows yet" in message) is own_directory
