"""The operator's HTML status page, ``GET /status``: server-rendered, no JavaScript.

It shows ids, statuses, counts and the steps' error texts, never content (no bodies, no
payloads, no purge's actor or reason). Purges that need attention (incomplete, or stalled) come
first, marked with a CSS class and a word; then the newest purges, each named by its label
(``PurgeStatus.label``: "retention purge (policy p1)", never who was erased). Then retention and
legal holds: the first 100 standing policies and holds in force (how many conversations and
authors each hold covers: never an author's name, nor who placed it) and the totals
``/metrics`` shows too. The page reloads itself every few seconds
(``<meta http-equiv="refresh">``).

Sign-in takes the operator token (``Tokens.operator_allows``), as ``Authorization: Bearer`` or
through the form at ``POST /status/login``, which sets the session cookie:

- the value is ``<expiry>.<HMAC-SHA256 keyed by the token, of the expiry>``: never the token,
  and it cannot be turned back into one;
- it is HttpOnly, SameSite=Strict, limited to ``/status``, Secure when served over https, and
  expires after ``session_ttl``;
- it stays valid across restarts and API processes, and dies when the token changes or it
  expires. ``POST /status/logout`` clears it from the browser; a copy taken before then lasts
  until its expiry, so rotate the token to end every session at once.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import time
from collections.abc import Iterable
from dataclasses import dataclass
from html import escape
from typing import Annotated

from fastapi import APIRouter, Form, Header, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from commands.handle import Purgekeeper
from commands.records import HoldCount, PurgeStatus, RetentionPolicy, StepState
from commands.surface import error_body, http_status, plain
from commands.web import metrics
from commands.web.auth import COOKIE_NAME, Tokens, bearer
from schema import overview
from schema.errors import NotFound, PurgekeeperError
from schema.states import StepStatus
from schema.steps import PARKED_UNTIL

RECENT_PURGES = 50
REFRESH_SECONDS = 5
SESSION_TTL = dt.timedelta(hours=12)
SESSION_CONTEXT = "purgekeeper /status session v1"
ATTENTION = ("incomplete", "stalled")

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1d1d1f; }
h1 { font-size: 1.4rem; margin: 0; } h2 { font-size: 1.1rem; margin-top: 1.5rem; }
header { display: flex; justify-content: space-between; align-items: center; }
table { border-collapse: collapse; margin: .4rem 0; } th, td { border: 1px solid #ccc; padding: .2rem .5rem; }
th { background: #f3f3f3; text-align: left; } code { font-size: .9em; }
.purge { border: 1px solid #ccc; border-radius: 4px; padding: .5rem .8rem; margin: .6rem 0; }
.purge h3 { font-size: 1rem; margin: 0 0 .3rem; }
.purge.incomplete { border: 2px solid #b00020; background: #fff4f4; }
.purge.stalled { border: 2px solid #b36b00; background: #fffaf0; }
.badge { font-weight: bold; padding: 0 .4rem; border-radius: 3px; color: #fff; background: #555; }
.badge.incomplete, .bad { background: #b00020; color: #fff; } .badge.stalled { background: #b36b00; }
.ok { color: #0a6b2d; font-weight: bold; } .bad { padding: 0 .3rem; font-weight: bold; }
.error-text { font-family: monospace; white-space: pre-wrap; overflow-wrap: anywhere; color: #b00020; }
td:last-child { max-width: 40rem; }
.login-error { color: #b00020; font-weight: bold; }
"""
CSP = (
    "default-src 'none'; "
    f"style-src 'sha256-{base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()}'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


# -- the session cookie ---------------------------------------------------------------------------


def _operator_token(tokens: Tokens) -> str:
    """The token ``Tokens.operator_allows`` accepts: the operator's, or else the host's."""
    return tokens.operator if tokens.operator is not None else tokens.api


def _mac(token: str, expires: int) -> str:
    message = f"{SESSION_CONTEXT}:{expires}".encode()
    return hmac.new(token.encode("utf-8"), message, hashlib.sha256).hexdigest()


def session_value(token: str, *, expires: int) -> str:
    return f"{expires}.{_mac(token, expires)}"


MAX_EXPIRY_DIGITS = 18  # an expiry in Unix seconds; longer is no expiry this code wrote


def session_valid(value: str | None, token: str, *, now: float) -> bool:
    """Any value at all gives True or False, never an error (a cookie is the client's)."""
    if not value or not token:
        return False
    expiry, _, mac = value.partition(".")
    if not (expiry.isascii() and expiry.isdigit()) or len(expiry) > MAX_EXPIRY_DIGITS or int(expiry) <= now:
        return False
    return hmac.compare_digest(mac.encode(), _mac(token, int(expiry)).encode())


# -- what the page shows --------------------------------------------------------------------------


@dataclass(frozen=True)
class View:
    snapshot: metrics.Snapshot
    attention: tuple[PurgeStatus, ...]  # incomplete and stalled purges, newest first
    recent: tuple[PurgeStatus, ...]  # the newest purges, without those above
    policies: tuple[RetentionPolicy, ...]  # the standing retention policies, the first LISTED of them
    holds: tuple[HoldCount, ...]  # the legal holds in force, the first LISTED of them, in counts


def needs_attention(purge: PurgeStatus) -> bool:
    return purge.status == "incomplete" or purge.stalled


def gather(pk: Purgekeeper, check: metrics.LedgerCheck, *, recent: int) -> View:
    snapshot = metrics.take_snapshot(pk, check)
    newest = pk.list_purges(limit=recent).purges
    incomplete = pk.list_purges("incomplete", limit=recent).purges
    with pk.db.read() as conn:
        stalled_ids = overview.stalled_purge_ids(conn, snapshot.now, pk.stall_after, limit=recent)
    known = {p.purge_id: p for p in (*newest, *incomplete)}
    stalled = [known.get(purge_id) or _status_or_none(pk, purge_id) for purge_id in stalled_ids]
    flagged = {p.purge_id: p for p in (*incomplete, *stalled, *newest) if p is not None and needs_attention(p)}
    attention = sorted(flagged.values(), key=lambda p: p.ledger_seq, reverse=True)
    rest = tuple(p for p in newest if p.purge_id not in flagged)
    policies, holds = tuple(pk.list_retention()[:LISTED]), tuple(pk.count_holds(limit=LISTED))
    return View(snapshot=snapshot, attention=tuple(attention), recent=rest, policies=policies, holds=holds)


def _status_or_none(pk: Purgekeeper, purge_id: str) -> PurgeStatus | None:
    """A step whose ledger row is missing (a damaged database) is the ledger check's to report."""
    try:
        return pk.status(purge_id)
    except NotFound:
        return None


# -- HTML -----------------------------------------------------------------------------------------


def _text(value: object) -> str:
    return escape(str(value), quote=True)


def _when(moment: dt.datetime) -> str:
    return _text(plain(moment))


def document(title: str, body: str, *, refresh: bool) -> str:
    meta = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">' if refresh else ""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">{meta}'
        f"<title>{_text(title)}</title><style>{STYLE}</style></head>\n<body>{body}</body></html>\n"
    )


