"""The key server: one ``FileKeyStore`` in a directory of its host, served over HTTP to the API,
worker and scheduler processes of every machine (``purgectl keys serve``; the client and the
protocol are ``purgekeeper.storage.key_client``).

The embedded store is SQLite in WAL mode, which serves the processes of one host only; a
deployment on several machines points them all at this server instead
(``PURGEKEEPER_KEY_STORE_URL``). Its directory holds the trust root (the ``kek.*`` files) and
every surviving key: back it up as the embedded store's (docs/guides/encryption.md).

Every request but ``GET /healthz`` carries ``Authorization: Bearer <token>``, the server's
``PURGEKEEPER_KEY_SERVER_TOKEN``, compared in constant time; ``/healthz`` takes it too, and
refuses a wrong one, so a client's health check proves its token. The answers:

- 200: the protocol's answer;
- 400: the body is not JSON ``{"ids": [...]}``;
- 401: no token, or not the server's (logged, without what was sent);
- 409: ``create`` of an id whose key was destroyed, with the ``ids``; nothing was created;
- 413: more than ``IDS_PER_REQUEST`` ids, or a body over ``MAX_BODY``;
- 422: an id that is not a string of 1 to 200 characters (``FileKeyStore``'s rule);
- 503: the store cannot be read or written (a full disk, a KEK file gone), or a ``destroy``
  with ``held_only`` names an id it never held (nothing destroyed: the caller's sign of a
  wrong store), with the reason.

No request's body and no key is ever logged: uvicorn's access log has the method, the path
and the status only. A thread rotates the key-encryption key when due (after destructions,
``--rotate-every`` seconds after the last rotation), so no client ever rotates it. The server
speaks plain HTTP unless given a key and certificate (uvicorn's TLS): off its own host it must
be reached over TLS, its own or a reverse proxy's, since the answers hold keys.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hmac
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from purgekeeper.commands import logs
from purgekeeper.commands.serving import BoundServer, bind_listener, quiet_signals, url_of
from purgekeeper.schema.errors import ValidationError
from purgekeeper.storage import key_client
from purgekeeper.storage.key_client import IDS_PER_REQUEST, checked_token
from purgekeeper.storage.keystore import ROTATE_EVERY, FileKeyStore, KeyDestroyed, KeyStoreUnusable
from purgekeeper.workers.shutdown import STOP_JOIN, Watchdog

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "ROTATION_CHECK",
    "KeyServer",
    "Tls",
    "create_key_server_app",
    "open_key_server",
    "rotate_if_due",
    "serve",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8090
TOKEN_VARIABLE = "PURGEKEEPER_KEY_SERVER_TOKEN"
MAX_BODY = 1 << 21  # bytes: IDS_PER_REQUEST ids of up to 200 characters, each escaped as JSON may escape it
ROTATION_CHECK = dt.timedelta(minutes=1)  # how often the rotation thread asks whether one is due
# After a SIGTERM, a request in flight gets this long to finish (one is a few milliseconds).
REQUEST_GRACE = dt.timedelta(seconds=3)


class Refusal(Exception):
    """The request is refused."""

    status = 400
    code = "bad_request"

    def __init__(self, detail: str | None = None) -> None:
        self.detail = detail or (self.__doc__ or "").strip().splitlines()[0]
        super().__init__(self.detail)

    def response(self) -> Response:
        return JSONResponse({"error": self.code, "detail": self.detail}, status_code=self.status)


class Unauthorised(Refusal):
    """No bearer token, or not the key server's."""

    status = 401
    code = "unauthorised"

    def response(self) -> Response:
        response = super().response()
        response.headers["WWW-Authenticate"] = "Bearer"
        return response


class TooLarge(Refusal):
    """The request is too large."""

    status = 413
    code = "too_large"


