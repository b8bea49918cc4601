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
    """Calls ``on_exit(pids)`` with the children of this process that exited (each one it saw
    alive at least once) since the last call, every ``interval_s`` while it runs, and once more
    when it stops (:meth:`stop` waits for that last call, up to ``join_s``: a main process
    that ends right after its worker processes must not lose the release of one that died).
    A failure of ``on_exit`` is logged, and the watch goes on."""

    def __init__(
        self, on_exit: Callable[[list[int]], object], *, interval_s: float = DEFAULT_INTERVAL_S, join_s: float = 5.0
    ) -> None:
        self.on_exit = on_exit
        self.interval_s = interval_s
        self.join_s = join_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="purgekeeper-child-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.join_s)

    def _run(self) -> None:
        known: set[int] = set()
        while True:
            stopping = self._stop.wait(self.interval_s)
            alive = living_children(os.getpid())
            exited = sorted(known - alive)
            if exited:
                try:
                    self.on_exit(exited)
                except Exception:  # the database is down: the heartbeat sweep or the lease covers it
                    log.warning("could not release the steps of worker processes %s", exited, exc_info=True)
            known = alive
            if stopping:
                return
