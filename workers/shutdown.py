"""How purgekeeper's processes stop: the bounds a SIGTERM is answered within, the answer to a
SIGTERM that comes more than once, and the watchdog that holds a process to its bound.

Supervisors reach a process group in different ways: a SIGTERM to the main process alone
(which passes it on: dramatiq's main process does), to the whole group at once (honcho,
``kill -TERM -- -PGID``), or to each process on its own (systemd's ``KillMode=control-group``,
``docker stop``, Kubernetes). So a process may be told to stop twice, by the supervisor and by
its parent. The first SIGTERM starts a clean stop; a repeat is logged and changes nothing
(:class:`StopSignals`). A clean stop ends every step's attempt at a safe point, between two
committed batches, or abandons a batch that does not get there within ``STOP_GRACE`` (its
transaction rolls back; batches are idempotent), gives the steps back with their leases
cleared, and marks the process ``stopped``. The whole stop takes at most ``STOP_BOUND``; a
process still running then (its database unreachable, say) is ended by its watchdog, and its
row and leases run out as a killed process's would.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType

log = logging.getLogger(__name__)

# An attempt's batch in flight gets this long to commit after a SIGTERM; then it is abandoned
# (it rolls back, and the next attempt does it again: batches are idempotent). A batch of the
# default size takes well under a second (bench/cleanup.py); one that takes longer, or waits on
# a row lock, is cheaper to do again than to wait for.
STOP_GRACE = dt.timedelta(seconds=2)
# From the first SIGTERM to the process's exit, at most: noticing it (dramatiq's worker
# process looks once a second), the grace, giving the steps back, marking the process stopped,
# and a margin (serve first lets its HTTP requests finish, for up to 3 s). Supervisors must
# wait at least this long before a SIGKILL (deploy/systemd: TimeoutStopSec=15s).
STOP_BOUND = dt.timedelta(seconds=10)
# The statements of the stop itself (giving steps back, marking the process stopped) wait at
# most this long for a row lock.
STOP_LOCK_WAIT = dt.timedelta(seconds=1)
# How long a stop waits for a loop's thread (a heartbeat's, a scheduler's round) to end
# before it goes on without it.
STOP_JOIN = dt.timedelta(seconds=2)
OVERDUE_EXIT_CODE = 1  # what a process its watchdog ends exits with


class Watchdog:
    """Ends the process ``bound`` after it is armed (``os._exit``: no clean-up runs, as none
    could finish) unless it exits first. Armed once; a second ``arm`` does nothing."""

    def __init__(self, bound: dt.timedelta = STOP_BOUND, *, end: Callable[[int], object] = os._exit) -> None:
        self.bound = bound
        self.end = end
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def arm(self) -> None:
        with self._lock:
            if self._timer is not None:
                return
            self._timer = threading.Timer(self.bound.total_seconds(), self._expire)
            self._timer.daemon = True
            self._timer.name = "purgekeeper-stop-watchdog"
            self._timer.start()

    def disarm(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()

    def _expire(self) -> None:
        log.error(
            "did not stop within %gs of the SIGTERM; exiting now (its leases and its process row run out)",
            self.bound.total_seconds(),
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        self.end(OVERDUE_EXIT_CODE)


class StopSignals:
    """A process's answer to the signals that ask it to stop: the first one arms the watchdog
    and runs ``on_stop`` (with the signal's number); a repeat is logged and ignored."""

    def __init__(self, on_stop: Callable[[int], object], *, watchdog: Watchdog | None = None) -> None:
        self.on_stop = on_stop
        self.watchdog = watchdog or Watchdog()
        self.stopping = threading.Event()

    def install(self, signals: Iterable[signal.Signals] = (signal.SIGTERM,)) -> None:
        """Answer ``signals`` from now on (the main thread only, as Python requires)."""
        for signum in signals:
            signal.signal(signum, self)

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping.is_set():
            log.info("%s again: already stopping", signal.Signals(signum).name)
            return
        self.stopping.set()
        self.watchdog.arm()
        self.on_stop(signum)
