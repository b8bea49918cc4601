"""purgectl: the operator's command line, a thin layer over the commands package.

Configuration comes only from the environment (PURGEKEEPER_DATABASE_URL, PURGEKEEPER_DATA_DIR,
PURGEKEEPER_BROKER_URL, ...). Run `purgectl init` once; the other commands refuse a database
that is not initialised (exit 4) and never migrate it.

Every command except `serve` and `scheduler` takes --json and then prints exactly one
JSON document on stdout, on success and on error ({"error": CODE, "detail": ...}, also for
bad usage); log lines and progress go to stderr. An unexpected failure is reported as an
infrastructure_error with its type only: no traceback, and no driver message (it may quote
content).

\b
Exit codes (DESIGN.md's error table, shared with the HTTP API):
    0  success, including `wait` that timed out ("timed_out": true) or
       ended with the purge incomplete: the status is the answer
    1  NotFound
    2  ValidationError, and bad command-line usage
    3  a conflict (stale confirmation, version, idempotency, active runs,
       a legal hold, a retention policy conflict), a fence, IdReserved or
       MemoryErasureUnavailable
    4  MessagingUnavailable or InfrastructureError (database unreachable,
       schema not initialised or newer than this code); also `ledger verify`
       and `health` when the ledger does not verify
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import logging
import re
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from commands import surface
from commands.gate import Gate
from commands.handle import Purgekeeper
from commands.operations import MAX_PAGE, PURGE_STATUSES
from commands.records import (
    Acceptance,
    AuthorErasurePreview,
    BotDeletionPreview,
    Hold,
    LedgerReport,
    PurgePage,
    PurgeStatus,
    RepositoryIdentity,
    RetentionPolicy,
    RetentionPreview,
)
from commands.scope import EventScope, PurgePreview
from commands.settings import Settings
from schema import ledger, migrate
from schema.db import Database, redacted
from schema.errors import (
    InfrastructureError,
    MessagingUnavailable,
    PurgekeeperError,
    SchemaMismatch,
    ValidationError,
)
from workers import broker, checkpoint, failpoints
from workers.scheduler import Scheduler

T = TypeVar("T")

ORIGIN = "cli"  # the ledger's causal metadata: which surface accepted the purge
DEFAULT_WAIT_S = 60.0
WAIT_POLL_S = 0.25
DEFAULT_PAGE = 50
FINISHED = ("complete", "incomplete")
NOT_INITIALISED = "the database is not initialised; run purgectl init"


# -- reporting ------------------------------------------------------------------------------------


def print_json(document: Any) -> None:
    click.echo(json.dumps(document, sort_keys=True))


def fail(error: PurgekeeperError, *, as_json: bool) -> NoReturn:
    """Report the error (one JSON document, or a line on stderr) and exit with its code."""
    body = surface.error_body(error)
    if as_json:
        print_json(body)
    else:
        click.echo(f"error: {error.detail} ({error.code})", err=True)
        for key, value in body.items():
            if key not in ("error", "detail"):
                click.echo(f"  {key}: {value}", err=True)
    sys.exit(surface.exit_code(error))


def as_domain_error(exc: Exception) -> PurgekeeperError:
    """An unexpected failure, without its message: a driver's message may quote content."""
    if isinstance(exc, OSError):
        return InfrastructureError(f"filesystem error: {exc.strerror or type(exc).__name__}")
    return InfrastructureError(f"unexpected {type(exc).__name__}; nothing more is reported, to keep content out")


def run_command(
    as_json: bool,
    action: Callable[[], T],
    render: Callable[[T], str],
    to_json: Callable[[T], Any] = surface.plain,
) -> None:
    """Run one command: print its result as JSON or text, or its error with its exit code."""
    try:
        result = action()
    except PurgekeeperError as error:
        fail(error, as_json=as_json)
    except Exception as exc:
        fail(as_domain_error(exc), as_json=as_json)
    if as_json:
        print_json(to_json(result))
    else:
        click.echo(render(result))


