"""What a worker's main process sees of its children: a thread that notices each one's exit
within ``interval`` (Linux: the children are read from ``/proc``, a zombie counting as exited,
so nothing here reaps them: dramatiq's own loop does), and says so (``on_exit(pid)``).

The worker's main process (``purgekeeper.commands.worker``) makes the steps a child held due
again at once (``purgekeeper.schema.heartbeats.release_dead``), rather than after their leases run
out: a kill -9 of one child then costs its steps a sweep interval, not a lease.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

PROC = Path("/proc")
DEFAULT_INTERVAL_S = 0.2


def living_children(parent: int, proc: Path = PROC) -> set[int]:
    """The pids of ``parent``'s children that have not exited (none where there is no /proc)."""
    found = set()
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # gone meanwhile
            continue
        state, ppid = fields[0], int(fields[1])
        if ppid == parent and state not in ("Z", "X"):
            found.add(int(entry.name))
    return found


class ChildWatch:
    """Calls ``on_exit(pid)`` once for each child of this process that exits while it runs
    (one it saw alive at least once). A failure of ``on_exit`` is logged, and the watch goes on."""

    def __init__(self, on_exit: Callable[[int], object], *, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.on_exit = on_exit
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="purgekeeper-child-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        known: set[int] = set()
        while not self._stop.wait(self.interval_s):
            alive = living_children(os.getpid())
            for pid in sorted(known - alive):
                try:
                    self.on_exit(pid)
                except Exception:  # the database is down: the heartbeat sweep or the lease covers it
                    log.warning("could not release the steps of worker process %d", pid, exc_info=True)
            known = alive
