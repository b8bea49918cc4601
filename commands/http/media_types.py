"""What a request body's media type must be, and which methods a path allows.

A ``/v1`` route whose body is JSON (``JsonBodyRoute``, the route class of ``routes.common.v1``)
refuses a body sent as anything but ``application/json`` (parameters such as ``charset``
allowed; no header at all is not JSON either) with ``415 unsupported_media_type``, before the
body is read, instead of reading the bytes as a string that then fails its schema. An empty
body passes on, and is refused as a missing body (400). The document declares the 415 on every
such operation. The multipart routes (``upload_event``, ``merge_ledger``) check their own.

``allowed_methods`` is the ``Allow`` header of a 405: every method of the path the request
names, not only those of the first route that matched it (Starlette's own answer, which
named ``POST`` alone for ``/v1/conversations``).
"""

from __future__ import annotations

import email.message
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from fastapi import params
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route

JSON = "application/json"
UNSUPPORTED_JSON: dict[str, Any] = {
    "description": "the body is not sent as application/json (unsupported_media_type)",
    "content": {JSON: {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
}


class NotJson(HTTPException):
    """415: a JSON body sent under another media type, or none."""

    def __init__(self) -> None:
        super().__init__(415, f"send the body as {JSON} (Content-Type: {JSON})")


class JsonBodyRoute(APIRoute):
    """An ``APIRoute`` that refuses a non-empty body whose media type is not JSON, when its
    body is JSON (not a form), and declares that 415."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        if self._takes_json():
            self.responses[415] = UNSUPPORTED_JSON

    def _takes_json(self) -> bool:
        return self.body_field is not None and not isinstance(self.body_field.field_info, params.Form)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if not self._takes_json():
            return handler

        async def json_only(request: Request) -> Response:
            if not is_json(request.headers.get("content-type")) and await request.body():
                raise NotJson()
            return await handler(request)

        return json_only


def is_json(content_type: str | None) -> bool:
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    return message.get_content_type() == JSON


def allowed_methods(routes: Sequence[Route], request: Request) -> str | None:
    """The methods of the path the request names, as an ``Allow`` header: the path of the
    first route of ``routes`` that matches it (as routing picks), and every method a route of
    that path takes (``/v1/purges/confirm`` is ``POST`` alone, though ``GET
    /v1/purges/{purge_id}`` would match its text too). None when no route matches."""
    matched = next((route for route in routes if route.matches(request.scope)[0] != Match.NONE), None)
    if matched is None:
        return None
    methods = {method for route in routes if route.path == matched.path for method in route.methods or ()}
    return ", ".join(sorted(methods))