def render_login(action: str, *, error: str | None) -> str:
    alert = f'<p class="login-error" role="alert">{_text(error)}</p>' if error else ""
    form = (
        f'<form method="post" action="{_text(action)}">'
        '<label for="token">Operator token</label> '
        '<input id="token" type="password" name="token" autocomplete="current-password" required autofocus> '
        '<button type="submit">Sign in</button></form>'
    )
    return document("purgekeeper status: sign in", f"<h1>purgekeeper status</h1>{alert}{form}", refresh=False)


def render_page(view: View, *, logout_action: str) -> str:
    logout = f'<form method="post" action="{_text(logout_action)}"><button type="submit">Sign out</button></form>'
    header = f"<header><h1>purgekeeper status</h1>{logout}</header>"
    attention = "".join(render_purge(p) for p in view.attention) or "<p>Nothing needs attention.</p>"
    recent = "".join(render_purge(p) for p in view.recent) or "<p>No other purges.</p>"
    body = (
        f"{header}{render_summary(view.snapshot)}"
        f'<section id="attention"><h2>Needs attention</h2>{attention}</section>'
        f'<section id="recent"><h2>Recent purges</h2>{recent}</section>'
        f"{render_retention(view)}"
    )
    return document("purgekeeper status", body, refresh=True)


