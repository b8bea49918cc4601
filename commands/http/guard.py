"""The HTTP API's guard, in front of every route: the bearer token of every ``/v1`` request
(the operator token for an operator route; ``request.state.operator`` says whether it was
the operator's), then the body cap, before anything reads the body.

Most bodies are read here, up to ``max_body_bytes``, and replayed to the app. The upload
routes (``streamed``: the ledger merge, the event upload) each have a cap of their own and
are not read here: their bytes pass through as they arrive, counted, and the first byte
past the cap raises ``BodyTooLarge`` (a 413) in the route that reads them, which then keeps
nothing. A ``Content-Length`` over the cap is refused before anything is read."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from purgekeeper.commands.web.auth import Tokens, bearer

API_PREFIX = "/v1"
OPERATOR_STATE = "operator"  # request.state.operator: the request carries the operator's token
UNAUTHORIZED = {"error": "unauthorized", "detail": "a valid 'Authorization: Bearer <token>' header is required"}


class BodyTooLarge(HTTPException):
    """413: the request body is larger than the route's cap."""

    def __init__(self, cap: int) -> None:
        super().__init__(413, f"the request body is larger than {cap} bytes")


class RequestGuard:
    """ASGI middleware: the bearer token of every ``/v1`` request (the operator token for an
    operator route), then the body cap: ``max_body_bytes`` read and replayed, or a streamed
    route's own cap counted as the body passes."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: Tokens,
        operator_routes: Sequence[APIRoute],
        max_body_bytes: int,
        streamed: Sequence[tuple[APIRoute, int]] = (),
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.operator_routes = operator_routes
        self.max_body_bytes = max_body_bytes
        self.streamed = streamed

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if _under_api(route_path(scope)):
            token = bearer(headers.get("authorization"))
            if not self._allowed(scope, token):
                await _send_json(send, 401, UNAUTHORIZED, {"www-authenticate": "Bearer"})
                return
            scope.setdefault("state", {})[OPERATOR_STATE] = self.tokens.operator_allows(token)
        streamed_cap = self._streamed_cap(scope)
        cap = self.max_body_bytes if streamed_cap is None else streamed_cap
        if _declared_over(headers.get("content-length"), cap):
            await _too_large(send, cap)
            return
        if streamed_cap is not None:
            await self.app(scope, _counted(receive, cap), send)
            return
        try:
            body = await _read_body(receive, cap)
        except _Disconnected:
            return  # the client left; there is no one to answer
        if body is None:
            await _too_large(send, cap)
            return
        await self.app(scope, _replay_body(body, receive), send)

    def _allowed(self, scope: AsgiScope, token: str | None) -> bool:
        if any(route.matches(scope)[0] != Match.NONE for route in self.operator_routes):
            return self.tokens.operator_allows(token)
        return self.tokens.host_allows(token)

    def _streamed_cap(self, scope: AsgiScope) -> int | None:
        for route, cap in self.streamed:
            if route.matches(scope)[0] == Match.FULL:
                return cap
        return None


class _Disconnected(Exception):
    """The client went away while sending the body."""


def route_path(scope: AsgiScope) -> str:
    """The path the routes match: without the prefix the app is mounted under (uvicorn's
    ``--root-path``, a Starlette ``Mount``), which the server leaves in ``path``."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _under_api(path: str) -> bool:
    return path == API_PREFIX or path.startswith(API_PREFIX + "/")


def _declared_over(content_length: str | None, cap: int) -> bool:
    return content_length is not None and content_length.isdigit() and int(content_length) > cap


async def _read_body(receive: Receive, cap: int) -> bytes | None:
    """The whole body, or None when it is larger than ``cap``."""
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


def _counted(receive: Receive, cap: int) -> Receive:
    """``receive``, passing each chunk on as it comes; past ``cap`` bytes, ``BodyTooLarge``."""
    total = 0

    async def counted() -> Message:
        nonlocal total
        message = await receive()
        if message["type"] == "http.request":
            total += len(message.get("body", b""))
            if total > cap:
                raise BodyTooLarge(cap)
        return message

    return counted


async def _too_large(send: Send, cap: int) -> None:
    await _send_json(send, 413, {"error": "payload_too_large", "detail": BodyTooLarge(cap).detail})


async def _send_json(send: Send, status: int, content: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    response = JSONResponse(content, status_code=status, headers=headers)
    await send({"type": "http.response.start", "status": status, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})
