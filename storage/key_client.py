"""The key store over HTTPS: :class:`HttpKeyStore`, a client of the key server
(``purgectl keys serve``, ``purgekeeper.commands.key_server``), for deployments whose API and
worker processes run on several machines.

The embedded store (``purgekeeper.storage.keystore.FileKeyStore``) is SQLite in WAL mode,
which works between the processes of one host only: its shared-memory index does not cross a
network file system. The key server holds one ``FileKeyStore`` on its own host and answers
every host's processes over HTTP, with a bearer token.

**The protocol** (version 1, JSON), each request with ``Authorization: Bearer <token>``::

    POST /v1/keys/create     {"ids": [...]}  ->  {"keys": {id: base64}}
                                                  409 {"error": "key_destroyed", "ids": [...]}
    POST /v1/keys/get        {"ids": [...]}  ->  {"keys": {id: base64 | null}}
    POST /v1/keys/destroy    {"ids": [...], "held_only": false}  ->  {"destroyed": n}
    POST /v1/keys/destroyed  {"ids": [...]}  ->  {"ids": [...]}
    GET  /healthz                            ->  200 {"ok": true}, 503 {"error": ..., "detail": ...}

At most ``IDS_PER_REQUEST`` ids a request (413 beyond); the client sends more in several
requests, so a call over more ids than that is not one transaction. When a later request is
refused, what the earlier ones did stays done: a ``create`` refused (``KeyDestroyed``) leaves
keys that seal nothing (``ContentKeys`` asks for ``POOL`` at a time, far below it); a
``destroy(held_only=True)`` refused (an id the store never held) leaves destroyed the held keys
of the earlier requests, which the caller was destroying anyway, and fails all the same.

**No cache.** Every ``get`` asks the server, so a key another host destroyed is never served
from this process's memory. ``ContentKeys`` still pools the new keys it makes.

**Failures.** A server that cannot be reached, does not answer within the timeout, answers
5xx or something that is not the protocol, or refuses the token, is ``KeyStoreUnusable``,
naming the server's URL, never the token or a key; a 409 on ``create`` is ``KeyDestroyed``
with the ids. Every call is idempotent (``create`` answers the same keys for the same ids),
so one that cannot reach the server or meets a 5xx is tried ``ATTEMPTS`` times,
``BACKOFF_S`` apart: a call gives up after at most ``ATTEMPTS`` timeouts.

**In clear, never.** A URL must be ``https://``, or ``http://`` to this host only (a loopback
address, or ``localhost``): the keys travel in the answers. A private CA's certificate is
given to httpx as ``SSL_CERT_FILE``.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from purgekeeper.schema.errors import ValidationError
from purgekeeper.storage.keystore import KeyDestroyed, KeyStoreUnusable, checked_ids
from purgekeeper.storage.sealing import KEY_BYTES

__all__ = [
    "ATTEMPTS",
    "IDS_PER_REQUEST",
    "TIMEOUT_S",
    "TOKEN_MIN_LENGTH",
    "HttpKeyStore",
    "checked_token",
    "checked_url",
]

IDS_PER_REQUEST = 1000  # the server refuses more (413): a request's body stays small
TIMEOUT_S = 10.0  # seconds: connecting, and each read of the answer
ATTEMPTS = 3  # tries of a call that cannot reach the server or meets a 5xx
BACKOFF_S = 0.2  # seconds between two tries
TOKEN_MIN_LENGTH = 32
TOKEN = re.compile(r"[!-~]+")  # printable ASCII without spaces: a header's value as it is
DETAIL_MAX = 300  # characters of a refusal's detail repeated in a message

CREATE = "/v1/keys/create"
GET = "/v1/keys/get"
DESTROY = "/v1/keys/destroy"
DESTROYED = "/v1/keys/destroyed"
HEALTHZ = "/healthz"

T = TypeVar("T")


class Malformed(ValueError):
    """The answer is not the protocol's (what is wrong with it, never what it holds)."""