@contextlib.contextmanager
def opened(settings: Settings | None = None, *, role: str = "cli") -> Iterator[Purgekeeper]:
    """A handle on the configured database, with no in-process worker: the one-shot commands
    only accept, read and wake; the worker and scheduler processes (or ``serve``) clean up."""
    settings = settings or Settings.from_env()
    db = settings.open_database(role=role)
    try:
        require_initialised(settings, db)
        settings.make_directories()
        pk = Purgekeeper(settings, db=db, workers="none")
    except BaseException:
        db.dispose()
        raise
    try:
        yield pk
    finally:
        pk.close()


def require_initialised(settings: Settings, db: Database) -> None:
    if settings.database_url.startswith("sqlite:///"):  # connecting would create an empty file
        if not Path(settings.database_url.removeprefix("sqlite:///")).exists():
            raise SchemaMismatch(NOT_INITIALISED)
    if migrate.check_current(db) is None:
        raise SchemaMismatch(NOT_INITIALISED)


def run_with_handle(
    as_json: bool,
    action: Callable[[Purgekeeper], T],
    render: Callable[[T], str],
    to_json: Callable[[T], Any] = surface.plain,
) -> None:
    def with_handle() -> T:
        with opened() as pk:
            return action(pk)

    run_command(as_json, with_handle, render, to_json)


class JsonCommand(click.Command):
    """A command whose usage errors, under ``--json``, are one JSON ``validation_error``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        wants_json = "--json" in args
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as error:
            if not wants_json:
                raise
            fail(ValidationError(error.format_message()), as_json=True)


json_option = click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document.")


def json_command(group: click.Group, name: str | None = None) -> Callable[[Callable[..., None]], click.Command]:
    def register(function: Callable[..., None]) -> click.Command:
        return group.command(name, cls=JsonCommand)(json_option(function))

    return register


# -- text output ------------------------------------------------------------------------------------


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dt.datetime):
        return str(surface.plain(value))
    return str(value)


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
            s.last_error,
        )
        for s in status.steps
    ]
    return summary + "\n\n" + table(headers, rows)


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
        "",
        "not erased:",
        *(f"  - {d}" for d in preview.disclosures),
        "",
        f"to confirm: purgectl confirm {scope_args} --digest {preview.scope_digest} --actor WHO --reason WHY",
    ]
    return "\n".join(lines)


def render_bot_preview(preview: BotDeletionPreview) -> str:
    memory = preview.memory
    pairs: list[tuple[str, Any]] = [
        ("bot", f"{preview.bot_id} ({preview.name}), {preview.state}"),
        ("blocking runs", ", ".join(preview.blocking_runs) or None),
        ("memory", memory.path),
        ("erasable", memory.erasable if memory.erasable else f"no: {memory.reason} ({memory.detail})"),
    ]
    lines = [fields(pairs), "", "not erased:", *(f"  - {d}" for d in preview.disclosures)]
    if memory.erasable and memory.identity is not None:
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
        "",
        "not erased:",
        *(f"  - {d}" for d in preview.disclosures),
        "",
        f"to confirm: purgectl erase-author {shlex.quote(preview.author)}{before} --digest {preview.scope_digest} "
        "--actor WHO --reason WHY",
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
    touched = f"{preview.conversations} conversations"
    elsewhere = list(preview.governed_elsewhere)
    pairs: list[tuple[str, Any]] = [
        ("scope", scope_text(preview.conversation_id)),
        ("max age", f"{duration_text(preview.max_age)} ({int(preview.max_age.total_seconds())} s)"),
        ("cutoff", preview.cutoff),
        ("expires now", f"{preview.events} events, from {preview.placements} placements in {touched}"),
        ("kept elsewhere", f"{preview.kept_elsewhere} of them stay live in a conversation the policy leaves alone"),
        ("held", f"{preview.held} events" + (f" (holds {', '.join(preview.hold_ids)})" if preview.hold_ids else "")),
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
    return f"ledger verifies: {report.rows} rows, head hash {report.head_hash}"


def render_checkpoint(written: checkpoint.Checkpoint) -> str:
    return f"wrote {written.path}: database {written.database_id}, {written.seq} rows, head hash {written.head_hash}"


def render_mapping(result: Any) -> str:
    value = surface.plain(result)
    if isinstance(value, dict) and value:
        return fields(list(value.items()))
    return cell(value)


# -- options --------------------------------------------------------------------------------------


class Timestamp(click.ParamType):
    """An ISO 8601 time with a timezone (``2024-05-01T12:00:00Z``)."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> dt.datetime:
        if isinstance(value, dt.datetime):
            return value
        try:
            parsed = dt.datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(f"{value!r} is not an ISO 8601 time", param, ctx)
        if parsed.tzinfo is None:
            self.fail(f"{value!r} has no timezone; add Z or an offset such as +02:00", param, ctx)
        return parsed


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
DURATION = re.compile(r"([0-9]{1,12})([smhdw]?)")
DURATION_SYNTAX = "an integer with a unit s, m, h, d or w (30d, 12h, 90m); a plain integer is seconds"


