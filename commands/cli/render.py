"""purgectl's text output: tables, fields and the rendering of each record."""

from __future__ import annotations

import datetime as dt
import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from purgekeeper.commands import surface
from purgekeeper.schema.states import StepStatus

if TYPE_CHECKING:
    from purgekeeper.commands.records import (
        Acceptance,
        AuthorErasurePreview,
        BotDeletionPreview,
        ConversationPreview,
        LedgerReport,
        OperatorStatus,
        PurgePage,
        PurgeStatus,
        RepositoryIdentity,
        StepState,
    )
    from purgekeeper.commands.scope import PurgePreview
    from purgekeeper.commands.touched import FailurePlace
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
            ("status", status_text(status)),
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


def status_text(status: PurgeStatus) -> str:
    """``cleaning: attachments retrying, next attempt T``: the purge's status, stalled or not,
    and each step waiting for its next attempt after a failed one."""
    told = status.status + (" (stalled)" if status.stalled else "")
    retrying = [f"{s.kind} retrying, next attempt {cell(s.next_attempt_at)}" for s in status.steps if is_retrying(s)]
    return told + (": " + "; ".join(retrying) if retrying else "")


def is_retrying(step: StepState) -> bool:
    return step.status == StepStatus.RETRYING


def next_retry(status: PurgeStatus) -> dt.datetime | None:
    """When the purge's first retrying step is tried next (None: no step is retrying)."""
    return min((s.next_attempt_at for s in status.steps if is_retrying(s)), default=None)


def render_operator_status(found: OperatorStatus) -> str:
    """``status``, then where to act on each failure of a step not done, once, and the retry."""
    text = render_status(found.status)
    if not found.where:
        return text
    lines = [f"where to act: {kind}: {place_text(place)}" for kind, places in found.where.items() for place in places]
    retry = f"then: purgectl retry {found.status.purge_id} --actor WHO --reason WHY"
    return "\n".join([text, "", *lines, retry])


def place_text(place: FailurePlace) -> str:
    """As the console says it: the root, its setting, and the path below it."""
    older = "" if place.complete else " (a file of the older layout, named after the attachment: not shown)"
    return f"the {place.root} ({place.setting}), {place.shown}{older}"


def operator_status_document(found: OperatorStatus) -> dict[str, Any]:
    """``status --json``: the status's fields, and ``where_to_act``: each place with its step."""
    where = [{"step": kind, **surface.plain(place)} for kind, places in found.where.items() for place in places]
    return {**surface.plain(found.status), "where_to_act": where}


def step_error(step: StepState) -> str | None:
    """The step's last error; once the step is done, marked as history (as the console marks it)."""
    if step.last_error and step.status == "done":
        return f"before it was done: {step.last_error}"
    return step.last_error


def render_page(page: PurgePage, *, next_command: Callable[[int], str]) -> str:
    if not page.purges:
        return "no purges"
    headers = ("purge", "what", "status", "stalled", "steps done", "removed", "next attempt", "accepted", "actor")
    rows = [
        (
            p.purge_id,
            p.label or p.kind,
            p.status + (", retrying" if any(is_retrying(s) for s in p.steps) else ""),
            p.stalled,
            f"{sum(s.status == 'done' for s in p.steps)}/{len(p.steps)}",
            sum(s.progress.removed for s in p.steps),
            next_retry(p),
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
