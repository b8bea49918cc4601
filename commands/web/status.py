"""The operator's console at ``/status``: server-rendered (Jinja2, autoescaped), no JavaScript.

===========================================  =============================================
``GET /status``                              the purges, newest first, filtered by ``status``
                                             (or ``retrying``) and ``kind``, one page at a time
                                             (``after``); retention policies and legal holds
``GET /status/purges/{id}``                  one purge: what it touched, steps, leases, attempts
                                             by round, where a failure is, audit rows
``GET /status/search?q=``                    a purge id (or its start) or a conversation id
``POST /status/purges/{id}/retry``           re-arm its incomplete steps (form: ``reason``)
``GET /status/workers``                      live lease owners and the steps each one holds
``POST /status/login``, ``/status/logout``   the session (form: ``name``, ``token``)
===========================================  =============================================

What the pages show. The overview (``overview_page``) is one table row per purge: its id,
status, kind and label ("retention purge (policy p1)", never who was erased), age, steps done
of total and the error of a step not done; never content (no bodies, no payloads, no purge's
own actor or reason). Purges that need attention (incomplete, or stalled) come first on the
unfiltered first page, in a table of their own, marked with a CSS class and a word. Then
retention and legal holds: the first 100 standing policies and holds in force (how many
conversations and authors each hold covers: never an author's name, nor who placed it). A
purge's page (``purge_page``) adds what it touched (ids and counts; the erased author, the
deleted bot and a hold's subjects are named there, to a signed-in operator), each attempt
(round, number, owner, start, finish, outcome, error), where a failed unlink is (the root and
the path below it, ``purgekeeper.commands.touched``) and its audit rows: the operators' own names and
reasons for a retry. Times are told relative to the database clock ("3 min ago", "in 40 s",
a due time passed as "overdue by 27 s"), the UTC time in a ``title``.

Refreshing. The overview, the workers view and the page of a purge still cleaning reload every
few seconds (``<meta http-equiv="refresh">``); ``?refresh=off`` (the "Pause refresh" link)
renders the same page without it. The sign-in form and the retry form never reload under a
person typing.

Signing in takes the operator's name and the operator token (``Tokens.operator_allows``); the
form says where that token is kept (``auth.token_hint``). The
session cookie (``auth.SessionSigner``: itsdangerous, keyed by the token) carries the name and
a CSRF token; it is HttpOnly, SameSite=Strict, limited to ``/status``, Secure over https, and
expires after ``session_ttl``. It stays valid across restarts and API processes, and dies when
the token changes or it expires. ``POST /status/logout`` clears it from the browser; a copy
taken before then lasts until its expiry, so rotate the token to end every session at once.

Scripts may send ``Authorization: Bearer <operator token>`` instead; a retry is then recorded
under the ``X-Purgekeeper-Operator`` header's name, or "operator". A form POST from a session
must carry the session's CSRF token, and is refused when ``Sec-Fetch-Site`` says it came
from another site (or, from a browser that does not send that header, when ``Origin`` names
another host); a bearer request needs neither (no browser sends the header on its own).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Form, Header, Request
from fastapi.responses import RedirectResponse, Response

from purgekeeper.commands import status_overview, validation
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.purge_commands import MAX_ACTOR_LENGTH, MAX_REASON_LENGTH
from purgekeeper.commands.purge_reads import LIST_STATUSES, PURGE_KINDS
from purgekeeper.commands.surface import error_body, http_status
from purgekeeper.commands.web import overview_page, pages, purge_page, search_page, workers_page
from purgekeeper.commands.web.auth import (
    COOKIE_NAME,
    SESSION_TTL,
    Operator,
    Session,
    SessionSigner,
    Tokens,
    bearer,
    same_origin,
    token_hint,
)
from purgekeeper.commands.web.overview_page import STEP_HELPERS, Filters, with_query
from purgekeeper.schema.errors import PurgekeeperError, ValidationError
from purgekeeper.schema.states import StepStatus

RECENT_PURGES = 50
FINISHED = ("complete", "incomplete")
OPERATOR_HEADER = "X-Purgekeeper-Operator"
BEARER_OPERATOR = "operator"
BAD_TOKEN = "That token is not valid."
FORGED_FORM = "This form did not come from your console session: reload the page and try again. Nothing was changed."
FORGED_SIGN_OUT = "This sign-out did not come from the console: you are still signed in."
RETRIED = "Retry recorded: the incomplete steps are re-armed."


# -- every page's frame ------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    """What every page's frame needs: where the console lives, who is signed in, the database's
    now, and whether the page reloads itself (``toggle``: the same page, paused or resumed)."""

    base: str
    operator: Operator | None = None
    now: dt.datetime | None = None
    refresh: bool = False
    paused: bool = False
    toggle: str | None = None
    query: str = ""  # what the search box holds

    @property
    def csrf(self) -> str | None:
        return None if self.operator is None or self.operator.session is None else self.operator.session.csrf


# -- the routes -----------------------------------------------------------------------------------

Authorization = Annotated[str | None, Header()]
OperatorName = Annotated[str | None, Header(alias=OPERATOR_HEADER)]


def router(
    pk: Purgekeeper,
    tokens: Tokens,
    *,
    page_size: int = RECENT_PURGES,
    session_ttl: dt.timedelta = SESSION_TTL,
) -> APIRouter:
    """The console's routes (see the module docstring)."""
    console = Console(pk, tokens, page_size=page_size, signer=SessionSigner(tokens.operator_token, ttl=session_ttl))
    api = APIRouter()

    @api.get("/status", include_in_schema=False)
    def overview_page(request: Request, authorization: Authorization = None) -> Response:
        who = console.operator(request, authorization, None)
        return console.overview(request, who) if who else console.sign_in(request)

    @api.get("/status/purges/{purge_id}", include_in_schema=False)
    def purge_page(request: Request, purge_id: str, authorization: Authorization = None) -> Response:
        who = console.operator(request, authorization, None)
        return console.purge(request, who, purge_id) if who else console.sign_in(request)

    @api.post("/status/purges/{purge_id}/retry", include_in_schema=False)
    def retry(
        request: Request,
        purge_id: str,
        reason: Annotated[str, Form()] = "",
        csrf: Annotated[str, Form()] = "",
        authorization: Authorization = None,
        operator_name: OperatorName = None,
    ) -> Response:
        who = console.operator(request, authorization, operator_name)
        if who is None:
            return console.sign_in(request, next_path=console.purge_path(request, purge_id))
        return console.retry(request, who, purge_id, reason=reason, csrf=csrf)

    @api.get("/status/search", include_in_schema=False)
    def search(request: Request, authorization: Authorization = None) -> Response:
        who = console.operator(request, authorization, None)
        return console.search(request, who) if who else console.sign_in(request)

    @api.get("/status/workers", include_in_schema=False)
    def workers_page(request: Request, authorization: Authorization = None) -> Response:
        who = console.operator(request, authorization, None)
        return console.workers(request, who) if who else console.sign_in(request)

    @api.post("/status/login", include_in_schema=False)
    def login(
        request: Request,
        token: Annotated[str, Form()] = "",
        name: Annotated[str, Form()] = "",
        next_path: Annotated[str, Form(alias="next")] = "",
    ) -> Response:
        return console.login(request, token=token, name=name, next_path=next_path)

    @api.post("/status/logout", include_in_schema=False)
    def logout(request: Request) -> Response:
        return console.logout(request)

    return api


