"""The process commands: init, serve, scheduler, health. Each calls one ``purgekeeper.commands.processes``
function (or ``purgekeeper.commands.http.server.serve``) with this process's settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from purgekeeper.commands.cli.render import counted
from purgekeeper.commands.cli.shared import fail, json_command, main, run_command, settings
from purgekeeper.schema.errors import PurgekeeperError

if TYPE_CHECKING:
    from purgekeeper.commands.processes import Health, Initialised


@json_command(main)
def init(as_json: bool) -> None:
    """Create or migrate the configured database. Safe to run again: an up-to-date database
    is left as it is, and a database newer than this code is refused (exit 4)."""

    def render(result: Initialised) -> str:
        verb = "migrated to" if result.migrated else "already at"
        return f"database {result.database_url} {verb} revision {result.revision}\ndata directory {result.data_dir}"

    from purgekeeper.commands import processes  # lazy: see commands/cli/__init__.py

    run_command(as_json, lambda: processes.initialise(settings()), render)


@main.command()
@click.option("--host", default=None, help="Interface to listen on (default: the server's, loopback).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on.")
@click.option(
    "--demo",
    is_flag=True,
    help="Seed demonstration content on an empty database: a complete purge, one retrying and one "
    "incomplete (idempotent).",
)
def serve(host: str | None, port: int, demo: bool) -> None:
    """Run the HTTP API, /status and /metrics; in embedded mode (no PURGEKEEPER_BROKER_URL)
    also the in-process worker and scheduler."""
    from purgekeeper.commands.http.server import serve as run_server  # FastAPI and uvicorn load only here

    try:
        run_server(settings(), host=host, port=port, demo=demo)
    except PurgekeeperError as error:  # a database that cannot be opened, a bad variable
        fail(error, as_json=False)


@main.command()
def scheduler() -> None:
    """Run the scheduler process: while it holds the leader lease, every
    PURGEKEEPER_SWEEP_INTERVAL seconds it takes the turn of every retention policy that is
    due, re-sends due and lease-expired cleanup steps, and copies the ledger out. Needs
    PURGEKEEPER_BROKER_URL (embedded mode runs the scheduler in-process). Stops on SIGTERM."""
    try:
        from purgekeeper.commands import processes  # lazy: see commands/cli/__init__.py

        processes.run_scheduler(settings())
    except PurgekeeperError as error:
        fail(error, as_json=False)


@json_command(main)
@click.option(
    "--quick",
    is_flag=True,
    help="Skip the walk of the ledger and its copy (a healthcheck every few seconds): the O(1) check "
    "of the ledger's head against its copy, as every content read makes it.",
)
def health(quick: bool, as_json: bool) -> None:
    """Check the database answers, its schema is current, its ledger verifies and holds every
    purge of the newest checkpoint, no merge is under way, and a checkpoint can be written
    into the checkpoint directory (exit 4 if not)."""

    def render(result: Health) -> str:
        walked = "verified" if result.verified else "(head checked against its copy)"
        return f"ok: schema {result.revision}, ledger {counted(result.ledger_rows, 'row')} {walked}"

    from purgekeeper.commands import processes  # lazy: see commands/cli/__init__.py

    run_command(as_json, lambda: processes.check_health(settings(), quick=quick), render)
