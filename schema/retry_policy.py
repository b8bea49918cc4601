"""How purgekeeper retries, in one place: which fault is retried where, how often, and why.
Every mechanism below reads its numbers from here; none retries what another one does.

1. **A deadlock, a serialization failure, a busy SQLite database, a connection lost before
   the commit.** ``purgekeeper.schema.db.Database.transact`` runs the whole transaction again, up to
   ``WRITE_ATTEMPTS`` in all, with random exponential waits up to ``TRANSACTION_WAIT_MAX_S``.
   Nothing of it committed, so a rerun is safe, and no caller should see a conflict that a
   rerun resolves in milliseconds.
2. **A lost database connection during a step's attempt** (a restart, a failover, a
   terminated session). ``purgekeeper.workers.runner`` (tenacity) runs the attempt's work again for as
   long as the step's lease, waiting exponentially up to ``TRANSIENT_WAIT_MAX_S``: the
   batches are idempotent, and a database back within the lease should not cost an attempt.
3. **Another transient infrastructure fault in an attempt** (a locked database, a blip).
   ``purgekeeper.workers.runner`` tries ``TRANSIENT_ATTEMPTS`` times before it counts as 5.
4. **A row lock a batch waits on** (a writer's, a frozen session's). ``purgekeeper.workers.cleanup``'s
   batch loop waits ``LOCK_TIMEOUT_SHARE`` of the lease, renews the lease and tries again,
   up to ``MAX_LOCK_WAIT`` in all: waiting on someone else's lock burns no attempt. Past the
   budget it is 5.
5. **Anything else an attempt raises** (an I/O error, a broken file, a lock held past the
   budget). The step's row (``purgekeeper.schema.steps``, ``purgekeeper.workers.runner``): the step goes
   ``retrying``, due again after ``backoff`` (exponential from ``BACKOFF_BASE``, capped at
   ``BACKOFF_CAP``, with jitter), up to its ``max_attempts`` counted at each claim; then
   ``incomplete``. The row is durable: the schedule survives crashes and lost queues, and
   an operator sees it and re-arms it.
6. **A message the broker delivers twice, or loses.** Nobody retries it
   (``BROKER_RETRIES`` = 0): the step's row is the only retry state; the scheduler's sweep
   sends again what is due, and a duplicate finds its step not due.

A proof that can never succeed (Memory ownership no longer provable) is not retried at
all: the step ends incomplete at once.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable

# -- the transaction (purgekeeper.schema.db) ------------------------------------------------------------
WRITE_ATTEMPTS = 5
TRANSACTION_WAIT_MAX_S = 0.5

# -- an attempt's transient faults (purgekeeper.workers.runner) -----------------------------------------
TRANSIENT_ATTEMPTS = 3  # of a transient fault other than a lost connection
TRANSIENT_WAIT_MAX_S = 2.0

# -- row locks a batch waits on (purgekeeper.workers.cleanup) --------------------------------------------
LOCK_TIMEOUT_SHARE = 1 / 3  # of the lease, per wait
MAX_LOCK_WAIT = dt.timedelta(minutes=5)

# -- the step's own schedule (purgekeeper.schema.steps, purgekeeper.workers.runner) ----------------------------------
LEASE = dt.timedelta(seconds=30)
BACKOFF_BASE = dt.timedelta(seconds=2)
BACKOFF_CAP = dt.timedelta(minutes=10)

# -- the broker (purgekeeper.workers.broker) -------------------------------------------------------------
BROKER_RETRIES = 0


def backoff(attempt: int, *, base: float, cap: float, rand: Callable[[], float] = random.random) -> float:
    """Seconds before the next attempt: exponential in the attempt, capped, with equal jitter."""
    ceiling = min(cap, base * 2 ** max(attempt - 1, 0))
    return ceiling / 2 + rand() * ceiling / 2
