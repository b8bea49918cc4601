"""``purgectl serve``: the HTTP API, ``/status`` and ``/metrics`` in one uvicorn process.

- purgekeeper is opened from the settings with ``workers="auto"``: without a broker URL the
  process also runs the in-process worker and scheduler (the embedded default).
- Tokens: ``PURGEKEEPER_API_TOKEN`` when set. Otherwise the host token is kept in
  ``<data dir>/api-token`` (created on first use, mode 0600) and the server binds to the
  loopback interface only, whatever host was asked for: an API whose token sits in a file
  is for this machine. The token itself is never printed, only where it is.
- ``--demo`` seeds a small world (``purgekeeper.commands.http.demo.seed_demo``), idempotently: an
  operator's day, with one complete purge, one retrying and one incomplete.
- The port is bound before anything is seeded, opened or announced: a port in use (or one
  that cannot be bound) is an ``InfrastructureError`` naming the port and how to pick
  another (``--port``; ``make run SERVE_FLAGS="--port N"``), exit 4 as documented, and
  "serving on" is printed only once the socket is bound. uvicorn serves on that socket.
- SIGTERM and SIGINT stop uvicorn gracefully (in-flight requests get ``REQUEST_GRACE`` to
  finish, then are cancelled), then purgekeeper is closed, which winds the in-process
  worker's attempts down (each ends at a safe point and gives its step back) and marks the
  process stopped, and ``serve`` returns. A repeated signal is ignored; the process exits
  within ``STOP_BOUND`` of the first one, or its watchdog ends it
  (``purgekeeper.workers.shutdown``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import uvicorn

import purgekeeper
from purgekeeper.commands import logs, wiring
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.http import create_app
from purgekeeper.commands.http.demo import DEMO_BOT, DEMO_PURGED_EVENT, no_wakeup, purges_text, seed_demo
from purgekeeper.commands.serving import BoundServer, bind_listener, quiet_signals, url_of
from purgekeeper.commands.settings import Settings
from purgekeeper.commands.web.auth import Tokens, load_or_create_token
from purgekeeper.workers import runner
from purgekeeper.workers.shutdown import Watchdog

__all__ = [  # DEMO_BOT, DEMO_PURGED_EVENT and seed_demo live in purgekeeper.commands.http.demo
    "DEFAULT_PORT",
    "DEMO_BOT",
    "DEMO_PURGED_EVENT",
    "LOOPBACK",
    "LOOPBACK_NAMES",
    "Echo",
    "bind_listener",
    "open_for_serving",
    "resolve_access",
    "seed_demo",
    "serve",
]

LOOPBACK = "127.0.0.1"
LOOPBACK_NAMES = frozenset({LOOPBACK, "localhost", "::1"})
DEFAULT_PORT = 8080
# After a SIGTERM, the requests in flight get this long to finish (a purge's wait polls for
# up to 30 s: its caller asks again, elsewhere); then uvicorn cancels them, and purgekeeper is
# closed, all within purgekeeper.workers.shutdown.STOP_BOUND.
REQUEST_GRACE = dt.timedelta(seconds=3)


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
    with bind_listener(bind, port) as listener:
        if demo:
            with purgekeeper.open(settings=settings, workers="none", enqueue=no_wakeup) as seeding:
                summary = seed_demo(seeding, settings)
            echo(f"demo data ready: {summary['conversations']} conversations; {purges_text(summary['purges'])}")
        pk = open_for_serving(settings)
        watchdog = Watchdog()
        with quiet_signals(watchdog):  # until purgekeeper is closed: a repeated SIGTERM is ignored
            try:
                config = uvicorn.Config(
                    create_app(pk, tokens=tokens),
                    host=bind,
                    port=port,
                    timeout_graceful_shutdown=int(REQUEST_GRACE.total_seconds()),
                    **logs.uvicorn_options(),
                )
                server = BoundServer(config, watchdog, on_exit=lambda: wiring.stop_soon(pk.database_key))
                echo(f"purgekeeper serving on {url_of(bind, port)} (API under /v1, /status, /metrics, /openapi.json)")
                server.run(sockets=[listener])
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
    return purgekeeper.open(
        settings=settings,
        workers="auto",
        policy=runner.Policy(lease=settings.step_lease, backoff_base=settings.backoff_base),
        sweep_interval=settings.sweep_interval,
    )
