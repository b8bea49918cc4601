"""The key server's command: ``keys serve``, one key store served over HTTP to the processes of
every machine (``purgekeeper.commands.key_server``; docs/guides/encryption.md). It needs no
database: its directory and its token (``PURGEKEEPER_KEY_SERVER_TOKEN``, never an option, so
it is not in the process list)."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from purgekeeper.commands.cli.options import Duration
from purgekeeper.commands.cli.shared import fail, main, settings
from purgekeeper.schema.errors import PurgekeeperError, ValidationError

if TYPE_CHECKING:
    from purgekeeper.commands.key_server import Tls

# purgekeeper.commands.key_server's, without importing it (Starlette and uvicorn load only when serving)
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8090
TOKEN_VARIABLE = "PURGEKEEPER_KEY_SERVER_TOKEN"
DIRECTORY = "key-server"  # under the data directory, by default
ROTATE_EVERY_S = 3600.0  # purgekeeper.storage.keystore.ROTATE_EVERY

pem_file = click.Path(exists=True, dir_okay=False, path_type=Path)


@main.group("keys")
def keys_group() -> None:
    """The key server: the content keys of a deployment whose processes run on several
    machines, in one store that all of them reach over HTTPS."""


@keys_group.command("serve")
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Interface to listen on.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535), help="Port.")
@click.option(
    "--directory",
    envvar="PURGEKEEPER_KEY_SERVER_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="The key store's directory (env PURGEKEEPER_KEY_SERVER_DIR; default <data dir>/key-server): the "
    "trust root and every key. Back it up (docs/guides/encryption.md).",
)
@click.option(
    "--rotate-every",
    default=f"{ROTATE_EVERY_S:g}s",
    show_default=True,
    type=Duration(),
    help="The time between two rotations of the key-encryption key, which come only after keys were destroyed "
    "(at least 1s).",
)
@click.option("--ssl-keyfile", type=pem_file, help="TLS: the server's private key (PEM), with --ssl-certfile.")
@click.option("--ssl-certfile", type=pem_file, help="TLS: the server's certificate chain (PEM), with --ssl-keyfile.")
def keys_serve(
    host: str,
    port: int,
    directory: Path | None,
    rotate_every: dt.timedelta,
    ssl_keyfile: Path | None,
    ssl_certfile: Path | None,
) -> None:
    """Serve the key store (POST /v1/keys/create, get, destroy, destroyed; GET /healthz) until
    SIGTERM or SIGINT, to clients with the token in PURGEKEEPER_KEY_SERVER_TOKEN (at least 32
    characters: refused to start without). Off this host, serve it over TLS: --ssl-keyfile and
    --ssl-certfile, or a reverse proxy."""
    try:
        from purgekeeper.commands import key_server  # Starlette and uvicorn load only here
        from purgekeeper.storage import failpoints

        tls = _tls(ssl_keyfile, ssl_certfile)
        found = settings()
        store_dir = directory or found.data_dir / DIRECTORY
        if rotate_every < dt.timedelta(seconds=1):
            raise ValidationError("--rotate-every is at least 1s")
        token = os.environ.get(TOKEN_VARIABLE)
        with key_server.open_key_server(store_dir, token, rotate_every=rotate_every.total_seconds()) as served:
            failpoints.arm(found.failpoints)  # after the store is open: a fault test's disk fails requests only
            key_server.serve(served, host=host, port=port, tls=tls, echo=click.echo)
    except PurgekeeperError as error:
        fail(error, as_json=False)


def _tls(keyfile: Path | None, certfile: Path | None) -> Tls | None:
    from purgekeeper.commands import key_server

    if (keyfile is None) != (certfile is None):
        raise ValidationError("TLS needs both --ssl-keyfile and --ssl-certfile")
    return None if keyfile is None or certfile is None else key_server.Tls(keyfile, certfile)
