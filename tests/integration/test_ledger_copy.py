"""The ledger outside the database (format version 2), on real files: appends, sealed
segments, the head, a crashed writer's tail, and every way a copy can be damaged (issue 12)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from purgekeeper.storage import ledger_copy
from purgekeeper.storage.ledger_copy import CopyDiverged, CopyGap, CopyInvalid, LedgerCopy
from tests.helpers.ledger import DATABASE, chain


@pytest.fixture
def small_segments(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(ledger_copy, "SEGMENT_ROWS", 4)
    return 4


@pytest.fixture
def copy(tmp_path: Path) -> LedgerCopy:
    return LedgerCopy(tmp_path / "ledger", DATABASE)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_append_lands_its_rows_and_moves_the_head(copy: LedgerCopy) -> None:
    assert copy.head() is None and list(copy.rows()) == []
    rows = chain(3)
    head = copy.append(rows)
    assert (head.seq, head.row_hash, head.segment) == (3, rows[-1].row_hash, 1)
    assert copy.head() == head
    assert [entry.purge_id for entry in copy.rows()] == ["p-1", "p-2", "p-3"]
    assert copy.verify() == (3, rows[-1].row_hash, [])
    assert sorted(p.name for p in copy.directory.iterdir()) == [".lock", "head.json", "segment-000000000001.jsonl"]
    written = json.loads((copy.directory / "head.json").read_text())
    assert (written["format"], written["version"], written["database_id"]) == ("purgekeeper-ledger-copy", 2, DATABASE)


def test_rows_already_there_are_skipped_and_others_must_follow_on(copy: LedgerCopy) -> None:
    rows = chain(5)
    copy.append(rows[:3])
    assert copy.append(rows[:3]).seq == 3  # a repeat writes nothing
    assert copy.append(rows[1:5]).seq == 5  # the overlap is skipped
    with pytest.raises(CopyGap) as gap:
        copy.append(chain(8)[6:])
    assert gap.value.after == 5
    other = chain(6, tag="other")  # another chain: its row 5 differs from the copy's
    with pytest.raises(CopyDiverged):
        copy.append(other[4:])
    assert copy.verify()[2] == []


def test_a_full_segment_is_sealed_and_never_written_again(copy: LedgerCopy, small_segments: int) -> None:
    rows = chain(10)
    copy.append(rows[:4])
    sealed = copy.directory / "segment-000000000001.jsonl"
    before = (digest(sealed), sealed.stat().st_mtime_ns)
    for entry in rows[4:]:
        copy.append([entry])  # one acceptance at a time
    assert (digest(sealed), sealed.stat().st_mtime_ns) == before
    names = sorted(p.name for p in copy.directory.glob("segment-*"))
    assert names == ["segment-000000000001.jsonl", "segment-000000000005.jsonl", "segment-000000000009.jsonl"]
    head = copy.head()
    assert head is not None and (head.seq, head.segment) == (10, 9)
    assert copy.verify() == (10, rows[-1].row_hash, [])
    assert [entry.seq for entry in copy.rows(after=6)] == [7, 8, 9, 10]


def test_rows_after_a_seq_never_read_the_segments_before_it(copy: LedgerCopy, small_segments: int) -> None:
    copy.append(chain(10))
    (copy.directory / "segment-000000000001.jsonl").unlink()
    assert [entry.seq for entry in copy.rows(after=4)] == [5, 6, 7, 8, 9, 10]
    assert copy.row(10) is not None and copy.row(10).seq == 10  # type: ignore[union-attr]


def test_a_writer_that_died_before_its_head_leaves_a_tail_the_next_one_truncates(copy: LedgerCopy) -> None:
    rows = chain(4)
    copy.append(rows[:2])
    segment = copy.directory / "segment-000000000001.jsonl"
    with segment.open("ab") as handle:  # its lines reached the segment, its head never did
        handle.write(ledger_copy.row_line(rows[2]) + b'{"half a row')
    assert [entry.seq for entry in copy.rows()] == [1, 2]
    assert copy.verify()[2] == []
    copy.append(rows[2:])
    assert [entry.seq for entry in copy.rows()] == [1, 2, 3, 4]
    assert b"half a row" not in segment.read_bytes() and copy.verify()[2] == []


def test_the_head_is_read_again_only_when_it_changed(copy: LedgerCopy, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = chain(3)  # one chain: each row's salts are drawn afresh (a second chain(3) is another chain)
    copy.append(rows[:2])
    reads: list[int] = []
    real = LedgerCopy._read_head

    def counted(self: LedgerCopy) -> ledger_copy.CopyHead:
        reads.append(1)
        return real(self)

    monkeypatch.setattr(LedgerCopy, "_read_head", counted)
    fresh = LedgerCopy(copy.checkpoint_dir, DATABASE)  # another process's view
    for _ in range(50):
        assert fresh.head() is not None
    assert len(reads) == 1
    copy.append(rows[2:])
    assert fresh.head().seq == 3  # type: ignore[union-attr]
    assert len(reads) >= 2 and len(reads) <= 4  # the writer read it once, the reader once


DAMAGE = {
    "a flipped byte in a sealed segment": lambda d: _flip(
        d / "segment-000000000001.jsonl", b'"actor":"op"', b'"actor":"oq"'
    ),
    "a sealed segment truncated": lambda d: _cut_last_line(d / "segment-000000000005.jsonl"),
    "a segment missing": lambda d: (d / "segment-000000000005.jsonl").unlink(),
    "the open segment cut short of its head": lambda d: _cut_last_line(d / "segment-000000000009.jsonl"),
    "a head that names no row": lambda d: _rewrite_head(d, seq=11),
    "a head of another database": lambda d: _rewrite_head(d, database_id="e" * 32),
    "a head that is not JSON": lambda d: (d / "head.json").write_bytes(b"{nope"),
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_every_damage_is_found(copy: LedgerCopy, small_segments: int, damage: object) -> None:
    copy.append(chain(10))
    damage(copy.directory)  # type: ignore[operator]
    fresh = LedgerCopy(copy.checkpoint_dir, DATABASE)
    try:
        _seq, _hash, problems = fresh.verify()
    except CopyInvalid as exc:
        problems = [str(exc)]
    assert problems, "the damage went unnoticed"
    assert all(str(copy.checkpoint_dir) not in problem for problem in problems)


def test_an_export_is_a_header_and_the_rows(copy: LedgerCopy) -> None:
    rows = chain(3)
    copy.append(rows)
    lines = b"".join(ledger_copy.export_lines(DATABASE, 3, rows[-1].row_hash, copy.rows())).splitlines()
    header = json.loads(lines[0])
    assert (header["version"], header["database_id"], header["head"]) == (
        2,
        DATABASE,
        {"seq": 3, "hash": rows[-1].row_hash},
    )
    assert [ledger_copy.parse_line(line, "export").row_hash for line in lines[1:]] == [r.row_hash for r in rows]


def _flip(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))


def _cut_last_line(path: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))


def _rewrite_head(directory: Path, **changes: object) -> None:
    data = json.loads((directory / "head.json").read_text())
    data.update(changes)
    (directory / "head.json").write_text(json.dumps(data))


def test_a_sealed_segment_changed_after_it_was_read_is_read_again(copy: LedgerCopy, small_segments: int) -> None:
    """The last sealed segment read is kept for the next read of it (the audit's steps); a
    change to its file afterwards is still found."""
    rows = chain(10)
    copy.append(rows)
    assert copy.verify()[2] == []
    assert copy.row_hashes(after=4, upto=8) == {r.seq: r.row_hash for r in rows[4:8]}  # kept: segment 5
    _flip(copy.directory / "segment-000000000005.jsonl", b'"actor":"op"', b'"actor":"oq"')
    assert any("tampered row in the copy at seq 5" in problem for problem in copy.verify()[2])
