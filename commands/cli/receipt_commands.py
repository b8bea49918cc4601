"""The receipt commands: ``receipt PURGE_ID`` (a purge's receipt, from the database's signed
log), ``completion PURGE_ID`` (the signed statement that its cleanup completed) and
``receipt verify FILE --key VKEY [--completion FILE]`` (offline: no database, no server; a
thin wrapper over ``purgekeeper.tlog.verify``)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from purgekeeper.commands.cli.shared import JsonCommand, json_command, json_option, main, print_json, run_with_handle

if TYPE_CHECKING:
    from purgekeeper.tlog import verify

VERIFIED, INVALID, UNUSABLE = 0, 1, 2  # purgekeeper.tlog.verify's exit codes


class ReceiptGroup(click.Group):
    """``receipt PURGE_ID`` is ``receipt show PURGE_ID``; ``receipt verify ...`` verifies."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["show", *args]
        return super().parse_args(ctx, args)


@main.group("receipt", cls=ReceiptGroup)
def receipt_group() -> None:
    """A purge's verifiable receipt (`receipt PURGE_ID`), and its offline check (`receipt verify`)."""


@json_command(receipt_group, "show")
@click.argument("purge_id")
@click.option(
    "--for-subject",
    is_flag=True,
    help="The receipt for the person whose data was purged: without the actor, the reason and the request's "
    "metadata (exit 2, validation_error, for a purge accepted before leaf version 2, whose leaf holds them in clear).",
)
def receipt_show(purge_id: str, for_subject: bool, as_json: bool) -> None:
    """Print the purge's receipt (one JSON document, with or without --json): its ledger row's
    leaf, the row's inclusion proof and the newest signed checkpoint, and (the operator's
    receipt) the actor, reason and request metadata with the salts their commitments in the
    leaf cover. Hand the --for-subject receipt to whoever asked for the purge; `receipt
    verify` checks either."""
    run_with_handle(as_json, lambda pk: pk.receipt(purge_id, for_subject=for_subject), _document)


@json_command(main, "completion")
@click.argument("purge_id")
def completion_show(purge_id: str, as_json: bool) -> None:
    """Print the signed statement that the purge's cleanup completed (one JSON document, with
    or without --json): each step's counts (removed, retained shared, held), the time its last
    step finished and the attempts, signed with the log's key and bound to the purge's ledger
    row. `receipt verify RECEIPT --key VKEY --completion FILE` checks it with the receipt.
    Exit 3 (cleanup_not_complete) while the cleanup has not completed, e.g. after a restore
    re-armed it: the later statement is the one that counts."""
    run_with_handle(as_json, lambda pk: pk.completion(purge_id), _document)


@receipt_group.command("verify", cls=JsonCommand)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--key", required=True, help="The log's verification key (`purgectl ledger key`), or a file holding it.")
@click.option("--origin", help="The log's origin (a checkpoint's first line): another log's checkpoint fails.")
@click.option("--newer", type=click.Path(dir_okay=False, path_type=Path), help="A newer signed checkpoint.")
@click.option(
    "--proof",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The consistency proof from the receipt's tree to --newer's (`ledger consistency`).",
)
@click.option(
    "--completion",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A completion statement (`purgectl completion`) that must be bound to the receipt's leaf.",
)
@click.option(
    "--witness",
    "witnesses",
    multiple=True,
    help="A witness's cosigner key (C2SP cosignature/v1 vkey), or a file holding it; repeatable.",
)
@click.option("--quorum", type=click.IntRange(min=1), help="Cosignatures needed of the --witness keys (default: all).")
@json_option
def receipt_verify(
    file: Path,
    key: str,
    origin: str | None,
    newer: Path | None,
    proof: Path | None,
    completion: Path | None,
    witnesses: tuple[str, ...],
    quorum: int | None,
    as_json: bool,
) -> None:
    """Verify a receipt offline, with the log's verification key: its signed checkpoint, its
    leaf (the purge's row, in canonical form) and its inclusion proof; with --origin, that the
    checkpoint is of that log; with --newer and --proof, that a newer checkpoint's tree
    extends the receipt's; with --completion, that the completion statement is signed with
    the key and bound to the receipt's leaf; with --witness (and --quorum), that enough of
    those witnesses cosigned the receipt's checkpoint. No database, no server. The line (or document)
    says what kind of row it verified: a content purge, a legal hold, a retention run...
    Exit 0: verified; 1: it does not verify (the reason is printed; also JSON nested too
    deep, a number of more than 20 digits, a key twice); 2: a file cannot be read, or
    --newer without --proof."""
    files = {"newer": newer, "proof": proof, "completion": completion}
    argv = [str(file), "--key", key]
    argv += [] if origin is None else ["--origin", origin]
    for name, path in files.items():
        argv += [] if path is None else [f"--{name}", str(path)]
    argv += [arg for witness in witnesses for arg in ("--witness", witness)]
    argv += [] if quorum is None else ["--quorum", str(quorum)]
    from purgekeeper.tlog import verify  # lazy: see commands/cli/__init__.py

    if not as_json:
        sys.exit(verify.main(argv))
    sys.exit(_verify_json(file, key, origin, files, Cosigned(witnesses, quorum)))


@dataclass(frozen=True)
class Cosigned:
    """What ``--witness`` and ``--quorum`` ask of the receipt's checkpoint."""

    witnesses: tuple[str, ...] = ()
    quorum: int | None = None


def _verify_json(file: Path, key: str, origin: str | None, files: dict[str, Path | None], cosigned: Cosigned) -> int:
    if (files["newer"] is None) != (files["proof"] is None):
        print_json({"error": "validation_error", "detail": "--newer and --proof go together"})
        return UNUSABLE
    from purgekeeper.tlog import verify  # lazy: see commands/cli/__init__.py

    paths = {name: None if path is None else str(path) for name, path in files.items()}
    try:
        result, statement = verify.verify_files(
            str(file),
            key,
            origin=origin,
            newer=paths["newer"],
            proof=paths["proof"],
            completion=paths["completion"],
            witnesses=cosigned.witnesses,
            quorum=cosigned.quorum,
        )
    except OSError as exc:
        print_json({"error": "validation_error", "detail": f"a file cannot be read ({type(exc).__name__})"})
        return UNUSABLE
    except verify.ReceiptInvalid as exc:
        print_json({"error": "receipt_invalid", "detail": exc.reason})
        return INVALID
    print_json(_verified(result, statement))
    return VERIFIED


def _verified(result: verify.ReceiptVerified, statement: verify.Completion | None) -> dict[str, Any]:
    verified: dict[str, Any] = {
        "ok": True,
        "purge_id": result.purge_id,
        "kind": result.kind,
        "kind_name": result.kind_name,
        "ledger_seq": result.ledger_seq,
        "origin": result.checkpoint.origin,
        "tree_size": result.checkpoint.size,
        "newer_tree_size": None if result.newer is None else result.newer.size,
        "cosigned_by": [{"name": c.name, "timestamp": c.timestamp} for c in result.cosignatures],
        "leaf_version": result.leaf_version,
        "disclosed": None if result.disclosed is None else dict(result.disclosed),
        "undisclosed": list(result.undisclosed),
    }
    if statement is not None:
        verified["completed_at"] = statement.completed_at
        verified["attempts"] = statement.attempts
        verified["steps"] = [
            {"kind": s.kind, "removed": s.removed, "retained_shared": s.retained_shared, "held": s.held}
            for s in statement.steps
        ]
    return verified


def _document(document: dict[str, Any]) -> str:
    return json.dumps(document, sort_keys=True)
