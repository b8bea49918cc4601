"""The operator's commands: status, list, retry, resume, wait."""

from __future__ import annotations

import datetime as dt
import shlex
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from purgekeeper.commands import surface
from purgekeeper.commands.cli.options import DURATION_SYNTAX, Duration, Timestamp, who_options
from purgekeeper.commands.cli.render import (
    counted,
    operator_status_document,
    render_operator_status,
    render_page,
    render_status,
    render_workers,
)
from purgekeeper.commands.cli.shared import (
    DEFAULT_PAGE,
    DEFAULT_WAIT_S,
    FINISHED,
    json_command,
    main,
    run_with_handle,
    run_with_reads,
)
from purgekeeper.schema.states import MAX_PAGE, PurgeKind, StepStatus, values
from purgekeeper.schema.states import PurgeStatus as Statuses

if TYPE_CHECKING:
    from purgekeeper.commands.handle import Purgekeeper
    from purgekeeper.commands.purge_reads import PurgeReads
    from purgekeeper.commands.records import (
        PurgeStatus,
    )

EXIT_INCOMPLETE = 5  # `wait --fail-on-incomplete`: the purge ended incomplete
# What `list --status` takes (purgekeeper.commands.purge_reads.LIST_STATUSES, not imported: --help stays light)
LIST_STATUSES = (*values(Statuses), StepStatus.RETRYING.value)

# -- operating


@json_command(main)
@click.argument("purge_id")
def status(purge_id: str, as_json: bool) -> None:
    """Show a purge's status and each cleanup step's attempts, progress and last error, and
    where to act on a file a step could not unlink (the root, its setting and the path below
    it). PURGE_ID is a purge's id or its first characters, as the console's search takes it:
    when several purges begin with them, none is shown and the error names them
    (validation_error, exit 2); none is not_found (exit 1). JSON: the status, with
    "where_to_act": [{"step", "root", "setting", "directory", "path", ...}]."""
    run_with_reads(
        as_json, lambda reads: reads.operator_status(purge_id), render_operator_status, operator_status_document
    )


@json_command(main, "list")
@click.option(
    "--status",
    "status_filter",
    type=click.Choice(LIST_STATUSES),
    help="Only purges in this status; retrying: with a step waiting for its next attempt after a failed one.",
)
@click.option("--kind", type=click.Choice(values(PurgeKind)), help="Only ledger rows of this kind.")
@click.option("--conversation", metavar="ID", help="Only purges that concern this conversation or channel.")
@click.option("--since", type=Timestamp(), help="Only purges accepted at or after TIME.")
@click.option("--until", type=Timestamp(), help="Only purges accepted before TIME.")
@click.option("--limit", default=DEFAULT_PAGE, show_default=True, type=int, help=f"Purges per page (1 to {MAX_PAGE}).")
@click.option("--after", "cursor", type=int, metavar="CURSOR", help="The cursor a previous page printed.")
def list_purges(
    status_filter: str | None,
    kind: str | None,
    conversation: str | None,
    since: dt.datetime | None,
    until: dt.datetime | None,
    limit: int,
    cursor: int | None,
    as_json: bool,
) -> None:
    """List purges, newest first, a page at a time, filtered as GET /v1/purges filters them.
    JSON: {"purges": [...], "next_after": N}; pass N to --after (with the same filters) for
    the next page (null on the last page)."""
    filters = {"status": status_filter, "kind": kind, "conversation": conversation, "since": since, "until": until}

    def next_command(after: int) -> str:
        chosen = "".join(f" --{name} {_argument(value)}" for name, value in filters.items() if value is not None)
        return f"purgectl list{chosen} --limit {limit} --after {after}"

    def action(reads: PurgeReads) -> Any:
        return reads.list_purges(
            status_filter, kind=kind, conversation_id=conversation, since=since, until=until, limit=limit, after=cursor
        )

    run_with_reads(as_json, action, lambda page: render_page(page, next_command=next_command))


def _argument(value: str | dt.datetime) -> str:
    return shlex.quote(surface.plain(value) if isinstance(value, dt.datetime) else value)


@json_command(main)
@click.argument("purge_id")
@who_options
def retry(purge_id: str, actor: str, reason: str, as_json: bool) -> None:
    """Re-arm a purge's incomplete and retrying steps: due now, with fresh attempts (after
    fixing a cause, rather than wait for the next attempt); the actor and reason are audited.
    A purge with neither is refused (validation_error, exit 2)."""
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
            return f"re-sent {counted(result['due_steps'], 'due step')} to the broker"
        return (
            f"{counted(result['due_steps'], 'step')} due; no PURGEKEEPER_BROKER_URL is set (embedded mode), so the "
            "scheduler inside `purgectl serve` sends them at its next sweep"
        )

    run_with_handle(as_json, action, render)


@json_command(main)
@click.argument("purge_id")
@click.option(
    "--timeout",
    default=f"{DEFAULT_WAIT_S:g}s",
    show_default=True,
    type=Duration(),
    help=f"Give up after this long and print the status: {DURATION_SYNTAX}.",
)
@click.option(
    "--fail-on-incomplete",
    is_flag=True,
    help=f"Exit {EXIT_INCOMPLETE} (after printing the status) when the purge ends incomplete; for scripts.",
)
def wait(purge_id: str, timeout: dt.timedelta, fail_on_incomplete: bool, as_json: bool) -> None:
    """Wait until the purge is complete or incomplete, showing steps done and rows removed,
    then print its status. A timeout is not an error: the status is printed with
    "timed_out": true, and the exit code is 0. An incomplete purge exits 0 too, unless
    --fail-on-incomplete is given: then it exits 5, so `purgectl wait ID --fail-on-incomplete
    && next-step` stops there (retry it with `purgectl retry`). This command does no cleanup
    itself: the worker processes (or `purgectl serve`) do."""
    ended: list[PurgeStatus] = []
    seconds = timeout.total_seconds()

    def action(pk: Purgekeeper) -> tuple[PurgeStatus, bool]:
        if as_json:
            outcome = poll_until_finished(pk, purge_id, seconds, on_status=lambda _: None)
        else:
            outcome = wait_with_progress(pk, purge_id, seconds)
        ended.append(outcome[0])
        return outcome

    def render(outcome: tuple[PurgeStatus, bool]) -> str:
        final, timed_out = outcome
        ending = "timed out; the purge is still " if timed_out else "the purge ended "
        return render_status(final) + "\n\n" + ending + final.status

    def to_json(outcome: tuple[PurgeStatus, bool]) -> dict[str, Any]:
        final, timed_out = outcome
        return {**surface.plain(final), "timed_out": timed_out}

    run_with_handle(as_json, action, render, to_json)
    if fail_on_incomplete and ended and ended[0].status == "incomplete":
        sys.exit(EXIT_INCOMPLETE)


def poll_until_finished(
    pk: Purgekeeper, purge_id: str, timeout: float, *, on_status: Callable[[PurgeStatus], None]
) -> tuple[PurgeStatus, bool]:
    """``pk.wait``, with ``on_status`` called on each change; ``True`` if it timed out."""
    final = pk.wait(purge_id, timeout, on_progress=on_status)
    return final, final.status not in FINISHED


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


@json_command(main)
def workers(as_json: bool) -> None:
    """List the worker, scheduler and embedded processes that sent a heartbeat in the last day,
    idle ones included: alive, dead (3 missed heartbeats) or stopped, with the steps each one
    runs now (the console's Workers view, /status/workers)."""
    run_with_handle(
        as_json, lambda pk: pk.list_workers(), render_workers, lambda found: {"workers": surface.plain(found)}
    )
