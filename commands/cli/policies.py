"""Retention policies and legal holds."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from purgekeeper.commands import surface
from purgekeeper.commands.cli.options import DURATION_SYNTAX, Duration, idempotency_option, who_options
from purgekeeper.commands.cli.render import render_ledger_change
from purgekeeper.commands.cli.render_policies import (
    render_holds,
    render_retention_preview,
    render_run_outcome,
    render_standing,
    standing_documents,
)
from purgekeeper.commands.cli.shared import ORIGIN, json_command, main, run_with_handle
from purgekeeper.schema.errors import NotFound

if TYPE_CHECKING:
    from purgekeeper.commands.handle import Purgekeeper
    from purgekeeper.commands.records import (
        Acceptance,
        RetentionPreview,
        RetentionRunOutcome,
    )

    """Place legal hold HOLD_ID on conversations and authors (at least one). It does not undo
    purges accepted before it: the disclosures name what they already removed in its scope.
    A conversation id that no conversation has is refused unless --allow-unknown is given."""

# -- retention policies and legal holds


@main.group("retention")
def retention_group() -> None:
    """Retention policies: previewed, confirmed once, then run by the scheduler as retention
    purges (purgectl status and list show them, labelled with their policy)."""


max_age_option = click.option(
    "--max-age",
    required=True,
    type=Duration(),
    help=f"Expire what occurred longer ago than this: {DURATION_SYNTAX}.",
)
policy_scope_option = click.option(
    "--conversation", metavar="ID", help="Only this conversation (default: every conversation and channel)."
)


@json_command(retention_group, "preview")
@max_age_option
@policy_scope_option
def retention_preview(max_age: dt.timedelta, conversation: str | None, as_json: bool) -> None:
    """Show what a policy of --max-age would expire if it ran now, what legal holds would
    keep, and the scope digest to set it with (retention set)."""

    def action(pk: Purgekeeper) -> RetentionPreview:
        return pk.preview_retention(max_age=max_age, conversation_id=conversation)

    run_with_handle(as_json, action, render_retention_preview)


@json_command(retention_group, "set")
@click.argument("policy_id")
@max_age_option
@policy_scope_option
@click.option("--digest", required=True, help="The scope digest retention preview showed.")
@who_options
@idempotency_option
def retention_set(
    policy_id: str,
    max_age: dt.timedelta,
    conversation: str | None,
    digest: str,
    actor: str,
    reason: str,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Set (or change) retention policy POLICY_ID, as previewed. Another policy already
    governing the same scope is refused (policy_conflict, exit 3)."""

    def action(pk: Purgekeeper) -> Acceptance:
        return pk.set_retention(
            policy_id,
            max_age=max_age,
            conversation_id=conversation,
            scope_digest=digest,
            actor=actor,
            reason=reason,
            idempotency_key=idempotency_key,
            origin=ORIGIN,
        )

    change = f"retention policy {policy_id} set"
    then = "the scheduler runs it at its next sweep (purgectl resume does too), then at every interval"
    run_with_handle(as_json, action, lambda a: render_ledger_change(a, change=change, then=then))


@json_command(retention_group, "remove")
@click.argument("policy_id")
@who_options
@idempotency_option
def retention_remove(policy_id: str, actor: str, reason: str, idempotency_key: str | None, as_json: bool) -> None:
    """Remove retention policy POLICY_ID: it is not run again; runs already accepted finish
    their cleanup."""

    def action(pk: Purgekeeper) -> Acceptance:
        return pk.remove_retention(
            policy_id, actor=actor, reason=reason, idempotency_key=idempotency_key, origin=ORIGIN
        )

    change = f"retention policy {policy_id} removed"
    run_with_handle(as_json, action, lambda a: render_ledger_change(a, change=change))


