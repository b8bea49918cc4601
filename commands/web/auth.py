"""Who may call the HTTP surfaces: the host token and the optional operator token.

- Every ``/v1`` request needs ``Authorization: Bearer <token>``.
- Host endpoints take the host token (``PURGEKEEPER_API_TOKEN``), or the operator token.
- Operator endpoints (and ``/status``, ``/metrics``) take the operator token when
  ``PURGEKEEPER_OPERATOR_TOKEN`` is set; otherwise the host token.
- Tokens are compared in constant time; a missing or wrong one is a 401 that names neither.

The console's session (``SessionSigner``) is an itsdangerous ``URLSafeTimedSerializer`` value:
the signed-in operator's name, a CSRF token and the time it was signed, HMAC-SHA256 under a key
derived from the operator token. It holds no token, it dies after its time to live, and rotating
the token ends every session at once.

The sign-in page says where the token is (``token_hint``): a variable's name, or the host
token's file; never the token.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from itsdangerous import BadData, TimestampSigner, URLSafeTimedSerializer

from purgekeeper.commands.settings import Settings

TOKEN_FILE_NAME = "api-token"
COOKIE_NAME = "purgekeeper_session"
SESSION_SALT = "purgekeeper /status session v2"
SESSION_TTL = dt.timedelta(hours=12)
CSRF_BYTES = 32


@dataclass(frozen=True)
class Tokens:
    api: str
    operator: str | None = None

    def host_allows(self, presented: str | None) -> bool:
        return _matches(presented, self.api) or (self.operator is not None and _matches(presented, self.operator))

    def operator_allows(self, presented: str | None) -> bool:
        return _matches(presented, self.operator_token)

    @property
    def operator_token(self) -> str:
        """The token ``operator_allows`` accepts: the operator's, or else the host's."""
        return self.operator if self.operator is not None else self.api


def _matches(presented: str | None, expected: str) -> bool:
    if not presented or not expected:
        return False
    return hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8"))


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def load_or_create_token(data_dir: Path) -> tuple[str, Path, bool]:
    """The host token kept in ``<data dir>/api-token`` (mode 0600), created when missing.
    Returns (token, path, created)."""
    path = data_dir / TOKEN_FILE_NAME
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        token = path.read_text("utf-8").strip()
        if token:
            return token, path, False
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    os.chmod(path, 0o600)
    return token, path, True


@dataclass(frozen=True)
class TokenHint:
    """Where the token the console takes is kept, for the sign-in page: which token it is
    (``operator`` or ``host``), where it is, and a command that prints it. Never the token."""

    token: str
    where: str
    command: str | None = None


def token_hint(tokens: Tokens, settings: Settings) -> TokenHint:
    """Where to find the token ``tokens.operator_allows``: the operator token's variable, the
    host token's variable, or the host token's file (``serve`` creates it when no host token
    is set, and then listens on loopback only, so the file is on the machine in front of you)."""
    if tokens.operator is not None:
        return TokenHint("operator", "PURGEKEEPER_OPERATOR_TOKEN in the server's environment")
    if settings.api_token is not None and settings.api_token == tokens.api:
        return TokenHint("host", "PURGEKEEPER_API_TOKEN in the server's environment (no operator token is set)")
    path = settings.data_dir / TOKEN_FILE_NAME
    if _token_in(path) == tokens.api:
        where = f"the file {path} on the server (no operator token is set), created by the first serve"
        return TokenHint("host", where, f'cat "${{PURGEKEEPER_DATA_DIR:-{settings.data_dir}}}/{TOKEN_FILE_NAME}"')
    return TokenHint("host", "the host token the server was started with (no operator token is set)")


def _token_in(path: Path) -> str | None:
    try:
        return path.read_text("utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


# -- the console's session -------------------------------------------------------------------------


@dataclass(frozen=True)
class Session:
    """Who signed in to the console, and the token its forms must carry back (CSRF)."""

    operator: str
    csrf: str

    @classmethod
    def start(cls, operator: str) -> Session:
        return cls(operator=operator, csrf=secrets.token_urlsafe(CSRF_BYTES))

    def form_allows(self, presented: str | None) -> bool:
        """The CSRF token a form sent back, compared in constant time."""
        return _matches(presented, self.csrf)


class _ClockedSigner(TimestampSigner):
    """itsdangerous' timestamp signer on a given clock (tests sign in the past)."""

    def __init__(self, *args: Any, clock: Callable[[], float], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock = clock

    def get_timestamp(self) -> int:
        return int(self.clock())


class SessionSigner:
    """Signs and reads the session cookie's value (itsdangerous, HMAC-SHA256). The key is the
    operator token, so a new token refuses every cookie signed under the old one."""

    def __init__(self, token: str, *, ttl: dt.timedelta = SESSION_TTL, clock: Callable[[], float] = time.time) -> None:
        self.ttl = ttl
        self.serializer = URLSafeTimedSerializer(
            token,
            salt=SESSION_SALT,
            signer=_ClockedSigner,
            signer_kwargs={"clock": clock, "key_derivation": "hmac", "digest_method": hashlib.sha256},
        )

    def sign(self, session: Session) -> str:
        return self.serializer.dumps({"operator": session.operator, "csrf": session.csrf})

    def read(self, value: str | None) -> Session | None:
        """The session of a cookie, or None when it is missing, forged, foreign or expired.
        Any value at all gives a session or None, never an error (a cookie is the client's)."""
        if not value:
            return None
        try:
            data = self.serializer.loads(value, max_age=int(self.ttl.total_seconds()))
        except BadData:
            return None
        if not isinstance(data, dict):
            return None
        operator, csrf = data.get("operator"), data.get("csrf")
        if not (isinstance(operator, str) and operator and isinstance(csrf, str) and csrf):
            return None
        return Session(operator=operator, csrf=csrf)


@dataclass(frozen=True)
class Operator:
    """A signed-in operator: by session cookie, or by bearer token (``session`` None: a script,
    with no cookie and no CSRF token to check)."""

    name: str
    session: Session | None


def same_origin(headers: Mapping[str, str]) -> bool:
    """No sign of a cross-site request. ``Sec-Fetch-Site`` decides when the browser sends it
    (no page can forge it); else ``Origin``, when sent, must be this host. Under
    ``Referrer-Policy: no-referrer`` a browser sends ``Origin: null`` even from this site,
    so a bare ``null`` is refused only when ``Sec-Fetch-Site`` cannot vouch for the request."""
    site = headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = headers.get("origin")
    if origin is None:
        return True
    try:
        return origin != "null" and urlsplit(origin).netloc == headers.get("host")
    except ValueError:
        return False
