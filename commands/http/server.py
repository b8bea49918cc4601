"""``purgectl serve``: the HTTP API, ``/status`` and ``/metrics`` in one uvicorn process.

- purgekeeper is opened from the settings with ``workers="auto"``: without a broker URL the
  process also runs the in-process worker and scheduler (the embedded default).
- Tokens: ``PURGEKEEPER_API_TOKEN`` when set. Otherwise the host token is kept in
  ``<data dir>/api-token`` (created on first use, mode 0600) and the server binds to the
  loopback interface only, whatever host was asked for: an API whose token sits in a file
  is for this machine. The token itself is never printed, only where it is.
- ``--demo`` seeds a small world (``commands.http.demo.seed_demo``), idempotently: an
  operator's day, with one complete purge, one retrying and one incomplete.
- SIGTERM and SIGINT stop uvicorn gracefully (in-flight requests finish), then purgekeeper
  is closed and ``serve`` returns.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

import uvicorn

import commands
from commands import logs
from commands.handle import Purgekeeper
from commands.http import create_app
from commands.http.demo import DEMO_BOT, DEMO_PURGED_EVENT, no_wakeup, purges_text, seed_demo
from commands.settings import Settings
from commands.web.auth import Tokens, load_or_create_token
from workers import runner

__all__ = [  # DEMO_BOT, DEMO_PURGED_EVENT and seed_demo live in commands.http.demo
    "DEFAULT_PORT",
    "DEMO_BOT",
    "DEMO_PURGED_EVENT",
    "LOOPBACK",
    "LOOPBACK_NAMES",
    "Echo",
    "open_for_serving",
    "resolve_access",
    "seed_demo",
    "serve",
]

LOOPBACK = "127.0.0.1"
LOOPBACK_NAMES = frozenset({LOOPBACK, "localhost", "::1"})
DEFAULT_PORT = 8080


Echo = Callable[[str], object]


def serve(
    settings: Settings,
    *,
    host: str | None = None,
    port: int = DEFAULT_PORT,
    demo: bool = False,
    echo: Echo = print,
) -> None:
    """Serve until SIGTERM or SIGINT; purgekeeper is closed on the way out. ``demo`` seeds
    first, on a handle of its own that wakes no worker, so the seeding's attempts are the
    only ones until the server starts."""
    tokens, bind = resolve_access(settings, host, echo)
    if demo:
        with commands.open(settings=settings, workers="none", enqueue=no_wakeup) as seeding:
            summary = seed_demo(seeding, settings)
        echo(f"demo data ready: {summary['conversations']} conversations; {purges_text(summary['purges'])}")
    pk = open_for_serving(settings)
    try:
        server = uvicorn.Server(
            uvicorn.Config(create_app(pk, tokens=tokens), host=bind, port=port, **logs.uvicorn_options())
        )
        echo(f"purgekeeper serving on {_url(bind, port)} (API under /v1, /status, /metrics, /openapi.json)")
        with _quiet_signals():
            server.run()
    finally:
        pk.close()


def resolve_access(settings: Settings, host: str | None, echo: Echo) -> tuple[Tokens, str]:
    """The tokens and the interface to bind: a generated token confines the API to loopback."""
    if settings.api_token:
        echo("host token: PURGEKEEPER_API_TOKEN")
        return Tokens(settings.api_token, settings.operator_token), host or LOOPBACK
    token, path, created = load_or_create_token(settings.data_dir)
    echo(f"host token: {'created in' if created else 'read from'} {path} (send it as 'Authorization: Bearer <token>')")
    if host is not None and host not in LOOPBACK_NAMES:
        echo(f"note: PURGEKEEPER_API_TOKEN is not set, so the API binds to {LOOPBACK} only, not {host}")
        host = None
    return Tokens(token, settings.operator_token), host or LOOPBACK


def open_for_serving(settings: Settings) -> Purgekeeper:
    return commands.open(
        settings=settings,
        workers="auto",
        policy=runner.Policy(lease=settings.step_lease, backoff_base=settings.backoff_base),
        sweep_interval=settings.sweep_interval,
    )


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


@contextmanager
def _quiet_signals() -> Iterator[None]:
    """uvicorn re-raises the signal that stopped it once it has shut down; with the default
    handlers that would kill the process before purgekeeper is closed. While serving, they do
    nothing instead, and the old handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def ignore(signum: int, frame: FrameType | None) -> None:
        """uvicorn already shut down gracefully."""

    previous = {sig: signal.signal(sig, ignore) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
