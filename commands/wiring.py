"""What a handle (``purgekeeper.commands.handle.Purgekeeper``) is made of, and what runs beside it.

``wire`` builds its services, each with what it needs, and wires them to one another: the
read gate on the ledger's copy, the enqueuer that wakes the workers, the ``Acceptor`` every
kind's preview and confirmation go through, and the services the handle delegates its
commands to. ``start_in_process`` starts the in-process dramatiq worker and scheduler of a
handle with ``workers="auto"`` and no broker URL; ``stop_soon`` asks its attempts to end at
their next safe point, and ``stop`` ends what a handle started."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection

from purgekeeper.commands import receipts
from purgekeeper.commands.acceptance import Acceptor, EnqueueHook, Enqueuer, broker_hook
from purgekeeper.commands.content_commands import ContentCommands
from purgekeeper.commands.gate import Gate
from purgekeeper.commands.hold_commands import HoldCommands
from purgekeeper.commands.operations import OperatorCommands
from purgekeeper.commands.purge_commands import PurgeCommands
from purgekeeper.commands.restore_commands import RestoreCommands
from purgekeeper.commands.retention_commands import RetentionCommands
from purgekeeper.commands.settings import Settings
from purgekeeper.commands.touched import TouchedCommands
from purgekeeper.schema import content_queries, ledger
from purgekeeper.schema.db import Database
from purgekeeper.schema.states import WorkerRole
from purgekeeper.storage import keystore_files
from purgekeeper.storage.blobstore import BlobStore
from purgekeeper.storage.content_keys import ContentKeys
from purgekeeper.storage.key_client import HttpKeyStore
from purgekeeper.storage.keystore import FileKeyStore, KeyStoreUnusable, RotatingKeyStore
from purgekeeper.workers import runner
from purgekeeper.workers.cleanup import StepContext
from purgekeeper.workers.heartbeat import Heartbeat, this_process
from purgekeeper.workers.scheduler import Scheduler


@dataclass(frozen=True)
class Services:
    """A handle's services, as ``wire`` built them (the handle holds each one as an attribute
    of the same name)."""

    blobs: BlobStore
    database_key: str
    key_store: RotatingKeyStore
    keys: ContentKeys
    gate: Gate
    enqueue: EnqueueHook
    enqueuer: Enqueuer
    acceptance: Acceptor
    receipts: receipts.Receipts
    content: ContentCommands
    purges: PurgeCommands
    retention: RetentionCommands
    holds: HoldCommands
    operations: OperatorCommands
    restore: RestoreCommands
    touched: TouchedCommands


def wire(
    settings: Settings,
    db: Database,
    *,
    workers: str,
    enqueue: EnqueueHook | None,
    stall_after: dt.timedelta,
    retention_interval: dt.timedelta,
    sign_checkpoints: bool,
) -> Services:
    """Build a handle's services on ``db``. The gate takes its quick check against the ledger's
    copy here and starts its audit (``stop`` ends it); ``enqueue`` None wakes the workers
    through the broker ``settings`` name (or the in-process one)."""
    blobs = BlobStore(blob_root=settings.blob_root, file_root=settings.file_root)
    with db.read() as conn:
        database_key = ledger.read_head(conn).database_id
        key_store = open_key_store(settings, database_key, conn)
    keys = ContentKeys(key_store)
    log = receipts.log_for(settings, database_key) if sign_checkpoints else None
    witnessing = receipts.witnessing_for(settings, log)
    gate = Gate(db, settings.checkpoint_dir, database_key, log=log)
    copy = gate.copy  # one copy per handle: its head's cache serves the gate and acceptances
    gate.quick()  # at start-up: the O(1) check against the copy; the audit walks the rest
    gate.start_audit()
    enqueue = enqueue or broker_hook(settings, workers, database_key, db)
    enqueuer = Enqueuer(enqueue)
    acceptance = Acceptor(db, gate, settings, copy, enqueuer, keys, copied=witnessing.wake if witnessing else None)
    retention = RetentionCommands(db, acceptance, retention_interval)
    return Services(
        blobs=blobs,
        database_key=database_key,
        key_store=key_store,
        keys=keys,
        gate=gate,
        enqueue=enqueue,
        enqueuer=enqueuer,
        acceptance=acceptance,
        receipts=receipts.Receipts(db, log, copy_ledger=acceptance.copy_ledger, witnessing=witnessing),
        content=ContentCommands(db, blobs, gate, keys),
        purges=PurgeCommands(acceptance),
        retention=retention,
        holds=HoldCommands(db, acceptance),
        operations=OperatorCommands(db, stall_after, enqueuer, retention),
        restore=RestoreCommands(db, gate, blobs, database_key, copy, enqueuer),
        touched=TouchedCommands(db, settings),
    )


def open_key_store(settings: Settings, database_key: str, conn: Connection) -> RotatingKeyStore:
    """The database's key store, as every process that serves it opens it (a handle, a
    worker): the key server's client when ``PURGEKEEPER_KEY_STORE_URL`` is set (a wrong or
    empty server fails the first destruction of a key it never held), else the file store
    in ``settings.key_store_dir``. KeyStoreUnusable, with nothing created, where the database
    holds sealed content and that directory has no key store: a new, empty one would make it
    all unreadable, and a worker's purges would "destroy" keys it never held (a wrong
    ``PURGEKEEPER_CHECKPOINT_DIR``, a key store not restored, a mount that failed)."""
    if settings.key_store_url:
        return HttpKeyStore(settings.key_store_url, settings.key_store_token or "")
    directory = settings.key_store_dir(database_key)
    if not (directory / keystore_files.DATABASE).exists() and content_queries.holds_sealed_content(conn):
        raise KeyStoreUnusable(
            f"the database holds sealed content, and {directory} holds no key store: restore the key store "
            "there, or point PURGEKEEPER_CHECKPOINT_DIR at the one its keys are in (docs/guides/encryption.md)"
        )
    return FileKeyStore(directory)


def start_in_process(
    db: Database,
    database_key: str,
    ctx: StepContext,
    policy: runner.Policy,
    *,
    wake: Callable[[Sequence[str]], None],
    interval: dt.timedelta,
    after_sweep: Callable[[], None],
) -> Scheduler:
    """Serve the database in this process: its steps run with ``ctx`` by the embedded dramatiq
    worker (StubBroker, threads), and a scheduler, started here, sweeps every ``interval``,
    waking the steps due with ``wake``, then runs ``after_sweep`` when it leads."""
    from purgekeeper.workers import broker  # lazy: dramatiq, which a one-shot command never needs

    broker.register(database_key, broker.Runtime(ctx, policy))
    broker.start_embedded_worker()
    process = this_process(WorkerRole.EMBEDDED, queues=(broker.QUEUE,), threads=broker.EMBEDDED_WORKER_THREADS)
    beats = Heartbeat(db, process, interval=interval)  # the worker's and the scheduler's, as one process
    scheduler = Scheduler(
        db, wake, interval=interval, resend_after=policy.lease, after_sweep=after_sweep, heartbeat=beats
    )
    scheduler.start()
    return scheduler


def stop_soon(database_key: str) -> None:
    """The in-process worker's attempts on the database end at their next safe point, and no
    new one begins (``serve`` calls it from its SIGTERM handler; ``stop`` ends the rest)."""
    from purgekeeper.workers import broker  # lazy: dramatiq, which a one-shot command never needs

    broker.stop_soon(database_key)


def stop(db: Database, gate: Gate, database_key: str, scheduler: Scheduler | None) -> None:
    """End what a handle started: its serving of the database in this process (the last
    handle serving it winds its attempts down: each ends at a safe point and gives its step
    back, one still inside a batch after ``purgekeeper.workers.shutdown.STOP_GRACE`` is abandoned and
    its step given back for it) and its scheduler, which marks the process stopped (when
    ``start_in_process`` started them), the gate's audit; then release the database
    connections."""
    if scheduler is not None:
        from purgekeeper.workers import broker  # lazy: dramatiq, which a one-shot command never needs

        scheduler.stop_sweeping()  # no wake-up for a worker that is going away
        runtime = broker.unregister(database_key)
        if runtime is not None:
            runner.wind_down(runtime.ctx)
        scheduler.stop()
    gate.stop_audit()
    db.dispose()
