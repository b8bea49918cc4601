"""Stopping real processes the ways supervisors do (tests/faults/test_clean_stops.py): a SIGTERM
to the main process only, to its whole process group, or to each of its processes one by one
(honcho, systemd's ``KillMode=control-group``, ``docker stop`` and Kubernetes reach every
process of a group or container); a batch held mid-way by a slow statement; and what the
database says of the steps and the processes afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

from sqlalchemy import text

import purgekeeper
from tests.helpers.processes import Proc, process_states

WAYS = ("main", "group", "every")
SLOW_STATEMENT_S = 1.0  # the first batch's UPDATE of events sleeps this long: well within the grace
_SLOW_FIRST_UPDATE = """
CREATE FUNCTION pk_stop_slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM events WHERE starts_with(id, '{prefix}') AND body IS NULL) THEN
        PERFORM pg_sleep({seconds});
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER pk_stop_slow BEFORE UPDATE ON events FOR EACH STATEMENT EXECUTE FUNCTION pk_stop_slow();
"""


def group_pids(proc: Proc) -> list[int]:
    """Every process of ``proc``'s group, its leader last."""
    return sorted(process_states(proc), key=lambda pid: (pid == proc.pid, pid))


def sigterm(proc: Proc, way: str) -> float:
    """SIGTERM ``proc`` one of the ``WAYS`` (``every``: its other processes first, then the
    leader, each on its own); returns when it was sent (``time.monotonic()``)."""
    pids = group_pids(proc)
    sent = time.monotonic()
    if way == "main":
        os.kill(proc.pid, signal.SIGTERM)
    elif way == "group":
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
    return sent


def sigint(proc: Proc) -> float:
    """Ctrl+C in honcho's terminal: SIGINT to honcho alone (its processes run in process groups
    of their own, which the terminal's signal does not reach); returns when it was sent."""
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    return sent


def ended(proc: Proc, sent: float, *, timeout: float) -> tuple[int, float]:
    """The leader's exit code and how long after ``sent`` it exited; fails (with the process's
    log) if it is still running ``timeout`` seconds later."""
    try:
        code = proc.popen.wait(timeout=max(timeout - (time.monotonic() - sent), 0.1))
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{proc.name} still runs {timeout:g}s after the SIGTERM\n{proc.tail()}") from None
    return code, time.monotonic() - sent


def slow_first_batch(
    pk: purgekeeper.Purgekeeper, conversation_id: str, seconds: float = SLOW_STATEMENT_S, *, events: str | None = None
) -> None:
    """An UPDATE of events sleeps ``seconds`` first while no event of the conversation (or
    whose id starts with ``events``) has lost its body yet: the first bodies batch of its
    purge can be caught in the middle, and the ones after it run at full speed."""
    prefix = events if events is not None else f"{conversation_id}-e"
    with pk.db.write() as conn:
        conn.exec_driver_sql(_SLOW_FIRST_UPDATE.format(prefix=prefix, seconds=float(seconds)))


def sleeping_sessions(pk: purgekeeper.Purgekeeper) -> int:
    """Other sessions of the test database inside ``pg_sleep`` now."""
    with pk.db.read() as conn:
        sql = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event = 'PgSleep' AND pid <> pg_backend_pid()"
        )
        return int(conn.scalar(text(sql)))


def step_row(pk: purgekeeper.Purgekeeper, step_id: str) -> Any:
    with pk.db.read() as conn:
        row = conn.execute(text("SELECT * FROM cleanup_steps WHERE id = :id"), {"id": step_id}).first()
    assert row is not None
    return row


def bodies_left(pk: purgekeeper.Purgekeeper, conversation_id: str) -> int:
    with pk.db.read() as conn:
        sql = "SELECT count(*) FROM events WHERE body IS NOT NULL AND id LIKE :prefix"
        return int(conn.scalar(text(sql), {"prefix": f"{conversation_id}-e%"}))


def process_rows(pk: purgekeeper.Purgekeeper) -> list[tuple[str, int, str]]:
    """(role, pid, state) of every process that beat on the test database."""
    return sorted((w.role, w.pid, w.state) for w in pk.list_workers())


def leader_lease_left(pk: purgekeeper.Purgekeeper) -> float | None:
    """Seconds left on the scheduler's leader lease (0 or less: given up or run out; None:
    no scheduler ever led)."""
    with pk.db.read() as conn:
        sql = "SELECT EXTRACT(EPOCH FROM expires_at - now()) FROM leader_leases WHERE name = 'scheduler'"
        left = conn.scalar(text(sql))
    return None if left is None else float(left)