def _flag(ok: bool, good: str, bad: str, name: str) -> str:
    css = "ok" if ok else "bad"
    return f'<span id="{name}" class="{css}">{_text(good if ok else bad)}</span>'


def render_summary(snap: metrics.Snapshot) -> str:
    problems = "".join(f"<li>{_text(problem)}</li>" for problem in snap.ledger.problems)
    closed = "".join(f"<li>{_text(problem)}</li>" for problem in snap.gate_problems)
    gate = f'<ul id="messaging-problems">{closed}</ul>' if closed else ""
    rows = [
        ("As of", _when(snap.now)),
        (
            "Ledger head",
            f'seq <span id="ledger-seq">{snap.ledger_seq}</span>, '
            f'hash <code id="ledger-head">{_text(snap.head_hash)}</code>',
        ),
        (
            "Ledger verifies",
            _flag(snap.ledger.ok, "yes", "NO", "ledger-verified")
            + (f'<ul id="ledger-problems">{problems}</ul>' if problems else ""),
        ),
        ("Messaging", _flag(snap.messaging_available, "available", "UNAVAILABLE", "messaging") + gate),
        (
            "Checkpoint directory",
            _flag(
                snap.checkpoint_problem is None,
                "writable",
                f"the checkpoint directory cannot be written: {snap.checkpoint_problem}",
                "checkpoint-dir",
            ),
        ),
        ("Incomplete purges", f'<span id="incomplete-count">{snap.incomplete_purges}</span>'),
        ("Stalled purges", f'<span id="stalled-count">{snap.stalled_purges}</span>'),
        ("Oldest due step waits", f"{snap.oldest_due_age.total_seconds():.0f} s"),
    ]
    summary = "".join(f"<tr><th>{_text(name)}</th><td>{cell}</td></tr>" for name, cell in rows)
    return f'<section id="summary"><table>{summary}</table>{render_step_counts(snap)}</section>'


def render_step_counts(snap: metrics.Snapshot) -> str:
    kinds = sorted({kind for _status, kind in snap.steps})
    head = "".join(f"<th>{_text(kind)}</th>" for kind in kinds)
    body = "".join(
        f"<tr><th>{_text(status.value)}</th>"
        + "".join(f"<td>{snap.steps[(status.value, kind)].steps}</td>" for kind in kinds)
        + "</tr>"
        for status in StepStatus
    )
    return f'<table id="step-counts"><tr><th>steps</th>{head}</tr>{body}</table>'


def render_purge(purge: PurgeStatus) -> str:
    marks = [mark for mark, on in zip(ATTENTION, (purge.status == "incomplete", purge.stalled), strict=True) if on]
    badges = "".join(f' <span class="badge {mark}">{mark.upper()}</span>' for mark in marks)
    classes = " ".join(["purge", *marks])
    return (
        f'<article class="{classes}" id="purge-{_text(purge.purge_id)}" data-status="{_text(purge.status)}">'
        f"<h3><code>{_text(purge.purge_id)}</code> {_text(purge.status)}{badges}</h3>"
        f"<p>{_text(purge.label or f'{purge.kind} purge')}, ledger seq {purge.ledger_seq}, "
        f"accepted {_when(purge.accepted_at)}</p>"
        f"{render_steps(purge.steps)}</article>"
    )


STEP_COLUMNS = (
    "step",
    "status",
    "attempts",
    "removed",
    "retained shared",
    "held",
    "remaining",
    "next attempt",
    "last error",
)


