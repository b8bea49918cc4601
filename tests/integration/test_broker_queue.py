"""What the scheduler asks Redis (``purgekeeper.workers.broker.queued_steps``): which due steps have a
wake-up that some worker will still run. On a Redis of the test's own, with dramatiq's own
consumer taking the messages as a worker does."""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from purgekeeper.workers import broker
from tests.helpers.processes import RedisServer

KEY = "db-under-test"


def take_one(url: str) -> RedisBroker:
    """A worker's broker that takes one wake-up and holds it unacknowledged (prefetched)."""
    worker = RedisBroker(url=url)
    consumer = worker.consume(broker.QUEUE, prefetch=1, timeout=1000)
    assert next(consumer) is not None
    return worker


def test_a_wake_up_waiting_is_queued_and_one_a_worker_took_is_not(
    redis_server: RedisServer, redis_broker: dramatiq.Broker
) -> None:
    """Issue 26: the scheduler never sends a step again while its wake-up waits in the queue.
    A wake-up a worker took and has not acknowledged does not count: that worker may have
    died or frozen with it (dramatiq gives it back only after its 60 s heartbeat timeout, at a
    1-in-1,000 chance per command), and a second wake-up for a live one finds the step
    claimed. Tried: two waiting, then one taken by a live worker, then one taken by a worker
    whose heartbeat stopped long ago."""
    broker.enqueue(redis_server.url, KEY, ["s-first", "s-second"])
    assert broker.queued_steps(redis_server.url, KEY) == {"s-first", "s-second"}
    take_one(redis_server.url)  # the first, prefetched by a worker
    assert broker.queued_steps(redis_server.url, KEY) == {"s-second"}
    dead = take_one(redis_server.url)
    dead.client.zadd(f"{dead.namespace}:__heartbeats__", {dead.broker_id: 0})  # it stopped beating long ago
    assert broker.queued_steps(redis_server.url, KEY) == set()


def test_another_database_s_wake_ups_are_not_this_one_s(
    redis_server: RedisServer, redis_broker: dramatiq.Broker
) -> None:
    broker.enqueue(redis_server.url, "another-db", ["s-theirs"])
    broker.enqueue(redis_server.url, KEY, ["s-ours"])
    assert broker.queued_steps(redis_server.url, KEY) == {"s-ours"}