class Duration(click.ParamType):
    """A whole number of seconds, minutes, hours, days or weeks (``90m``, ``12h``, ``30d``,
    ``2w``); a plain integer is seconds."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> dt.timedelta:
        if isinstance(value, dt.timedelta):
            return value
        match = DURATION.fullmatch(str(value))
        if match is None:
            self.fail(f"{value!r} is not a duration: {DURATION_SYNTAX}", param, ctx)
        number, unit = match.groups()
        try:
            return dt.timedelta(seconds=int(number) * DURATION_UNITS[unit or "s"])
        except OverflowError:
            self.fail(f"{value!r} is too long a duration", param, ctx)


def duration_text(duration: dt.timedelta) -> str:
    """The duration in its largest whole unit, as ``Duration`` reads it back (``30d``)."""
    seconds = int(duration.total_seconds())
    unit = next(u for u in "wdhms" if seconds % DURATION_UNITS[u] == 0)
    return f"{seconds // DURATION_UNITS[unit]}{unit}"


def scope_options(function: Callable[..., None]) -> Callable[..., None]:
    options = [
        click.option("--event", "events", multiple=True, metavar="ID", help="An event to purge (repeatable)."),
        click.option("--conversation", metavar="ID", help="Select events in this conversation."),
        click.option("--after", type=Timestamp(), help="With --conversation: occurred_at >= TIME."),
        click.option("--before", type=Timestamp(), help="With --conversation: occurred_at < TIME."),
        click.option("--author", help="With --conversation: only this author's events."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def build_scope(
    events: Sequence[str],
    conversation: str | None,
    after: dt.datetime | None,
    before: dt.datetime | None,
    author: str | None,
) -> EventScope:
    if events and any(v is not None for v in (conversation, after, before, author)):
        raise ValidationError("name events with --event, or a conversation with --conversation, not both")
    if events:
        return EventScope(event_ids=tuple(events))
    if conversation is None:
        raise ValidationError("name events with --event ID, or --conversation ID with --after/--before/--author")
    return EventScope(conversation_id=conversation, after=after, before=before, author=author)


def scope_arguments(scope: EventScope) -> str:
    """The options that select ``scope`` again, for the confirm hint."""
    if scope.event_ids is not None:
        return " ".join(f"--event {shlex.quote(e)}" for e in scope.event_ids)
    parts = [f"--conversation {shlex.quote(scope.conversation_id or '')}"]
    for name, value in (("after", scope.after), ("before", scope.before)):
        if value is not None:
            parts.append(f"--{name} {surface.plain(value)}")
    if scope.author is not None:
        parts.append(f"--author {shlex.quote(scope.author)}")
    return " ".join(parts)


def who_options(function: Callable[..., None]) -> Callable[..., None]:
    function = click.option("--reason", required=True, help="Why; recorded in the ledger.")(function)
    return click.option("--actor", required=True, help="Who asks; recorded in the ledger.")(function)


idempotency_option = click.option(
    "--idempotency-key", metavar="KEY", help="Repeat safely: the same key returns the original acceptance."
)


# -- the commands -----------------------------------------------------------------------------------


@click.group(
    help=__doc__,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
def main() -> None:
    # Library log lines (warnings about failed wake-ups and the like) belong on stderr: stdout
    # carries the result, and under --json nothing but the one document.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


@json_command(main)
def init(as_json: bool) -> None:
    """Create or migrate the configured database. Safe to run again: an up-to-date database
    is left as it is, and a database newer than this code is refused (exit 4)."""

    def action() -> dict[str, Any]:
        settings = Settings.from_env()
        settings.make_directories()
        db = settings.open_database(role="cli")
        try:
            result = migrate.upgrade(db)
        finally:
            db.dispose()
        return {
            "database_url": redacted(db.url),
            "data_dir": str(settings.data_dir),
            "revision": result.after,
            "previous_revision": result.before,
            "migrated": result.changed,
        }

    def render(result: dict[str, Any]) -> str:
        verb = "migrated to" if result["migrated"] else "already at"
        return (
            f"database {result['database_url']} {verb} revision {result['revision']}\n"
            f"data directory {result['data_dir']}"
        )

    run_command(as_json, action, render)


@main.command()
@click.option("--host", default=None, help="Interface to listen on (default: the server's, loopback).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on.")
@click.option("--demo", is_flag=True, help="Seed demonstration content on an empty database.")
def serve(host: str | None, port: int, demo: bool) -> None:
    """Run the HTTP API, /status and /metrics; in embedded mode (no PURGEKEEPER_BROKER_URL)
    also the in-process worker and scheduler."""
    try:
        settings = Settings.from_env()
    except PurgekeeperError as error:
        fail(error, as_json=False)
    from commands.server import serve as run_server  # FastAPI and uvicorn load only here

    run_server(settings, host=host, port=port, demo=demo)


@main.command()
def scheduler() -> None:
    """Run the scheduler process: while it holds the leader lease, every
    PURGEKEEPER_SWEEP_INTERVAL seconds it takes the turn of every retention policy that is
    due, re-sends due and lease-expired cleanup steps, and copies the ledger out. Needs
    PURGEKEEPER_BROKER_URL (embedded mode runs the scheduler in-process). Stops on SIGTERM."""
    try:
        settings = Settings.from_env()
        if not settings.broker_url:
            raise ValidationError("purgectl scheduler needs PURGEKEEPER_BROKER_URL; embedded mode runs it in-process")
        failpoints.arm(settings.failpoints)
        with opened(settings, role="scheduler") as pk:
            lead(pk, settings, settings.broker_url)
    except PurgekeeperError as error:
        fail(error, as_json=False)


def lead(pk: Purgekeeper, settings: Settings, broker_url: str) -> None:
    """The scheduler's loop on ``pk``, until a SIGTERM."""
    loop = Scheduler(
        pk.db,
        _logged_enqueue(broker_url, pk.database_key),
        interval=settings.sweep_interval,
        resend_after=settings.step_lease,
        after_sweep=pk.scheduler_duties,
        queued=functools.partial(broker.queued_steps, broker_url, pk.database_key),
    )
    signal.signal(signal.SIGTERM, lambda *_: loop.stop_soon())
    click.echo(f"scheduler {loop.owner}: sweeping every {settings.sweep_interval.total_seconds():g}s", err=True)
    loop.run()
    loop.release()  # a SIGTERM gives the lease up: the next scheduler leads at once