class ServerFault(Exception):
    """A 5xx answer: tried again, then reported."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(response.status_code)
        self.response = response


class HttpKeyStore:
    """The ``KeyStore`` of a key server at ``url`` (see the module's docstring); ``token`` is
    the server's ``PURGEKEEPER_KEY_SERVER_TOKEN``."""

    def __init__(self, url: str, token: str, *, timeout: float = TIMEOUT_S) -> None:
        self.url = checked_url(url)
        self.directory = self.url  # where the keys are, for messages (FileKeyStore's is a path)
        self.timeout = timeout
        headers = {"Authorization": f"Bearer {checked_token(token, 'the key store token')}"}
        self._client = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, follow_redirects=False)
        self._retrying = Retrying(
            stop=stop_after_attempt(ATTEMPTS),
            wait=wait_fixed(BACKOFF_S),
            retry=retry_if_exception_type((httpx.TransportError, ServerFault)),
            reraise=True,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HttpKeyStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the interface ------------------------------------------------------------------

    def create(self, ids: Iterable[str]) -> dict[str, bytes]:
        return {k: v for chunk in _chunks(checked_ids(ids)) for k, v in self._call(CREATE, chunk, _created).items()}

    def get(self, ids: Iterable[str]) -> dict[str, bytes | None]:
        return {k: v for chunk in _chunks(checked_ids(ids)) for k, v in self._call(GET, chunk, _found).items()}

    def destroy(self, ids: Iterable[str], *, held_only: bool = False) -> int:
        flag = {"held_only": True} if held_only else {}
        return sum(self._call(DESTROY, chunk, _count, **flag) for chunk in _chunks(checked_ids(ids)))

    def destroyed(self, ids: Iterable[str]) -> set[str]:
        return {key_id for chunk in _chunks(checked_ids(ids)) for key_id in self._call(DESTROYED, chunk, _destroyed)}

    def check(self) -> None:
        """KeyStoreUnusable, naming the URL and the reason, unless the server answers that its
        store can be written now (``FileKeyStore.check``, run by the server) and takes this
        process's token."""
        self._call(HEALTHZ, None, _healthy)

    # -- rotation is the server's --------------------------------------------------------

    def rotation_due(self) -> bool:
        """Never: the key server rotates its key-encryption key itself, so a client's
        scheduler has nothing to rotate."""
        return False

    def rotate(self) -> int:
        """Refused (KeyStoreUnusable): only the key server rotates its key-encryption key."""
        raise KeyStoreUnusable(f"the key server at {self.url} rotates its own key-encryption key; no client rotates it")

    # -- inside -------------------------------------------------------------------------

    def _call(self, path: str, ids: list[str] | None, read: Callable[[Any, list[str]], T], **flags: bool) -> T:
        """``read`` of the JSON of the server's 200 answer to ``ids`` and ``flags`` (a GET
        without them); KeyStoreUnusable otherwise, or KeyDestroyed for a 409 on create."""
        body = None if ids is None else {"ids": ids, **flags}
        response = self._exchange("GET" if body is None else "POST", path, body)
        try:
            return read(self._answer(response, path), ids or [])
        except Malformed as exc:
            raise self._unusable(f"answered {path} with something that is not the protocol ({exc})") from None

    def _exchange(self, method: str, path: str, body: dict[str, Any] | None) -> httpx.Response:
        """The server's answer, tried again while it cannot be reached or answers 5xx."""
        try:
            return self._retrying.copy()(self._send, method, path, body)  # a copy a call: threads share the store
        except ServerFault as fault:
            return fault.response
        except httpx.TimeoutException:
            raise self._unusable(f"did not answer within {self.timeout:g} s ({ATTEMPTS} tries)") from None
        except httpx.HTTPError as exc:
            raise self._unusable(f"cannot be reached ({type(exc).__name__}: {exc})") from None

    def _send(self, method: str, path: str, body: dict[str, Any] | None) -> httpx.Response:
        response = self._client.request(method, path, json=body)
        if response.status_code >= 500:
            raise ServerFault(response)
        return response

    def _answer(self, response: httpx.Response, path: str) -> Any:
        status = response.status_code
        if status == 200:
            return _json(response)
        if status in (401, 403):
            raise self._unusable(f"refused this process's token ({status}): it is not the server's")
        detail = _detail(response)
        if status == 409 and path == CREATE:
            raise KeyDestroyed(detail or None, ids=_strings(_json(response), "ids"))
        raise self._unusable(f"answered {status}" + (f": {detail}" if detail else ""))

    def _unusable(self, reason: str) -> KeyStoreUnusable:
        return KeyStoreUnusable(f"the key server at {self.url} {reason}")


def checked_url(url: str) -> str:
    """``url``, with a trailing slash; ValidationError for one that is not ``https://`` or
    ``http://`` to this host (keys would travel in clear), or that holds credentials."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        raise ValidationError("the key server's URL is not a URL") from None
    if parsed.userinfo:
        raise ValidationError("the key server's URL holds credentials: give the token on its own, not in the URL")
    if parsed.scheme not in ("https", "http") or not parsed.host or parsed.query or parsed.fragment:
        raise ValidationError(f"the key server's URL {url} is not https://HOST[:PORT][/PATH]")
    if parsed.scheme == "http" and not _loopback(parsed.host):
        raise ValidationError(
            f"the key server's URL {url} is http:// to another host: keys would travel in clear; use https://"
        )
    return str(parsed.copy_with(path=parsed.path.rstrip("/") + "/"))


def checked_token(token: str | None, name: str) -> str:
    """``token`` (``name`` says which, in the message), at least ``TOKEN_MIN_LENGTH``
    printable ASCII characters without spaces; ValidationError otherwise, never quoting it."""
    rule = f"at least {TOKEN_MIN_LENGTH} printable ASCII characters without spaces (e.g. `openssl rand -hex 32`)"
    if not token:
        raise ValidationError(f"{name} is not set: it must be {rule}")
    if len(token) < TOKEN_MIN_LENGTH or not TOKEN.fullmatch(token):
        raise ValidationError(f"{name} must be {rule}")
    return token


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _chunks(ids: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(ids), IDS_PER_REQUEST):
        yield ids[start : start + IDS_PER_REQUEST]


def _created(answer: Any, wanted: list[str]) -> dict[str, bytes]:
    return {key_id: _key(value) for key_id, value in _keys(answer, wanted).items()}


def _found(answer: Any, wanted: list[str]) -> dict[str, bytes | None]:
    return {key_id: None if value is None else _key(value) for key_id, value in _keys(answer, wanted).items()}


def _count(answer: Any, wanted: list[str]) -> int:
    count = answer.get("destroyed") if isinstance(answer, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= len(wanted):
        raise Malformed("no count of the keys destroyed")
    return count


def _destroyed(answer: Any, wanted: list[str]) -> set[str]:
    ids = set(_strings(answer, "ids"))
    if not ids <= set(wanted):
        raise Malformed("ids that were not asked for")
    return ids


def _healthy(answer: Any, wanted: list[str]) -> None:
    if not isinstance(answer, dict) or answer.get("ok") is not True:
        raise Malformed("no ok")


def _keys(answer: Any, wanted: list[str]) -> dict[str, Any]:
    """The answer's ``keys``: one for each id asked, and no other, in the order asked."""
    keys = answer.get("keys") if isinstance(answer, dict) else None
    if not isinstance(keys, dict) or keys.keys() != set(wanted):
        raise Malformed("not a key for each id asked, and only those")
    return {key_id: keys[key_id] for key_id in wanted}


def _key(value: Any) -> bytes:
    """A key from its base64; Malformed (never quoting it) when it is not one."""
    try:
        key = base64.b64decode(value, validate=True) if isinstance(value, str) else b""
    except binascii.Error:
        key = b""
    if len(key) != KEY_BYTES:
        raise Malformed(f"a key that is not {KEY_BYTES} bytes in base64")
    return key


def _strings(answer: Any, name: str) -> list[str]:
    """The answer's list of strings ``name``; Malformed otherwise."""
    found = answer.get(name) if isinstance(answer, dict) else None
    if not isinstance(found, list) or not all(isinstance(item, str) for item in found):
        raise Malformed(f"no list of strings {name!r}")
    return found


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise Malformed("not JSON") from None


def _detail(response: httpx.Response) -> str:
    """The refusal's ``detail`` (the server's own words, which never hold a key), or nothing
    (a proxy's page is not repeated)."""
    try:
        body = response.json()
    except ValueError:
        return ""
    detail = body.get("detail") if isinstance(body, dict) else None
    return detail[:DETAIL_MAX] if isinstance(detail, str) else ""
