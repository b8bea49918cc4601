"""The two rules of ``purgekeeper.schema.lifecycle`` (when a step is due; a purge's status) in their
Python and SQL forms give the same answers, for any steps (hypothesis), on a SQLite table
of the real ``cleanup_steps`` definition (no triggers, no migrations: the rules only)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, create_engine, delete, insert, literal, select

from purgekeeper.schema import lifecycle
from purgekeeper.schema.states import PurgeStatus, StepKind, StepStatus
from purgekeeper.schema.tables import cleanup_steps

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
STALL = dt.timedelta(minutes=10)


@dataclass(frozen=True)
class Step:
    kind: str
    status: str
    attempts: int
    next_attempt_at: dt.datetime
    lease_expires_at: dt.datetime | None


offsets = st.integers(min_value=-1800, max_value=1800).map(lambda s: NOW + dt.timedelta(seconds=s))
steps_of_a_purge = st.lists(
    st.builds(
        Step,
        kind=st.sampled_from([k.value for k in StepKind]),
        status=st.sampled_from([s.value for s in StepStatus]),
        attempts=st.integers(min_value=0, max_value=3),
        next_attempt_at=offsets | st.just(NOW),
        lease_expires_at=st.none() | offsets | st.just(NOW),
    ),
    max_size=3,
    unique_by=lambda step: step.kind,
)


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = create_engine("sqlite://")
    cleanup_steps.create(engine)
    yield engine
    engine.dispose()


def stored(engine: Engine, steps: list[Step]) -> None:
    with engine.begin() as conn:
        conn.execute(delete(cleanup_steps))
        for step in steps:
            conn.execute(
                insert(cleanup_steps).values(
                    id=step.kind, purge_id="p", max_attempts=3, **{k: v for k, v in step.__dict__.items()}
                )
            )


@settings(max_examples=200, deadline=None)
@given(steps=steps_of_a_purge)
def test_the_status_rule_is_one_rule_in_both_forms(engine: Engine, steps: list[Step]) -> None:
    stored(engine, steps)
    with engine.connect() as conn:
        in_sql = {
            status for status in PurgeStatus if conn.scalar(select(lifecycle.status_clause(status, literal("p"))))
        }
    assert in_sql == {lifecycle.derive_status(steps)}


@settings(max_examples=200, deadline=None)
@given(steps=steps_of_a_purge)
def test_the_due_rule_is_one_rule_in_both_forms(engine: Engine, steps: list[Step]) -> None:
    stored(engine, steps)
    with engine.connect() as conn:
        due = set(conn.scalars(select(cleanup_steps.c.kind).where(lifecycle.due_clause(NOW))))
        stalled = set(conn.scalars(select(cleanup_steps.c.kind).where(lifecycle.stalled_clause(NOW, STALL))))
    assert due == {step.kind for step in steps if lifecycle.is_due(step, NOW)}
    assert bool(stalled) == lifecycle.is_stalled(steps, now=NOW, stall_after=STALL)
    assert stalled <= due


def test_the_rules_read_as_written() -> None:
    waiting = Step("bodies", "retrying", 1, NOW, None)
    assert lifecycle.is_due(waiting, NOW) and not lifecycle.is_due(waiting, NOW - dt.timedelta(seconds=1))
    frozen = Step("bodies", "running", 1, NOW - dt.timedelta(hours=1), NOW - STALL - dt.timedelta(seconds=1))
    assert lifecycle.is_stalled([frozen], now=NOW, stall_after=STALL)
    assert not lifecycle.is_due(Step("bodies", "incomplete", 3, NOW - dt.timedelta(days=1), None), NOW)
    assert lifecycle.derive_status([]) is PurgeStatus.COMPLETE
    assert lifecycle.derive_status([Step("bodies", "pending", 0, NOW, None)]) is PurgeStatus.ACCEPTED
    assert lifecycle.derive_status([waiting, Step("memory", "incomplete", 3, NOW, None)]) is PurgeStatus.INCOMPLETE
