"""The ledger commands: verify, checkpoint, repair, merge, consistency, key."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from purgekeeper.commands.cli.render import render_checkpoint, render_mapping, render_report
from purgekeeper.commands.cli.shared import json_command, json_option, main, run_with_handle
from purgekeeper.schema.errors import (
    MessagingUnavailable,
)

if TYPE_CHECKING:
    from purgekeeper.commands.handle import Purgekeeper
    from purgekeeper.commands.records import (
        LedgerReport,
    )
    from purgekeeper.storage import checkpoint

# -- the ledger


@main.group("ledger")
def ledger_group() -> None:
    """Verify, checkpoint, repair and merge the purge ledger."""


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
        from purgekeeper.storage import checkpoint  # lazy: see commands/cli/__init__.py

        return checkpoint.Checkpoint(pk.copy.directory, pk.database_key, seq, head.row_hash if head else "")

    run_with_handle(as_json, action, render_checkpoint)


@json_command(ledger_group, "repair")
def ledger_repair(as_json: bool) -> None:
    """Bring the ledger's copy in the checkpoint directory back to a verifying state: rebuild
    a lost or unreadable head.json from its segments, re-establish a truncated open segment
    from the database, rebuild the signed log's missing or damaged tiles from the copy (each
    row verified first, the tree checked against the signed root), append what the database
    holds beyond it. Rows the copy holds and the database lacks are kept: `ledger merge`
    brings them back. A copy that cannot be repaired (a row that does not verify is named by
    its seq) is a messaging_unavailable error with the reason (exit code 4)."""

    run_with_handle(as_json, lambda pk: pk.repair_ledger_copy(), render_mapping)


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


@json_command(ledger_group, "consistency")
@click.option("--from", "from_size", type=int, required=True, help="The older tree's size (a receipt's checkpoint).")
def ledger_consistency(from_size: int, as_json: bool) -> None:
    """Print the proof (RFC 9162) that the newest signed checkpoint's tree extends the tree of
    --from leaves, with that checkpoint: one JSON document, for `receipt verify --newer
    --proof`. A size below 1 or beyond the newest checkpoint is a validation_error."""

    run_with_handle(as_json, lambda pk: pk.consistency(from_size), lambda document: json.dumps(document))


@ledger_group.group("key", invoke_without_command=True)
@json_option
@click.pass_context
def ledger_key(ctx: click.Context, as_json: bool) -> None:
    """Print the signed log's verification key (`<name>+<key id>+<base64 key>`): publish it;
    receipts and checkpoints are verified with it. It never makes a key: a missing or unusable
    key is a signing_key_missing or signing_key_unusable error naming its file (exit code 4)."""
    if ctx.invoked_subcommand is None:
        run_with_handle(as_json, lambda pk: {"vkey": pk.log_key()}, lambda found: str(found["vkey"]))


@json_command(ledger_key, "init")
@click.option("--origin", help="The new origin the key signs (PURGEKEEPER_LOG_ORIGIN by default); set it there too.")
def ledger_key_init(origin: str | None, as_json: bool) -> None:
    """Make the signed log's signing key (0600) in its file (PURGEKEEPER_SIGNING_KEY_FILE, else
    <data dir>/ledger-signing.key) with its mark (<key file>.mark), and print its verification
    key. Refused when anything is there already (signing_key_exists, exit code 3): a key is
    never replaced. Where the log has signed (or a surviving mark knows the origin), only for a
    new origin (--origin NEW, then set PURGEKEEPER_LOG_ORIGIN to it): the same origin is never
    signed by a fresh key (validation_error otherwise). Publish the new key."""

    def action(pk: Purgekeeper) -> dict[str, str]:
        from purgekeeper.commands import key_commands  # lazy: see commands/cli/__init__.py

        return {"vkey": key_commands.create_signing_key(pk.settings, pk.database_key, origin=origin).vkey}

    run_with_handle(as_json, action, lambda found: found["vkey"])


@json_command(ledger_key, "mark")
@click.option(
    "--adopt",
    is_flag=True,
    help="Write the mark from the log's newest checkpoint that verifies: an operator's decision, after "
    "checking it is the newest one ever published (docs: Signing key).",
)
@click.option(
    "--never-signed",
    is_flag=True,
    help="With --adopt: the key has never signed a checkpoint anyone saw (a key made outside purgekeeper): "
    "its mark starts empty. Refused where a checkpoint or the copy records a signed tree.",
)
def ledger_key_mark(adopt: bool, never_signed: bool, as_json: bool) -> None:
    """Show the signing key's mark: for each origin the largest tree the key signed, the
    origins retired and the key's rotations. With --adopt (after an upgrade from a version
    without marks, or a lost mark), write it from the log's newest checkpoint: first check
    that no newer checkpoint was ever published (at your witnesses, in receipts handed out).
    With --adopt --never-signed, start the mark of a key that has never signed (one you made
    yourself and name with PURGEKEEPER_SIGNING_KEY_FILE)."""
    if never_signed and not adopt:
        raise click.UsageError("--never-signed goes with --adopt")

    def action(pk: Purgekeeper) -> dict[str, object]:
        from purgekeeper.commands import key_commands  # lazy: see commands/cli/__init__.py

        if adopt:
            with pk.copy.writers_kept_out():  # nothing signed between the checks and the write (as rotate)
                return key_commands.adopt_mark(pk.settings, pk.database_key, never_signed=never_signed)
        return key_commands.show_mark(pk.settings, pk.database_key)

    run_with_handle(as_json, action, render_mapping)


@json_command(ledger_key, "rotate")
def ledger_key_rotate(as_json: bool) -> None:
    """Replace the signing key by a new one for the same origin: a statement signed by the old
    key naming the new one is published in the log (rotation/<n>), the current tree is signed
    again, and the old key is kept aside (<key file>.retired-<time>, 0600) for you to destroy.
    Receipts carry the statements, so a verifier holding the old key follows. Publish the new
    key. An interrupted rotation resumes when run again."""

    def action(pk: Purgekeeper) -> dict[str, object]:
        from purgekeeper.commands import key_commands  # lazy: see commands/cli/__init__.py

        with pk.copy.writers_kept_out():  # no checkpoint is signed meanwhile (as ledger repair)
            return dataclasses.asdict(key_commands.rotate_signing_key(pk.settings, pk.database_key))

    run_with_handle(as_json, action, render_mapping)


if __name__ == "__main__":  # pragma: no cover
    main()