@dataclass(frozen=True)
class KeysRequest:
    """A ``POST /v1/keys/...`` request's body: ``{"ids": [string, ...]}``, and for ``destroy``
    ``"held_only": true`` or false. The store checks each id."""

    ids: list[str]
    held_only: bool = False

    @classmethod
    def parse(cls, body: bytes) -> KeysRequest:
        """The request; Refusal (400) for a body that is not one, TooLarge past
        ``IDS_PER_REQUEST`` ids."""
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            raise Refusal('the body is not JSON {"ids": [...]}') from None
        ids = document.get("ids") if isinstance(document, dict) else None
        if not isinstance(ids, list) or not all(isinstance(key_id, str) for key_id in ids):
            raise Refusal('the body is not JSON {"ids": [...]} with a list of strings')
        if len(ids) > IDS_PER_REQUEST:
            raise TooLarge(f"at most {IDS_PER_REQUEST} ids a request, not {len(ids)}")
        held_only = document.get("held_only", False)
        if not isinstance(held_only, bool):
            raise Refusal('"held_only" is true or false')
        return cls(ids, held_only)


@dataclass(frozen=True)
class Tls:
    """uvicorn's TLS: the server's private key and certificate (chain) files, PEM."""

    keyfile: Path
    certfile: Path


@dataclass
class KeyServer:
    """The store served, the token it takes, and how often its KEK is rotated after
    destructions (seconds)."""

    store: FileKeyStore
    token: str
    rotate_every: float = ROTATE_EVERY

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> KeyServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_key_server(directory: Path, token: str | None, *, rotate_every: float = ROTATE_EVERY) -> KeyServer:
    """The server of ``purgectl keys serve``: ValidationError without a token of at least
    ``TOKEN_MIN_LENGTH`` characters (it never starts without one), KeyStoreUnusable for a
    directory that cannot hold the store."""
    checked = checked_token(token, TOKEN_VARIABLE)
    if rotate_every <= 0:
        raise ValidationError("--rotate-every must be more than 0 seconds")
    return KeyServer(FileKeyStore(directory), checked, rotate_every)


# -- HTTP --


def create_key_server_app(server: KeyServer) -> Starlette:
    """The routes: ``POST /v1/keys/{create,get,destroy,destroyed}`` and ``GET /healthz``."""
    store, token = server.store, server.token.encode("ascii")
    actions: dict[str, Callable[[KeysRequest], dict[str, Any]]] = {
        key_client.CREATE: lambda asked: {"keys": _encoded(store.create(asked.ids))},
        key_client.GET: lambda asked: {"keys": _encoded(store.get(asked.ids))},
        key_client.DESTROY: lambda asked: {"destroyed": store.destroy(asked.ids, held_only=asked.held_only)},
        key_client.DESTROYED: lambda asked: {"ids": sorted(store.destroyed(asked.ids))},
    }
    routes = [Route(path, _keys_route(token, action), methods=["POST"]) for path, action in actions.items()]
    return Starlette(routes=[*routes, Route(key_client.HEALTHZ, _healthz_route(token, store), methods=["GET"])])


Endpoint = Callable[[Request], Awaitable[Response]]


def _keys_route(token: bytes, action: Callable[[KeysRequest], dict[str, Any]]) -> Endpoint:
    """A ``POST {"ids": [...]}`` route: the token checked, the ids read, ``action`` run on a
    thread (the store's calls block), and its refusals answered with their status."""

    async def endpoint(request: Request) -> Response:
        try:
            _authorise(request, token)
            asked = KeysRequest.parse(await _bounded_body(request))
            return JSONResponse(await run_in_threadpool(action, asked))
        except Refusal as refusal:
            return refusal.response()
        except KeyDestroyed as exc:
            return JSONResponse({"error": exc.code, "detail": exc.detail, "ids": list(exc.ids)}, status_code=409)
        except ValidationError as exc:
            return JSONResponse({"error": exc.code, "detail": exc.detail}, status_code=422)
        except KeyStoreUnusable as exc:
            log.error("the key store cannot be used: %s", exc.detail)
            return JSONResponse({"error": exc.code, "detail": exc.detail}, status_code=503)

    return endpoint