def render_steps(steps: Iterable[StepState]) -> str:
    rows = "".join(render_step(step) for step in steps)
    if not rows:
        return "<p>No cleanup steps.</p>"
    head = "".join(f"<th>{_text(name)}</th>" for name in STEP_COLUMNS)
    return f'<table class="steps"><tr>{head}</tr>{rows}</table>'


def render_step(step: StepState) -> str:
    progress = step.progress
    reasons = ", ".join(f"{reason}: {_count(detail)}" for reason, detail in sorted(progress.retained_reasons.items()))
    retained = f"{progress.retained_shared}" + (f" ({reasons})" if reasons else "")
    remaining = "" if progress.remaining is None else str(progress.remaining)
    error = f'<span class="error-text">{_text(step.last_error)}</span>' if step.last_error else ""
    cells = (
        step.kind,
        step.status,
        f"{step.attempts}/{step.max_attempts}",
        str(progress.removed),
        retained,
        str(progress.held),
        remaining,
        _next_attempt(step),
    )
    tds = "".join(f"<td>{_text(cell)}</td>" for cell in cells)
    return f'<tr class="step {_text(step.status)}" data-kind="{_text(step.kind)}">{tds}<td>{error}</td></tr>'


def _count(detail: object) -> object:
    return detail.get("count", "?") if isinstance(detail, dict) else detail


def _next_attempt(step: StepState) -> str:
    if step.status in (StepStatus.DONE, StepStatus.INCOMPLETE):
        return ""
    if step.next_attempt_at >= PARKED_UNTIL:
        return "after the bodies step"
    return str(plain(step.next_attempt_at))


def render_retention(view: View) -> str:
    summary = view.snapshot.retention_summary
    totals = [
        ("Standing policies", "retention-policies-count", summary.policies),
        ("Retention runs", "retention-runs", summary.runs),
        ("Events expired", "retention-expired", summary.expired),
        ("Events kept by holds", "retention-held", summary.held),
        ("Holds in force", "legal-holds-count", summary.holds),
        ("Runs still cleaning up", "retention-fences", summary.fences),
    ]
    rows = "".join(f'<tr><th>{_text(name)}</th><td id="{css}">{value}</td></tr>' for name, css, value in totals)
    return (
        f'<section id="retention"><h2>Retention and holds</h2><table id="retention-summary">{rows}</table>'
        f"<h3>Retention policies</h3>{render_policies(view.policies)}"
        f"<h3>Legal holds in force</h3>{render_holds(view.holds)}</section>"
    )


POLICY_COLUMNS = ("policy", "scope", "max age", "last run", "next run", "last run's purge")
HOLD_COLUMNS = ("hold", "conversations", "authors", "placed at")
LISTED = 100  # policies and holds listed; the summary counts them all


def render_policies(policies: Iterable[RetentionPolicy]) -> str:
    rows = "".join(render_policy(policy) for policy in policies)
    return _table("retention-policies", POLICY_COLUMNS, rows) if rows else "<p>No retention policies.</p>"


def render_policy(policy: RetentionPolicy) -> str:
    scope = f"conversation {policy.conversation_id}" if policy.conversation_id else "every conversation"
    cells = (
        f"<code>{_text(policy.policy_id)}</code>",
        _text(scope),
        _text(_age(policy.max_age)),
        _maybe_when(policy.last_run),
        _maybe_when(policy.next_run),
        f"<code>{_text(policy.last_purge_id)}</code>" if policy.last_purge_id else "",
    )
    tds = "".join(f"<td>{cell}</td>" for cell in cells)
    return f'<tr class="policy" data-policy="{_text(policy.policy_id)}">{tds}</tr>'


def render_holds(holds: Iterable[HoldCount]) -> str:
    rows = "".join(render_hold(hold) for hold in holds)
    return _table("legal-holds", HOLD_COLUMNS, rows) if rows else "<p>No legal holds in force.</p>"


def render_hold(hold: HoldCount) -> str:
    """How many conversations and authors the hold covers: an author's name never reaches the
    page, nor (as for purges) who placed it."""
    cells = (
        f"<code>{_text(hold.hold_id)}</code>",
        str(hold.conversations),
        str(hold.authors),
        _maybe_when(hold.placed_at),
    )
    tds = "".join(f"<td>{cell}</td>" for cell in cells)
    return f'<tr class="hold" data-hold="{_text(hold.hold_id)}">{tds}</tr>'


