"""The console's Workers view: what it reads and what its template is given.

The route and the sign-in live with the other console routes (``commands/web/status.py``);
this module owns what the page shows, so that the view can change without touching them.

It lists the processes (``pk.list_workers()``: every worker, scheduler and embedded process
that sent a heartbeat in the last day, the idle ones included, the dead ones flagged), then
the live leases by owner (``pk.worker_leases()``), each with the process that holds it when
one says so: a lease held by no listed process belongs to a process that sends no heartbeat
(an older version, or a test's stand-in).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.records import WorkerLeases
from purgekeeper.commands.worker_records import WorkerProcess
from purgekeeper.schema.states import RUNS_STEPS, WorkerRole

TEMPLATE = "workers.html"
PROCESSES_SHOWN = 200


@dataclass(frozen=True)
class WorkersView:
    now: dt.datetime  # the database's clock, which every time on the page is relative to
    processes: tuple[WorkerProcess, ...]
    workers: tuple[WorkerLeases, ...]  # the live leases, by owner

    @property
    def alive(self) -> dict[str, int]:
        """Live processes by role, every role."""
        counts = {role.value: 0 for role in WorkerRole}
        for process in self.processes:
            counts[process.role] += process.alive
        return counts

    @property
    def nobody_to_work(self) -> bool:
        """Processes that run steps have beaten and none of them is alive: due steps wait, and
        their purges need attention (``purgekeeper.schema.heartbeats.Presence.nobody_to_work``)."""
        seen = any(process.role in RUNS_STEPS for process in self.processes)
        return seen and not any(self.alive[role] for role in RUNS_STEPS)

    def holder_of(self) -> dict[str, WorkerProcess]:
        """The listed process holding each step, by step id."""
        return {step.step_id: process for process in self.processes for step in process.holding}

    def context(self) -> dict[str, Any]:
        """What the template is given besides the frame."""
        return {
            "processes": self.processes,
            "workers": self.workers,
            "alive": self.alive,
            "nobody_to_work": self.nobody_to_work,
            "holder_of": self.holder_of(),
        }


def gather(pk: Purgekeeper) -> WorkersView:
    """Bounded reads only; raises ``PurgekeeperError`` when the database cannot answer."""
    return WorkersView(
        now=pk.database_now(),
        processes=tuple(pk.list_workers(limit=PROCESSES_SHOWN)),
        workers=tuple(pk.worker_leases()),
    )
