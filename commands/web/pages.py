"""The console's HTML: Jinja2 templates in ``templates/``, autoescaped, and the headers every
page carries.

Every value a page shows goes through autoescaping: an error text, a label or an operator's
reason is text, never markup. The one stylesheet is inlined and allowed by its SHA-256 in the
Content-Security-Policy; no script runs (the refresh is a ``<meta>`` tag, and pausing it is a
link to the same page without one).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import re
from pathlib import Path
from typing import Any

import jinja2
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from purgekeeper.commands.web import times

TEMPLATES = Path(__file__).parent / "templates"
REFRESH_SECONDS = 5
STYLE = (TEMPLATES / "console.css").read_text("utf-8")
STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode("utf-8")).digest()).decode()
CSP = (
    f"default-src 'none'; style-src 'sha256-{STYLE_HASH}'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
AGE_UNITS = (("day", 86_400), ("hour", 3_600), ("minute", 60), ("second", 1))
ERROR_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,39})(?::|$)")


def policy_age(max_age: dt.timedelta) -> str:
    """A retention policy's max age in its largest whole unit: 30 days, 12 hours."""
    seconds = int(max_age.total_seconds())
    name, size = next((name, size) for name, size in AGE_UNITS if seconds % size == 0)
    count = seconds // size
    return f"{count} {name}" + ("" if count == 1 else "s")


def error_name(error: str) -> str:
    """What kind of error a step's text is, for its steps-table cell: the exception's name it
    begins with ("IsADirectoryError"), else "error"; the whole text has a row of its own."""
    named = ERROR_NAME.match(error)
    return named.group(1) if named else "error"


def retained_count(detail: object) -> object:
    """A retained-shared reason's count (older rows kept a bare number)."""
    return detail.get("count", "?") if isinstance(detail, dict) else detail


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters |= {
        "utc": times.utc,
        "span": times.span,
        "policy_age": policy_age,
        "retained": retained_count,
        "error_name": error_name,
    }
    env.globals |= {
        "relative": times.relative,
        "due": times.due,
        "style": Markup(STYLE),
        "refresh_seconds": REFRESH_SECONDS,
    }
    return env


ENVIRONMENT = _environment()


def render(template: str, **context: Any) -> str:
    return ENVIRONMENT.get_template(template).render(**context)


def respond(
    template: str, status_code: int = 200, *, headers: dict[str, str] | None = None, **context: Any
) -> HTMLResponse:
    """A rendered page with the security headers."""
    return HTMLResponse(
        render(template, **context), status_code=status_code, headers={**SECURITY_HEADERS, **(headers or {})}
    )
