"""The HTTP API: a thin layer over the same ``commands`` methods, each under ``/v1``.

``GET /`` redirects to the operator console (``/status``; see ``_serve_root``), and the probes
``/healthz`` and ``/readyz`` answer without a token (``routes.probes``).

The OpenAPI document is at ``/openapi.json``, and readable at ``/docs`` (Swagger UI) and
``/redoc`` (ReDoc), which work without internet: their scripts, styles and icon are the files
the ``fastapi-offline`` package installs (MIT; Swagger UI is Apache-2.0, ReDoc MIT), served
under ``/docs/assets`` (no operation of the document; see ``_serve_docs``). Every operation has an
explicit ``operationId`` (the command's name) and a typed response (``purgekeeper.commands.http.models``;
the JSON is ``purgekeeper.commands.surface.plain`` of the record), a summary and a description, and each
request body an example. A request that does not match the document is a ``400
validation_error``: the document says so, and lists no 422. A JSON body sent as anything but
``application/json`` is a ``415`` (``media_types``), and a 405's ``Allow`` names the methods of
its path. ``tests/http/test_openapi_fuzz.py`` holds the document to the truth with Schemathesis.
A repeated idempotent write returns the same record, so a creation is not told apart from a
replay.

The parts: ``create_app`` here assembles the routes (``purgekeeper.commands.http.routes``, one module per
area, with the route table and who may call what), the request bodies (``bodies``, of the
field types of ``field_types``), the response bodies (``models``), the error handlers
(``error_handlers``), the media types (``media_types``) and the token and body guard (``guard``).

Caps (``RequestGuard``): a JSON body is at most ``max_body_bytes`` (1 MiB). Attachments
sent in it are base64 (4 bytes for every 3), so together they stay under 768 KiB, less the
rest of the JSON: ``ingest_event`` is for small ones. ``upload_event`` takes the same event
as ``multipart/form-data`` and is where attachments reach their limit: each at most
``max_attachment_bytes`` (64 MiB, ``validation.MAX_ATTACHMENT_BYTES``), at most
``validation.MAX_ATTACHMENTS_PER_EVENT`` per event, and the whole request at most
``max_attachment_bytes + UPLOAD_ALLOWANCE_BYTES`` (the fields and framing). Its body is never
held in memory: ``purgekeeper.commands.http.uploads`` writes each part to a spool file under the blob
root as it arrives, and the event is ingested from those files. A merge upload is at most
``max_upload_bytes``, also streamed. ``wait`` blocks at most ``MAX_WAIT_SECONDS`` (a longer
timeout is shortened, and the status returned as on any timeout).

The API never reads or writes a server path that a client names: the checkpoint is a
download written to a private temporary file, a merge is an upload, an upload's spool
files are named by the API, and ``register_bot``'s ``memory_path`` must lie inside one of
the configured Memory roots.
"""

from __future__ import annotations

import importlib
import importlib.resources
import logging
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles

from purgekeeper.commands import validation
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.http import routes, uploads
from purgekeeper.commands.http.error_handlers import install_error_handlers
from purgekeeper.commands.http.field_types import MAX_JSON_DEPTH
from purgekeeper.commands.http.guard import RequestGuard
from purgekeeper.commands.http.routes.common import OPERATOR_TAG
from purgekeeper.commands.http.routes.purge_routes import MAX_WAIT_SECONDS
from purgekeeper.commands.web.auth import Tokens

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_UPLOAD_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_WAIT_SECONDS",
    "OPERATOR_TAG",
    "UPLOAD_ALLOWANCE_BYTES",
    "create_app",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 1_048_576
DEFAULT_MAX_UPLOAD_BYTES = 64 * 1_048_576
UPLOAD_ALLOWANCE_BYTES = 1_048_576  # an upload's fields and multipart framing, beside its attachments
CONSOLE_MODULE = "purgekeeper.commands.web.status"
WEB_ROUTER_MODULES = (CONSOLE_MODULE, "purgekeeper.commands.web.metrics")
VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")
DOCS_ASSETS = "/docs/assets"


