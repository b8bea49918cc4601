"""The content commands: ``content seal``, the sealing of content written before encryption at rest."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from purgekeeper.commands.cli.render import counted, table
from purgekeeper.commands.cli.shared import json_command, main, run_with_handle

if TYPE_CHECKING:
    from purgekeeper.commands.handle import Purgekeeper
    from purgekeeper.commands.sealing_backfill import SealingRound

DEFAULT_BATCH = 500  # purgekeeper.commands.sealing_backfill.BATCH (not imported: --help stays light)
MAX_BATCH = 10_000


@main.group("content")
def content_group() -> None:
    """Content at rest: seal what was written before encryption at rest."""


@json_command(content_group, "seal")
@click.option(
    "--batch",
    default=DEFAULT_BATCH,
    show_default=True,
    type=click.IntRange(1, MAX_BATCH),
    help="Rows per table per round, each table's batch one transaction.",
)
@click.option("--until-done", is_flag=True, help="Run rounds until one seals nothing more.")
def content_seal(batch: int, until_done: bool, as_json: bool) -> None:
    """Seal content written before encryption at rest (event bodies, attachment names,
    admissions' payloads, runs' outputs, derivatives' payloads) in place, one batch per table
    per round, each row under a key of its own. Safe to run at any time, and beside the
    scheduler: a row is sealed once. Not sealed: what a legal hold covers (counted as held,
    sealed once the hold is released), what a purge fenced (its cleanup removes it), runs
    still under way, and attachment files. Progress goes to stderr, one line a round. Old row
    versions stay in the database's files until VACUUM reuses them (docs/guides/encryption.md).
    JSON: {"sealed": {table: rows}, "left": {table: rows}, "held": {table: rows}}, what every
    round sealed and what is left after the last (counted up to 10,001 a table)."""

    def action(pk: Purgekeeper) -> SealingRound:
        from purgekeeper.commands import sealing_backfill  # lazy: see commands/cli/__init__.py

        done = last = sealing_backfill.seal_older_content(pk.db, pk.keys, batch=batch)
        click.echo(progress(last), err=True)
        while until_done and last.sealed_any:
            last = sealing_backfill.seal_older_content(pk.db, pk.keys, batch=batch)
            click.echo(progress(last), err=True)
            done = done.then(last)
        return done

    run_with_handle(as_json, action, render_sealing)


def progress(round_: SealingRound) -> str:
    return f"sealed {counted(sum(round_.sealed.values()), 'row')}; left {sum(round_.left.values())}"


def render_sealing(done: SealingRound) -> str:
    rows = [(name, done.sealed.get(name, 0), done.left.get(name, 0), done.held.get(name, 0)) for name in done.left]
    lines = [table(["table", "sealed", "left", "held"], rows)]
    if any(done.held.values()):
        lines.append("held rows wait for their hold's release: they are sealed by a round after it")
    if done.done:
        lines.append("nothing written before encryption at rest is left in plain text (attachment files aside)")
    return "\n".join(lines)
