"""purgectl's text of retention policies and legal holds: a policy's preview, a turn's outcome,
the standing policies with their last turns, and the holds."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from purgekeeper.commands import surface
from purgekeeper.commands.cli.options import duration_text
from purgekeeper.commands.cli.render import cell, counted, fields, listed, table

if TYPE_CHECKING:
    from purgekeeper.commands.records import (
        Hold,
        PolicyDeferral,
        RetentionPreview,
        RetentionRunOutcome,
        StandingPolicy,
    )


def render_retention_preview(preview: RetentionPreview) -> str:
    conversation = f" --conversation {shlex.quote(preview.conversation_id)}" if preview.conversation_id else ""
    more = preview.conversations - len(preview.by_conversation)
    touched = counted(preview.conversations, "conversation")
    elsewhere = list(preview.governed_elsewhere)
    pairs: list[tuple[str, Any]] = [
        ("scope", scope_text(preview.conversation_id)),
        ("max age", f"{duration_text(preview.max_age)} ({int(preview.max_age.total_seconds())} s)"),
        ("cutoff", preview.cutoff),
        (
            "expires now",
            f"{counted(preview.events, 'event')}, from {counted(preview.placements, 'placement')} in {touched}",
        ),
        ("kept elsewhere", f"{preview.kept_elsewhere} of them stay live in a conversation the policy leaves alone"),
        (
            "held",
            counted(preview.held, "event") + (f" (holds {', '.join(preview.hold_ids)})" if preview.hold_ids else ""),
        ),
        ("replaces", f"policy {preview.replaces}" if preview.replaces else None),
    ]
    lines = [
        f"scope digest  {preview.scope_digest}",
        "",
        fields(pairs),
        "",
        f"conversations touched ({preview.conversations}):",
        table(("conversation", "events"), [(c.conversation_id, c.events) for c in preview.by_conversation]),
        *([f"  ... and {more} more"] if more > 0 else []),
        *([listed("left to their own policies", elsewhere)] if elsewhere else []),
        "",
        "not erased:",
        *(f"  - {d}" for d in preview.disclosures),
        "",
        f"to confirm: purgectl retention set POLICY_ID --max-age {duration_text(preview.max_age)}{conversation} "
        f"--digest {preview.scope_digest} --actor WHO --reason WHY",
    ]
    return "\n".join(lines)


def render_run_outcome(outcome: RetentionRunOutcome) -> str:
    """One policy's turn: the run it accepted, or why there was none."""
    if outcome.error is not None:
        return f"retention policy {outcome.policy_id}: its turn failed ({outcome.error}); the next turn tries again"
    if outcome.purge_id is None:
        said = f"retention policy {outcome.policy_id}: nothing new to expire since its last cutoff; no run accepted"
    else:
        cutoff = outcome.cutoff.strftime("%Y-%m-%dT%H:%M:%SZ") if outcome.cutoff else "-"
        said = (
            f"retention policy {outcome.policy_id}: run {outcome.purge_id} accepted (cutoff {cutoff})\n"
            f"follow it: purgectl wait {outcome.purge_id}"
        )
    if outcome.deferred_events:
        said += f"\n{counted(outcome.deferred_events, 'event')} admitted by agent runs wait for a later run"
    return said


def render_standing(policies: Sequence[StandingPolicy]) -> str:
    """The standing policies with their last turn (who took it, and why) and what agent runs
    hold back."""
    if not policies:
        return "no retention policies"
    headers = (
        "policy", "scope", "max age", "last run", "last run by", "last cutoff", "last purge", "next run",
        "deferral", "set by",
    )  # fmt: skip
    rows = [
        (
            s.policy.policy_id,
            scope_text(s.policy.conversation_id),
            duration_text(s.policy.max_age),
            s.policy.last_run,
            f"{s.last_run_by}: {s.last_run_reason}" if s.last_run_by else None,
            s.policy.last_cutoff,
            s.policy.last_purge_id,
            s.policy.next_run,
            deferral_text(s.deferral),
            s.policy.set_by,
        )
        for s in policies
    ]
    return table(headers, rows)


def deferral_text(deferral: PolicyDeferral | None) -> str | None:
    if deferral is None:
        return None
    runs = ", ".join(deferral.run_ids)
    return f"held back by agent runs {runs} ({counted(deferral.events, 'event')}) since {cell(deferral.since)}"


def standing_documents(policies: Sequence[StandingPolicy]) -> dict[str, Any]:
    """``retention list --json``: each policy's fields, and its last turn's and deferral's."""
    return {
        "policies": [
            {
                **surface.plain(s.policy),
                "last_run_by": s.last_run_by,
                "last_run_reason": s.last_run_reason,
                "deferral": surface.plain(s.deferral),
            }
            for s in policies
        ]
    }


def render_holds(holds: Sequence[Hold], *, include_released: bool) -> str:
    if not holds:
        return "no legal holds" if include_released else "no legal holds in force"
    headers = ("hold", "conversations", "authors", "placed at", "placed by", "released at", "released by")
    rows = [
        (h.hold_id, few(h.conversation_ids), few(h.authors), h.placed_at, h.placed_by, h.released_at, h.released_by)
        for h in holds
    ]
    width = len(headers) if include_released else len(headers) - 2
    return table(headers[:width], [row[:width] for row in rows])


def scope_text(conversation_id: str | None) -> str:
    return f"conversation {conversation_id}" if conversation_id else "every conversation"


def few(ids: Sequence[str], limit: int = 3) -> str:
    """A count, and the first few ids: a hold may name a thousand."""
    if not ids:
        return "-"
    shown = ", ".join(ids[:limit]) + (", ..." if len(ids) > limit else "")
    return f"{len(ids)}: {shown}"