@json_command(retention_group, "list")
def retention_list(as_json: bool) -> None:
    """List the standing retention policies, with their last and next runs, who took the last
    turn and why, and what non-terminal agent runs hold back (since when, how many events,
    which runs). JSON: {"policies": [...]}, each with "last_run_by", "last_run_reason" and
    "deferral" ({"since", "events", "run_ids"} or null)."""
    run_with_handle(as_json, lambda pk: pk.retention.list_standing(), render_standing, standing_documents)


@json_command(retention_group, "run")
@click.argument("policy_id")
@who_options
def retention_run(policy_id: str, actor: str, reason: str, as_json: bool) -> None:
    """Take retention policy POLICY_ID's turn now, rather than at its next run (after a hold's
    release, say): what the scheduler's turn does, so a run is accepted once per cutoff, and
    run again at once it finds nothing new. The actor and reason are recorded on the policy
    (retention list) and in the ledger row of the run the turn accepts (status, list). An
    unknown policy is not_found (exit 1)."""

    def action(pk: Purgekeeper) -> RetentionRunOutcome:
        return pk.run_retention_policy(policy_id, actor=actor, reason=reason, origin=ORIGIN)

    run_with_handle(as_json, action, render_run_outcome)


@main.group("hold")
def hold_group() -> None:
    """Legal holds: while one is in force, every purge of what it covers is refused
    (legal_hold, exit 3) and retention runs keep it."""


@json_command(hold_group, "place")
@click.argument("hold_id")
@click.option("--conversation", "conversations", multiple=True, metavar="ID", help="Hold a conversation (repeatable).")
@click.option("--author", "authors", multiple=True, help="Hold everything this author wrote (repeatable).")
@click.option(
    "--allow-unknown",
    is_flag=True,
    help="Hold a conversation id that no conversation has yet (it holds whatever is created under it). "
    "Without it an unknown id is refused (not_found, exit 1), since it is most often a typo.",
)
@who_options
@idempotency_option
def hold_place(
    hold_id: str,
    conversations: Sequence[str],
    authors: Sequence[str],
    allow_unknown: bool,
    actor: str,
    reason: str,
    idempotency_key: str | None,
    as_json: bool,
) -> None:

    def action(pk: Purgekeeper) -> Acceptance:
        unknown = [] if allow_unknown else [c for c in conversations if pk.preview_conversation_purge(c).unknown]
        if unknown:
            raise NotFound(
                f"no conversation {', '.join(unknown)}: a hold on an id nobody uses holds nothing now; check the id, "
                "or pass --allow-unknown to hold it for content created under it later"
            )
        return pk.place_hold(
            hold_id,
            conversation_ids=conversations,
            authors=authors,
            actor=actor,
            reason=reason,
            idempotency_key=idempotency_key,
            origin=ORIGIN,
        )

    run_with_handle(as_json, action, lambda a: render_ledger_change(a, change=f"legal hold {hold_id} placed"))


@json_command(hold_group, "release")
@click.argument("hold_id")
@who_options
@idempotency_option
def hold_release(hold_id: str, actor: str, reason: str, idempotency_key: str | None, as_json: bool) -> None:
    """Release legal hold HOLD_ID: what it covered can be purged again, and retention runs
    expire what it kept at their next turn. A hold id is never reused."""

    def action(pk: Purgekeeper) -> Acceptance:
        return pk.release_hold(hold_id, actor=actor, reason=reason, idempotency_key=idempotency_key, origin=ORIGIN)

    run_with_handle(as_json, action, lambda a: render_ledger_change(a, change=f"legal hold {hold_id} released"))


@json_command(hold_group, "list")
@click.option("--all", "include_released", is_flag=True, help="Also the released holds.")
def hold_list(include_released: bool, as_json: bool) -> None:
    """List the legal holds in force (--all: the released ones too). JSON: {"holds": [...]}."""
    run_with_handle(
        as_json,
        lambda pk: pk.list_holds(include_released=include_released),
        lambda holds: render_holds(holds, include_released=include_released),
        lambda holds: {"holds": surface.plain(holds)},
    )
