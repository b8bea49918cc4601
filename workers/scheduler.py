"""The scheduler: one leader at a time (a lease row in the database) re-sends due steps and
steps whose lease expired, at start-up and every few seconds. A sweep by a process that is
not the leader is harmless: a duplicate wake-up finds the step claimed and does nothing.

While its loop runs, leader or not, it beats (``purgekeeper.workers.heartbeat``) every sweep interval:
as a ``scheduler`` process by default, as ``embedded`` when a handle runs it beside its
in-process worker.

It logs when it becomes or stops being the leader (INFO), and a failed round (WARNING); the
wake-ups it sends are logged where they are sent (``purgekeeper.workers.broker``).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Sequence

from purgekeeper.schema import heartbeats, leadership, steps
from purgekeeper.schema.db import Database
from purgekeeper.schema.states import WorkerRole
from purgekeeper.workers.heartbeat import Heartbeat, this_process
from purgekeeper.workers.runner import worker_identity
from purgekeeper.workers.shutdown import STOP_JOIN

log = logging.getLogger(__name__)

LEADER_NAME = "scheduler"
DEFAULT_SWEEP_INTERVAL = dt.timedelta(seconds=5)
DEFAULT_RESEND_AFTER = dt.timedelta(seconds=30)
SWEEP_LIMIT = 1000

Enqueue = Callable[[Sequence[str]], None]
Queued = Callable[[], "set[str] | None"]  # the step ids with a wake-up in the broker, or None: unknown


def sweep(db: Database, enqueue: Enqueue, *, limit: int = SWEEP_LIMIT) -> int:
    """Release the steps of processes whose heartbeats say they died (``heartbeats.release_dead``:
    their leases need not run out), then re-send every step that is due or whose lease
    expired; returns how many were sent."""
    released = db.transact(heartbeats.release_dead)
    if released:
        log.warning(
            "%d step(s) held by processes that missed their heartbeats are due again: %s",
            len(released),
            ", ".join(released[:10]),
        )
    with db.read() as conn:
        step_ids = steps.due_steps(conn, limit=limit)
    if step_ids:
        enqueue(step_ids)
    return len(step_ids)


class Scheduler:
    """A thread that sweeps while it holds the leader lease."""

    def __init__(
        self,
        db: Database,
        enqueue: Enqueue,
        *,
        interval: dt.timedelta = DEFAULT_SWEEP_INTERVAL,
        resend_after: dt.timedelta = DEFAULT_RESEND_AFTER,
        after_sweep: Callable[[], object] | None = None,
        queued: Queued | None = None,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        self.db = db
        self.enqueue = enqueue
        self.interval = interval
        self.resend_after = resend_after
        self.after_sweep = after_sweep
        self.queued = queued
        self._sent: dict[str, float] = {}
        self._leading = False
        self.owner = worker_identity()
        self.heartbeat = heartbeat or Heartbeat(db, this_process(WorkerRole.SCHEDULER), interval=interval)
        self._stop = threading.Event()
        self._sweeping = True
        self._thread: threading.Thread | None = None

    def lead(self) -> bool:
        lease = max(self.interval * 3, dt.timedelta(seconds=1))
        leads = self.db.transact(
            lambda conn: leadership.take_leadership(conn, LEADER_NAME, owner=self.owner, lease=lease)
        )
        if leads != self._leading:
            self._leading = leads
            log.info("scheduler %s %s", self.owner, "leads now" if leads else "no longer leads; another one does")
        return leads

    def tick(self) -> int:
        """One round: sweep if this process leads. Errors are logged; the next tick retries.
        A round that failed (the database or the broker was down) forgets what was sent: a
        wake-up a worker took meanwhile may have found no database to claim its step in."""
        try:
            if not self._sweeping or not self.lead():
                return 0
            sent = sweep(self.db, self._send_unless_recent)
        except Exception:
            log.warning("scheduler sweep failed; retrying in %gs", self.interval.total_seconds(), exc_info=True)
            self._sent.clear()
            return 0
        if self.after_sweep is not None:
            try:
                self.after_sweep()
            except OSError as exc:  # the checkpoint directory: its reason, never its path
                log.warning("the automatic checkpoint failed (%s); retrying after the next sweep", exc.strerror)
            except Exception:
                log.warning("the automatic checkpoint failed; retrying after the next sweep", exc_info=True)
        return sent

    def _send_unless_recent(self, step_ids: Sequence[str]) -> None:
        """Wake-ups never pile up in the queue while no worker runs. When the broker can say
        which steps have a wake-up queued (Redis: waiting, delayed, or taken and not yet
        acknowledged), a due step is sent only when it has none, at once (its wake-up was
        taken and came to nothing) and never while one waits: at most one queued wake-up per
        due step. When it cannot say (the in-process broker), a step still due is sent again
        once ``resend_after`` has passed."""
        now = time.monotonic()
        self._sent = {k: t for k, t in self._sent.items() if now - t < self.resend_after.total_seconds()}
        waiting = self.queued() if self.queued is not None else None
        if waiting is not None:
            fresh = [s for s in step_ids if s not in waiting]
        else:
            fresh = [s for s in step_ids if s not in self._sent]
        if fresh:
            self.enqueue(fresh)
            self._sent.update(dict.fromkeys(fresh, now))

    def run(self) -> None:
        """Sweep every ``interval`` until asked to stop, beating meanwhile; a clean end marks
        the process stopped."""
        self.heartbeat.start()
        try:
            while not self._stop.is_set():
                self.tick()
                self._stop.wait(self.interval.total_seconds())
        finally:
            self.heartbeat.stop()

    def stop_sweeping(self) -> None:
        """Send nothing more, and run no more duties, but go on beating until ``stop`` (a handle
        that stops winds its in-process worker down meanwhile)."""
        self._sweeping = False

    def stop_soon(self) -> None:
        """Ask the loop to end after the current tick (from a signal handler)."""
        self._stop.set()

    def start(self) -> None:
        """Run the loop in a thread, its first beat written before this returns."""
        self.heartbeat.start()
        self._thread = threading.Thread(target=self.run, name="purgekeeper-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the loop, mark the process stopped, then give up the leader lease (best effort:
        it runs out anyway). A round still under way after ``STOP_JOIN`` is not waited for."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_JOIN.total_seconds())
        self.heartbeat.stop()
        self.release()

    def release(self) -> None:
        try:
            self.db.transact(lambda conn: leadership.give_up_leadership(conn, LEADER_NAME, owner=self.owner))
        except Exception:  # the database is gone: the lease runs out by itself
            log.warning("could not give up the scheduler's leader lease; it expires by itself", exc_info=True)
