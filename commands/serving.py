"""Serving an ASGI app with uvicorn, as ``purgectl serve`` and ``purgectl witness serve`` do:
on a socket bound first (a port that cannot be bound is an ``InfrastructureError`` naming it,
before anything is opened or announced), stopped by SIGTERM or SIGINT, which arm the
process's watchdog (``purgekeeper.workers.shutdown``), and with the signal uvicorn raises
again once it has shut down kept from killing the process before it exits cleanly.
"""

from __future__ import annotations

import errno
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

import uvicorn

from purgekeeper.schema.errors import InfrastructureError
from purgekeeper.workers.shutdown import Watchdog

__all__ = ["SERVE_COMMAND", "BoundServer", "bind_listener", "quiet_signals", "url_of"]

SERVE_COMMAND = "purgectl serve"


class BoundServer(uvicorn.Server):
    """uvicorn on a socket bound beforehand logs no "Uvicorn running on" (it expects a
    supervisor to have done so); this one logs it as uvicorn does when it binds itself, so the
    readiness line that logs and process supervisors wait for is the same either way. The
    signal that stops it arms the process's watchdog and runs ``on_exit``."""

    def __init__(
        self, config: uvicorn.Config, watchdog: Watchdog, *, on_exit: Callable[[], object] = lambda: None
    ) -> None:
        super().__init__(config)
        self.watchdog = watchdog
        self.on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.watchdog.arm()
        self.on_exit()
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if sockets is not None and self.started:
            self._log_started_message(sockets)


@contextmanager
def bind_listener(host: str, port: int, *, command: str = SERVE_COMMAND) -> Iterator[socket.socket]:
    """The listening socket on ``host:port``, closed when the block ends; a port that cannot be
    bound is an ``InfrastructureError`` (exit 4) that says which and what to do (``command``:
    the command to run again with another port). SO_REUSEADDR (as uvicorn sets it) lets a
    restart reuse a port left in TIME_WAIT, never one in use."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise InfrastructureError(f"cannot listen on {host}: the host name does not resolve ({exc.strerror})") from None
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(2048)
    except OSError as exc:
        listener.close()
        raise InfrastructureError(_bind_failure(host, port, exc, command)) from None
    try:
        yield listener
    finally:
        listener.close()


def _bind_failure(host: str, port: int, exc: OSError, command: str) -> str:
    other = port + 1 if port < 65535 else port - 1
    fix = f"serve on another port: {command} --port {other}"
    if command == SERVE_COMMAND:
        fix += f', or make run SERVE_FLAGS="--port {other}"'
    if exc.errno == errno.EADDRINUSE:
        return f"port {port} on {host} is already in use (another process listens on it); {fix}"
    if exc.errno == errno.EACCES:
        return f"port {port} on {host} needs privileges this process lacks; {fix}"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {host}: it is not an address of this machine; choose another with --host"
    return f"cannot listen on port {port} on {host} ({exc.strerror or type(exc).__name__}); {fix}"


def url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


@contextmanager
def quiet_signals(watchdog: Watchdog) -> Iterator[None]:
    """uvicorn re-raises the signal that stopped it once it has shut down; with the default
    handlers that would kill the process before it is closed. While serving and closing, they
    only arm the watchdog (uvicorn's own handler did, or the process is closing already), and
    the old handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def ignore(signum: int, frame: FrameType | None) -> None:
        """uvicorn already shut down gracefully, or the process is closing."""
        watchdog.arm()

    previous = {sig: signal.signal(sig, ignore) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
