"""A cleanup step yields to the foreground (issue 27, item 3): after a batch that ran while
other sessions of the database were running statements, it pauses a share of the batch's
time (``StepContext.yield_share``, at most ``max_yield``); alone on the database, or with a
share of 0, it never pauses, and the batch that finishes the step is not followed by one."""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import purgekeeper
from purgekeeper.commands.settings import Settings
from purgekeeper.schema import cleanup_queries
from purgekeeper.schema.errors import ValidationError
from purgekeeper.workers import cleanup, runner
from tests.helpers import POLICY

Pk = purgekeeper.Purgekeeper


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    paused: list[float] = []
    monkeypatch.setattr(cleanup.time, "sleep", paused.append)
    return paused


def busy(monkeypatch: pytest.MonkeyPatch, sessions: int) -> list[int]:
    asked: list[int] = []

    def others_active(conn: object) -> int:
        asked.append(sessions)
        return sessions

    monkeypatch.setattr(cleanup.cleanup_queries, "others_active", others_active)
    return asked


def empty_conversation_in_batches_of_two(pk: Pk, **knobs: object) -> None:
    """Five events: batches of 2, 2, then 1 with the runs and derivatives (the last)."""
    pk.create_conversation("c1")
    for n in range(5):
        pk.ingest_event("c1", author="ada", body=f"words {n}")
    purge_id = pk.purge_conversation("c1", actor="op", reason="test").purge_id
    ctx = dataclasses.replace(pk.step_context(), batch_size=2, **knobs)  # type: ignore[arg-type]
    [step] = [s for s in pk.status(purge_id).steps if s.kind == "bodies"]
    assert runner.run_step(ctx, step.id, policy=POLICY).status == "done"


def test_a_batch_that_met_busy_sessions_is_followed_by_a_pause(
    pk: Pk, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    busy(monkeypatch, 3)
    empty_conversation_in_batches_of_two(pk, max_yield=dt.timedelta(seconds=0.5))
    assert len(sleeps) == 2  # not after the last batch
    assert all(0 < pause <= 0.5 for pause in sleeps)


def test_alone_on_the_database_the_step_never_pauses(
    pk: Pk, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = busy(monkeypatch, 0)
    empty_conversation_in_batches_of_two(pk)
    assert (len(asked), sleeps) == (2, [])


def test_a_share_of_zero_never_pauses_nor_asks(pk: Pk, sleeps: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    asked = busy(monkeypatch, 3)
    empty_conversation_in_batches_of_two(pk, yield_share=0.0)
    assert (asked, sleeps) == ([], [])


@pytest.fixture
def statement_running_elsewhere(pk: Pk) -> Iterator[None]:
    """Another session of the same database, running a statement for a second."""
    started = threading.Event()

    def sleep_in_the_database() -> None:
        with pk.db.read() as conn:
            started.set()
            conn.exec_driver_sql("SELECT pg_sleep(1)" if pk.db.dialect == "postgresql" else "SELECT 1")

    thread = threading.Thread(target=sleep_in_the_database)
    thread.start()
    started.wait(5)
    yield
    thread.join()


def test_others_active_counts_the_sessions_running_a_statement(pk: Pk, statement_running_elsewhere: None) -> None:
    expected = 1 if pk.db.dialect == "postgresql" else 0  # SQLite: one writer at a time, no count
    deadline = time.monotonic() + 5  # the other session's statement may not have begun yet
    while True:
        with pk.db.read() as conn:
            others = cleanup_queries.others_active(conn)
        if others == expected or time.monotonic() > deadline:
            break
    assert others == expected


def test_the_share_is_a_setting_and_its_default_is_the_librarys() -> None:
    assert Settings.from_env({}).cleanup_yield == cleanup.DEFAULT_YIELD_SHARE
    assert Settings.from_env({"PURGEKEEPER_CLEANUP_YIELD": "0"}).cleanup_yield == 0.0
    assert Settings.from_env({"PURGEKEEPER_CLEANUP_YIELD": "0.5"}).cleanup_yield == 0.5
    for wrong in ("-1", "nan", "lots"):
        with pytest.raises(ValidationError):
            Settings.from_env({"PURGEKEEPER_CLEANUP_YIELD": wrong})


def test_a_handle_runs_its_steps_with_the_setting(open_pk: Callable[..., Pk], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PURGEKEEPER_CLEANUP_YIELD", "0.25")
    assert open_pk().step_context().yield_share == 0.25