def _logged_enqueue(broker_url: str, key: str) -> Callable[[Sequence[str]], None]:
    def send(step_ids: Sequence[str]) -> None:
        try:
            broker.enqueue(broker_url, key, step_ids)
        except Exception as exc:  # the broker is down: the next sweep sends them again
            click.echo(f"enqueue of {len(step_ids)} step(s) failed: {exc}", err=True)

    return send


@json_command(main)
def health(as_json: bool) -> None:
    """Check the database answers, its schema is current, its ledger verifies and holds every
    purge of the newest checkpoint, no merge is under way, and a checkpoint can be written
    into the checkpoint directory (exit 4 if not)."""

    def action() -> dict[str, Any]:
        settings = Settings.from_env()
        db = settings.open_database(role="cli")
        try:
            revision = migrate.check_current(db)
            if revision is None:
                raise SchemaMismatch(NOT_INITIALISED)
            with db.read(snapshot=True) as conn:
                report = ledger.verify(conn)
                database_id = ledger.read_head(conn).database_id
            if not report.ok:
                raise MessagingUnavailable("the purge ledger does not verify", diagnostics=report.problems)
            state = Gate(db, settings.checkpoint_dir, database_id).evaluate()
        finally:
            db.dispose()
        if not state.open:
            raise MessagingUnavailable("content reads and writes are closed", diagnostics=state.problems)
        unwritable = checkpoint.unwritable(settings.checkpoint_dir)
        if unwritable is not None:
            raise InfrastructureError(f"the checkpoint directory cannot be written: {unwritable}")
        return {"ok": True, "revision": revision, "ledger_rows": report.rows, "head_hash": report.head_hash}

    run_command(as_json, action, lambda r: f"ok: schema {r['revision']}, ledger {r['ledger_rows']} rows verified")


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


