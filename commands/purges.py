"""The purge commands: preview, confirmation, conversation purge, channel and bot deletion.

Each acceptance is one transaction: lock what it fences (conversations, then events, in id
order), take the ledger head last, check, append the ledger row, write the fences and
tombstones, create the cleanup steps, bump the versions. Only after the commit is the
enqueue hook called, best effort: the scheduler's sweep heals a wake-up that was lost.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from commands import validation
from commands.gate import Gate
from commands.records import Acceptance, BotDeletionPreview, MemoryPreview, RepositoryIdentity
from commands.scope import EventScope, PurgePreview, build_report, describe_changes
from commands.settings import Settings
from schema import content as q
from schema import ledger
from schema import purges as pq
from schema.db import Database
from schema.errors import (
    ActiveRuns,
    IdempotencyConflict,
    LedgerNotCopied,
    MemoryErasureUnavailable,
    NotFound,
    PurgekeeperError,
    StaleConfirmation,
    ValidationError,
    VersionConflict,
)
from schema.states import ConversationKind, PurgeKind, StepKind, TombstoneKind
from workers import ledger_copy, memory
from workers.files import reason_of

log = logging.getLogger(__name__)

# The row this thread's acceptance appended in its committed transaction: copied out as it
# is, without reading it back (``_copy_out``; any doubt, and the copy reads the database).
_appended = threading.local()
_COPY_FAILED: tuple[type[Exception], ...] = (*ledger_copy.COPY_FAILED, PurgekeeperError)

MAX_ACTOR_LENGTH = 200
MAX_REASON_LENGTH = 1000
MAX_ORIGIN_LENGTH = 64
PREVIEW_RETENTION = dt.timedelta(days=1)
DEFAULT_ORIGIN = "python"

EnqueueHook = Callable[[Sequence[str]], None]


@dataclass(frozen=True)
class Causal:
    """Who asked, why, and the causal metadata the ledger keeps (never any content)."""

    actor: str
    reason: str
    idempotency_key: str | None
    request_id: str
    origin: str

    @classmethod
    def check(cls, actor: Any, reason: Any, idempotency_key: Any, request_id: Any, origin: Any) -> Causal:
        return cls(
            actor=validation.check_text(actor, "actor", max_length=MAX_ACTOR_LENGTH),
            reason=validation.check_text(reason, "reason", max_length=MAX_REASON_LENGTH),
            idempotency_key=validation.check_optional_id(idempotency_key, "idempotency_key"),
            request_id=validation.check_optional_id(request_id, "request_id") or uuid.uuid4().hex,
            origin=validation.check_text(origin or DEFAULT_ORIGIN, "origin", max_length=MAX_ORIGIN_LENGTH),
        )


class PurgeCommands:
    """Mixed into :class:`commands.Purgekeeper`; needs ``db``, ``settings``, ``enqueue`` and
    ``gate`` (previews and acceptances refuse while the gate is closed)."""

    db: Database
    settings: Settings
    enqueue: EnqueueHook
    gate: Gate
    copy: ledger_copy.LedgerCopy

    # -- content purges -----------------------------------------------------------------

    def preview_purge(self, scope: EventScope) -> PurgePreview:
        """The dependency report of a content purge, and the ``scope_digest`` to confirm."""
        _check_scope(scope)

        def work(conn: Connection) -> PurgePreview:
            self.gate.require_open(conn)
            report = build_report(conn, scope)
            pq.save_preview(conn, report.scope_digest, report.id_summary(), keep_for=PREVIEW_RETENTION)
            return report

        return self.db.transact(work)

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
        _check_scope(scope)
        _check_digest(scope_digest)
        causal = Causal.check(actor, reason, idempotency_key, request_id, origin)
        request = {"scope": scope.canonical()}

        def work(conn: Connection) -> tuple[Acceptance, list[str]]:
            replay = _replay(conn, causal, PurgeKind.CONTENT, request)
            if replay:
                return replay, []
            report = build_report(conn, scope, lock=True)
            if report.scope_digest != scope_digest:
                raise StaleConfirmation(describe_changes(pq.saved_preview(conn, scope_digest), report))
            _refuse_active_runs([r.id for r in report.blocking_runs])
            fresh = [e for e in report.events if not e.already_fenced]
            if not fresh:
                return _already_purged(pq.latest_covering_purge(conn, report.event_ids)), []
            return _accept_content(conn, self.gate, report, fresh, causal, request)

        return self._accept(work)

    # -- whole conversations, channels and bots --------------------------------------------

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
        validation.check_id(conversation_id, "conversation_id")
        _check_version(expected_version)
        causal = Causal.check(actor, reason, idempotency_key, request_id, origin)
        request = {"conversation_id": conversation_id}

        def work(conn: Connection) -> tuple[Acceptance, list[str]]:
            replay = _replay(conn, causal, PurgeKind.CONVERSATION, request)
            if replay:
                return replay, []
            row = pq.lock_conversation(conn, conversation_id)
            head = ledger.lock_head(conn)
            self.gate.check_head(conn, head)
            done = pq.tombstone_of(conn, TombstoneKind.CONVERSATION, conversation_id)
            if done:
                return _already_purged(done), []
            if row is not None and expected_version is not None and row.version != expected_version:
                raise VersionConflict(
                    f"conversation {conversation_id} is at version {row.version}, not {expected_version}"
                )
            if row is not None:
                _refuse_active_runs(pq.active_run_ids(conn, conversation_ids=[conversation_id]))
            selectors = {
                "conversation_id": conversation_id,
                "conversation_kind": row.kind if row is not None else None,
                "reserved_absent_id": row is None,
                "request": request,
            }
            entry = _append(conn, head, PurgeKind.CONVERSATION, selectors, causal)
            pq.insert_tombstones(conn, entry.purge_id, {TombstoneKind.CONVERSATION: [conversation_id]})
            # A conversation's attachments wait for its bodies step, which decides (when it runs)
            # which events are no longer live anywhere and fences them.
            kinds = [StepKind.BODIES, StepKind.ATTACHMENTS] if row is not None else []
            steps = pq.create_steps(conn, entry.purge_id, kinds, parked=[StepKind.ATTACHMENTS])
            return _accepted(entry), steps

        return self._accept(work)

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
        validation.check_id(channel_id, "channel_id")
        causal = Causal.check(actor, reason, idempotency_key, request_id, origin)
        request = {"channel_id": channel_id}

        def work(conn: Connection) -> tuple[Acceptance, list[str]]:
            replay = _replay(conn, causal, PurgeKind.CHANNEL, request)
            if replay:
                return replay, []
            row = pq.lock_conversation(conn, channel_id)
            if row is None:
                raise NotFound(f"no channel {channel_id}")
            if row.kind != ConversationKind.CHANNEL:
                raise ValidationError(f"{channel_id} is a conversation, not a channel; purge it instead")
            head = ledger.lock_head(conn)
            self.gate.check_head(conn, head)
            done = pq.tombstone_of(conn, TombstoneKind.CHANNEL, channel_id) or pq.tombstone_of(
                conn, TombstoneKind.CONVERSATION, channel_id
            )
            if done:
                return _already_purged(done), []
            entry = _append(conn, head, PurgeKind.CHANNEL, {"channel_id": channel_id, "request": request}, causal)
            pq.insert_tombstones(conn, entry.purge_id, {TombstoneKind.CHANNEL: [channel_id]})
            return _accepted(entry), []

        return self._accept(work)

    def preview_bot_deletion(self, bot_id: str) -> BotDeletionPreview:
        """What deleting the bot does, and whether its Memory can be erased (with the reason)."""
        validation.check_id(bot_id, "bot_id")
        with self.db.read() as conn:
            self.gate.require_open(conn)
            bot = q.bot_row(conn, bot_id)
            if bot is None:
                raise NotFound(f"no bot {bot_id}")
            blocking = pq.active_run_ids(conn, bot_id=bot_id)
            verdict = self._ownership(conn, bot)
        identity = RepositoryIdentity(bot.memory_path, bot.marker_id) if bot.memory_path and bot.marker_id else None
        memory_preview = MemoryPreview(bot.memory_path, verdict.provable, verdict.reason, verdict.detail, identity)
        return BotDeletionPreview(bot.id, bot.name, bot.state, tuple(blocking), memory_preview, BOT_DISCLOSURES)

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
        validation.check_id(bot_id, "bot_id")
        if not isinstance(erase_memory, bool):
            raise ValidationError("erase_memory must be true or false")
        if erase_memory and not isinstance(reviewed_repository, RepositoryIdentity):
            raise ValidationError("erase_memory needs the reviewed_repository from preview_bot_deletion()")
        causal = Causal.check(actor, reason, idempotency_key, request_id, origin)
        request = {"bot_id": bot_id, "erase_memory": erase_memory}

        def work(conn: Connection) -> tuple[Acceptance, list[str]]:
            replay = _replay(conn, causal, PurgeKind.BOT, request)
            if replay:
                return replay, []
            bot = pq.lock_bot(conn, bot_id)
            if bot is None:
                raise NotFound(f"no bot {bot_id}")
            head = ledger.lock_head(conn)
            self.gate.check_head(conn, head)
            done = pq.tombstone_of(conn, TombstoneKind.BOT, bot_id)
            if done:
                return _already_purged(done), []
            _refuse_active_runs(pq.active_run_ids(conn, bot_id=bot_id))
            if erase_memory:
                self._require_erasable(conn, bot, reviewed_repository)
                pq.mark_memory_erasure(conn, bot_id)
            selectors = {
                "bot_id": bot_id,
                "erase_memory": erase_memory,
                "memory_path": bot.memory_path,
                "marker_id": bot.marker_id,
                "request": request,
            }
            entry = _append(conn, head, PurgeKind.BOT, selectors, causal)
            pq.insert_tombstones(conn, entry.purge_id, {TombstoneKind.BOT: [bot_id]})
            kinds = [StepKind.MEMORY] if erase_memory else []
            return _accepted(entry), pq.create_steps(conn, entry.purge_id, kinds)

        return self._accept(work)

    # -- helpers --------------------------------------------------------------------------

    def _accept(self, work: Callable[[Connection], tuple[Acceptance, list[str]]]) -> Acceptance:
        """Commit, then copy the ledger row out (flushed), then wake the steps; the call
        returns only once the row is in the checkpoint directory."""
        acceptance, step_ids = self.db.transact(work)
        try:
            self._copy_out(acceptance)
        finally:
            if step_ids:
                self._wake(step_ids)
        return acceptance

    def _copy_out(self, acceptance: Acceptance) -> None:
        """After the commit, never before: a row may be outside and not yet in a database
        that was later restored, never the reverse. A failure leaves the purge accepted."""
        written = getattr(_appended, "entry", None)
        _appended.entry = None
        if written is not None and (written.seq, written.purge_id) != (acceptance.ledger_seq, acceptance.purge_id):
            written = None  # not this acceptance's row (a replay appends none): read it instead
        try:
            ledger_copy.catch_up(self.db, self.copy, upto=acceptance.ledger_seq, committed=written)
        except _COPY_FAILED as exc:
            raise LedgerNotCopied(
                f"purge {acceptance.purge_id} is accepted and fenced (ledger seq {acceptance.ledger_seq}), but its "
                f"ledger row is not in the checkpoint directory yet ({reason_of(exc)}); the same request again "
                "(same idempotency key), the next acceptance or the scheduler completes the copy",
                purge_id=acceptance.purge_id,
                ledger_seq=acceptance.ledger_seq,
            ) from exc

    def _wake(self, step_ids: Sequence[str]) -> None:
        """After the commit, never before; a failure is logged and the sweep heals it."""
        try:
            self.enqueue(list(step_ids))
        except Exception:
            log.warning(
                "enqueue of cleanup steps %s failed; the scheduler will resume them", list(step_ids), exc_info=True
            )

    def _ownership(self, conn: Connection, bot: Any) -> memory.Ownership:
        if not bot.memory_path:
            return memory.Ownership.refused("no_repository")
        return memory.prove_ownership(
            bot.memory_path,
            bot_id=bot.id,
            marker_id=bot.marker_id,
            memory_roots=self.settings.memory_roots,
            other_repositories=pq.kept_repositories(conn, except_bot=bot.id),
        )

    def _require_erasable(self, conn: Connection, bot: Any, reviewed: RepositoryIdentity | None) -> None:
        if not bot.memory_path:
            raise MemoryErasureUnavailable(memory.OWNERSHIP_REASONS["no_repository"], reason="no_repository")
        current = RepositoryIdentity(bot.memory_path, bot.marker_id or "")
        if reviewed is None or _normal(reviewed) != _normal(current):
            detail = memory.OWNERSHIP_REASONS["identity_changed"]
            raise MemoryErasureUnavailable(detail, reason="identity_changed")
        verdict = self._ownership(conn, bot)
        if not verdict.provable:
            raise MemoryErasureUnavailable(verdict.detail, reason=verdict.reason or "unprovable")


BOT_DISCLOSURES = (
    "Deleting a bot keeps its Memory repository unless Memory erasure is chosen; its id is never reused.",
    "Memory erasure removes only the reviewed repository, with its local Git history; Git remotes, "
    "exports and backups are not touched.",
    "A request already sent to a model or provider is not recalled.",
)


def _normal(identity: RepositoryIdentity) -> tuple[str, str]:
    return (str(Path(identity.path).expanduser().absolute()), identity.marker_id)


def _check_scope(scope: Any) -> None:
    if not isinstance(scope, EventScope):
        raise ValidationError("scope must be a commands.EventScope")


def _check_digest(digest: Any) -> None:
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValidationError("scope_digest must be the 64-character hex digest from preview_purge()")


def _check_version(version: Any) -> None:
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
        raise ValidationError("expected_version must be a positive integer")


def _refuse_active_runs(run_ids: Sequence[str]) -> None:
    if run_ids:
        shown = ", ".join(run_ids[:10])
        raise ActiveRuns(f"non-terminal runs are affected: {shown}; settle or abandon them first", run_ids=run_ids)


def _replay(conn: Connection, causal: Causal, kind: PurgeKind, request: dict[str, Any]) -> Acceptance | None:
    """The original acceptance for a repeated idempotency key, or a conflict. A key names
    one request: its kind, what it asked for, and who asked and why; any other request with
    the same key is an IdempotencyConflict."""
    if causal.idempotency_key is None:
        return None
    entry = ledger.entry_by_idempotency_key(conn, causal.idempotency_key)
    if entry is None:
        return None
    asked = (kind.value, json.loads(ledger.canonical_json(request)), causal.actor, causal.reason)
    if (entry.kind, entry.selectors.get("request"), entry.actor, entry.reason) != asked:
        raise IdempotencyConflict(f"idempotency key {causal.idempotency_key} was used for another request")
    return Acceptance(entry.purge_id, entry.seq, "accepted")


def _append(
    conn: Connection,
    head: ledger.Head,
    kind: PurgeKind,
    selectors: dict[str, Any],
    causal: Causal,
    *,
    digest: str = "",
    purge_id: str | None = None,
) -> ledger.LedgerEntry:
    entry = ledger.append(
        conn,
        head,
        purge_id=purge_id or uuid.uuid4().hex,
        kind=kind.value,
        selectors=selectors,
        scope_digest=digest or ledger.sha256_hex(ledger.canonical_json(selectors)),
        actor=causal.actor,
        reason=causal.reason,
        request_id=causal.request_id,
        idempotency_key=causal.idempotency_key,
        origin=causal.origin,
    )
    _appended.entry = entry  # this thread's acceptance copies it out once committed
    return entry


def _accept_content(
    conn: Connection, gate: Gate, report: PurgePreview, fresh: Sequence[Any], causal: Causal, request: dict[str, Any]
) -> tuple[Acceptance, list[str]]:
    """Fences, steps and versions first; the ledger head is locked last, for the least time."""
    purge_id = uuid.uuid4().hex
    event_ids = sorted(e.id for e in fresh)
    provider_ids = sorted(e.provider_event_id for e in fresh if e.provider_event_id)
    pq.insert_tombstones(conn, purge_id, {TombstoneKind.EVENT: event_ids, TombstoneKind.PROVIDER_EVENT: provider_ids})
    fresh_ids = set(event_ids)
    attachments = report.exclusive_attachments + report.shared_attachments
    kinds = [StepKind.BODIES] + ([StepKind.ATTACHMENTS] if any(a.event_id in fresh_ids for a in attachments) else [])
    steps = pq.create_steps(conn, purge_id, kinds)
    pq.bump_versions(conn, report.conversation_ids)
    selectors = {
        "event_ids": event_ids,
        "provider_event_ids": provider_ids,
        "already_fenced": sorted(report.already_fenced),
        "request": request,
    }
    head = ledger.lock_head(conn)
    gate.check_head(conn, head)
    entry = _append(conn, head, PurgeKind.CONTENT, selectors, causal, digest=report.scope_digest, purge_id=purge_id)
    return _accepted(entry), steps


def _accepted(entry: ledger.LedgerEntry) -> Acceptance:
    return Acceptance(entry.purge_id, entry.seq, "accepted")


def _already_purged(covering: Any) -> Acceptance:
    return Acceptance(covering.purge_id, int(covering.seq or 0), "already_purged")