def _healthz_route(token: bytes, store: FileKeyStore) -> Endpoint:
    """``FileKeyStore.check``: 200, or 503 with the reason. A token is not needed (a
    supervisor's probe has none), and refused when it is wrong."""

    async def healthz(request: Request) -> Response:
        try:
            if "authorization" in request.headers:
                _authorise(request, token)
            await run_in_threadpool(store.check)
        except Refusal as refusal:
            return refusal.response()
        except KeyStoreUnusable as exc:
            return JSONResponse({"error": exc.code, "detail": exc.detail}, status_code=503)
        return JSONResponse({"ok": True})

    return healthz


def _authorise(request: Request, token: bytes) -> None:
    """Unauthorised (logged with the client's address, never what it sent) unless the
    request's bearer token is ``token``, compared in constant time."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode("latin-1"), token):
        client = request.client.host if request.client else "an unknown client"
        log.warning("refused a request to %s from %s: no bearer token, or not the server's", request.url.path, client)
        raise Unauthorised()


async def _bounded_body(request: Request) -> bytes:
    """The body, refused past ``MAX_BODY`` without reading the rest."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise TooLarge(f"the request body is over {MAX_BODY} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise TooLarge(f"the request body is over {MAX_BODY} bytes")
    return bytes(body)


def _encoded(keys: Mapping[str, bytes | None]) -> dict[str, str | None]:
    return {key_id: None if key is None else base64.b64encode(key).decode("ascii") for key_id, key in keys.items()}


# -- rotation --


def rotate_if_due(store: FileKeyStore, *, every: float = ROTATE_EVERY) -> int | None:
    """Rotate the store's KEK if it is due (``FileKeyStore.rotation_due``); the new version,
    or None. A failure is logged, and the next check tries again."""
    try:
        if not store.rotation_due(every=every):
            return None
        version = store.rotate()
    except KeyStoreUnusable:
        log.exception("the key store's rotation failed; the next check tries again")
        return None
    log.info("the key store's key-encryption key was rotated to version %d", version)
    return version


@contextlib.contextmanager
def rotating(server: KeyServer) -> Iterator[threading.Thread]:
    """A thread that calls :func:`rotate_if_due` at once, then every ``ROTATION_CHECK`` (or
    ``rotate_every``, when shorter), until the block ends; a rotation under way then is
    waited for up to ``STOP_JOIN`` (each of its steps is crash-safe)."""
    stop = threading.Event()
    interval = min(ROTATION_CHECK.total_seconds(), server.rotate_every)

    def run() -> None:
        while True:
            rotate_if_due(server.store, every=server.rotate_every)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=run, name="purgekeeper-key-rotation", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        stop.set()
        thread.join(timeout=STOP_JOIN.total_seconds())


# -- serving --


def serve(
    server: KeyServer,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    tls: Tls | None = None,
    echo: Callable[[str], object] = print,
) -> None:
    """Serve until SIGTERM or SIGINT, then let the requests in flight finish and return. The
    port is bound first: one that cannot be is an InfrastructureError naming it."""
    watchdog = Watchdog()
    config = uvicorn.Config(
        create_key_server_app(server),
        host=host,
        port=port,
        timeout_graceful_shutdown=int(REQUEST_GRACE.total_seconds()),
        ssl_keyfile=None if tls is None else str(tls.keyfile),
        ssl_certfile=None if tls is None else str(tls.certfile),
        **logs.uvicorn_options(),
    )
    url = url_of(host, port).replace("http://", "https://" if tls else "http://", 1)
    with (
        bind_listener(host, port, command="purgectl keys serve") as listener,
        quiet_signals(watchdog),
        rotating(server),
    ):
        echo(f"key server for {server.store.directory} serving on {url} (POST /v1/keys/..., GET /healthz)")
        BoundServer(config, watchdog).run(sockets=[listener])
