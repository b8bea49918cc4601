"""What ``list_workers`` returns: the worker, scheduler and embedded processes, as their
heartbeats show them (``purgekeeper.schema.heartbeats``), with the steps each one holds now."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from purgekeeper.commands.purge_records import HeldStep
from purgekeeper.schema import heartbeats


@dataclass(frozen=True)
class WorkerProcess:
    """One start of a process: ``role`` is ``worker``, ``scheduler`` or ``embedded``
    (``purgekeeper.schema.states.WorkerRole``); ``queues`` and ``threads`` are what it runs steps from and
    how many at once (none for a scheduler). Times are the database clock. ``alive`` while its
    heartbeat is not overdue (``alive_until``: the last beat plus 3 intervals) and it did not
    stop; ``holding`` is the steps its attempts hold under a live lease."""

    process_id: str
    role: str
    host: str
    pid: int
    queues: tuple[str, ...]
    threads: int
    started_at: dt.datetime
    last_seen_at: dt.datetime
    alive_until: dt.datetime
    stopped_at: dt.datetime | None
    alive: bool
    holding: tuple[HeldStep, ...]

    @property
    def state(self) -> str:
        """``alive``, ``stopped`` (it said so) or ``dead`` (its heartbeats stopped coming)."""
        if self.stopped_at is not None:
            return "stopped"
        return "alive" if self.alive else "dead"

    @classmethod
    def from_row(cls, row: Any, *, now: dt.datetime, held: Mapping[str, Sequence[HeldStep]]) -> WorkerProcess:
        """``held``: the live leases' steps by lease owner (``row.holding`` names its owners)."""
        owners = heartbeats.decoded(row.holding)
        return cls(
            process_id=row.id,
            role=row.role,
            host=row.host,
            pid=int(row.pid),
            queues=heartbeats.decoded(row.queues),
            threads=int(row.threads),
            started_at=row.started_at,
            last_seen_at=row.last_seen_at,
            alive_until=row.alive_until,
            stopped_at=row.stopped_at,
            alive=row.stopped_at is None and row.alive_until > now,
            holding=tuple(step for owner in owners for step in held.get(owner, ())),
        )