def _table(css_id: str, columns: Iterable[str], rows: str) -> str:
    head = "".join(f"<th>{_text(name)}</th>" for name in columns)
    return f'<table id="{css_id}"><tr>{head}</tr>{rows}</table>'


def _maybe_when(moment: dt.datetime | None) -> str:
    return _when(moment) if moment is not None else ""


AGE_UNITS = (("day", 86_400), ("hour", 3_600), ("minute", 60), ("second", 1))


def _age(max_age: dt.timedelta) -> str:
    """A policy's max age in its largest whole unit: 30 days, 12 hours."""
    seconds = int(max_age.total_seconds())
    name, size = next((name, size) for name, size in AGE_UNITS if seconds % size == 0)
    count = seconds // size
    return f"{count} {name}" + ("" if count == 1 else "s")


# -- the routes -----------------------------------------------------------------------------------


def html(body: str, status_code: int = 200, *, headers: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(body, status_code=status_code, headers={**SECURITY_HEADERS, **(headers or {})})


def router(
    pk: Purgekeeper,
    tokens: Tokens,
    *,
    recent: int = RECENT_PURGES,
    session_ttl: dt.timedelta = SESSION_TTL,
) -> APIRouter:
    """``GET /status`` (the page, or the sign-in form with 401), ``POST /status/login`` (form
    field ``token``) and ``POST /status/logout``."""
    check = metrics.LedgerCheck(pk)
    api = APIRouter()

    def signed_in(request: Request, authorization: str | None) -> bool:
        presented = bearer(authorization)
        if presented is not None:
            return tokens.operator_allows(presented)
        cookie = request.cookies.get(COOKIE_NAME)
        return session_valid(cookie, _operator_token(tokens), now=time.time())

    def login_form(request: Request, *, error: str | None) -> HTMLResponse:
        page = render_login(_path(request, "/status/login"), error=error)
        return html(page, 401, headers={"WWW-Authenticate": 'Bearer realm="purgekeeper"'})

    @api.get("/status", include_in_schema=False)
    def status_page(request: Request, authorization: Annotated[str | None, Header()] = None) -> Response:
        if not signed_in(request, authorization):
            return login_form(request, error=None)
        try:
            view = gather(pk, check, recent=recent)
        except PurgekeeperError as exc:
            return html(render_unavailable(exc), http_status(exc))
        return html(render_page(view, logout_action=_path(request, "/status/logout")))

    @api.post("/status/login", include_in_schema=False)
    def login(request: Request, token: Annotated[str, Form()] = "") -> Response:
        if not tokens.operator_allows(token):
            return login_form(request, error="That token is not valid.")
        expires = int(time.time() + session_ttl.total_seconds())
        response = RedirectResponse(_path(request, "/status"), status_code=303, headers=SECURITY_HEADERS)
        response.set_cookie(
            COOKIE_NAME,
            session_value(token, expires=expires),
            max_age=int(session_ttl.total_seconds()),
            path=_path(request, "/status"),
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response

    @api.post("/status/logout", include_in_schema=False)
    def logout(request: Request) -> Response:
        response = RedirectResponse(_path(request, "/status"), status_code=303, headers=SECURITY_HEADERS)
        response.delete_cookie(
            COOKIE_NAME,
            path=_path(request, "/status"),
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response

    return api


def _path(request: Request, path: str) -> str:
    """``path`` under the app's mount point (``root_path``, behind a proxy)."""
    return str(request.scope.get("root_path", "")).rstrip("/") + path


def render_unavailable(error: PurgekeeperError) -> str:
    body = error_body(error)
    text = f'<h1>purgekeeper status</h1><p class="bad">{_text(body["error"])}: {_text(body["detail"])}</p>'
    return document("purgekeeper status: unavailable", text, refresh=True)
