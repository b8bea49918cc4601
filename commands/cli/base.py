"""What every purgectl command shares: the group, running a command, JSON output, errors, the handle."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from commands import surface
from commands.handle import Purgekeeper
from commands.settings import Settings
from schema import migrate
from schema.db import Database
from schema.errors import (
    InfrastructureError,
    PurgekeeperError,
    SchemaMismatch,
    ValidationError,
)

T = TypeVar("T")

ORIGIN = "cli"  # the ledger's causal metadata: which surface accepted the purge
DEFAULT_WAIT_S = 60.0
WAIT_POLL_S = 0.25
DEFAULT_PAGE = 50
FINISHED = ("complete", "incomplete")
NOT_INITIALISED = "the database is not initialised; run purgectl init"


HELP = """purgectl: the operator's command line, a thin layer over the commands package.

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


@click.group(
    help=HELP,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
def main() -> None:
    # Library log lines (warnings about failed wake-ups and the like) belong on stderr: stdout
    # carries the result, and under --json nothing but the one document.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
