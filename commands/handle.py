"""The handle a host application holds (``purgekeeper.open()``, in ``purgekeeper.commands.opening``, builds one)."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from types import TracebackType

from purgekeeper.commands import kinds, sealing_backfill, wiring
from purgekeeper.commands.acceptance import Acceptor, EnqueueHook
from purgekeeper.commands.content_commands import ContentCommands
from purgekeeper.commands.delegation import delegate
from purgekeeper.commands.hold_commands import HoldCommands
from purgekeeper.commands.operations import OperatorCommands
from purgekeeper.commands.purge_commands import PurgeCommands
from purgekeeper.commands.purge_reads import STALL_AFTER
from purgekeeper.commands.receipts import Receipts
from purgekeeper.commands.records import PurgeStatus
from purgekeeper.commands.restore_commands import RestoreCommands
from purgekeeper.commands.retention_commands import RetentionCommands
from purgekeeper.commands.sealing_backfill import SealingRound
from purgekeeper.commands.settings import Settings
from purgekeeper.commands.touched import TouchedCommands
from purgekeeper.schema import content_queries
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import PurgekeeperError
from purgekeeper.storage.keystore import KeyStoreUnusable, RotatingKeyStore
from purgekeeper.workers import runner
from purgekeeper.workers.cleanup import StepContext
from purgekeeper.workers.scheduler import DEFAULT_SWEEP_INTERVAL, Scheduler

log = logging.getLogger(__name__)
SEALING_IDLE = dt.timedelta(hours=1)  # after a sealing round that sealed nothing (held rows, files left)


class Purgekeeper:
    """One database and its roots. Use ``purgekeeper.open()`` to get one; ``close()`` it after.

    ``workers="auto"`` without a broker URL runs an in-process dramatiq worker (StubBroker,
    threads) and scheduler; with a broker URL, wake-ups go to Redis and the ``worker`` and
    ``scheduler`` processes do the rest. ``workers="none"`` runs nothing in-process.
    ``retention_interval``: how long after a policy's run its next one is due.

    It holds its services, built and wired in ``purgekeeper.commands.wiring``, and delegates every command
    to one of them: ``acceptance`` (``purgekeeper.commands.acceptance.Acceptor``: the skeleton every
    kind's preview and confirmation go through, and the ledger row's copy out), the
    ``enqueuer`` (waking the workers), ``content``, ``purges``, ``retention``, ``holds``,
    ``operations``, ``restore``, ``receipts`` and ``touched`` (the console's reads of one
    purge and its search). A command that only forwards is declared in
    one line with ``purgekeeper.commands.delegation.delegate``: its docstring, the API reference, is on
    the service's method it names."""

    def __init__(
        self,
        settings: Settings,
        *,
        db: Database,
        workers: str = "auto",
        enqueue: EnqueueHook | None = None,
        stall_after: dt.timedelta = STALL_AFTER,
        policy: runner.Policy | None = None,
        sweep_interval: dt.timedelta = DEFAULT_SWEEP_INTERVAL,
        retention_interval: dt.timedelta | None = None,
        sign_checkpoints: bool = True,
    ) -> None:
        self.settings = settings
        self.retention_interval = retention_interval or settings.retention_interval
        self.stall_after = stall_after
        self.db = db
        self.workers = workers
        self.policy = policy or runner.Policy()
        services = wiring.wire(
            settings,
            db,
            workers=workers,
            enqueue=enqueue,
            stall_after=stall_after,
            retention_interval=self.retention_interval,
            sign_checkpoints=sign_checkpoints,
        )
        self.blobs = services.blobs
        self.database_key = services.database_key
        self.keys = services.keys
        self.key_store: RotatingKeyStore = services.key_store
        self.gate = services.gate
        self.copy = services.gate.copy
        self.enqueue = services.enqueue
        self.enqueuer = services.enqueuer
        self.acceptance = services.acceptance
        self.receipts = services.receipts
        self.content = services.content
        self.purges = services.purges
        self.retention = services.retention
        self.holds = services.holds
        self.operations = services.operations
        self.restore = services.restore
        self.touched = services.touched
        self._closed = False
        self._scheduler: Scheduler | None = None
        self._sealing_idle_until = 0.0  # time.monotonic() before which no sealing round runs
        if workers == "auto" and settings.broker_url is None:
            self._scheduler = wiring.start_in_process(
                db,
                self.database_key,
                self.step_context(),
                self.policy,
                wake=self.enqueuer.wake,
                interval=sweep_interval,
                after_sweep=self.scheduler_duties,
            )

    def step_context(self) -> StepContext:
        """What a cleanup step runs with here: this handle's database, blob store, Memory
        roots and lease (the in-process worker's, and a test's that runs a step itself)."""
        return StepContext(
            db=self.db,
            blobs=self.blobs,
            keys=self.keys,
            memory_roots=self.settings.memory_roots,
            lease=self.policy.lease,
            bodies=kinds.bodies_steps(),
            yield_share=self.settings.cleanup_yield,
        )

    def scheduler_duties(self) -> None:
        """What the leading scheduler does after each sweep: the turn of every retention
        policy that is due (a failure is logged; the next turn tries again), then the copy
        of every committed ledger row the checkpoint directory lacks, then the key store's
        rotation when keys were destroyed since the last one (``ROTATE_EVERY`` ago or more),
        then a round of sealing older content while any is left."""
        self.run_retention()
        self.copy_ledger()
        self.rotate_keys()
        self.seal_older_content()

    def seal_older_content(self) -> SealingRound | None:
        """One round of sealing the content written before encryption at rest
        (``purgekeeper.commands.sealing_backfill``), while any is left; after a round that
        sealed nothing (only held rows, or files, are left), not again for ``SEALING_IDLE``. A
        failure is logged; the next sweep tries again. The round, or None when none ran."""
        if time.monotonic() < self._sealing_idle_until:
            return None
        try:
            with self.db.read() as conn:
                if not content_queries.holds_plain_content(conn):
                    self._sealing_idle_until = time.monotonic() + SEALING_IDLE.total_seconds()
                    return None
            sealed = sealing_backfill.seal_older_content(self.db, self.keys)
        except PurgekeeperError:
            log.exception("sealing older content failed; the next sweep tries again")
            return None
        if sealed.sealed_any:
            log.info("sealed older content: %s; left: %s", dict(sealed.sealed), dict(sealed.left))
        else:
            self._sealing_idle_until = time.monotonic() + SEALING_IDLE.total_seconds()
        return sealed

    def rotate_keys(self) -> bool:
        """Rotate the key store's key-encryption key if it is due (``FileKeyStore.rotation_due``):
        a destroyed key's leftover wrapped bytes die with the old one. A failure is logged, and
        the next sweep tries again; whether it rotated."""
        try:
            if not self.key_store.rotation_due():
                return False
            version = self.key_store.rotate()
        except KeyStoreUnusable:
            log.exception("the key store's rotation failed; the next sweep tries again")
            return False
        log.info("the key store's key-encryption key was rotated to version %d", version)
        return True

    copy_ledger = delegate("acceptance", Acceptor.copy_ledger)

    def close(self) -> None:
        """Stop the in-process parts and release the database connections."""
        if not self._closed:
            self._closed = True
            self.receipts.close()
            wiring.stop(self.db, self.gate, self.database_key, self._scheduler)
            self.key_store.close()

    def __enter__(self) -> Purgekeeper:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- receipts (purgekeeper.commands.receipts) ---------------------------------------------------------

    receipt = delegate("receipts", Receipts.receipt)
    completion = delegate("receipts", Receipts.completion)
    consistency = delegate("receipts", Receipts.consistency)
    log_key = delegate("receipts", Receipts.vkey)

    # -- content (purgekeeper.commands.content_commands) -----------------------------------------------------------

    create_conversation = delegate("content", ContentCommands.create_conversation)
    register_bot = delegate("content", ContentCommands.register_bot)
    get_conversation = delegate("content", ContentCommands.get_conversation)
    why_unreadable = delegate("content", ContentCommands.why_unreadable)
    list_conversations = delegate("content", ContentCommands.list_conversations)
    ingest_event = delegate("content", ContentCommands.ingest_event)
    ingest_events = delegate("content", ContentCommands.ingest_events)
    place_event = delegate("content", ContentCommands.place_event)
    read_conversation = delegate("content", ContentCommands.read_conversation)
    open_attachment = delegate("content", ContentCommands.open_attachment)
    start_run = delegate("content", ContentCommands.start_run)
    finish_run = delegate("content", ContentCommands.finish_run)
    admit = delegate("content", ContentCommands.admit)
    add_derivative = delegate("content", ContentCommands.add_derivative)

    # -- purges (purgekeeper.commands.purge_commands) -----------------------------------------------------------

    preview_purge = delegate("purges", PurgeCommands.preview_purge)
    confirm_purge = delegate("purges", PurgeCommands.confirm_purge)
    preview_conversation_purge = delegate("purges", PurgeCommands.preview_conversation_purge)
    purge_conversation = delegate("purges", PurgeCommands.purge_conversation)
    preview_channel_deletion = delegate("purges", PurgeCommands.preview_channel_deletion)
    delete_channel = delegate("purges", PurgeCommands.delete_channel)
    preview_bot_deletion = delegate("purges", PurgeCommands.preview_bot_deletion)
    delete_bot = delegate("purges", PurgeCommands.delete_bot)
    preview_author_erasure = delegate("purges", PurgeCommands.preview_author_erasure)
    erase_author = delegate("purges", PurgeCommands.erase_author)

    # -- retention (purgekeeper.commands.retention_commands) ------------------------------------------------------

    preview_retention = delegate("retention", RetentionCommands.preview_retention)
    set_retention = delegate("retention", RetentionCommands.set_retention)
    remove_retention = delegate("retention", RetentionCommands.remove_retention)
    list_retention = delegate("retention", RetentionCommands.list_retention)
    run_retention = delegate("retention", RetentionCommands.run_retention)
    run_retention_policy = delegate("retention", RetentionCommands.run_retention_policy)

    # -- legal holds (purgekeeper.commands.hold_commands) ---------------------------------------------------------

    place_hold = delegate("holds", HoldCommands.place_hold)
    release_hold = delegate("holds", HoldCommands.release_hold)
    list_holds = delegate("holds", HoldCommands.list_holds)
    count_holds = delegate("holds", HoldCommands.count_holds)

    # -- the operator's commands (purgekeeper.commands.operations) ----------------------------------------

    resume = delegate("operations", OperatorCommands.resume)
    retry = delegate("operations", OperatorCommands.retry)

    def wait(
        self, purge_id: str, timeout: float, *, on_progress: Callable[[PurgeStatus], None] | None = None
    ) -> PurgeStatus:
        """Block until the purge is complete or incomplete; on timeout, return its status.
        ``on_progress`` is called with each status polled that differs from the one before."""
        return self.operations.wait(purge_id, timeout, on_progress=on_progress, look=self.status)

    status = delegate("operations", OperatorCommands.status)
    list_purges = delegate("operations", OperatorCommands.list_purges)
    purge_detail = delegate("operations", OperatorCommands.purge_detail)
    worker_leases = delegate("operations", OperatorCommands.worker_leases)
    list_workers = delegate("operations", OperatorCommands.list_workers)
    stalled_purge_ids = delegate("operations", OperatorCommands.stalled_purge_ids)
    database_now = delegate("operations", OperatorCommands.database_now)
    verify_ledger = delegate("operations", OperatorCommands.verify_ledger)
    checkpoint_ledger = delegate("operations", OperatorCommands.checkpoint_ledger)
    purge_touched = delegate("touched", TouchedCommands.purge_touched)
    find_purges = delegate("touched", TouchedCommands.find_purges)

    # -- restore (purgekeeper.commands.restore_commands) -----------------------------------------------------------

    messaging_status = delegate("restore", RestoreCommands.messaging_status)
    repair_ledger_copy = delegate("restore", RestoreCommands.repair_ledger_copy)
    merge_ledger = delegate("restore", RestoreCommands.merge_ledger)
