"""The process commands: init, serve, scheduler, health."""

from __future__ import annotations

import functools
import signal
from collections.abc import Callable, Sequence
from typing import Any

import click

from commands.cli.base import NOT_INITIALISED, fail, json_command, main, opened, run_command
from commands.gate import Gate
from commands.handle import Purgekeeper
from commands.settings import Settings
from schema import ledger, migrate
from schema.db import redacted
from schema.errors import (
    InfrastructureError,
    MessagingUnavailable,
    PurgekeeperError,
    SchemaMismatch,
    ValidationError,
)
from workers import broker, checkpoint, failpoints
from workers.scheduler import Scheduler

# -- the commands -----------------------------------------------------------------------------------


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
    from commands.http.server import serve as run_server  # FastAPI and uvicorn load only here

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
