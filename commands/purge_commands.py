"""The purge commands: preview, confirmation, conversation purge, channel and bot deletion.

Each validates what it is asked, then runs the kind's stages through the one skeleton
(``purgekeeper.commands.kinds.skeleton``) by way of the handle's ``Acceptor`` (``purgekeeper.commands.acceptance``):
one transaction that locks, checks, fences and appends the ledger row. After the commit the
row is copied to the checkpoint directory, and only then are the steps woken, best effort:
the scheduler's sweep heals a wake-up that was lost.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from purgekeeper.commands import kinds, validation
from purgekeeper.commands.acceptance import Acceptor
from purgekeeper.commands.kinds import author as author_kind
from purgekeeper.commands.kinds import bot, content, conversation
from purgekeeper.commands.kinds.skeleton import MAX_ACTOR_LENGTH, MAX_REASON_LENGTH, Causal
from purgekeeper.commands.records import (
    Acceptance,
    AuthorErasurePreview,
    BotDeletionPreview,
    ConversationPreview,
    RepositoryIdentity,
)
from purgekeeper.commands.scope import EventScope, PurgePreview, aware
from purgekeeper.schema.errors import ValidationError

__all__ = ["MAX_ACTOR_LENGTH", "MAX_REASON_LENGTH", "PurgeCommands", "check_digest"]


class PurgeCommands:
    """The purge commands of :class:`commands.Purgekeeper` (each documented there): every
    one validates what it is asked, then goes through ``acceptance`` (previews and
    acceptances refuse while the gate is closed)."""

    def __init__(self, acceptance: Acceptor) -> None:
        self.acceptance = acceptance

    # -- content purges -----------------------------------------------------------------

    def preview_purge(self, scope: EventScope) -> PurgePreview:
        """The dependency report of a content purge, and the ``scope_digest`` to confirm."""
        _check_scope(scope)
        return self.acceptance.preview_read_once(kinds.CONTENT, scope)

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
        args = content.ScopeConfirmation(scope, scope_digest)
        return self.acceptance.accept(kinds.CONTENT, args, {"scope": scope.canonical()}, causal)

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
        args = conversation.ConversationPurgeRequest(conversation_id, expected_version)
        return self.acceptance.accept(kinds.CONVERSATION, args, {"conversation_id": conversation_id}, causal)

    def preview_conversation_purge(self, conversation_id: str) -> ConversationPreview:
        """What purging the whole conversation would remove, in counts, and what stays: events
        also placed in a live conversation, and, for an id that does not exist, that the purge
        reserves it. ``holds`` names the legal holds that would refuse it. Confirm with
        ``purge_conversation(..., expected_version=preview.version)``."""
        validation.check_id(conversation_id, "conversation_id")
        return self.acceptance.preview(kinds.CONVERSATION, conversation_id)

    def preview_channel_deletion(self, channel_id: str) -> ConversationPreview:
        """What the channel holds; its deletion removes none of it (``removes_content`` is
        false). An unknown id is ``NotFound``, a conversation's a ``ValidationError``."""
        validation.check_id(channel_id, "channel_id")
        return self.acceptance.preview(kinds.CHANNEL, channel_id)

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
        return self.acceptance.accept(kinds.CHANNEL, channel_id, {"channel_id": channel_id}, causal)

    def preview_bot_deletion(self, bot_id: str) -> BotDeletionPreview:
        """What deleting the bot does, and whether its Memory can be erased (with the reason)."""
        validation.check_id(bot_id, "bot_id")
        return self.acceptance.preview(kinds.BOT, bot_id)

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
        args = bot.BotDeletionRequest(bot_id, erase_memory, reviewed_repository)
        return self.acceptance.accept(kinds.BOT, args, {"bot_id": bot_id, "erase_memory": erase_memory}, causal)

    # -- a person, everywhere ---------------------------------------------------------------

    def preview_author_erasure(self, author: str, *, before: dt.datetime | None = None) -> AuthorErasurePreview:
        """What erasing everything ``author`` wrote (with ``occurred_at < before``, if given)
        would touch, in every conversation, and the ``scope_digest`` to confirm."""
        return self.acceptance.preview(kinds.AUTHOR, _window(author, before))

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
        ``purgekeeper.commands.kinds.author``). The acceptance costs the same for ten events as for a
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
        confirmation = author_kind.ErasureConfirmation(window, scope_digest, close_author)
        return self.acceptance.accept(kinds.AUTHOR, confirmation, request, causal)


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