def create_app(
    pk: Purgekeeper,
    *,
    tokens: Tokens,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
    max_attachment_bytes: int = validation.MAX_ATTACHMENT_BYTES,
) -> FastAPI:
    """The FastAPI app over ``pk``. The caller keeps ``pk`` open while the app serves."""
    app = FastAPI(
        title="purgekeeper",
        version="1",
        summary="Confirmed content purges for chat and agent hosts.",
        docs_url=None,
        redoc_url=None,
    )
    _serve_docs(app)
    operator = routes.operator_routers(pk)
    routers = (*routes.host_routers(pk, max_attachment_bytes), *operator)
    for router in routers:
        app.include_router(router)
    app.include_router(routes.log_routes(pk))
    served = _include_web_routers(app, pk, tokens)
    probes = routes.probe_routes(pk)
    app.include_router(probes)
    _serve_root(app, "/status" if CONSOLE_MODULE in served else "/docs")
    install_error_handlers(app, _api_routes(*routers, probes))
    _document_400_not_422(app)
    uploads.sweep_stale(pk.settings.blob_root)
    streamed = {"merge_ledger": max_upload_bytes, "upload_event": max_attachment_bytes + UPLOAD_ALLOWANCE_BYTES}
    app.add_middleware(
        RequestGuard,
        tokens=tokens,
        operator_routes=_api_routes(*operator),
        max_body_bytes=max_body_bytes,
        streamed=[(route, streamed[route.name]) for route in _api_routes(*routers) if route.name in streamed],
    )
    return app


def _serve_docs(app: FastAPI) -> None:
    """``/docs`` and ``/redoc`` as FastAPI would serve them, but with every script, style and
    icon from ``DOCS_ASSETS`` (``fastapi_offline/static``: swagger-ui-bundle.js, swagger-ui.css,
    redoc.standalone.js, favicon.png) instead of a CDN, no Google Fonts for ReDoc, and no
    Swagger validator badge (an image from validator.swagger.io)."""
    static = Path(str(importlib.resources.files("fastapi_offline") / "static"))
    app.mount(DOCS_ASSETS, StaticFiles(directory=static), name="docs-assets")
    title = f"{app.title} API"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = _prefix(request)
        return get_swagger_ui_html(
            openapi_url=root + app.openapi_url if app.openapi_url else "",
            title=title,
            swagger_js_url=f"{root}{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = _prefix(request)
        return get_redoc_html(
            openapi_url=root + app.openapi_url if app.openapi_url else "",
            title=title,
            redoc_js_url=f"{root}{DOCS_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{DOCS_ASSETS}/favicon.png",
            with_google_fonts=False,
        )


def _serve_root(app: FastAPI, target: str) -> None:
    """``GET /`` redirects (307, temporary) to ``target``: the operator console, ``/status``.
    The URL that ``make run`` and ``purgectl serve`` print is opened in a browser, by a
    person, and the console is where a person starts (it asks for the operator token to sign
    in, and shows nothing before). A redirect rather than an index page of its own: one page
    fewer to keep, and nothing more served without a token. The API's clients never ask for
    ``/`` (the document is ``/openapi.json``, readable at ``/docs``, where ``/`` leads when
    the console's module is not installed)."""

    @app.get("/", include_in_schema=False)
    def root(request: Request) -> RedirectResponse:
        return RedirectResponse(_prefix(request) + target, status_code=307)


def _prefix(request: Request) -> str:
    """Behind a ``--root-path`` (or a ``Mount``), the URLs the app sends carry it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _api_routes(*routers: APIRouter) -> list[APIRoute]:
    return [route for router in routers for route in router.routes if isinstance(route, APIRoute)]


def _document_400_not_422(app: FastAPI) -> None:
    """A request that does not match the document is a 400 ``ErrorOut`` (``errors``), so the
    422 FastAPI documents for every operation with parameters is taken out again."""
    generate = app.openapi

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            for item in schema["paths"].values():
                for operation in item.values():
                    operation["responses"].pop("422", None)
            for name in VALIDATION_SCHEMAS:
                schema.get("components", {}).get("schemas", {}).pop(name, None)
        return app.openapi_schema or generate()

    app.openapi = document  # type: ignore[method-assign]


def _include_web_routers(app: FastAPI, pk: Purgekeeper, tokens: Tokens) -> list[str]:
    """``/status`` and ``/metrics`` live in their own modules; a missing one is skipped. The
    modules whose routes are served."""
    served = []
    for name in WEB_ROUTER_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            log.warning("%s is not available; its routes are not served", name)
            continue
        app.include_router(module.router(pk, tokens))
        served.append(name)
    return served
