"""The signed log's writer keeps the tree's right edge and the hashes it read in memory
(``workers.signed_log``): appends in one process read no tile, another writer in between is
noticed by the checkpoint's text, a retired directory starts afresh, and a group commit
still puts its files on disk in the order the module's docstring gives (tiles and their
directories, then the checkpoint and its directory, then the copy's head)."""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from schema import ledger
from tlog import note, tree
from tlog.verify import open_checkpoint, verify_consistency, verify_inclusion
from workers import signed_log
from workers.ledger_copy import LedgerCopy
from workers.signed_log import SignedLog

DATABASE_ID = "db-memory"
ORIGIN = "purgekeeper.example/memory"
ACCEPTED_AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Rows:
    def __init__(self) -> None:
        self.head = ledger.Head(0, ledger.GENESIS_HASH, DATABASE_ID, ACCEPTED_AT)

    def take(self, count: int) -> list[ledger.LedgerEntry]:
        return list(self._rows(count))

    def _rows(self, count: int) -> Iterator[ledger.LedgerEntry]:
        for _ in range(count):
            seq = self.head.seq + 1
            entry = ledger.next_entry(
                self.head,
                purge_id=uuid.uuid4().hex,
                kind="content",
                selectors={"event_ids": [f"e-{seq}"], "provider_event_ids": [], "already_fenced": []},
                scope_digest="0" * 64,
                actor="test",
                reason="memory",
                request_id=None,
                idempotency_key=None,
                origin="test",
                accepted_at=ACCEPTED_AT + dt.timedelta(microseconds=seq),
            )
            self.head = ledger.following(self.head, entry)
            yield entry


SIGNER = note.Signer.generate(ORIGIN)


def writer(root: Path, origin: str = ORIGIN) -> LedgerCopy:
    return LedgerCopy(root, DATABASE_ID, log=SignedLog.beside(root, DATABASE_ID, origin=origin, signer=SIGNER))


def log_of(copy: LedgerCopy) -> SignedLog:
    assert copy.log is not None
    return copy.log


def assert_sound(log: SignedLog, rows: list[ledger.LedgerEntry]) -> None:
    """Every leaf proven in the newest checkpoint, by a log that knows nothing yet (tiles only)."""
    cold = SignedLog(log.directory, origin=log.origin, signer=SIGNER)
    head = cold.head()
    assert head is not None and head.size == len(rows)
    assert open_checkpoint(head.note, SIGNER.verifier).root == head.root
    for row in rows:
        proof = cold.inclusion(row.seq - 1, head)
        verify_inclusion(signed_log.leaf_hash_of(row), row.seq - 1, head.size, proof, head.root)
    for old in {1, len(rows) // 2, len(rows) - 1} - {0}:
        old_root = tree.tree_hash(old, cold.reader(head.size))
        verify_consistency(old, head.size, cold.consistency(old, head), old_root, head.root)


def test_appends_in_one_process_read_no_tile_and_stay_sound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy, rows = writer(tmp_path), Rows()
    written = rows.take(300)
    copy.append(written[:10])

    def no_tile_read(wanted: tree.Tile) -> bytes:
        raise AssertionError(f"{wanted.path} read from disk")

    monkeypatch.setattr(log_of(copy), "_fetch_file", no_tile_read)
    for start in range(10, 300, 7):  # across a full tile of level 0 and the first of level 1
        copy.append(written[start : start + 7])
    monkeypatch.undo()
    assert_sound(log_of(copy), written)


def test_another_writer_in_between_is_noticed(tmp_path: Path) -> None:
    one, two, rows = writer(tmp_path), writer(tmp_path), Rows()
    written = rows.take(600)
    for turn, start in enumerate(range(0, 600, 37)):
        (one if turn % 2 == 0 else two).append(written[start : start + 37])
    assert_sound(log_of(one), written)
    head_one, head_two = log_of(one).head(), log_of(two).head()
    assert head_one is not None and head_one == head_two and head_one.size == 600


def test_a_retired_directory_is_forgotten(tmp_path: Path) -> None:
    first, rows = writer(tmp_path), Rows()
    written = rows.take(20)
    first.append(written[:10])
    head = log_of(first).head()
    assert head is not None and head.size == 10
    renamed = writer(tmp_path, origin="purgekeeper.example/renamed")  # a new origin retires the log
    renamed.append(written[10:])
    retired = [p for p in tmp_path.iterdir() if ".log.retired-" in p.name]
    assert len(retired) == 1
    fresh = log_of(renamed).head()
    assert fresh is not None and (fresh.checkpoint.origin, fresh.size) == ("purgekeeper.example/renamed", 20)
    assert_sound(log_of(renamed), written)


def test_a_group_commit_writes_tiles_then_the_checkpoint_then_the_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy, rows = writer(tmp_path), Rows()
    written = rows.take(260)
    copy.append(written[:250])
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        real_fsync(fd)
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))

    def replace(src: str, dst: str, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None:
        real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        where = os.readlink(f"/proc/self/fd/{dst_dir_fd}") if dst_dir_fd is not None else ""
        events.append(("rename", f"{where}/{dst}"))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    copy.append(written[250:])  # completes tile 0/000 and starts 0/001.p/4 and 1/000.p/1
    monkeypatch.undo()

    log_dir = str(log_of(copy).directory)
    renames = [path for kind, path in events if kind == "rename"]
    tiles = [path for path in renames if "/tile/" in path]
    assert sorted(Path(path).relative_to(log_dir).as_posix() for path in tiles) == [
        "tile/0/000",
        "tile/0/001.p/4",
        "tile/1/000.p/1",
    ]
    checkpoint_at = events.index(("rename", f"{log_dir}/checkpoint"))
    head_at = events.index(("rename", f"{copy.directory}/head.json"))
    for path in tiles:  # each tile fsynced before its rename, its directory after, all before the checkpoint
        renamed = events.index(("rename", path))
        assert events[renamed - 1][0] == "fsync"
        assert ("fsync", str(Path(path).parent)) in events[renamed:checkpoint_at]
    assert events[checkpoint_at - 1][0] == "fsync"
    assert ("fsync", log_dir) in events[checkpoint_at:head_at]
    assert ("fsync", str(copy.directory)) in events[head_at:]
    segment_synced = [i for i, (kind, path) in enumerate(events) if kind == "fsync" and "segment-" in path]
    assert segment_synced and segment_synced[0] < min(events.index(("rename", path)) for path in tiles)
    assert_sound(log_of(copy), written)