class Console:
    """The routes' work: who is asking, what to read, which page to render."""

    def __init__(self, pk: Purgekeeper, tokens: Tokens, *, page_size: int, signer: SessionSigner) -> None:
        self.pk = pk
        self.tokens = tokens
        self.page_size = page_size
        self.signer = signer
        self.check = status_overview.LedgerCheck(pk)
        self.token_hint = token_hint(tokens, pk.settings)

    # -- signing in

    def operator(self, request: Request, authorization: str | None, name: str | None) -> Operator | None:
        presented = bearer(authorization)
        if presented is not None:
            return Operator(name or BEARER_OPERATOR, None) if self.tokens.operator_allows(presented) else None
        session = self.signer.read(request.cookies.get(COOKIE_NAME))
        return None if session is None else Operator(session.operator, session)

    def sign_in(
        self,
        request: Request,
        *,
        error: str | None = None,
        name: str = "",
        next_path: str | None = None,
        code: int = 401,
    ) -> Response:
        """The sign-in form; it comes back to ``next_path`` (by default the page asked for)."""
        wanted = next_path if next_path is not None else _request_path(request)
        return pages.respond(
            "login.html",
            code,
            headers={"WWW-Authenticate": 'Bearer realm="purgekeeper"'} if code == 401 else None,
            frame=Frame(base=_base(request)),
            action=_base(request) + "/login",
            error=error,
            name=name,
            next_path=self.safe_next(request, wanted),
            max_name=MAX_ACTOR_LENGTH,
            hint=self.token_hint,
        )

    def login(self, request: Request, *, token: str, name: str, next_path: str) -> Response:
        if not self.tokens.operator_allows(token):
            return self.sign_in(request, error=BAD_TOKEN, name=name, next_path=next_path)
        try:
            operator = validation.check_text(name, "your name", max_length=MAX_ACTOR_LENGTH).strip()
        except ValidationError as exc:
            return self.sign_in(request, error=_detail(exc), name=name, next_path=next_path, code=400)
        response = RedirectResponse(self.safe_next(request, next_path), 303, headers=pages.SECURITY_HEADERS)
        response.set_cookie(
            COOKIE_NAME,
            self.signer.sign(Session.start(operator)),
            max_age=int(self.signer.ttl.total_seconds()),
            path=_base(request),
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response

    def logout(self, request: Request) -> Response:
        """Clear the session cookie; a post from another site (it would sign the operator out
        behind their back) is refused."""
        if not same_origin(request.headers):
            frame = Frame(base=_base(request))
            return pages.respond("problem.html", 403, frame=frame, code="forbidden", detail=FORGED_SIGN_OUT)
        response = RedirectResponse(_base(request), 303, headers=pages.SECURITY_HEADERS)
        response.delete_cookie(
            COOKIE_NAME, path=_base(request), secure=request.url.scheme == "https", httponly=True, samesite="strict"
        )
        return response

    @staticmethod
    def safe_next(request: Request, wanted: str) -> str:
        """Where to go after signing in: a console page of this site, never elsewhere."""
        base = _base(request)
        local = wanted == base or wanted.startswith((base + "/", base + "?"))
        if local and wanted.isascii() and wanted.isprintable() and "//" not in wanted and "\\" not in wanted:
            return wanted
        return base

    # -- the pages

    def overview(self, request: Request, who: Operator) -> Response:
        try:
            filters = Filters.parse(request.query_params)
            view = overview_page.gather(self.pk, self.check, filters, page_size=self.page_size)
        except PurgekeeperError as exc:
            return self.problem(request, who, exc)
        base = _base(request)
        frame = Frame(
            base=base,
            operator=who,
            now=view.snapshot.now,
            refresh=not filters.paused,
            paused=filters.paused,
            toggle=filters.href(base, paused=not filters.paused),
        )
        return pages.respond(
            overview_page.TEMPLATE,
            frame=frame,
            view=view,
            filters=filters,
            purge_statuses=LIST_STATUSES,
            late_deferral=overview_page.LATE_DEFERRAL,
            purge_kinds=PURGE_KINDS,
            step_statuses=[status.value for status in StepStatus],
            step_kinds=sorted({kind for _status, kind in view.snapshot.steps}),
            older=None if view.next_after is None else filters.href(base, after=view.next_after),
            newest=filters.href(base, after=None) if filters.after is not None else None,
            cleared=Filters(paused=filters.paused).href(base),
            **STEP_HELPERS,
        )

    def purge(
        self,
        request: Request,
        who: Operator,
        purge_id: str,
        *,
        error: str | None = None,
        reason: str = "",
        code: int = 200,
    ) -> Response:
        try:
            view = purge_page.gather(self.pk, purge_id)
        except PurgekeeperError as exc:
            return self.problem(request, who, exc)
        path = self.purge_path(request, purge_id)
        live = view.detail.status.status not in FINISHED and error is None
        return pages.respond(
            purge_page.TEMPLATE,
            code,
            frame=_frame(request, who, view.now, path, live=live),
            **view.context(),
            error=error,
            notice=RETRIED if request.query_params.get("retried") and error is None else None,
            reason=reason,
            max_reason=MAX_REASON_LENGTH,
            action=path + "/retry",
            **STEP_HELPERS,
        )

    def retry(self, request: Request, who: Operator, purge_id: str, *, reason: str, csrf: str) -> Response:
        """Re-arm the purge's incomplete steps as ``who``; any refusal changes nothing."""
        if who.session is not None and not (who.session.form_allows(csrf) and same_origin(request.headers)):
            return self.purge(request, who, purge_id, error=FORGED_FORM, reason=reason, code=403)
        try:
            self.pk.retry(purge_id, actor=who.name, reason=reason)
        except PurgekeeperError as exc:
            return self.purge(request, who, purge_id, error=_detail(exc), reason=reason, code=http_status(exc))
        return RedirectResponse(self.purge_path(request, purge_id) + "?retried=1", 303, headers=pages.SECURITY_HEADERS)

    def search(self, request: Request, who: Operator) -> Response:
        """One purge found opens its page; several are listed; none says so."""
        query = request.query_params.get("q", "").strip()
        if not query:
            return RedirectResponse(_base(request), 303, headers=pages.SECURITY_HEADERS)
        try:
            view = search_page.gather(self.pk, query)
        except PurgekeeperError as exc:
            return self.problem(request, who, exc, query=query)
        if view.only is not None:
            return RedirectResponse(self.purge_path(request, view.only.purge_id), 303, headers=pages.SECURITY_HEADERS)
        frame = Frame(base=_base(request), operator=who, now=view.now, query=query)
        return pages.respond(search_page.TEMPLATE, frame=frame, **view.context(), **STEP_HELPERS)

    def workers(self, request: Request, who: Operator) -> Response:
        try:
            view = workers_page.gather(self.pk)
        except PurgekeeperError as exc:
            return self.problem(request, who, exc)
        frame = _frame(request, who, view.now, _base(request) + "/workers", live=True)
        return pages.respond(workers_page.TEMPLATE, frame=frame, **view.context())

    def problem(self, request: Request, who: Operator, error: PurgekeeperError, *, query: str = "") -> Response:
        """A bad request (400), an unknown purge (404), or the database unavailable (503, and
        the page tries again by itself)."""
        code = http_status(error)
        body = error_body(error)
        frame = Frame(base=_base(request), operator=who, refresh=code >= 500, query=query)
        return pages.respond("problem.html", code, frame=frame, code=body["error"], detail=body["detail"])

    @staticmethod
    def purge_path(request: Request, purge_id: str) -> str:
        return f"{_base(request)}/purges/{purge_id}"


def _frame(request: Request, who: Operator, now: dt.datetime, path: str, *, live: bool) -> Frame:
    """The frame of a page at ``path`` that reloads itself while ``live``, unless paused
    (``?refresh=off``)."""
    paused = request.query_params.get("refresh") == "off"
    return Frame(
        base=_base(request),
        operator=who,
        now=now,
        refresh=live and not paused,
        paused=paused,
        toggle=with_query(path, {"refresh": None if paused else "off"}) if live else None,
    )


def _detail(error: PurgekeeperError) -> str:
    return str(error_body(error)["detail"])


def _base(request: Request) -> str:
    """``/status`` under the app's mount point (``root_path``, behind a proxy)."""
    return str(request.scope.get("root_path", "")).rstrip("/") + "/status"


def _request_path(request: Request) -> str:
    """The path and query asked for, with the mount point (servers differ on whether the
    ASGI ``path`` already holds ``root_path``)."""
    root = str(request.scope.get("root_path", "")).rstrip("/")
    path = str(request.scope["path"])
    if root and not path.startswith(root + "/"):
        path = root + path
    query = request.url.query
    return path + ("?" + query if query else "")
