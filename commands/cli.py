"""``purgectl``: the operator's command line, a thin layer over ``commands``.

Exit codes (DESIGN.md's error table):

    0  success
    1  NotFound
    2  ValidationError (and bad command-line usage)
    3  a conflict, a fence, IdReserved or MemoryErasureUnavailable
    4  MessagingUnavailable or InfrastructureError (including SchemaMismatch)

With ``--json`` a command prints exactly one JSON document, on success and on error.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import click

from commands.settings import Settings
from schema import ledger, migrate
from schema.db import Database, redacted
from schema.errors import (
    Conflict,
    Fenced,
    InfrastructureError,
    MemoryErasureUnavailable,
    MessagingUnavailable,
    NotFound,
    PurgekeeperError,
    SchemaMismatch,
    ValidationError,
)
from workers import broker, checkpoint
from workers.scheduler import Scheduler

EXIT_CODES: tuple[tuple[type[PurgekeeperError], int], ...] = (
    (NotFound, 1),
    (ValidationError, 2),
    (Conflict, 3),
    (Fenced, 3),
    (MemoryErasureUnavailable, 3),
    (MessagingUnavailable, 4),
    (InfrastructureError, 4),
)


def exit_code(error: PurgekeeperError) -> int:
    for cls, code in EXIT_CODES:
        if isinstance(error, cls):
            return code
    return 4


def fail(error: PurgekeeperError, *, as_json: bool) -> NoReturn:
    if as_json:
        click.echo(json.dumps({"error": error.code, "detail": error.detail}))
    else:
        click.echo(f"error: {error.detail} ({error.code})", err=True)
    sys.exit(exit_code(error))


def run_command(as_json: bool, action: Callable[[], Any], render: Callable[[Any], str]) -> None:
    """Run one command: print its result as JSON or text, or its error with its exit code."""
    try:
        result = action()
    except PurgekeeperError as error:
        fail(error, as_json=as_json)
    click.echo(json.dumps(result, default=str) if as_json else render(result))


json_option = click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document.")


@click.group(
    help=__doc__,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
def main() -> None:
    pass


@main.command()
@json_option
def init(as_json: bool) -> None:
    """Create or migrate the configured database. Safe to run again: an up-to-date database
    is left as it is, and a database newer than this code is refused (exit 4)."""
    settings = Settings.from_env()

    def action() -> dict[str, Any]:
        settings.make_directories()
        db = Database(settings.database_url)
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
def scheduler() -> None:
    """Run the scheduler process: while it holds the leader lease, re-send due and
    lease-expired cleanup steps every PURGEKEEPER_SWEEP_INTERVAL seconds. Needs
    PURGEKEEPER_BROKER_URL (embedded mode runs the scheduler in-process). Stops on SIGTERM."""
    settings = Settings.from_env()
    if not settings.broker_url:
        fail(
            ValidationError("purgectl scheduler needs PURGEKEEPER_BROKER_URL; embedded mode runs it in-process"),
            as_json=False,
        )
    db = Database(settings.database_url)
    try:
        migrate.check_current(db)
        with db.read() as conn:
            key = ledger.read_head(conn).database_id
    except PurgekeeperError as error:
        fail(error, as_json=False)
    broker.setup(settings.broker_url)
    settings.make_directories()
    loop = Scheduler(
        db,
        _logged_enqueue(key),
        interval=settings.sweep_interval,
        resend_after=settings.step_lease,
        after_sweep=functools.partial(checkpoint.automatic, db, settings.checkpoint_dir),
    )
    signal.signal(signal.SIGTERM, lambda *_: loop.stop_soon())
    click.echo(f"scheduler {loop.owner}: sweeping every {settings.sweep_interval.total_seconds():g}s", err=True)
    loop.run()


def _logged_enqueue(key: str) -> Callable[[Sequence[str]], None]:
    def send(step_ids: Sequence[str]) -> None:
        try:
            broker.enqueue(key, step_ids)
        except Exception as exc:  # the broker is down: the next sweep sends them again
            click.echo(f"enqueue of {len(step_ids)} step(s) failed: {exc}", err=True)

    return send


@main.command()
@json_option
def health(as_json: bool) -> None:
    """Check the database answers, its schema is current and its ledger verifies (exit 4 if not)."""
    settings = Settings.from_env()

    def action() -> dict[str, Any]:
        db = Database(settings.database_url)
        try:
            revision = migrate.check_current(db)
            with db.read() as conn:
                report = ledger.verify(conn)
        finally:
            db.dispose()
        if revision is None:
            raise SchemaMismatch("the database is not initialised; run purgectl init")
        if not report.ok:
            raise MessagingUnavailable("the purge ledger does not verify", diagnostics=report.problems)
        return {"ok": True, "revision": revision, "ledger_rows": report.rows, "head_hash": report.head_hash}

    run_command(as_json, action, lambda r: f"ok: schema {r['revision']}, ledger {r['ledger_rows']} rows verified")


if __name__ == "__main__":  # pragma: no cover
    main()
