"""What the scheduler asks Redis (``workers.broker.queued_steps``): which due steps have a
wake-up that some worker will still run. On a Redis of the test's own, with dramatiq's own
consumer taking the messages as a worker does."""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from tests.helpers.processes import RedisServer
from workers import broker

KEY = "db-under-test"


def take_one(url: str) -> RedisBroker:
    """A worker's broker that takes one wake-up and holds it unacknowledged (prefetched)."""
    worker = RedisBroker(url=url)
    consumer = worker.consume(broker.QUEUE, prefetch=1, timeout=1000)
    assert next(consumer) is not None
    return worker


def test_a_wake_up_waiting_or_held_by_a_live_worker_is_queued(
    redis_server: RedisServer, redis_broker: dramatiq.Broker
) -> None:
    broker.enqueue(redis_server.url, KEY, ["s-waiting", "s-taken"])
    assert broker.queued_steps(redis_server.url, KEY) == {"s-waiting", "s-taken"}
    take_one(redis_server.url)  # one of the two, prefetched by a live worker
    assert broker.queued_steps(redis_server.url, KEY) == {"s-waiting", "s-taken"}


def test_a_wake_up_a_dead_worker_took_is_not_counted_as_queued(
    redis_server: RedisServer, redis_broker: dramatiq.Broker
) -> None:
    """Issue 26: the scheduler never sends a step again while its wake-up is queued. A wake-up
    a worker took and died with stays unacknowledged in Redis until dramatiq's maintenance
    (run by a 1-in-1,000 chance per command) gives it back: counted as queued, its step
    would wait for that. Tried: the taking worker's heartbeat older than dramatiq's timeout."""
    broker.enqueue(redis_server.url, KEY, ["s-only"])
    dead = take_one(redis_server.url)
    dead.client.zadd(f"{dead.namespace}:__heartbeats__", {dead.broker_id: 0})  # it stopped beating long ago
    assert broker.queued_steps(redis_server.url, KEY) == set()
