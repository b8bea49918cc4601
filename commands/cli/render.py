"""purgectl's text output: tables, fields and the rendering of each record."""

from __future__ import annotations

import datetime as dt
import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from purgekeeper.commands import surface
from purgekeeper.commands.cli.options import duration_text

if TYPE_CHECKING:
    from purgekeeper.commands.records import (
        Acceptance,
        AuthorErasurePreview,
        BotDeletionPreview,
        ConversationPreview,
        Hold,
        LedgerReport,
        PurgePage,
        PurgeStatus,
        RepositoryIdentity,
        RetentionPolicy,
        RetentionPreview,
        RetentionRunOutcome,
        StepState,
    )
    from purgekeeper.commands.scope import PurgePreview
    from purgekeeper.commands.worker_records import WorkerProcess
    from purgekeeper.storage import checkpoint

# -- text output ------------------------------------------------------------------------------------


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dt.datetime):
        return str(surface.plain(value))
    if isinstance(value, dict):
        return "; ".join(f"{label(k)}: {cell(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(cell(v) for v in value) or "-"
    return str(value)


def label(name: Any) -> str:
    """A field's name as text: ``head_rebuilt`` is ``head rebuilt``."""
    return str(name).replace("_", " ")


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``1 row``, ``2 rows``, ``0 rows``: the noun in the plural unless there is exactly one."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Aligned columns that never wrap or truncate an id, so the output stays greppable."""
    cells = [list(headers), *([cell(value) for value in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def fields(pairs: Sequence[tuple[str, Any]]) -> str:
    width = max(len(name) for name, _ in pairs)
    return "\n".join(f"{name.ljust(width)}  {cell(value)}" for name, value in pairs)


def listed(title: str, ids: Sequence[str]) -> str:
    return f"{title} ({len(ids)}): {', '.join(ids) if ids else '-'}"


def render_acceptance(acceptance: Acceptance) -> str:
    if acceptance.outcome == "already_purged":
        text = f"already purged: covered by purge {acceptance.purge_id} (ledger seq {acceptance.ledger_seq})"
    else:
        text = (
            f"accepted: purge {acceptance.purge_id} (ledger seq {acceptance.ledger_seq})\n"
            f"follow it with: purgectl wait {acceptance.purge_id}"
        )
    if acceptance.reserved_absent:
        text += "\nreserved: no conversation had this id; it is now reserved and can never be used"
    return text + render_disclosures(acceptance.disclosures)


def render_ledger_change(acceptance: Acceptance, *, change: str, then: str = "") -> str:
    """A policy or hold acceptance: it removes nothing itself, so there is nothing to wait for."""
    where = f"purge {acceptance.purge_id}, ledger seq {acceptance.ledger_seq}"
    if acceptance.outcome == "already_purged":
        text = f"already in force: {change} ({where})"
    else:
        text = f"accepted: {change} ({where})" + (f"\n{then}" if then else "")
    return text + render_disclosures(acceptance.disclosures)


def render_disclosures(disclosures: Sequence[str]) -> str:
    return "".join(["\n\ndisclosures:", *(f"\n  - {d}" for d in disclosures)]) if disclosures else ""


def render_status(status: PurgeStatus) -> str:
    summary = fields(
        [
            ("purge", status.purge_id),
            ("what", status.label or status.kind),
            ("kind", status.kind),
            ("status", status.status + (" (stalled)" if status.stalled else "")),
            ("accepted", f"{cell(status.accepted_at)} by {status.actor}"),
            ("reason", status.reason),
            ("ledger seq", status.ledger_seq),
        ]
    )
    if not status.steps:
        return summary + "\nno cleanup steps (nothing to remove)"
    headers = ("step", "status", "attempts", "removed", "retained", "held", "remaining", "next attempt", "last error")
    rows = [
        (
            s.kind,
            s.status,
            f"{s.attempts}/{s.max_attempts}",
            s.progress.removed,
            s.progress.retained_shared,
            s.progress.held,
            s.progress.remaining,
            s.next_attempt_at if s.status in ("pending", "retrying") else None,
            step_error(s),
        )
        for s in status.steps
    ]
    return summary + "\n\n" + table(headers, rows)


def step_error(step: StepState) -> str | None:
    """The step's last error; once the step is done, marked as history (as the console marks it)."""
    if step.last_error and step.status == "done":
        return f"before it was done: {step.last_error}"
    return step.last_error


def render_page(page: PurgePage, *, next_command: Callable[[int], str]) -> str:
    if not page.purges:
        return "no purges"
    headers = ("purge", "what", "status", "stalled", "steps done", "removed", "accepted", "actor")
    rows = [
        (
            p.purge_id,
            p.label or p.kind,
            p.status,
            p.stalled,
            f"{sum(s.status == 'done' for s in p.steps)}/{len(p.steps)}",
            sum(s.progress.removed for s in p.steps),
            p.accepted_at,
            p.actor,
        )
        for p in page.purges
    ]
    more = f"next page: {next_command(page.next_after)}" if page.next_after is not None else "(end of list)"
    return table(headers, rows) + "\n" + more


def render_preview(preview: PurgePreview, *, scope_args: str) -> str:
    events = table(
        ("event", "author", "occurred at", "placements", "note"),
        [
            (e.id, e.author, e.occurred_at, ", ".join(e.placements), "already purged" if e.already_fenced else "")
            for e in preview.events
        ],
    )
    holds = {hold for h in preview.held for hold in h.hold_ids}
    shared = [
        f"{a.id} (kept: also {', '.join(f'{r.attachment_id}@{r.event_id}' for r in a.other_references)})"
        for a in preview.shared_attachments
    ]
    lines = [
        f"scope digest  {preview.scope_digest}",
        "",
        f"events ({len(preview.events)}):",
        events,
        "",
        listed("admissions, payloads cleared", [a.id for a in preview.admissions]),
        listed("runs, outputs cleared", [r.id for r in preview.runs]),
        listed("derivatives", [d.id for d in preview.derivatives]),
        listed("attachments deleted", [a.id for a in preview.exclusive_attachments]),
        listed("attachments shared", shared),
        listed("blocking runs, refusing confirmation until they end", [r.id for r in preview.blocking_runs]),
        *held_lines(holds, [h.event_id for h in preview.held], "events"),
        "",
        "not erased:",
        *(f"  - {d}" for d in preview.disclosures),
        "",
        confirm_line(
            f"purgectl confirm {scope_args} --digest {preview.scope_digest} --actor WHO --reason WHY",
            holds=holds,
            blocking=[r.id for r in preview.blocking_runs],
        ),
    ]
    return "\n".join(lines)


def held_lines(holds: Iterable[str], held: Sequence[str], what: str) -> list[str]:
    """What legal holds keep: the holds, and the ids they cover (empty when none does)."""
    names = sorted(holds)
    if not names:
        return []
    return [listed(f"held by legal hold {', '.join(names)}, refusing confirmation: {what}", list(held))]


def confirm_line(command: str, *, holds: Iterable[str] = (), blocking: Sequence[str] = ()) -> str:
    """The command that confirms, or, when it cannot succeed now, why not and what to do."""
    names = sorted(holds)
    if names:
        releases = "; ".join(f"purgectl hold release {shlex.quote(h)} --actor WHO --reason WHY" for h in names)
        return (
            f"no confirm command: legal hold {', '.join(names)} refuses it (legal_hold). "
            f"Once released ({releases}), preview again."
        )
    if blocking:
        return f"no confirm command: runs {', '.join(blocking)} have not ended (active_runs); preview again then."
    return f"to confirm: {command}"


def render_conversation_preview(preview: ConversationPreview) -> str:
    what = preview.kind or "unknown id"
    pairs: list[tuple[str, Any]] = [
        ("conversation", f"{preview.conversation_id} ({what})"),
        ("version", preview.version),
        ("purged by", preview.purged_by),
        ("events", preview.events),
        ("placed elsewhere too", preview.events_placed_elsewhere),
        ("attachments", preview.attachments),
        ("runs", preview.runs),
        ("derivatives", preview.derivatives),
    ]
    lines = [
        fields(pairs),
        *([listed("runs not ended, refusing the purge", list(preview.active_runs))] if preview.active_runs else []),
        *held_lines(preview.holds, [preview.conversation_id], "conversation"),
        "",
        "what stays:",
        *(f"  - {d}" for d in preview.disclosures),
        "",
        _conversation_confirm(preview),
    ]
    return "\n".join(lines)


def _conversation_confirm(preview: ConversationPreview) -> str:
    name = shlex.quote(preview.conversation_id)
    if preview.purged_by is not None:
        return f"nothing to confirm: purge {preview.purged_by} already purged it"
    if not preview.removes_content:
        return confirm_line(f"purgectl delete-channel {name} --actor WHO --reason WHY")
    if not preview.exists:
        return f"to reserve the id: purgectl purge-conversation {name} --reserve-absent --actor WHO --reason WHY"
    command = f"purgectl purge-conversation {name} --expected-version {preview.version} --actor WHO --reason WHY"
    return confirm_line(command, holds=preview.holds, blocking=preview.active_runs)


def render_bot_preview(preview: BotDeletionPreview) -> str:
    memory = preview.memory
    pairs: list[tuple[str, Any]] = [
        ("bot", f"{preview.bot_id} ({preview.name}), {preview.state}"),
        ("blocking runs", ", ".join(preview.blocking_runs) or None),
        ("memory", memory.path),
        ("erasable", memory.erasable if memory.erasable else f"no: {memory.reason} ({memory.detail})"),
    ]
    lines = [
        fields(pairs),
        *held_lines(preview.held_by, [preview.bot_id], "the Memory erasure (a deletion without it removes nothing)"),
        "",
        "not erased:",
        *(f"  - {d}" for d in preview.disclosures),
    ]
    if memory.erasable and memory.identity is not None and not preview.held_by:
        lines += ["", "to delete it and erase its Memory:", erase_hint(preview.bot_id, memory.identity)]
    return "\n".join(lines)


def render_author_preview(preview: AuthorErasurePreview) -> str:
    totals = preview.totals
    before = f" --before {preview.before.isoformat()}" if preview.before else ""
    more = totals.conversations - len(preview.conversations)
    lines = [
        f"scope digest  {preview.scope_digest}",
        "",
        fields([(name.replace("_", " "), value) for name, value in vars(totals).items()]),
        "",
        f"conversations touched ({totals.conversations}):",
        table(("conversation", "events"), [(c.conversation_id, c.events) for c in preview.conversations]),
        *([f"  ... and {more} more"] if more > 0 else []),
        "",
        listed(
            "attachments shared, bytes kept",
            [f"{a.attachment_id}@{a.event_id} (+{a.other_references} other)" for a in preview.shared_attachments],
        ),
        listed("blocking runs, refusing the erasure until they end", list(preview.blocking_runs)),
        *held_lines(preview.held_by, [preview.author], "author"),
        "",
        "not erased:",
        *(f"  - {d}" for d in preview.disclosures),
        "",
        confirm_line(
            f"purgectl erase-author {shlex.quote(preview.author)}{before} --digest {preview.scope_digest} "
            "--actor WHO --reason WHY",
            holds=preview.held_by,
            blocking=preview.blocking_runs,
        ),
    ]
    return "\n".join(lines)


def erase_hint(bot_id: str, identity: RepositoryIdentity) -> str:
    return (
        f"purgectl delete-bot {shlex.quote(bot_id)} --actor WHO --reason WHY --erase-memory "
        f"--reviewed-path {shlex.quote(identity.path)} --reviewed-marker {shlex.quote(identity.marker_id)}"
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


def render_policies(policies: Sequence[RetentionPolicy]) -> str:
    if not policies:
        return "no retention policies"
    headers = ("policy", "scope", "max age", "last run", "last cutoff", "last purge", "next run", "set by")
    rows = [
        (
            p.policy_id,
            scope_text(p.conversation_id),
            duration_text(p.max_age),
            p.last_run,
            p.last_cutoff,
            p.last_purge_id,
            p.next_run,
            p.set_by,
        )
        for p in policies
    ]
    return table(headers, rows)


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


def render_report(report: LedgerReport) -> str:
    return f"ledger verifies: {counted(report.rows, 'row')}, head hash {report.head_hash}"


def render_checkpoint(written: checkpoint.Checkpoint) -> str:
    rows = counted(written.seq, "row")
    return f"wrote {written.path}: database {written.database_id}, {rows}, head hash {written.head_hash}"


def render_mapping(result: Any) -> str:
    """A record as aligned fields; a nested record (a merge's gate) as its own indented block."""
    value = surface.plain(result)
    if not (isinstance(value, dict) and value):
        return cell(value)
    flat = [(label(k), v) for k, v in value.items() if not (isinstance(v, dict) and v)]
    lines = [fields(flat)] if flat else []
    for name, nested in value.items():
        if isinstance(nested, dict) and nested:
            block = render_mapping(nested).splitlines()
            lines += [f"{label(name)}:", *(f"  {line}" for line in block)]
    return "\n".join(lines)


def render_workers(processes: Sequence[WorkerProcess]) -> str:
    if not processes:
        return "no worker, scheduler or embedded process has sent a heartbeat in the last day"
    rows = [
        (
            p.state,
            p.role,
            p.host,
            p.pid,
            ", ".join(p.queues) or "-",
            p.threads or "-",
            p.started_at,
            p.last_seen_at,
            ", ".join(f"{h.purge_id} {h.kind} (attempt {h.attempt})" for h in p.holding) or "-",
        )
        for p in processes
    ]
    headers = ("state", "role", "host", "pid", "queues", "threads", "started", "last seen", "holding")
    return table(headers, rows)
