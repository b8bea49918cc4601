"""Issue 27, item 4: an acceptance waits for its row's copy, and that copy took five fsyncs one
after another (the segment; the checkpoint and its directory; head.json and its directory).
The segment's fsync now runs while the signed log is grown and its checkpoint written, and
head.json is still written only once both are on disk.

What was tried, with ``os.fsync`` and ``os.replace`` watched: the segment's fsync waits (up
to a few seconds) for the checkpoint's fsync to begin, which only a concurrent flush lets
happen; head.json is renamed into place only after the segment's and the checkpoint's
fsyncs returned; an fsync of the segment that fails leaves head.json as it was, and the
error reaches the caller; and a log that refuses leaves no flush thread behind."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from storage import signed_log
from storage.copy_layout import HEAD_FILE
from tests.unit.test_signed_log_memory import Rows, writer

WAIT_S = 5.0  # a bound that only ends a hang: the test never looks at a time


def _path_of(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


class Watch:
    """Records the fsyncs and renames the copy makes, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, on_fsync: Callable[[str], None] | None = None) -> None:
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        real_fsync, real_replace = os.fsync, os.replace

        def fsync(fd: int) -> None:
            path = _path_of(fd)
            if on_fsync is not None:
                on_fsync(path)
            real_fsync(fd)
            with self.lock:
                self.events.append(("fsync", path))

        def replace(src: str, dst: str, **kwargs: object) -> None:
            real_replace(src, dst, **kwargs)  # type: ignore[arg-type]
            with self.lock:
                self.events.append(("replace", dst))

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)

    def index(self, kind: str, ends: str) -> int:
        return next(i for i, (k, path) in enumerate(self.events) if k == kind and path.endswith(ends))


def _is_segment(path: str) -> bool:
    name = Path(path).name
    return name.startswith("segment-") and name.endswith(".jsonl")


def test_the_segment_is_flushed_while_the_checkpoint_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy, rows = writer(tmp_path), Rows()
    copy.append(rows.take(3))  # the copy and its log exist: the next append is the steady case
    checkpoint_began = threading.Event()
    overlapped: list[bool] = []

    def on_fsync(path: str) -> None:
        if ".incoming-" in path and signed_log.LOG_SUFFIX in path:
            checkpoint_began.set()  # the checkpoint's temporary file, in the log's directory
        elif _is_segment(path):
            overlapped.append(checkpoint_began.wait(WAIT_S))

    watch = Watch(monkeypatch, on_fsync)
    copy.append(rows.take(2))
    assert overlapped == [True], "the segment's fsync did not run beside the checkpoint's"
    head_renamed = watch.index("replace", HEAD_FILE)
    segment_synced = next(i for i, (kind, path) in enumerate(watch.events) if kind == "fsync" and _is_segment(path))
    checkpoint_renamed = watch.index("replace", signed_log.CHECKPOINT_FILE)
    assert segment_synced < head_renamed and checkpoint_renamed < head_renamed
    assert copy.head().seq == 5


def test_a_failed_segment_flush_leaves_the_head_and_reaches_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy, rows = writer(tmp_path), Rows()
    copy.append(rows.take(3))
    head_file = copy.directory / HEAD_FILE
    before = head_file.read_bytes()

    def on_fsync(path: str) -> None:
        if _is_segment(path):
            raise OSError(5, "Input/output error")

    Watch(monkeypatch, on_fsync)
    with pytest.raises(OSError, match="Input/output error"):
        copy.append(rows.take(2))
    assert head_file.read_bytes() == before
    assert copy.head().seq == 3
    assert [t for t in threading.enumerate() if t.name.startswith("copy-flush")] == []


def test_a_log_that_refuses_leaves_the_head_and_no_flush_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy, rows = writer(tmp_path), Rows()
    copy.append(rows.take(3))
    head_file = copy.directory / HEAD_FILE
    before = head_file.read_bytes()

    def refuse(*args: object, **kwargs: object) -> None:
        raise signed_log.LogRefused("the tiles do not extend the checkpoint")

    assert copy.log is not None
    monkeypatch.setattr(copy.log, "extend", refuse)
    with pytest.raises(signed_log.LogRefused):
        copy.append(rows.take(2))
    assert head_file.read_bytes() == before
    assert [t for t in threading.enumerate() if t.name.startswith("copy-flush")] == []
