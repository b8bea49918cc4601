"""The purge commands: preview, confirm, conversation purges, channel and bot deletion, author erasure."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from purgekeeper.commands.cli.options import (
    Timestamp,
    build_scope,
    idempotency_option,
    scope_arguments,
    scope_options,
    who_options,
)
from purgekeeper.commands.cli.render import (
    render_acceptance,
    render_author_preview,
    render_bot_preview,
    render_conversation_preview,
    render_preview,
)
from purgekeeper.commands.cli.shared import ORIGIN, json_command, main, run_with_handle
from purgekeeper.schema.errors import (
    NotFound,
    ValidationError,
)

if TYPE_CHECKING:
    from purgekeeper.commands.handle import Purgekeeper
    from purgekeeper.commands.records import (
        Acceptance,
        ConversationPreview,
        RepositoryIdentity,
    )
    from purgekeeper.commands.scope import PurgePreview

# -- content purges


@json_command(main)
@scope_options
def preview(
    events: Sequence[str],
    conversation: str | None,
    after: dt.datetime | None,
    before: dt.datetime | None,
    author: str | None,
    as_json: bool,
) -> None:
    """Show what a content purge would touch, and the scope digest to confirm it with.
    Select --event ID (repeatable), or --conversation ID with optional --after/--before
    (ISO 8601 with a timezone) and --author."""

    def action(pk: Purgekeeper) -> PurgePreview:
        return pk.preview_purge(build_scope(events, conversation, after, before, author))

    run_with_handle(as_json, action, lambda p: render_preview(p, scope_args=scope_arguments(p.scope)))


@json_command(main)
@scope_options
@click.option("--digest", required=True, help="The scope digest the preview showed.")
@who_options
@idempotency_option
def confirm(
    events: Sequence[str],
    conversation: str | None,
    after: dt.datetime | None,
    before: dt.datetime | None,
    author: str | None,
    digest: str,
    actor: str,
    reason: str,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Accept a previewed content purge (same scope options as preview). A scope that changed
    since the preview is refused (stale_confirmation, exit 3) and nothing is written."""

    def action(pk: Purgekeeper) -> Acceptance:
        scope = build_scope(events, conversation, after, before, author)
        return pk.confirm_purge(
            scope, scope_digest=digest, actor=actor, reason=reason, idempotency_key=idempotency_key, origin=ORIGIN
        )

    run_with_handle(as_json, action, render_acceptance)


@json_command(main, "preview-conversation")
@click.argument("conversation_id")
def preview_conversation(conversation_id: str, as_json: bool) -> None:
    """Show what purging a whole conversation would remove, in counts, the legal holds that
    would refuse it, what stays, and the command that confirms it."""
    run_with_handle(as_json, lambda pk: pk.preview_conversation_purge(conversation_id), render_conversation_preview)


