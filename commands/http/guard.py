"""The HTTP API's guard, in front of every route: the bearer token of every ``/v1`` request
(the operator token for an operator route), then the body cap, before anything reads the body.
The body is read here, up to the cap, and replayed to the app."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from commands.web.auth import Tokens, bearer

API_PREFIX = "/v1"
MERGE_PATH = f"{API_PREFIX}/ledger/merge"
UNAUTHORIZED = {"error": "unauthorized", "detail": "a valid 'Authorization: Bearer <token>' header is required"}


class RequestGuard:
    """ASGI middleware: the bearer token of every ``/v1`` request (the operator token for an
    operator route), then the body cap. The body is read here, up to the cap, and replayed."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: Tokens,
        operator_routes: Sequence[APIRoute],
        max_body_bytes: int,
        max_upload_bytes: int,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.operator_routes = operator_routes
        self.max_body_bytes = max_body_bytes
        self.max_upload_bytes = max_upload_bytes

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if _under_api(scope["path"]) and not self._allowed(scope, bearer(headers.get("authorization"))):
            await _send_json(send, 401, UNAUTHORIZED, {"www-authenticate": "Bearer"})
            return
        cap = self.max_upload_bytes if scope["path"] == MERGE_PATH else self.max_body_bytes
        try:
            body = await _read_body(receive, cap, headers.get("content-length"))
        except _Disconnected:
            return  # the client left; there is no one to answer
        if body is None:
            detail = f"the request body is larger than {cap} bytes"
            await _send_json(send, 413, {"error": "payload_too_large", "detail": detail})
            return
        await self.app(scope, _replay_body(body, receive), send)

    def _allowed(self, scope: AsgiScope, token: str | None) -> bool:
        if any(route.matches(scope)[0] != Match.NONE for route in self.operator_routes):
            return self.tokens.operator_allows(token)
        return self.tokens.host_allows(token)


class _Disconnected(Exception):
    """The client went away while sending the body."""


def _under_api(path: str) -> bool:
    return path == API_PREFIX or path.startswith(API_PREFIX + "/")


async def _read_body(receive: Receive, cap: int, content_length: str | None) -> bytes | None:
    """The whole body, or None when it is larger than ``cap`` (told, or counted)."""
    if content_length is not None and content_length.isdigit() and int(content_length) > cap:
        return None
    chunks: list[bytes] = []
    total = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > cap:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay_body(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _send_json(send: Send, status: int, content: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    response = JSONResponse(content, status_code=status, headers=headers)
    await send({"type": "http.response.start", "status": status, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})
