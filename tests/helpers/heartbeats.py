"""Processes' heartbeats under test: a ``Heartbeat`` of a made-up process of this test process
whose thread never beats inside a test (the test beats it), and a process's last beat moved
into the past with raw SQL (a process that stopped beating that long ago)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import bindparam, text

import purgekeeper
from purgekeeper.schema.states import WorkerRole
from purgekeeper.schema.tables import UtcDateTime
from purgekeeper.workers import broker
from purgekeeper.workers.heartbeat import Heartbeat, this_process

SLOW = dt.timedelta(seconds=30)  # no beat of the thread lands inside a test
_SHIFT = text(
    "UPDATE worker_processes SET last_seen_at = :seen, alive_until = :until, started_at = :seen WHERE id = :id"
).bindparams(bindparam("seen", type_=UtcDateTime()), bindparam("until", type_=UtcDateTime()))


def heartbeat(
    pk: purgekeeper.Purgekeeper, role: WorkerRole = WorkerRole.WORKER, *, threads: int = 4, holding: Sequence[str] = ()
) -> Heartbeat:
    """A process of ``role`` (a worker of ``threads`` threads on the cleanup queue), holding the
    attempts whose lease owners are ``holding``."""
    runs_steps = role != WorkerRole.SCHEDULER
    process = this_process(role, queues=(broker.QUEUE,), threads=threads) if runs_steps else this_process(role)
    return Heartbeat(pk.db, process, interval=SLOW, holding=lambda: list(holding))


def seen_ago(pk: purgekeeper.Purgekeeper, process_id: str, ago: dt.timedelta) -> None:
    """The process's last beat (and start), and so its dead bound, were ``ago`` earlier."""
    row = next(w for w in pk.list_workers() if w.process_id == process_id)
    bound = row.alive_until - row.last_seen_at
    with pk.db.write() as conn:
        conn.execute(
            _SHIFT, {"seen": row.last_seen_at - ago, "until": row.last_seen_at - ago + bound, "id": process_id}
        )
