"""The signed log's writer keeps the tree's right edge and the hashes it read in memory
(``purgekeeper.storage.signed_log``): appends in one process read no tile, another writer in between is
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

from purgekeeper.schema import ledger
from purgekeeper.storage import signed_log
from purgekeeper.storage.ledger_copy import LedgerCopy
from purgekeeper.storage.signed_log import SignedLog
from purgekeeper.tlog import note, tree
from purgekeeper.tlog.verify import open_checkpoint, verify_consistency, verify_inclusion

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


class Recorded:
    """The fsyncs and renames a group commit makes, in order (paths through /proc/self/fd)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, str]] = []
        real_fsync, real_replace = os.fsync, os.replace

        def fsync(fd: int) -> None:
            real_fsync(fd)
            self.events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))

        def replace(src: str, dst: str, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None) -> None:
            real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            where = os.readlink(f"/proc/self/fd/{dst_dir_fd}") if dst_dir_fd is not None else ""
            self.events.append(("rename", f"{where}/{dst}"))

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)

    def renamed(self, kind: str = "rename") -> list[str]:
        return [path for what, path in self.events if what == kind]


def test_a_group_commit_writes_tiles_then_the_checkpoint_then_the_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy, rows = writer(tmp_path), Rows()
    written = rows.take(260)
    copy.append(written[:250])
    recorded = Recorded(monkeypatch)
    copy.append(written[250:])  # completes tile 0/000 and starts 0/001.p/4 and 1/000.p/1
    monkeypatch.undo()
    events = recorded.events

    log_dir = str(log_of(copy).directory)
    tiles = [path for path in recorded.renamed() if "/tile/" in path]
    assert sorted(Path(path).relative_to(log_dir).as_posix() for path in tiles) == [
        "tile/0/000",
        "tile/0/001.p/4",
        "tile/1/000.p/1",
    ]
    checkpoint_at = events.index(("rename", f"{log_dir}/checkpoint"))
    head_at = events.index(("rename", f"{copy.directory}/head.json"))
    full = f"{log_dir}/tile/0/000"  # a full tile is fsynced before its rename, its directory after
    renamed = events.index(("rename", full))
    assert events[renamed - 1][0] == "fsync" and Path(events[renamed - 1][1]).parent == Path(full).parent
    assert ("fsync", str(Path(full).parent)) in events[renamed:checkpoint_at]
    for partial in tiles:  # a partial tile is rebuilt from the copy after a crash: never fsynced
        if partial != full:
            assert ("fsync", str(Path(partial).parent)) not in events
    assert events[checkpoint_at - 1][0] == "fsync"
    assert ("fsync", log_dir) in events[checkpoint_at:head_at]
    assert ("fsync", str(copy.directory)) in events[head_at:]
    segment_synced = [i for i, (kind, path) in enumerate(events) if kind == "fsync" and "segment-" in path]
    assert segment_synced and segment_synced[0] < min(events.index(("rename", path)) for path in tiles)
    assert_sound(log_of(copy), written)


def test_a_commit_that_completes_no_tile_fsyncs_only_the_checkpoint_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy, rows = writer(tmp_path), Rows()
    written = rows.take(300)
    copy.append(written[:280])
    recorded = Recorded(monkeypatch)
    copy.append(written[280:])  # grows 0/001.p and 1/000.p, completes nothing
    monkeypatch.undo()
    log_dir = str(log_of(copy).directory)
    in_log = [path for path in recorded.renamed("fsync") if path.startswith(log_dir)]
    assert len(in_log) == 2 and in_log[-1] == log_dir  # the checkpoint's file, then the directory
    assert_sound(log_of(copy), written)


def lose_partial_tiles(log_dir: Path, how: str) -> list[Path]:
    """What a crash may do to tiles written without an fsync: gone, empty, or zeros."""
    partials = sorted(p for p in (log_dir / "tile").rglob("*") if p.is_file() and p.parent.name.endswith(".p"))
    assert partials
    for path in partials:
        if how == "gone":
            path.unlink()
        elif how == "empty":
            path.write_bytes(b"")
        else:
            path.write_bytes(bytes(path.stat().st_size))
    return partials


@pytest.mark.parametrize("how", ["gone", "empty", "zeros"])
def test_partial_tiles_lost_in_a_crash_are_rebuilt_by_the_next_writer(tmp_path: Path, how: str) -> None:
    copy, rows = writer(tmp_path), Rows()
    written = rows.take(600)
    for start in range(0, 590, 59):
        copy.append(written[start : min(start + 59, 590)])
    before = log_of(copy).head()
    assert before is not None and before.size == 590
    lose_partial_tiles(log_of(copy).directory, how)
    restarted = writer(tmp_path)  # a new process: nothing in memory
    restarted.append(written[590:])
    assert_sound(log_of(restarted), written)
    after = log_of(restarted).head()
    assert after is not None
    cold = SignedLog(log_of(restarted).directory, origin=ORIGIN, signer=SIGNER)
    verify_consistency(before.size, after.size, cold.consistency(before.size, after), before.root, after.root)


def test_partial_tiles_lost_in_a_crash_are_rebuilt_without_a_new_row(tmp_path: Path) -> None:
    copy, rows = writer(tmp_path), Rows()
    written = rows.take(300)
    copy.append(written)
    lose_partial_tiles(log_of(copy).directory, "gone")
    restarted = writer(tmp_path)
    restarted.sign_lagging()  # what a catch-up with nothing to copy (the scheduler's, a receipt's) does
    assert_sound(log_of(restarted), written)


def test_a_damaged_full_tile_is_refused_not_guessed(tmp_path: Path) -> None:
    copy, rows = writer(tmp_path), Rows()
    written = rows.take(300)
    copy.append(written)
    directory = log_of(copy).directory
    lose_partial_tiles(directory, "gone")
    full = directory / "tile/0/000"
    full.write_bytes(bytes(full.stat().st_size))  # fsynced at its commit: damage, not a crash
    restarted = writer(tmp_path)
    with pytest.raises(signed_log.LogRefused, match="do not give"):
        restarted.append(rows.take(1))


def test_a_wider_partial_tile_replaces_the_narrower_one(tmp_path: Path) -> None:
    copy, rows = writer(tmp_path), Rows()
    written = rows.take(520)
    for start in range(0, 520, 13):  # across two full tiles of level 0
        copy.append(written[start : start + 13])
    tiles = log_of(copy).directory / "tile"
    partials = sorted(p.relative_to(tiles).as_posix() for p in tiles.rglob("*") if p.parent.name.endswith(".p"))
    assert partials == ["0/002.p/8", "1/000.p/2"]
    assert_sound(log_of(copy), written)


def test_a_catch_up_under_another_key_leaves_the_log_to_its_owner(tmp_path: Path) -> None:
    """What was tried: a process whose key is not the log's (another data directory) catches
    the copy up with nothing to copy. It checks no tile and raises nothing: the key's owner
    checks its log."""
    copy, rows = writer(tmp_path), Rows()
    copy.append(rows.take(10))
    stranger = LedgerCopy(
        tmp_path,
        DATABASE_ID,
        log=SignedLog.beside(tmp_path, DATABASE_ID, origin=ORIGIN, signer=note.Signer.generate(ORIGIN)),
    )
    assert stranger.sign_lagging().seq == 10
