"""Who may call the HTTP surfaces: the host token and the optional operator token.

- Every ``/v1`` request needs ``Authorization: Bearer <token>``.
- Host endpoints take the host token (``PURGEKEEPER_API_TOKEN``), or the operator token.
- Operator endpoints (and ``/status``, ``/metrics``) take the operator token when
  ``PURGEKEEPER_OPERATOR_TOKEN`` is set; otherwise the host token.
- Tokens are compared in constant time; a missing or wrong one is a 401 that names neither.
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

TOKEN_FILE_NAME = "api-token"
COOKIE_NAME = "purgekeeper_session"


@dataclass(frozen=True)
class Tokens:
    api: str
    operator: str | None = None

    def host_allows(self, presented: str | None) -> bool:
        return _matches(presented, self.api) or (self.operator is not None and _matches(presented, self.operator))

    def operator_allows(self, presented: str | None) -> bool:
        return _matches(presented, self.operator if self.operator is not None else self.api)


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
