"""What every purgectl command shares: the group, running a command, JSON output, errors, the handle."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from purgekeeper.commands import surface
from purgekeeper.commands.cli.render import cell
from purgekeeper.schema.errors import (
    InfrastructureError,
    NotFound,
    PurgekeeperError,
    ValidationError,
)

if TYPE_CHECKING:
    from purgekeeper.commands.handle import Purgekeeper
    from purgekeeper.commands.purge_reads import PurgeReads
    from purgekeeper.commands.settings import Settings

T = TypeVar("T")

ORIGIN = "cli"  # the ledger's causal metadata: which surface accepted the purge
DEFAULT_WAIT_S = 60.0
DEFAULT_PAGE = 50
FINISHED = ("complete", "incomplete")


HELP = """purgectl: the operator's command line, a thin layer over the commands package.

Configuration comes only from the environment (PURGEKEEPER_DATABASE_URL, PURGEKEEPER_DATA_DIR,
PURGEKEEPER_BROKER_URL, ...). The default data directory, $XDG_DATA_HOME/purgekeeper
(~/.local/share/purgekeeper), is the one `make run` and purgekeeper.open() use too. Run
`purgectl init` once; the other commands refuse a database that is not initialised (exit 4,
naming the database) and never migrate it.

Every command except `serve` and `scheduler` takes --json and then prints exactly one
JSON document on stdout, on success and on error ({"error": CODE, "detail": ...}, also for
bad usage); log lines and progress go to stderr. An unexpected failure is reported as an
infrastructure_error with its type only: no traceback, and no driver message (it may quote
content).

\b
Exit codes (docs/design.md's error table, shared with the HTTP API):
    0  success, including `wait` that timed out ("timed_out": true) or
       ended with the purge incomplete (without --fail-on-incomplete): the
       status is the answer
    1  NotFound
    2  ValidationError, and bad command-line usage
    3  a conflict (stale confirmation, version, idempotency, active runs,
       a legal hold, a retention policy conflict), a fence, IdReserved or
       MemoryErasureUnavailable
    4  MessagingUnavailable or InfrastructureError (database unreachable,
       schema not initialised or newer than this code); also `ledger verify`
       and `health` when the ledger does not verify
    5  `wait --fail-on-incomplete`: the purge ended incomplete (the status
       is printed as with 0)
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
                click.echo(f"  {key}: {cell(value)}", err=True)
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


def settings() -> Settings:
    """This process's settings, read from the environment once (at the first command that
    needs them, so a bad variable is reported like any error) and kept on the click context."""
    root = click.get_current_context().find_root()
    from purgekeeper.commands.settings import Settings  # lazy: see commands/cli/__init__.py

    if not isinstance(root.obj, Settings):
        root.obj = Settings.from_env()
    return root.obj


@contextlib.contextmanager
def opened(*, role: str = "cli") -> Iterator[Purgekeeper]:
    """A handle on the initialised database (``processes.opened``), from this process's settings."""
    from purgekeeper.commands import processes  # lazy: see commands/cli/__init__.py

    with processes.opened(settings(), role=role) as pk:
        yield pk


def run_with_handle(
    as_json: bool,
    action: Callable[[Purgekeeper], T],
    render: Callable[[T], str],
    to_json: Callable[[T], Any] = surface.plain,
) -> None:
    def with_handle() -> T:
        with opened() as pk:
            return naming_the_database(lambda: action(pk))

    run_command(as_json, with_handle, render, to_json)


def run_with_reads(
    as_json: bool,
    action: Callable[[PurgeReads], T],
    render: Callable[[T], str],
    to_json: Callable[[T], Any] = surface.plain,
) -> None:
    """``run_with_handle`` for a command that only reads purges (``status``, ``list``): it
    opens the purge reads alone (``purgekeeper.commands.reading``), not the whole handle."""

    def with_reads() -> T:
        from purgekeeper.commands import reading  # lazy: see commands/cli/__init__.py

        with reading.reading(settings()) as reads:
            return naming_the_database(lambda: action(reads))

    run_command(as_json, with_reads, render, to_json)


def naming_the_database(action: Callable[[], T]) -> T:
    """``action``'s answer; a NotFound names the database it looked in: a second, empty one
    is a common mistake."""
    try:
        return action()
    except NotFound as missing:
        raise NotFound(f"{missing.detail} in the database {settings().database_name}") from missing


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
    # Log lines go to stderr in the one format (purgekeeper.commands.logs): stdout
    # carries the result, and under --json nothing but the one document.
    from purgekeeper.commands import logs  # lazy: see commands/cli/__init__.py

    logs.configure_purgectl(settings, click.get_current_context().invoked_subcommand)
