"""Ledger checkpoints: a versioned file of every ledger row and the head, written atomically,
and automatic ones named after the database id, of which the newest few are kept."""

from __future__ import annotations

from pathlib import Path

import pytest

import commands
from schema import ledger
from workers import checkpoint


def purge(pk: commands.Purgekeeper, conversation_id: str) -> commands.Acceptance:
    return pk.purge_conversation(conversation_id, actor="op", reason="checkpoint test")


def test_checkpoint_holds_every_row_and_the_head_and_no_content(pk: commands.Purgekeeper, tmp_path: Path) -> None:
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="TOP-SECRET", event_id="e1")
    for i in range(3):
        purge(pk, f"gone-{i}")
    written = pk.checkpoint_ledger(tmp_path / "out" / "ledger.json")
    data = checkpoint.load(written.path)
    assert (data["format"], data["version"]) == (checkpoint.FORMAT, checkpoint.VERSION)
    assert [row["seq"] for row in data["rows"]] == [1, 2, 3]
    assert data["head"] == {"seq": 3, "hash": pk.verify_ledger().head_hash}
    assert "TOP-SECRET" not in written.path.read_text()
    for row in data["rows"]:  # each row carries what its hash covers
        fields = {name: row[name] for name in ledger.HASHED_FIELDS}
        assert ledger.row_hash(row["prev_hash"], fields) == row["row_hash"]
    assert not list((tmp_path / "out").glob(".incoming-*")), "no temporary file is left behind"


def test_automatic_checkpoints_follow_the_head_and_keep_the_newest(pk: commands.Purgekeeper) -> None:
    directory = pk.settings.checkpoint_dir
    assert checkpoint.automatic(pk.db, directory) is None  # an empty ledger needs none
    seqs = []
    for i in range(7):
        purge(pk, f"gone-{i}")
        made = checkpoint.automatic(pk.db, directory)
        assert made is not None and made.path.name == f"{pk.database_key}-{made.seq:012d}.json"
        seqs.append(made.seq)
        assert checkpoint.automatic(pk.db, directory) is None  # nothing new since
    kept = checkpoint.own_checkpoints(directory, pk.database_key)
    assert [seq for seq, _path in kept] == seqs[-checkpoint.KEEP_NEWEST :]


def test_checkpoint_refuses_a_directory_as_its_path(pk: commands.Purgekeeper, tmp_path: Path) -> None:
    with pytest.raises(commands.ValidationError):
        pk.checkpoint_ledger(tmp_path)