@json_command(main, "purge-conversation")
@click.argument("conversation_id")
@who_options
@click.option("--expected-version", type=int, help="Refuse (version_conflict) if the conversation moved on.")
@click.option(
    "--reserve-absent",
    is_flag=True,
    help="Purge the id even if no conversation has it: the id is then reserved forever. Without it an "
    "unknown id is refused (not_found, exit 1), since it is most often a typo.",
)
@idempotency_option
def purge_conversation(
    conversation_id: str,
    actor: str,
    reason: str,
    expected_version: int | None,
    reserve_absent: bool,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Purge a whole conversation or channel (preview-conversation shows what it removes). A
    repeat reports already_purged. An unknown id is refused unless --reserve-absent is given."""

    def action(pk: Purgekeeper) -> Acceptance:
        if not reserve_absent:
            refuse_unknown(pk.preview_conversation_purge(conversation_id))
        return pk.purge_conversation(
            conversation_id,
            actor=actor,
            reason=reason,
            expected_version=expected_version,
            idempotency_key=idempotency_key,
            origin=ORIGIN,
        )

    run_with_handle(as_json, action, render_acceptance)


def refuse_unknown(preview: ConversationPreview) -> None:
    """An id that no conversation has, and that no purge has reserved yet."""
    if preview.unknown:
        raise NotFound(
            f"no conversation {preview.conversation_id}: purging an unknown id reserves it forever, so it is "
            "refused here; check the id, or pass --reserve-absent to reserve it"
        )


@json_command(main, "preview-channel-deletion")
@click.argument("channel_id")
def preview_channel_deletion(channel_id: str, as_json: bool) -> None:
    """Show what the channel holds (its deletion removes none of it) and the command that
    deletes it."""
    run_with_handle(as_json, lambda pk: pk.preview_channel_deletion(channel_id), render_conversation_preview)


@json_command(main, "delete-channel")
@click.argument("channel_id")
@who_options
@idempotency_option
def delete_channel(channel_id: str, actor: str, reason: str, idempotency_key: str | None, as_json: bool) -> None:
    """End a channel: no new membership, routing or content. Its history stays readable
    (purge-conversation removes it) and its id is never reused."""

    def action(pk: Purgekeeper) -> Acceptance:
        return pk.delete_channel(channel_id, actor=actor, reason=reason, idempotency_key=idempotency_key, origin=ORIGIN)

    run_with_handle(as_json, action, render_acceptance)


@json_command(main, "preview-bot-deletion")
@click.argument("bot_id")
def preview_bot_deletion(bot_id: str, as_json: bool) -> None:
    """Show what deleting a bot does, and whether its Memory repository can be erased (with
    the reason when not, and the reviewed path and marker to pass to delete-bot when so)."""
    run_with_handle(as_json, lambda pk: pk.preview_bot_deletion(bot_id), render_bot_preview)


@json_command(main, "delete-bot")
@click.argument("bot_id")
@who_options
@click.option("--erase-memory", is_flag=True, help="Also erase the bot's Memory repository (Git metadata too).")
@click.option("--reviewed-path", metavar="PATH", help="With --erase-memory: the path preview-bot-deletion showed.")
@click.option("--reviewed-marker", metavar="ID", help="With --erase-memory: the marker preview-bot-deletion showed.")
@idempotency_option
def delete_bot(
    bot_id: str,
    actor: str,
    reason: str,
    erase_memory: bool,
    reviewed_path: str | None,
    reviewed_marker: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Delete a bot: refused while it has non-terminal runs; its id is never reused. Its Memory
    is kept unless --erase-memory names the reviewed repository, which must still be provably
    the bot's alone (else memory_erasure_unavailable, exit 3, and nothing is written)."""

    def action(pk: Purgekeeper) -> Acceptance:
        reviewed = reviewed_repository(erase_memory, reviewed_path, reviewed_marker)
        return pk.delete_bot(
            bot_id,
            actor=actor,
            reason=reason,
            erase_memory=erase_memory,
            reviewed_repository=reviewed,
            idempotency_key=idempotency_key,
            origin=ORIGIN,
        )

    run_with_handle(as_json, action, render_acceptance)


@json_command(main, "preview-author-erasure")
@click.argument("author")
@click.option(
    "--before", type=Timestamp(), help="Only what the author wrote before this time (ISO 8601, with a timezone)."
)
def preview_author_erasure(author: str, before: dt.datetime | None, as_json: bool) -> None:
    """Show what erasing everything AUTHOR wrote, in every conversation, would touch, and the
    scope digest to confirm it with (erase-author)."""
    run_with_handle(as_json, lambda pk: pk.preview_author_erasure(author, before=before), render_author_preview)


@json_command(main, "erase-author")
@click.argument("author")
@click.option("--before", type=Timestamp(), help="The same --before as the preview, if it had one.")
@click.option("--digest", required=True, help="The scope digest preview-author-erasure showed.")
@click.option(
    "--keep-author-open",
    is_flag=True,
    help="Accept new events by the author after the erased window (default: refuse every new one).",
)
@who_options
@idempotency_option
def erase_author(
    author: str,
    before: dt.datetime | None,
    digest: str,
    keep_author_open: bool,
    actor: str,
    reason: str,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Erase everything AUTHOR wrote, wherever it is placed. Afterwards an event by the author
    inside the erased window is refused (author_erased, exit 3), and so is every new one
    unless --keep-author-open."""

    def action(pk: Purgekeeper) -> Acceptance:
        return pk.erase_author(
            author,
            scope_digest=digest,
            actor=actor,
            reason=reason,
            before=before,
            close_author=not keep_author_open,
            idempotency_key=idempotency_key,
            origin=ORIGIN,
        )

    run_with_handle(as_json, action, render_acceptance)


def reviewed_repository(erase: bool, path: str | None, marker: str | None) -> RepositoryIdentity | None:
    if not erase:
        if path is not None or marker is not None:
            raise ValidationError("--reviewed-path and --reviewed-marker go with --erase-memory")
        return None
    if path is None or marker is None:
        raise ValidationError("--erase-memory needs --reviewed-path and --reviewed-marker from preview-bot-deletion")
    from purgekeeper.commands.records import RepositoryIdentity

    return RepositoryIdentity(path, marker)
