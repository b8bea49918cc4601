"""The heartbeats of the cleanup machinery's processes (``worker_processes``, migration 0013).

Each worker, scheduler and embedded process (``purgekeeper.schema.states.WorkerRole``) writes one row when
it starts, under a random id of that start, and renews it every few seconds
(``purgekeeper.workers.heartbeat``): when it was last seen, on the database clock, and until when it
counts as alive: that moment plus the dead bound the process gives (3 of its intervals), so
processes with different intervals share the table. A clean stop marks the row stopped; a
process that died or froze leaves its row to run out. Every beat also deletes the rows
that have been dead for longer than ``PRUNE_AFTER``: the table holds the processes of the
last day, however often they restart.

"Nobody to do the work" (:attr:`Presence.nobody_to_work`) is read here: processes that run
steps have beaten, and none of them is alive now.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, case, delete, func, select, update

from purgekeeper.schema.content_queries import upsert_insert
from purgekeeper.schema.ledger import database_now
from purgekeeper.schema.states import RUNS_STEPS, StepStatus, WorkerRole, values
from purgekeeper.schema.tables import cleanup_steps, worker_processes

DEAD_AFTER_BEATS = 3  # missed heartbeats before a process counts as dead
MIN_DEAD_AFTER = dt.timedelta(seconds=2)  # a sub-second interval still allows a pause of GC or I/O
PRUNE_AFTER = dt.timedelta(days=1)
ROLES = values(WorkerRole)

_c = worker_processes.c


@dataclass(frozen=True)
class ProcessIdentity:
    """What a process says of itself in its row; ``id`` is random per start."""

    id: str
    role: str
    host: str
    pid: int
    queues: tuple[str, ...] = ()
    threads: int = 0


def dead_after(interval: dt.timedelta) -> dt.timedelta:
    """How long after its last beat a process beating every ``interval`` counts as dead."""
    return max(interval * DEAD_AFTER_BEATS, MIN_DEAD_AFTER)


def beat(
    conn: Connection,
    process: ProcessIdentity,
    *,
    holding: Sequence[str],
    dead_after: dt.timedelta,
    prune_after: dt.timedelta = PRUNE_AFTER,
) -> None:
    """Write or renew ``process``'s row (never one already stopped), holding the attempts whose
    lease owners are ``holding``; then delete the rows dead for longer than ``prune_after``."""
    now = database_now(conn)
    renewed = {"last_seen_at": now, "alive_until": now + dead_after, "holding": json.dumps(sorted(holding))}
    statement = upsert_insert(conn, worker_processes).values(
        id=process.id,
        role=process.role,
        host=process.host,
        pid=process.pid,
        queues=json.dumps(list(process.queues)),
        threads=process.threads,
        started_at=now,
        **renewed,
    )
    conn.execute(statement.on_conflict_do_update(index_elements=["id"], set_=renewed, where=_c.stopped_at.is_(None)))
    conn.execute(delete(worker_processes).where(_c.alive_until < now - prune_after))


def stop(conn: Connection, process_id: str) -> None:
    """Mark the process stopped now (a clean stop): no longer alive, holding nothing."""
    now = database_now(conn)
    conn.execute(
        update(worker_processes)
        .where(_c.id == process_id, _c.stopped_at.is_(None))
        .values(stopped_at=now, last_seen_at=now, alive_until=now, holding="[]")
    )


def processes(conn: Connection, *, limit: int) -> list[Any]:
    """Up to ``limit`` rows, the alive first, then the most recently seen."""
    return list(conn.execute(select(worker_processes).order_by(_c.alive_until.desc(), _c.id).limit(limit)).all())


def decoded(text: str) -> tuple[str, ...]:
    """A JSON list column (``queues``, ``holding``) as a tuple of strings."""
    return tuple(str(item) for item in json.loads(text))


@dataclass(frozen=True)
class Presence:
    """Processes by role: how many have a row (alive, dead or stopped, within the last day)
    and how many are alive now."""

    seen: Mapping[str, int]
    alive: Mapping[str, int]

    @property
    def nobody_to_work(self) -> bool:
        """Processes that run steps have beaten, and none of them is alive now. A database
        none has ever beaten on (a fresh install, a handle with ``workers="none"``) is not
        judged: the alert on ``purgekeeper_workers_alive`` covers a worker never started."""
        return any(self.seen.get(role) for role in RUNS_STEPS) and not any(self.alive.get(r) for r in RUNS_STEPS)


def presence(conn: Connection, now: dt.datetime) -> Presence:
    """One aggregate statement over the (small) table; every role is in both maps."""
    alive_now = and_(_c.alive_until > now, _c.stopped_at.is_(None))
    query = select(_c.role, func.count(), func.count(case((alive_now, 1)))).group_by(_c.role)
    seen, alive = dict.fromkeys(ROLES, 0), dict.fromkeys(ROLES, 0)
    for role, rows, living in conn.execute(query):
        seen[role], alive[role] = int(rows), int(living)
    return Presence(seen=seen, alive=alive)


TAG_LENGTH = 16  # hex digits: a process's tag leads its row's id (purgekeeper.workers.identity)
_TAG = re.compile(f"[0-9a-f]{{{TAG_LENGTH}}}")


def release_dead(conn: Connection, *, tag: str | None = None) -> list[str]:
    """Make the steps held by dead processes due now, without waiting for their leases to run
    out: those of the process whose tag is ``tag`` (its main process saw it exit), or, with
    none given, those of every process whose heartbeat row says it missed its beats (not
    stopped, ``alive_until`` passed) while no row of the same process is alive. A step is
    one of a process's when its lease owner carries the process's tag
    (``purgekeeper.workers.runner.worker_identity``): a process restarted with the same pid, or
    another container's with the same host name, has a tag of its own. Released, a step is
    exactly one whose lease expired: the next claim closes the attempt ``lease_lost``, and a
    late write of a process that was only frozen is refused by its owner guard. Returns the
    ids released."""
    now = database_now(conn)
    c = cleanup_steps.c
    if tag is not None:
        if not _TAG.fullmatch(tag):
            raise ValueError(f"not a process tag: {tag!r}")
        held = c.lease_owner.contains(f":{tag}:", autoescape=True)
    else:
        dead, alive = worker_processes.alias("dead"), worker_processes.alias("alive")
        dead_tag, alive_tag = func.substr(dead.c.id, 1, TAG_LENGTH), func.substr(alive.c.id, 1, TAG_LENGTH)
        still_alive = (
            select(alive.c.id)
            .where(alive_tag == dead_tag, alive.c.stopped_at.is_(None), alive.c.alive_until >= now)
            .exists()
        )
        held = (
            select(dead.c.id)
            .where(dead.c.stopped_at.is_(None), dead.c.alive_until < now, ~still_alive)
            .where(c.lease_owner.like("%:" + dead_tag + ":%"))
            .exists()
        )
    rows = conn.execute(
        update(cleanup_steps)
        .where(c.status == StepStatus.RUNNING.value, c.lease_expires_at > now, held)
        .values(lease_expires_at=now, updated_at=now)
        .returning(c.id)
    ).all()
    return sorted(row.id for row in rows)
