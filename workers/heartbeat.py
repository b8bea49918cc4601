"""A process's heartbeat: a daemon thread that renews the process's row in
``worker_processes`` (``purgekeeper.schema.heartbeats``) every ``interval``, with the lease owners of the
attempts it runs now, and marks it stopped when the process stops cleanly.

The worker process (``purgekeeper.commands.worker``) beats from its boot to its shutdown, and the
scheduler (``purgekeeper.workers.scheduler``: ``purgectl scheduler``, and the embedded worker and
scheduler of a handle) while its loop runs. A beat that fails (the database is down) is
logged and tried again at the next interval: the row runs out meanwhile, which is what an
operator should see of a process that cannot reach its database.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Sequence

from purgekeeper.schema import heartbeats
from purgekeeper.schema.db import Database
from purgekeeper.schema.heartbeats import ProcessIdentity
from purgekeeper.schema.states import WorkerRole
from purgekeeper.workers import identity, runner
from purgekeeper.workers.shutdown import STOP_JOIN

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = dt.timedelta(seconds=5)


def this_process(role: WorkerRole, *, queues: Sequence[str] = (), threads: int = 0) -> ProcessIdentity:
    """This process, under a new id (its tag, ``purgekeeper.workers.identity``, then random): host,
    pid, role, and the queues and threads it runs steps from (none for a scheduler)."""
    row_id = identity.process_tag() + uuid.uuid4().hex[: 32 - identity.TAG_LENGTH]  # the tag first: release_dead
    return ProcessIdentity(row_id, role.value, socket.gethostname(), os.getpid(), tuple(queues), threads)


class Heartbeat:
    """Beats for ``process`` on ``db`` every ``interval`` once started; ``holding`` says the
    lease owners of the attempts the process runs now (``purgekeeper.workers.runner``'s, by default)."""

    def __init__(
        self,
        db: Database,
        process: ProcessIdentity,
        *,
        interval: dt.timedelta = DEFAULT_INTERVAL,
        holding: Callable[[], Sequence[str]] = runner.active_owners,
    ) -> None:
        self.db = db
        self.process = process
        self.interval = interval
        self.holding = holding
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self._stopped = False
        self._stopping = threading.Lock()

    def start(self) -> None:
        """Beat once now, then every ``interval`` in a thread (once: a second call does nothing)."""
        if self._thread is not None:
            return
        self.beat()
        self._thread = threading.Thread(target=self._run, name="purgekeeper-heartbeat", daemon=True)
        self._thread.start()
        log.info("%s process %s beats every %gs", self.process.role, self.process.id, self.interval.total_seconds())

    def beat(self) -> bool:
        """One beat; a failure is logged (once until a beat succeeds again) and returns False."""
        write = functools.partial(
            heartbeats.beat,
            process=self.process,
            holding=self.holding(),
            dead_after=heartbeats.dead_after(self.interval),
        )
        try:
            self.db.transact(write)
        except Exception as exc:  # the next beat tries again; meanwhile the row runs out
            if not self._failing:
                log.warning("heartbeat of %s process %s failed (%s)", self.process.role, self.process.id, exc)
            self._failing = True
            return False
        self._failing = False
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval.total_seconds()):
            self.beat()

    def stop(self) -> None:
        """End the beats and mark the row stopped (best effort: unmarked, it runs out); once.
        A beat still under way after ``STOP_JOIN`` is not waited for: a late beat never
        brings a stopped process back (``purgekeeper.schema.heartbeats.beat``)."""
        with self._stopping:
            if self._stopped:
                return
            self._stopped = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_JOIN.total_seconds())
        try:
            self.db.transact(functools.partial(heartbeats.stop, process_id=self.process.id))
        except Exception as exc:
            log.warning(
                "could not mark %s process %s stopped (%s); its row runs out", self.process.role, self.process.id, exc
            )