@json_command(main, "purge-conversation")
@click.argument("conversation_id")
@who_options
@click.option("--expected-version", type=int, help="Refuse (version_conflict) if the conversation moved on.")
@idempotency_option
def purge_conversation(
    conversation_id: str,
    actor: str,
    reason: str,
    expected_version: int | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Purge a whole conversation or channel. A repeat reports already_purged; an unknown id
    is reserved so it is never reused."""

    def action(pk: Purgekeeper) -> Acceptance:
        return pk.purge_conversation(
            conversation_id,
            actor=actor,
            reason=reason,
            expected_version=expected_version,
            idempotency_key=idempotency_key,
            origin=ORIGIN,
        )

    run_with_handle(as_json, action, render_acceptance)


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
    return RepositoryIdentity(path, marker)


# -- operating


@json_command(main)
@click.argument("purge_id")
def status(purge_id: str, as_json: bool) -> None:
    """Show a purge's status and each cleanup step's attempts, progress and last error."""
    run_with_handle(as_json, lambda pk: pk.status(purge_id), render_status)


@json_command(main, "list")
@click.option("--status", "status_filter", type=click.Choice(PURGE_STATUSES), help="Only purges in this status.")
@click.option("--limit", default=DEFAULT_PAGE, show_default=True, type=int, help=f"Purges per page (1 to {MAX_PAGE}).")
@click.option("--after", "cursor", type=int, metavar="CURSOR", help="The cursor a previous page printed.")
def list_purges(status_filter: str | None, limit: int, cursor: int | None, as_json: bool) -> None:
    """List purges, newest first, a page at a time. JSON: {"purges": [...], "next_after": N};
    pass N to --after for the next page (null on the last page)."""

    def next_command(after: int) -> str:
        chosen = f" --status {status_filter}" if status_filter else ""
        return f"purgectl list{chosen} --limit {limit} --after {after}"

    run_with_handle(
        as_json,
        lambda pk: pk.list_purges(status_filter, limit=limit, after=cursor),
        lambda page: render_page(page, next_command=next_command),
    )


@json_command(main)
@click.argument("purge_id")
@who_options
def retry(purge_id: str, actor: str, reason: str, as_json: bool) -> None:
    """Re-arm a purge's incomplete steps with fresh attempts; the actor and reason are audited.
    A purge with no incomplete step is refused (validation_error, exit 2)."""
    run_with_handle(as_json, lambda pk: pk.retry(purge_id, actor=actor, reason=reason), render_status)


@json_command(main)
def resume(as_json: bool) -> None:
    """Re-send every cleanup step that is due or whose lease expired. JSON: {"due_steps": N,
    "sent": true|false}; without PURGEKEEPER_BROKER_URL nothing can be sent from here, and the
    scheduler inside `purgectl serve` sends them at its next sweep."""

    def action(pk: Purgekeeper) -> dict[str, Any]:
        return {"due_steps": pk.resume(), "sent": pk.settings.broker_url is not None}

    def render(result: dict[str, Any]) -> str:
        if result["sent"]:
            return f"re-sent {result['due_steps']} due step(s) to the broker"
        return (
            f"{result['due_steps']} step(s) due; no PURGEKEEPER_BROKER_URL is set (embedded mode), so the "
            "scheduler inside `purgectl serve` sends them at its next sweep"
        )

    run_with_handle(as_json, action, render)


@json_command(main)
@click.argument("purge_id")
@click.option(
    "--timeout",
    default=DEFAULT_WAIT_S,
    show_default=True,
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Give up after this long and print the status.",
)
def wait(purge_id: str, timeout: float, as_json: bool) -> None:
    """Wait until the purge is complete or incomplete, showing steps done and rows removed,
    then print its status. A timeout is not an error: the status is printed with
    "timed_out": true, and the exit code is 0 (as it is for an incomplete purge). This command
    does no cleanup itself: the worker processes (or `purgectl serve`) do."""

    def action(pk: Purgekeeper) -> tuple[PurgeStatus, bool]:
        if as_json:
            return poll_until_finished(pk, purge_id, timeout, on_status=lambda _: None)
        return wait_with_progress(pk, purge_id, timeout)

    def render(outcome: tuple[PurgeStatus, bool]) -> str:
        final, timed_out = outcome
        ending = "timed out; the purge is still " if timed_out else "the purge ended "
        return render_status(final) + "\n\n" + ending + final.status

    def to_json(outcome: tuple[PurgeStatus, bool]) -> dict[str, Any]:
        final, timed_out = outcome
        return {**surface.plain(final), "timed_out": timed_out}

    run_with_handle(as_json, action, render, to_json)


def poll_until_finished(
    pk: Purgekeeper, purge_id: str, timeout: float, *, on_status: Callable[[PurgeStatus], None]
) -> tuple[PurgeStatus, bool]:
    """Poll the status until the purge is complete or incomplete; ``True`` if it timed out."""
    deadline = time.monotonic() + timeout
    while True:
        current = pk.status(purge_id)
        on_status(current)
        if current.status in FINISHED:
            return current, False
        left = deadline - time.monotonic()
        if left <= 0:
            return current, True
        time.sleep(min(WAIT_POLL_S, left))


def wait_with_progress(pk: Purgekeeper, purge_id: str, timeout: float) -> tuple[PurgeStatus, bool]:
    """The same poll, with a Rich progress bar on stderr (steps done of all, rows removed)
    when stderr is a terminal; a log file gets only the final status, on stdout."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        return poll_until_finished(pk, purge_id, timeout, on_status=lambda _: None)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("steps, {task.fields[removed]} removed"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(f"purge {purge_id}", total=None, removed=0)

        def show(current: PurgeStatus) -> None:
            progress.update(
                task,
                description=f"purge {purge_id} {current.status}",
                total=len(current.steps),
                completed=sum(s.status == "done" for s in current.steps),
                removed=sum(s.progress.removed for s in current.steps),
            )

        return poll_until_finished(pk, purge_id, timeout, on_status=show)


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
    """List the standing retention policies, with their last and next runs. JSON:
    {"policies": [...]}."""
    run_with_handle(
        as_json,
        lambda pk: pk.list_retention(),
        render_policies,
        lambda policies: {"policies": surface.plain(policies)},
    )


@main.group("hold")
def hold_group() -> None:
    """Legal holds: while one is in force, every purge of what it covers is refused
    (legal_hold, exit 3) and retention runs keep it."""


@json_command(hold_group, "place")
@click.argument("hold_id")
@click.option("--conversation", "conversations", multiple=True, metavar="ID", help="Hold a conversation (repeatable).")
@click.option("--author", "authors", multiple=True, help="Hold everything this author wrote (repeatable).")
@who_options
@idempotency_option
def hold_place(
    hold_id: str,
    conversations: Sequence[str],
    authors: Sequence[str],
    actor: str,
    reason: str,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Place legal hold HOLD_ID on conversations and authors (at least one). It does not undo
    purges accepted before it: the disclosures name what they already removed in its scope."""

    def action(pk: Purgekeeper) -> Acceptance:
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


# -- the ledger


@main.group("ledger")
def ledger_group() -> None:
    """Verify, checkpoint and merge the purge ledger."""


@json_command(ledger_group, "verify")
def ledger_verify(as_json: bool) -> None:
    """Walk the ledger's hash chain and compare it with the newest checkpoint in the
    checkpoint directory. When it does not verify, or lacks purges the checkpoint holds, or a
    merge is under way, the problems are reported as a messaging_unavailable error with
    diagnostics, and the exit code is 4 (content reads and writes are closed in that state)."""

    def action(pk: Purgekeeper) -> LedgerReport:
        report = pk.verify_ledger()
        if not report.ok:
            detail = f"the purge ledger does not verify ({report.rows} rows, head hash {report.head_hash})"
            raise MessagingUnavailable(detail, diagnostics=report.problems)
        state = pk.messaging_status()
        if not state.open:
            detail = f"the ledger verifies ({report.rows} rows) but content reads and writes are closed"
            raise MessagingUnavailable(detail, diagnostics=state.problems)
        return report

    run_with_handle(as_json, action, render_report)


@json_command(ledger_group, "checkpoint")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Export the whole ledger to this one file (format version 2); without it, bring the "
    "ledger's copy in the checkpoint directory (PURGEKEEPER_CHECKPOINT_DIR) up to the database.",
)
def ledger_checkpoint(out: Path | None, as_json: bool) -> None:
    """Export the ledger as one self-contained file (--out), or bring its copy in the
    checkpoint directory up to date (every acceptance already adds its row there before it
    returns). Keep both outside database backups: `ledger merge` restores purges from them."""

    def action(pk: Purgekeeper) -> checkpoint.Checkpoint:
        if out is not None:
            return pk.checkpoint_ledger(out)
        seq = pk.copy_ledger()
        head = pk.copy.head()
        return checkpoint.Checkpoint(pk.copy.directory, pk.database_key, seq, head.row_hash if head else "")

    run_with_handle(as_json, action, render_checkpoint)


@json_command(ledger_group, "merge")
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--from-other-database",
    is_flag=True,
    help="Also merge ledgers written by another database (another database id); refused otherwise.",
)
@click.option(
    "--full",
    is_flag=True,
    help="Also re-apply every purge the database holds already, and unlink the files of deleted "
    "blobs: for a database restored together with its files from older backups.",
)
def ledger_merge(sources: tuple[Path, ...], from_other_database: bool, full: bool, as_json: bool) -> None:
    """Restore: from the checkpoint directory, a ledger copy, an export or a version 1 file,
    append the purges the database lacks, re-apply their fences and re-create their cleanup;
    content reads and writes reopen only afterwards. The report names the database each
    source came from."""

    run_with_handle(
        as_json,
        lambda pk: pk.merge_ledger(*sources, allow_other_database=from_other_database, full=full),
        render_mapping,
    )


if __name__ == "__main__":  # pragma: no cover
    main()
