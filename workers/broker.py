"""The broker and the one actor. The broker only carries wake-ups: a message names a database
(by key) and a step id, and the step row decides everything else.

- With a broker URL: dramatiq's ``RedisBroker`` (run ``dramatiq commands.worker``).
- Without: a ``StubBroker`` and an in-process ``dramatiq.Worker`` in threads (embedded mode).

dramatiq's own retries are off: retries are the step row's business, not Redis's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import dramatiq
from dramatiq.brokers.stub import StubBroker

from workers import runner
from workers.cleanup import StepContext

log = logging.getLogger(__name__)

QUEUE = "purgekeeper-cleanup"
ACTOR_NAME = "run_cleanup_step"
ACTOR_TIME_LIMIT_MS = 60 * 60 * 1000  # a hung attempt is reclaimed through its lease long before
EMBEDDED_WORKER_THREADS = 2


@dataclass(frozen=True)
class Runtime:
    ctx: StepContext
    policy: runner.Policy


_runtimes: dict[str, Runtime] = {}
_holders: dict[str, int] = {}  # handles in this process serving each database
_lock = threading.Lock()
_broker: dramatiq.Broker | None = None
_broker_url: str | None = None
_actor: dramatiq.Actor[..., None] | None = None
_embedded_worker: dramatiq.Worker | None = None


def register(key: str, runtime: Runtime) -> None:
    """Serve the database ``key`` (its ledger database id) in this process. Several handles
    on one database share the serving; the last one to unregister ends it."""
    with _lock:
        _runtimes.setdefault(key, runtime)
        _holders[key] = _holders.get(key, 0) + 1


def unregister(key: str) -> None:
    with _lock:
        _holders[key] = _holders.get(key, 1) - 1
        if _holders[key] <= 0:
            _holders.pop(key, None)
            _runtimes.pop(key, None)


def run_cleanup_step(database_key: str, step_id: str) -> None:
    """The actor: load by id, run the plain function, wake what it unparked."""
    runtime = _runtimes.get(database_key)
    if runtime is None:
        log.warning("no database %s is served by this worker; step %s is left to the sweep", database_key, step_id)
        return
    outcome = runner.run_step(runtime.ctx, step_id, policy=runtime.policy)
    if outcome.wake:
        enqueue(database_key, outcome.wake)


def setup(broker_url: str | None) -> dramatiq.Broker:
    """The process's broker, made once: Redis for a URL, a StubBroker without one."""
    global _broker, _broker_url, _actor
    with _lock:
        if _broker is not None:
            if broker_url != _broker_url:
                raise RuntimeError(f"this process already uses broker {_broker_url!r}, not {broker_url!r}")
            return _broker
        broker: dramatiq.Broker
        if broker_url:
            from dramatiq.brokers.redis import RedisBroker

            broker = RedisBroker(url=broker_url)
        else:
            broker = StubBroker()
        dramatiq.set_broker(broker)
        declare = dramatiq.actor(
            actor_name=ACTOR_NAME, queue_name=QUEUE, broker=broker, max_retries=0, time_limit=ACTOR_TIME_LIMIT_MS
        )
        _actor = declare(run_cleanup_step)
        _broker, _broker_url = broker, broker_url
        return broker


def enqueue(database_key: str, step_ids: Sequence[str]) -> None:
    """Send one wake-up per step. Raises if the broker is down; callers log and move on."""
    if _actor is None:
        raise RuntimeError("the broker is not set up")
    for step_id in step_ids:
        _actor.send(database_key, step_id)


def start_embedded_worker() -> dramatiq.Worker:
    """The in-process worker on the StubBroker, started once per process."""
    global _embedded_worker
    broker = setup(None)
    with _lock:
        if _embedded_worker is None:
            _embedded_worker = dramatiq.Worker(broker, worker_threads=EMBEDDED_WORKER_THREADS)
            _embedded_worker.start()
        return _embedded_worker
