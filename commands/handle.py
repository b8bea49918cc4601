"""The handle a host application holds (``commands.open()``, in ``commands.opening``, builds one)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from commands import kinds, wiring
from commands.acceptance import EnqueueHook
from commands.attachments import NewAttachment
from commands.gate import GateState
from commands.operations import MAX_PAGE, STALL_AFTER
from commands.records import (
    Acceptance,
    Admission,
    AuthorErasurePreview,
    Bot,
    BotDeletionPreview,
    Conversation,
    Derivative,
    Event,
    Hold,
    HoldCount,
    LedgerReport,
    Placement,
    PurgeDetail,
    PurgePage,
    PurgeStatus,
    RepositoryIdentity,
    RetentionPolicy,
    RetentionPreview,
    RetentionRunOutcome,
    Run,
    WorkerLeases,
)
from commands.restore_commands import CopyRepair, MergeReport
from commands.scope import EventScope, PurgePreview
from commands.settings import Settings
from schema.db import Database
from schema.errors import PurgekeeperError
from storage import checkpoint
from workers import runner
from workers.cleanup import StepContext
from workers.scheduler import DEFAULT_SWEEP_INTERVAL, Scheduler


class Purgekeeper:
    """One database and its roots. Use ``commands.open()`` to get one; ``close()`` it after.

    ``workers="auto"`` without a broker URL runs an in-process dramatiq worker (StubBroker,
    threads) and scheduler; with a broker URL, wake-ups go to Redis and the ``worker`` and
    ``scheduler`` processes do the rest. ``workers="none"`` runs nothing in-process.
    ``retention_interval``: how long after a policy's run its next one is due.

    It holds its services, built and wired in ``commands.wiring``, and delegates every command
    to one of them: ``acceptance`` (``commands.acceptance.Acceptor``: the skeleton every
    kind's preview and confirmation go through, and the ledger row's copy out), the
    ``enqueuer`` (waking the workers), ``content``, ``purges``, ``retention``, ``holds``,
    ``operations``, ``restore`` and ``receipts``."""

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
        self._closed = False
        self._scheduler: Scheduler | None = None
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
            memory_roots=self.settings.memory_roots,
            lease=self.policy.lease,
            bodies=kinds.bodies_steps(),
        )

    def scheduler_duties(self) -> None:
        """What the leading scheduler does after each sweep: the turn of every retention
        policy that is due (a failure is logged; the next turn tries again), then the copy
        of every committed ledger row the checkpoint directory lacks."""
        self.run_retention()
        self.copy_ledger()

    def copy_ledger(self) -> int:
        """Copy every committed ledger row the checkpoint directory lacks (the scheduler does
        this after every sweep; an acceptance copies its own row before it returns). Returns
        the seq the copy holds."""
        return self.acceptance.copy_ledger()

    def close(self) -> None:
        """Stop the in-process parts and release the database connections."""
        if not self._closed:
            self._closed = True
            wiring.stop(self.db, self.gate, self.database_key, self._scheduler)

    def __enter__(self) -> Purgekeeper:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- receipts (commands.receipts) ---------------------------------------------------------

    def receipt(self, purge_id: str) -> dict[str, Any]:
        """The purge's receipt: its ledger row proven in the newest signed checkpoint
        (format ``purgekeeper-receipt`` version 1; ``tlog.verify`` checks it offline).
        NotFound for an unknown purge; LedgerNotCopied when its row cannot be copied yet."""
        return self.receipts.receipt(purge_id)

    def completion(self, purge_id: str) -> dict[str, Any]:
        """The purge's completion statement: ``{"purge_id", "ledger_seq", "completed_at",
        "attempts", "steps", "statement"}``, where ``statement`` is a note signed with the
        log's key, bound to the purge's leaf, with each step's counts and the time its last
        step finished (``tlog.verify.verify_completion`` checks it offline). Signed on
        request from the step rows: after a restore re-arms cleanup, the purge is complete
        again only once those steps finish, and the statement then carries the later time.
        NotFound for an unknown purge; CleanupNotComplete while its cleanup has not completed."""
        return self.receipts.completion(purge_id)

    def consistency(self, from_size: int) -> dict[str, Any]:
        """``{"proof", "checkpoint"}``: the newest signed checkpoint's tree extends the tree of
        ``from_size`` leaves (RFC 9162 §2.1.4). ValidationError outside 1 .. its size."""
        return self.receipts.consistency(from_size)

    def log_key(self) -> str:
        """The signed log's verification key (``<name>+<key id>+<base64 key>``)."""
        return self.receipts.vkey()

    # -- content (commands.content_commands) -----------------------------------------------------------

    def create_conversation(
        self, conversation_id: str, *, kind: str = "conversation", bot_id: str | None = None
    ) -> Conversation:
        """Create a conversation or channel; repeating an identical create returns it."""
        return self.content.create_conversation(conversation_id, kind=kind, bot_id=bot_id)

    def register_bot(self, bot_id: str, *, name: str, memory_path: str | Path | None = None) -> Bot:
        """Register a bot; with a Memory repository, write its ownership marker in ``.git/``."""
        return self.content.register_bot(bot_id, name=name, memory_path=memory_path)

    def get_conversation(self, conversation_id: str) -> Conversation | None:
        """The conversation, or None when it is unknown or purged."""
        return self.content.get_conversation(conversation_id)

    def why_unreadable(self, conversation_id: str) -> PurgekeeperError:
        """Why ``get_conversation`` gives None: ``ConversationPurged`` for a purged
        conversation, else ``NotFound`` (for a surface that reports the difference)."""
        return self.content.why_unreadable(conversation_id)

    def list_conversations(self) -> list[Conversation]:
        """The catalog: every conversation and channel that is not purged, by id."""
        return self.content.list_conversations()

    def ingest_event(
        self,
        conversation_id: str,
        *,
        author: str,
        body: str | None,
        provider_event_id: str | None = None,
        event_id: str | None = None,
        occurred_at: dt.datetime | None = None,
        attachments: Sequence[NewAttachment] = (),
    ) -> Event:
        """Add an event to a conversation. Idempotent on ``provider_event_id``: a duplicate
        delivery returns the event already ingested and writes nothing."""
        return self.content.ingest_event(
            conversation_id,
            author=author,
            body=body,
            provider_event_id=provider_event_id,
            event_id=event_id,
            occurred_at=occurred_at,
            attachments=attachments,
        )

    def place_event(self, event_id: str, conversation_id: str) -> Placement:
        """Place a live event in another conversation too; it stays one piece of content."""
        return self.content.place_event(event_id, conversation_id)

    def read_conversation(self, conversation_id: str) -> list[Event]:
        """The conversation's events that no purge fences; ``[]`` for a purged one."""
        return self.content.read_conversation(conversation_id)

    def open_attachment(self, attachment_id: str) -> BinaryIO:
        """The attachment's bytes as a binary file; ``ContentPurged`` once it is fenced."""
        return self.content.open_attachment(attachment_id)

    def start_run(self, conversation_id: str, *, bot_id: str, run_id: str | None = None) -> Run:
        """Start an agent run of ``bot_id`` in the conversation (status ``running``)."""
        return self.content.start_run(conversation_id, bot_id=bot_id, run_id=run_id)

    def finish_run(self, run_id: str, *, status: str, output: Any = None) -> Run:
        """Settle a run with a terminal status, keeping its assistant ``output``."""
        return self.content.finish_run(run_id, status=status, output=output)

    def admit(self, event_id: str, run_id: str, *, payload: Any) -> Admission:
        """Record that a live event was admitted to a non-terminal run, with its input."""
        return self.content.admit(event_id, run_id, payload=payload)

    def add_derivative(
        self, conversation_id: str, *, kind: str, payload: Any, source_event_ids: Sequence[str] = ()
    ) -> Derivative:
        """Record data derived from events: a summary, an inactive history row, an index entry."""
        return self.content.add_derivative(
            conversation_id, kind=kind, payload=payload, source_event_ids=source_event_ids
        )

    # -- purges (commands.purge_commands) -----------------------------------------------------------

    def preview_purge(self, scope: EventScope) -> PurgePreview:
        """The dependency report of a content purge, and the ``scope_digest`` to confirm."""
        return self.purges.preview_purge(scope)

    def confirm_purge(
        self,
        scope: EventScope,
        *,
        scope_digest: str,
        actor: str,
        reason: str,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        origin: str | None = None,
    ) -> Acceptance:
        """Accept a previewed content purge: ledger row, fences and cleanup steps, at once."""
        return self.purges.confirm_purge(
            scope,
            scope_digest=scope_digest,
            actor=actor,
            reason=reason,
            idempotency_key=idempotency_key,
            request_id=request_id,
            origin=origin,
        )

    def purge_conversation(
        self,
        conversation_id: str,
        *,
        actor: str,
        reason: str,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        origin: str | None = None,
    ) -> Acceptance:
        """Purge a whole conversation (or channel). A repeat is ``already_purged``, even with
        the original expected version; an absent id is reserved. The cost of acceptance does
        not depend on the conversation's size: cleanup removes its content afterwards."""
        return self.purges.purge_conversation(
            conversation_id,
            actor=actor,
            reason=reason,
            expected_version=expected_version,
            idempotency_key=idempotency_key,
            request_id=request_id,
            origin=origin,
        )

    def delete_channel(
        self,
        channel_id: str,
        *,
        actor: str,
        reason: str,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        origin: str | None = None,
    ) -> Acceptance:
        """End a channel: no new membership, routing or content. Its history stays readable,
        its id is tombstoned, and nothing is removed (purge it separately to remove content)."""
        return self.purges.delete_channel(
            channel_id,
            actor=actor,
            reason=reason,
            idempotency_key=idempotency_key,
            request_id=request_id,
            origin=origin,
        )

    def preview_bot_deletion(self, bot_id: str) -> BotDeletionPreview:
        """What deleting the bot does, and whether its Memory can be erased (with the reason)."""
        return self.purges.preview_bot_deletion(bot_id)

    def delete_bot(
        self,
        bot_id: str,
        *,
        actor: str,
        reason: str,
        erase_memory: bool = False,
        reviewed_repository: RepositoryIdentity | None = None,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        origin: str | None = None,
    ) -> Acceptance:
        """Delete a bot: refuse while it has non-terminal runs, close new runs and admissions,
        tombstone its id and keep a durable locator of its Memory. With ``erase_memory`` the
        reviewed repository must still match and be provably the bot's alone; a ``memory``
        cleanup step then removes it."""
        return self.purges.delete_bot(
            bot_id,
            actor=actor,
            reason=reason,
            erase_memory=erase_memory,
            reviewed_repository=reviewed_repository,
            idempotency_key=idempotency_key,
            request_id=request_id,
            origin=origin,
        )

    def preview_author_erasure(self, author: str, *, before: dt.datetime | None = None) -> AuthorErasurePreview:
        """What erasing everything ``author`` wrote (with ``occurred_at < before``, if given)
        would touch, in every conversation, and the ``scope_digest`` to confirm."""
        return self.purges.preview_author_erasure(author, before=before)

    def erase_author(
        self,
        author: str,
        *,
        scope_digest: str,
        actor: str,
        reason: str,
        before: dt.datetime | None = None,
        close_author: bool = True,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        origin: str | None = None,
    ) -> Acceptance:
        """Erase everything ``author`` wrote, wherever it is placed (see
        ``commands.kinds.author``). The acceptance costs the same for ten events as for a
        hundred thousand; from it on no reader returns any of them, and the cleanup steps
        remove them in batches (the touched conversations' versions rise as they do, not at
        acceptance). Afterwards ingesting an event by the author inside the erased window
        raises ``AuthorErased``, and with ``close_author`` any new event by them does."""
        return self.purges.erase_author(
            author,
            scope_digest=scope_digest,
            actor=actor,
            reason=reason,
            before=before,
            close_author=close_author,
            idempotency_key=idempotency_key,
            request_id=request_id,
            origin=origin,
        )

    # -- retention (commands.retention_commands) ------------------------------------------------------

    def preview_retention(self, *, max_age: dt.timedelta, conversation_id: str | None = None) -> RetentionPreview:
        """What a policy of ``max_age`` over the conversation (None: every conversation and
        channel) would expire if it ran now, what holds would keep, and the ``scope_digest``
        of its definition that ``set_retention`` names."""
        return self.retention.preview_retention(max_age=max_age, conversation_id=conversation_id)

    def set_retention(
        self,
        policy_id: str,
        *,
        max_age: dt.timedelta,
        conversation_id: str | None = None,
        scope_digest: str,
        actor: str,
        reason: str,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        origin: str | None = None,
    ) -> Acceptance:
        """Set (or change) a retention policy, previewed with ``preview_retention``; the
        scheduler runs it at its next sweep, then every ``retention_interval``."""
        return self.retention.set_retention(
            policy_id,
            max_age=max_age,
            conversation_id=conversation_id,
            scope_digest=scope_digest,
            actor=actor,
            reason=reason,
            idempotency_key=idempotency_key,
            request_id=request_id,
            origin=origin,
        )

    def remove_retention(
        self,
        policy_id: str,
        *,
        actor: str,
        reason: str,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        origin: str | None = None,
    ) -> Acceptance:
        """Remove a policy: it is not run again. Runs already accepted finish their cleanup."""
        return self.retention.remove_retention(
            policy_id, actor=actor, reason=reason, idempotency_key=idempotency_key, request_id=request_id, origin=origin
        )

    def list_retention(self) -> list[RetentionPolicy]:
        """The standing policies, by id."""
        return self.retention.list_retention()

    def run_retention(self) -> list[RetentionRunOutcome]:
        """Take the turn of every policy that is due now (the leading scheduler does at every
        sweep, and ``resume()`` does): one run accepted per policy with anything to expire."""
        return self.retention.run_retention()

    # -- legal holds (commands.hold_commands) ---------------------------------------------------------

    def place_hold(
        self,
        hold_id: str,
        *,
        conversation_ids: Iterable[str] = (),
        authors: Iterable[str] = (),
        actor: str,
        reason: str,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        origin: str | None = None,
    ) -> Acceptance:
        """Place a legal hold on conversations (everything placed in them) and authors
        (everything they wrote). It does not undo a purge accepted before it: the
        acceptance's ``disclosures`` name what was already purged in its scope."""
        return self.holds.place_hold(
            hold_id,
            conversation_ids=conversation_ids,
            authors=authors,
            actor=actor,
            reason=reason,
            idempotency_key=idempotency_key,
            request_id=request_id,
            origin=origin,
        )

    def release_hold(
        self,
        hold_id: str,
        *,
        actor: str,
        reason: str,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        origin: str | None = None,
    ) -> Acceptance:
        """Release a hold: purges of what it covered are possible again, and retention runs
        expire what it kept past their cutoffs at their next turn."""
        return self.holds.release_hold(
            hold_id, actor=actor, reason=reason, idempotency_key=idempotency_key, request_id=request_id, origin=origin
        )

    def list_holds(self, *, include_released: bool = False) -> list[Hold]:
        """The holds in force (with ``include_released``, the released ones too), by id."""
        return self.holds.list_holds(include_released=include_released)

    def count_holds(self, *, limit: int = 100) -> list[HoldCount]:
        """The first ``limit`` holds in force by id, each with how many conversations and
        authors it covers (no subjects: what ``/status`` shows)."""
        return self.holds.count_holds(limit=limit)

    # -- the operator's commands (commands.operations) ----------------------------------------

    def resume(self) -> int:
        """Run every retention policy that is due, then re-send every step that is due or
        whose lease expired (one sweep); returns how many steps were sent."""
        return self.operations.resume()

    def retry(self, purge_id: str, *, actor: str, reason: str) -> PurgeStatus:
        """Re-arm the purge's incomplete steps with fresh attempts, and record who and why.
        It never re-reads or re-creates content: the steps only ever remove."""
        return self.operations.retry(purge_id, actor=actor, reason=reason)

    def wait(
        self, purge_id: str, timeout: float, *, on_progress: Callable[[PurgeStatus], None] | None = None
    ) -> PurgeStatus:
        """Block until the purge is complete or incomplete; on timeout, return its status.
        ``on_progress`` is called with each status polled that differs from the one before."""
        return self.operations.wait(purge_id, timeout, on_progress=on_progress, look=self.status)

    def status(self, purge_id: str) -> PurgeStatus:
        """A purge's derived status, with each step's attempts, progress and last error."""
        return self.operations.status(purge_id)

    def list_purges(
        self,
        status: str | None = None,
        *,
        kind: str | None = None,
        conversation_id: str | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        limit: int = 100,
        after: int | None = None,
        operator_rows: bool = True,
    ) -> PurgePage:
        """Purges newest first: of one derived ``status``, one ``kind``, concerning one
        conversation or channel, accepted in ``[since, until)``, as given. ``after`` is the
        ``next_after`` of the previous page. ``operator_rows=False`` leaves out the policies'
        and holds' rows (``OPERATOR_KINDS``), as a host is shown the list."""
        return self.operations.list_purges(
            status,
            kind=kind,
            conversation_id=conversation_id,
            since=since,
            until=until,
            limit=limit,
            after=after,
            operator_rows=operator_rows,
        )

    def purge_detail(self, purge_id: str) -> PurgeDetail:
        """A purge's status with every attempt of its steps (owner, start, finish, error) and
        the operators' actions on it (who retried it, and why): the console's page of it."""
        return self.operations.purge_detail(purge_id)

    def worker_leases(self, *, limit: int = MAX_PAGE) -> list[WorkerLeases]:
        """The live lease owners (a worker's attempt each), and the steps each one holds now."""
        return self.operations.worker_leases(limit=limit)

    def stalled_purge_ids(self, *, limit: int = MAX_PAGE) -> list[str]:
        """Purges with a step due (or whose lease expired) for longer than ``stall_after``,
        newest first, at most ``limit``."""
        return self.operations.stalled_purge_ids(limit=limit)

    def database_now(self) -> dt.datetime:
        """The database clock, which every stored time comes from (for telling times relative
        to it)."""
        return self.operations.database_now()

    def verify_ledger(self) -> LedgerReport:
        """Walk the hash chain; report at most a bounded number of problems."""
        return self.operations.verify_ledger()

    def checkpoint_ledger(self, path: str | Path) -> checkpoint.Checkpoint:
        """Export the whole ledger as one self-contained file (format version 2: a header
        line, then one row per line), atomically; ``merge_ledger`` reads it back."""
        return self.operations.checkpoint_ledger(path)

    # -- restore (commands.restore_commands) -----------------------------------------------------------

    def messaging_status(self, *, refresh: bool = True) -> GateState:
        """Whether content reads and writes are open, with the bounded reasons when not.
        ``refresh`` takes the full verdict again (it walks the whole ledger and its copy);
        otherwise the last verdict is returned."""
        return self.restore.messaging_status(refresh=refresh)

    def repair_ledger_copy(self) -> CopyRepair:
        """Bring the ledger's copy in the checkpoint directory back to a verifying state
        (``purgectl ledger repair``): a lost or unreadable head.json is rebuilt from the
        segments, a truncated open segment is re-established from the database's rows, and
        the rows the database holds beyond the copy are appended. Rows the copy holds and the
        database lacks (a restored database) are kept: the gate stays closed until a merge
        brings them back. Then the gate's full check (the chain and the copy walked, as
        ``messaging_status()``). ``MessagingUnavailable`` with the reason when it cannot be
        done."""
        return self.restore.repair_ledger_copy()

    def merge_ledger(self, *paths: str | Path, allow_other_database: bool = False, full: bool = False) -> MergeReport:
        """Restore: bring this ledger's missing purges back from the ledger kept outside it,
        and re-apply them before any reader sees content again (see ``commands.restore_commands``).
        A source written by another database is refused unless ``allow_other_database``;
        ``full`` re-applies every purge of the ledger, not only the missing ones."""
        return self.restore.merge_ledger(*paths, allow_other_database=allow_other_database, full=full)
