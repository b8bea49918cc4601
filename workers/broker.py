"""The broker and the one actor. The broker only carries wake-ups: a message names a database
(by key) and a step id, and the step row decides everything else.

- With a broker URL: dramatiq's ``RedisBroker`` (run ``dramatiq purgekeeper.commands.worker``).
- Without: a ``StubBroker`` and an in-process ``dramatiq.Worker`` in threads (embedded mode).

dramatiq's own retries are off: retries are the step row's business, not Redis's.

A worker on Redis looks at an idle queue again within ``IDLE_POLL_MS`` (:class:`IdlePoll`):
dramatiq's Redis consumer has no blocking pop and sleeps up to 1 s between two fetches of an
empty queue, and a purge's wake-ups each arrive in an idle queue (its acceptance wakes the
first step, a step's last batch wakes the one it unparked), so each waited about half a
second that embedded mode never waits.

Every wake-up sent is logged (INFO ``step sent``, with ``step_id``, and ``purge_id`` and
``step_kind`` when the sender passes its database to look them up: one read by primary key
per call, made only when INFO is logged).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import dramatiq
from dramatiq import Message
from dramatiq.brokers.stub import StubBroker
from dramatiq.common import dq_name, q_name

from purgekeeper.schema import retry_policy, steps
from purgekeeper.schema.db import Database
from purgekeeper.workers import runner
from purgekeeper.workers.cleanup import StepContext

log = logging.getLogger(__name__)

QUEUE = "purgekeeper-cleanup"
ACTOR_NAME = "run_cleanup_step"
ACTOR_TIME_LIMIT_MS = 60 * 60 * 1000  # a hung attempt is reclaimed through its lease long before
EMBEDDED_WORKER_THREADS = 2
# The longest an idle Redis consumer sleeps between two fetches (dramatiq's default is 1 s).
# Each consumer thread (a queue and its delay queue, per worker process) then fetches about
# 13 times a second while idle: a Lua call Redis answers in microseconds.
IDLE_POLL_MS = 100


@dataclass(frozen=True)
class Runtime:
    ctx: StepContext
    policy: runner.Policy


_runtimes: dict[str, Runtime] = {}
_holders: dict[str, int] = {}  # handles in this process serving each database
_lock = threading.Lock()
_buses: dict[str | None, Bus] = {}  # by broker URL; None is the in-process StubBroker
_embedded_worker: dramatiq.Worker | None = None


@dataclass(frozen=True)
class Bus:
    """One broker and the actor declared on it (dramatiq declares an actor per broker, so
    one process can send to Redis and run an in-process StubBroker worker at once)."""

    broker: dramatiq.Broker
    actor: dramatiq.Actor[..., None]


class IdlePoll(dramatiq.Middleware):
    """Bound the idle sleep of the consumers of a worker booting on this broker: they are
    made after ``before_worker_boot``, with the worker's ``worker_timeout`` (which the
    dramatiq CLI has no option for: only its ``dramatiq_worker_timeout`` environment
    variable, read when dramatiq is imported)."""

    def __init__(self, idle_poll_ms: int = IDLE_POLL_MS) -> None:
        self.idle_poll_ms = idle_poll_ms

    def before_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        worker.worker_timeout = min(worker.worker_timeout, self.idle_poll_ms)


def register(key: str, runtime: Runtime) -> None:
    """Serve the database ``key`` (its ledger database id) in this process. Several handles
    on one database share the serving; the last one to unregister ends it."""
    with _lock:
        _runtimes.setdefault(key, runtime)
        _holders[key] = _holders.get(key, 0) + 1


def unregister(key: str) -> Runtime | None:
    """One handle fewer serves ``key``; returns the runtime whose serving the last one ended
    (its attempts still running are the caller's to wind down), else None."""
    with _lock:
        _holders[key] = _holders.get(key, 1) - 1
        if _holders[key] > 0:
            return None
        _holders.pop(key, None)
        return _runtimes.pop(key, None)


def stop_soon(key: str) -> None:
    """The attempts serving ``key`` in this process end at their next safe point, and no new
    one begins (a signal handler may call this; ``unregister`` and
    ``purgekeeper.workers.runner.wind_down`` then end the serving)."""
    runtime = _runtimes.get(key)
    if runtime is not None:
        runtime.ctx.stopping.set()


def run_cleanup_step(broker_url: str | None, database_key: str, step_id: str) -> None:
    """The actor's body: load by id, run the plain function, wake what it unparked on the
    broker that delivered the message."""
    runtime = _runtimes.get(database_key)
    if runtime is None:
        log.warning("no database %s is served by this worker; step %s is left to the sweep", database_key, step_id)
        return
    outcome = runner.run_step(runtime.ctx, step_id, policy=runtime.policy)
    if outcome.wake:
        enqueue(broker_url, database_key, outcome.wake, db=runtime.ctx.db)


def _actor_function(broker_url: str | None) -> Callable[[str, str], None]:
    def run_cleanup_step_actor(database_key: str, step_id: str) -> None:
        run_cleanup_step(broker_url, database_key, step_id)

    return run_cleanup_step_actor


def setup(broker_url: str | None) -> dramatiq.Broker:
    """The process's broker for this URL, made once: Redis for a URL, a StubBroker without
    one. The first one made is also dramatiq's global broker (the ``dramatiq`` CLI reads it)."""
    return _bus(broker_url).broker


def _bus(broker_url: str | None) -> Bus:
    with _lock:
        bus = _buses.get(broker_url)
        if bus is not None:
            return bus
        the_broker: dramatiq.Broker
        if broker_url:
            from dramatiq.brokers.redis import RedisBroker

            the_broker = RedisBroker(url=broker_url)
            the_broker.add_middleware(IdlePoll())
        else:
            the_broker = StubBroker()
        if not _buses:
            dramatiq.set_broker(the_broker)
        declare = dramatiq.actor(
            actor_name=ACTOR_NAME,
            queue_name=QUEUE,
            broker=the_broker,
            max_retries=retry_policy.BROKER_RETRIES,
            time_limit=ACTOR_TIME_LIMIT_MS,
        )
        bus = _buses[broker_url] = Bus(the_broker, declare(_actor_function(broker_url)))
        return bus


def enqueue(broker_url: str | None, database_key: str, step_ids: Sequence[str], *, db: Database | None = None) -> None:
    """Send one wake-up per step on the broker of ``broker_url`` (set up if need be), then log
    the ones sent (naming their purge and kind when ``db`` is given). Raises if the broker is
    down; callers log and move on."""
    actor = _bus(broker_url).actor
    sent: list[str] = []
    try:
        for step_id in step_ids:
            actor.send(database_key, step_id)
            sent.append(step_id)
    finally:
        _log_sent(db, sent)


def _log_sent(db: Database | None, step_ids: Sequence[str]) -> None:
    if not step_ids or not log.isEnabledFor(logging.INFO):
        return
    named = _refs(db, step_ids)
    for step_id in step_ids:
        ref = named.get(step_id)
        fields = {"step_id": step_id, "purge_id": ref.purge_id, "step_kind": ref.kind} if ref else {"step_id": step_id}
        log.info("step sent", extra=fields)


def _refs(db: Database | None, step_ids: Sequence[str]) -> dict[str, steps.StepRef]:
    """The purge and kind of the steps sent, by primary key; nothing without a database or when
    the read fails (the log line then names the step only)."""
    if db is None:
        return {}
    try:
        with db.read() as conn:
            return steps.refs(conn, step_ids)
    except Exception as exc:  # two fields of a log line are not worth failing a sent wake-up for
        log.warning("could not name the steps sent (%s); they are logged by id", type(exc).__name__)
        return {}


def queued_steps(broker_url: str | None, database_key: str) -> set[str] | None:
    """The steps of ``database_key`` with a wake-up waiting in the broker for a worker to take
    it (queued or delayed, not yet taken), or None when the broker cannot say (the in-process
    StubBroker). A wake-up a worker took and has not acknowledged is not counted: its worker
    is starting it (a second wake-up then finds the step claimed, and does nothing) or died or
    froze with it, which dramatiq notices only after its heartbeat timeout and gives back at
    a 1-in-1,000 chance per command; the step's lease says which. One read of the queue's
    ids and their messages: its cost follows the queue, which holds at most about one
    wake-up per due step."""
    the_broker = _bus(broker_url).broker
    client = getattr(the_broker, "client", None)
    if client is None:
        return None
    prefix = f"{getattr(the_broker, 'namespace', 'dramatiq')}:"
    queued: set[str] = set()
    for queue in (q_name(QUEUE), dq_name(QUEUE)):
        waiting = client.lrange(f"{prefix}{queue}", 0, -1)
        for raw in client.hmget(f"{prefix}{queue}.msgs", waiting) if waiting else []:
            if raw is None:
                continue
            args = Message.decode(raw).args
            if len(args) == 2 and args[0] == database_key:
                queued.add(str(args[1]))
    return queued


def forget(broker_url: str) -> None:
    """Drop this process's broker for ``broker_url`` (tests): the next setup makes a new one."""
    with _lock:
        bus = _buses.pop(broker_url, None)
    client = getattr(bus.broker, "client", None) if bus else None
    if client is not None:
        client.connection_pool.disconnect()


def start_embedded_worker() -> dramatiq.Worker:
    """The in-process worker on the StubBroker, started once per process."""
    global _embedded_worker
    broker = setup(None)
    with _lock:
        if _embedded_worker is None:
            _embedded_worker = dramatiq.Worker(broker, worker_threads=EMBEDDED_WORKER_THREADS)
            _embedded_worker.start()
        return _embedded_worker
