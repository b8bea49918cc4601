"""How soon a worker on Redis looks at its queue again while it is idle (issue 27, item 5).

dramatiq's Redis consumer has no blocking pop: while its queue is empty it sleeps, doubling
up to the worker's ``worker_timeout`` (1 s by default), between two fetches. A purge's wake-
ups come one after another (its acceptance wakes the bodies step; the bodies step's last
batch unparks the attachments step and wakes it), each into an idle queue, so each waited
half a second on average: about a second per purge that embedded mode never waits. The
broker purgekeeper makes for a Redis URL bounds the idle sleep (``broker.IDLE_POLL_MS``),
whoever starts a worker on it (``python -m purgekeeper.commands.worker``, ``dramatiq purgekeeper.commands.worker``).
No timing is asserted: what is checked is the bound each consumer of a booted worker got."""

from __future__ import annotations

import dramatiq

from purgekeeper.workers import broker
from tests.helpers.processes import RedisServer


def test_a_worker_on_the_redis_broker_polls_its_idle_queues_within_the_bound(
    redis_server: RedisServer, redis_broker: dramatiq.Broker
) -> None:
    worker = dramatiq.Worker(redis_broker, worker_threads=1)
    worker.start()
    try:
        assert set(worker.consumers) == {broker.QUEUE, f"{broker.QUEUE}.DQ"}  # the queue and its delay queue
        assert {consumer.worker_timeout for consumer in worker.consumers.values()} == {broker.IDLE_POLL_MS}
        assert broker.IDLE_POLL_MS <= 100
    finally:
        worker.stop()


def test_the_in_process_broker_keeps_its_own_wait(redis_server: RedisServer) -> None:
    """The embedded worker's StubBroker wakes on a put (a queue ``get`` with a timeout): its
    wait is no poll, and is left as dramatiq sets it."""
    assert not any(isinstance(m, broker.IdlePoll) for m in broker.setup(None).middleware)
