"""The witness commands: ``witness key init``, ``witness key show`` and ``witness serve``, a
C2SP tlog-witness that cosigns a log's checkpoints only while the log never forks. The witness
needs no database: its key's file and its state directory
(``purgekeeper.commands.witness_app``)."""

from __future__ import annotations

from pathlib import Path

import click

from purgekeeper.commands.cli.shared import fail, json_command, main, run_command
from purgekeeper.schema.errors import PurgekeeperError

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8090  # purgekeeper.commands.witness_app's, without importing it

key_option = click.option(
    "--key",
    "key_file",
    envvar="PURGEKEEPER_WITNESS_KEY_FILE",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The witness's signing key file (env PURGEKEEPER_WITNESS_KEY_FILE).",
)


@main.group("witness")
def witness_group() -> None:
    """Run a witness for a purgekeeper log (or any C2SP checkpoint log): it cosigns each
    checkpoint that extends the last one it cosigned, and refuses a fork."""


@witness_group.group("key")
def witness_key_group() -> None:
    """The witness's cosigner key (Ed25519, cosignature/v1)."""


@json_command(witness_key_group, "init")
@key_option
@click.option("--name", required=True, help="The witness's name, e.g. witness.example.com/w1 (no spaces, no '+').")
def witness_key_init(key_file: Path, name: str, as_json: bool) -> None:
    """Make the witness's key (0600) in --key and print its verification key: give it to the
    logs' operators. Refused when the file exists (witness_key_exists, exit 3): a key is
    never replaced."""
    from purgekeeper.storage import witness_key  # lazy: see commands/cli/__init__.py

    run_command(
        as_json, lambda: {"vkey": witness_key.create_witness_key(key_file, name=name).vkey}, lambda r: r["vkey"]
    )


@json_command(witness_key_group, "show")
@key_option
def witness_key_show(key_file: Path, as_json: bool) -> None:
    """Print the witness's verification key (<name>+<key id>+<base64 key>, type 0x04)."""
    from purgekeeper.storage import witness_key  # lazy: see commands/cli/__init__.py

    run_command(as_json, lambda: {"vkey": witness_key.read_witness_key(key_file).vkey}, lambda r: r["vkey"])


@witness_group.command("serve")
@key_option
@click.option(
    "--state",
    "state_dir",
    envvar="PURGEKEEPER_WITNESS_STATE_DIR",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The witness's state directory (env PURGEKEEPER_WITNESS_STATE_DIR): what it cosigned. Lost or restored "
    "from a backup, the witness needs a new key (docs/guides/witnesses.md).",
)
@click.option(
    "--log",
    "log_specs",
    envvar="PURGEKEEPER_WITNESS_LOGS",
    multiple=True,
    help="[ORIGIN=]VKEY: a log to follow and its key (the origin defaults to the key's name); repeat for "
    "each (env PURGEKEEPER_WITNESS_LOGS, whitespace-separated).",
)
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Interface to listen on.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535), help="Port.")
def witness_serve(key_file: Path, state_dir: Path, log_specs: tuple[str, ...], host: str, port: int) -> None:
    """Serve POST /add-checkpoint (C2SP tlog-witness), GET /logs and GET /healthz until SIGTERM
    or SIGINT."""
    try:
        from purgekeeper.commands import witness_app  # Starlette and uvicorn load only here

        witness = witness_app.open_witness(key_file, state_dir, log_specs)
        witness_app.serve(witness, host=host, port=port, echo=click.echo)
    except PurgekeeperError as error:
        fail(error, as_json=False)
