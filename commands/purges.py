"""The purge commands: preview, confirmation, conversation purge, channel and bot deletion.

Each validates what it is asked, then runs the kind's stages through the one skeleton
(``commands.kinds.skeleton``): one transaction that locks, checks, fences and appends the
ledger row. After the commit the row is copied to the checkpoint directory, and only then is
the enqueue hook called, best effort: the scheduler's sweep heals a wake-up that was lost.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from typing import Any

from commands import kinds, validation
from commands.gate import Gate
from commands.kinds import author as author_kind
from commands.kinds import bot, content, conversation
from commands.kinds.base import PREVIEW_RETENTION, Env, Kind
from commands.kinds.skeleton import MAX_ACTOR_LENGTH, MAX_REASON_LENGTH, Causal, accept, appended
from commands.records import Acceptance, AuthorErasurePreview, BotDeletionPreview, RepositoryIdentity
from commands.scope import EventScope, PurgePreview, aware
from commands.settings import Settings
from schema import purges
from schema.db import Database
from schema.errors import LedgerNotCopied, PurgekeeperError, ValidationError
from storage import ledger_copy
from storage.files import reason_of

log = logging.getLogger(__name__)

_COPY_FAILED: tuple[type[Exception], ...] = (*ledger_copy.COPY_FAILED, PurgekeeperError)

__all__ = ["MAX_ACTOR_LENGTH", "MAX_REASON_LENGTH", "EnqueueHook", "PurgeCommands"]

EnqueueHook = Callable[[Sequence[str]], None]


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
        return self._preview(kinds.CONTENT, scope)

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
        check_digest(scope_digest, "preview_purge()")
        causal = Causal.check(actor, reason, idempotency_key, request_id, origin)
        args = content.Confirmation(scope, scope_digest)
        return self._accept(kinds.CONTENT, args, {"scope": scope.canonical()}, causal)

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
        args = conversation.Request(conversation_id, expected_version)
        return self._accept(kinds.CONVERSATION, args, {"conversation_id": conversation_id}, causal)

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
        return self._accept(kinds.CHANNEL, channel_id, {"channel_id": channel_id}, causal)

    def preview_bot_deletion(self, bot_id: str) -> BotDeletionPreview:
        """What deleting the bot does, and whether its Memory can be erased (with the reason)."""
        validation.check_id(bot_id, "bot_id")
        return self._preview(kinds.BOT, bot_id)

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
        args = bot.Request(bot_id, erase_memory, reviewed_repository)
        return self._accept(kinds.BOT, args, {"bot_id": bot_id, "erase_memory": erase_memory}, causal)

    # -- a person, everywhere ---------------------------------------------------------------

    def preview_author_erasure(self, author: str, *, before: dt.datetime | None = None) -> AuthorErasurePreview:
        """What erasing everything ``author`` wrote (with ``occurred_at < before``, if given)
        would touch, in every conversation, and the ``scope_digest`` to confirm."""
        return self._preview(kinds.AUTHOR, _window(author, before))

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
        window = _window(author, before)
        check_digest(scope_digest, "preview_author_erasure()")
        if not isinstance(close_author, bool):
            raise ValidationError("close_author must be true or false")
        causal = Causal.check(actor, reason, idempotency_key, request_id, origin)
        request = {"author": window.author, "before": window.before, "close_author": close_author}
        return self._accept(kinds.AUTHOR, author_kind.Confirmation(window, scope_digest, close_author), request, causal)

    # -- the skeleton's edges -------------------------------------------------------------

    def _env(self) -> Env:
        return Env(self.gate, self.settings)

    def _preview(self, kind: Kind, args: Any) -> Any:
        """A kind's preview, in one read transaction while the gate is open; then, in a short
        write of its own, what a confirmation checks it against."""
        with self.db.read() as conn:
            self.gate.require_open(conn)
            report, remembered = kind.preview(conn, self._env(), args)
        if remembered is not None:
            digest = report.scope_digest
            self.db.transact(lambda conn: purges.save_preview(conn, digest, remembered, keep_for=PREVIEW_RETENTION))
        return report

    def _accept(self, kind: Kind, args: Any, request: dict[str, Any], causal: Causal) -> Acceptance:
        """Commit, then copy the ledger row out (flushed), then wake the steps; the call
        returns only once the row is in the checkpoint directory."""
        env = self._env()
        acceptance, step_ids = self.db.transact(lambda conn: accept(conn, kind, env, args, request, causal))
        try:
            self._copy_out(acceptance)
        finally:
            if step_ids:
                self._wake(step_ids)
        return acceptance

    def _copy_out(self, acceptance: Acceptance) -> None:
        """After the commit, never before: a row may be outside and not yet in a database
        that was later restored, never the reverse. A failure leaves the purge accepted."""
        written = getattr(appended, "entry", None)
        appended.entry = None
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


def _check_scope(scope: Any) -> None:
    if not isinstance(scope, EventScope):
        raise ValidationError("scope must be a commands.EventScope")


def check_digest(digest: Any, preview: str) -> None:
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValidationError(f"scope_digest must be the 64-character hex digest from {preview}")


def _check_version(version: Any) -> None:
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
        raise ValidationError("expected_version must be a positive integer")


def _window(author: Any, before: Any) -> author_kind.Window:
    checked = validation.check_text(author, "author", max_length=validation.MAX_AUTHOR_LENGTH)
    return author_kind.Window(checked, aware(before, "before"))
