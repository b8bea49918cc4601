"""The HTTP API's errors: ``{"error": CODE, "detail": ...}`` with docs/design.md's statuses
(``purgekeeper.commands.surface``). The HTTP layer adds:

- ``400 validation_error`` for a request that does not match the OpenAPI schema (wrong
  types, unknown fields, lengths, patterns, bad base64, nesting deeper than
  ``MAX_JSON_DEPTH``, a malformed multipart body); only a short message, never the input.
  Types are strict: a value is never converted to the type declared (``true`` is not 1,
  ``"2592000"`` not a number); a time is ISO 8601 text with an offset, within
  ``validation``'s range of times; a form or query flag is ``true`` or ``false``;
- ``401 unauthorized``, ``404 not_found`` (no such endpoint, or an unknown id),
  ``405 method_not_allowed`` (its ``Allow`` header lists every method of the path),
  ``415 unsupported_media_type`` (a JSON body not sent as ``application/json``, an upload
  that is not ``multipart/form-data``: ``media_types``);
- ``410 conversation_purged`` when reading a purged conversation (the Python API returns
  ``None`` or ``[]``);
- ``413 payload_too_large`` for a body over its cap, refused before the request reaches a
  command and with nothing kept;
- ``500 internal_error`` for a bug: the traceback goes to the log, never to the client.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from purgekeeper.commands import surface
from purgekeeper.commands.http import media_types
from purgekeeper.schema.errors import PurgekeeperError

log = logging.getLogger("purgekeeper.commands.http.app")  # the logger the API's internal errors have always gone to

MAX_DETAIL_LENGTH = 500
HTTP_ERROR_CODES = {
    400: "validation_error",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def install_error_handlers(app: FastAPI, routes: Sequence[Route]) -> None:
    """The handlers of ``app``; a 405's ``Allow`` lists the methods ``routes`` take at its path."""

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = media_types.allowed_methods(routes, request) or headers.get("Allow", "")
        return _http_error(exc, headers)

    app.add_exception_handler(PurgekeeperError, _domain_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, _internal_error)


async def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PurgekeeperError)
    return JSONResponse(surface.error_body(exc), status_code=surface.http_status(exc))


async def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"error": "validation_error", "detail": _short(exc.errors())}, status_code=400)


def _http_error(exc: StarletteHTTPException, headers: dict[str, str]) -> JSONResponse:
    code = HTTP_ERROR_CODES.get(exc.status_code, "http_error")
    detail = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    return JSONResponse({"error": code, "detail": detail}, status_code=exc.status_code, headers=headers)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"error": "internal_error", "detail": "internal error"}, status_code=500)


def _short(errors: Sequence[Any]) -> str:
    """Where and what, for the first few problems; never the input itself."""
    parts = []
    for error in errors[:3]:
        if error.get("type") == "json_invalid":
            parts.append("body: not valid JSON")
            continue
        location = [str(p) for p in error.get("loc", ())]
        if len(location) > 1 and location[0] == "body":
            location = location[1:]
        parts.append(f"{'.'.join(location) or 'request'}: {error.get('msg', 'invalid')}")
    if len(errors) > 3:
        parts.append(f"and {len(errors) - 3} more")
    return "; ".join(parts)[:MAX_DETAIL_LENGTH] or "invalid request"
