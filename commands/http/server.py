"""``purgectl serve``: the HTTP API, ``/status`` and ``/metrics`` in one uvicorn process.

- purgekeeper is opened from the settings with ``workers="auto"``: without a broker URL the
  process also runs the in-process worker and scheduler (the embedded default).
- Tokens: ``PURGEKEEPER_API_TOKEN`` when set. Otherwise the host token is kept in
  ``<data dir>/api-token`` (created on first use, mode 0600) and the server binds to the
  loopback interface only, whatever host was asked for: an API whose token sits in a file
  is for this machine. The token itself is never printed, only where it is.
- ``--demo`` seeds a small world (``seed_demo``), idempotently.
- SIGTERM and SIGINT stop uvicorn gracefully (in-flight requests finish), then purgekeeper
  is closed and ``serve`` returns.
"""

from __future__ import annotations

import functools
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

import commands
from commands.handle import Purgekeeper
from commands.http import create_app
from commands.scope import EventScope
from commands.settings import Settings
from commands.web.auth import Tokens, load_or_create_token
from schema.errors import Fenced, NotFound
from workers import runner

LOOPBACK = "127.0.0.1"
LOOPBACK_NAMES = frozenset({LOOPBACK, "localhost", "::1"})
DEFAULT_PORT = 8080

DEMO_BOT = "demo-bot"
DEMO_CONVERSATION = "demo-welcome"
DEMO_CHANNEL = "demo-announcements"
DEMO_PURGED_EVENT = "demo-welcome-3"
DEMO_PURGE_KEY = "demo-purge-welcome-3"
DEMO_EVENTS: tuple[tuple[str, str, str, str], ...] = (
    # (conversation, event id, author, body); provider ids are "demo:<event id>"
    (DEMO_CONVERSATION, "demo-welcome-1", "ada", "Hello! Can you summarise the design doc?"),
    (DEMO_CONVERSATION, "demo-welcome-2", "demo-bot", "Sure: previews, confirmation, a ledger, then cleanup."),
    (DEMO_CONVERSATION, DEMO_PURGED_EVENT, "ada", "Oops, here is my home address: 1 Example Lane."),
    (DEMO_CHANNEL, "demo-announcements-1", "grace", "Release notes are attached."),
)

Echo = Callable[[str], object]


def serve(
    settings: Settings,
    *,
    host: str | None = None,
    port: int = DEFAULT_PORT,
    demo: bool = False,
    echo: Echo = print,
) -> None:
    """Serve until SIGTERM or SIGINT; purgekeeper is closed on the way out."""
    tokens, bind = resolve_access(settings, host, echo)
    pk = open_for_serving(settings)
    try:
        if demo:
            summary = seed_demo(pk, settings)
            echo(f"demo data ready: {summary['conversations']} conversations, purge {summary['purge_id']}")
        server = uvicorn.Server(uvicorn.Config(create_app(pk, tokens=tokens), host=bind, port=port, log_level="info"))
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
        settings.database_url,
        blob_root=settings.blob_root,
        file_root=settings.file_root,
        memory_roots=settings.memory_roots,
        checkpoint_dir=settings.checkpoint_dir,
        broker_url=settings.broker_url,
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


# -- the demo world -------------------------------------------------------------------------


def seed_demo(pk: Purgekeeper, settings: Settings) -> dict[str, Any]:
    """A bot with a Memory repository, a conversation and a channel with events (one placed in
    both, two with attachments), and one confirmed purge. Running it again changes nothing:
    every step is idempotent (identical creates, provider event ids, the purge's idempotency
    key), and a step whose target was purged or deleted since (through the API, say) is
    skipped, because purged content never comes back."""
    _demo_bot(pk, settings)
    _unless_fenced(lambda: pk.create_conversation(DEMO_CONVERSATION, bot_id=DEMO_BOT))
    _unless_fenced(lambda: pk.create_conversation(DEMO_CHANNEL, kind="channel"))
    for conversation_id, event_id, author, body in DEMO_EVENTS:
        _unless_fenced(functools.partial(_demo_event, pk, conversation_id, event_id, author, body))
    _unless_fenced(lambda: pk.place_event("demo-welcome-1", DEMO_CHANNEL))
    return {
        "conversations": len(pk.list_conversations()),
        "bot_id": DEMO_BOT,
        "purge_id": _demo_purge(pk),
    }


def _demo_bot(pk: Purgekeeper, settings: Settings) -> None:
    try:
        pk.preview_bot_deletion(DEMO_BOT)
        return  # registered by an earlier run (and perhaps deleted since)
    except NotFound:
        pass
    pk.register_bot(DEMO_BOT, name="Demo helper", memory_path=_demo_repository(settings.memory_roots[0]))


def _demo_repository(memory_root: Path) -> Path | None:
    """A real Git working tree under the first Memory root; None when git is not installed."""
    repository = memory_root / DEMO_BOT
    repository.mkdir(parents=True, exist_ok=True)
    if not (repository / ".git").is_dir():
        try:
            subprocess.run(["git", "init", "-q", str(repository)], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError):
            return None
    notes = repository / "MEMORY.md"
    if not notes.exists():
        notes.write_text("# Demo helper\n\nThe bot's notes live here.\n", encoding="utf-8")
    return repository


def _demo_event(pk: Purgekeeper, conversation_id: str, event_id: str, author: str, body: str) -> None:
    attachments = []
    if event_id == DEMO_PURGED_EVENT:
        attachments = [commands.NewAttachment.file(b"1 Example Lane\n", name="address.txt")]
    elif event_id == "demo-announcements-1":
        attachments = [commands.NewAttachment.cas(b"Release 1.0\n", name="release-notes.txt")]
    pk.ingest_event(
        conversation_id,
        author=author,
        body=body,
        event_id=event_id,
        provider_event_id=f"demo:{event_id}",
        attachments=attachments,
    )


def _demo_purge(pk: Purgekeeper) -> str | None:
    """The confirmed purge of the message with the address; a repeat replays its acceptance."""
    try:
        preview = pk.preview_purge(EventScope(event_ids=(DEMO_PURGED_EVENT,)))
    except (NotFound, Fenced):
        return None  # the whole conversation was purged since
    acceptance = pk.confirm_purge(
        preview.scope,
        scope_digest=preview.scope_digest,
        actor="demo",
        reason="the demo purges a message that shared a home address",
        idempotency_key=DEMO_PURGE_KEY,
        origin="demo",
    )
    return acceptance.purge_id


def _unless_fenced(step: Callable[[], object]) -> None:
    try:
        step()
    except Fenced:
        pass  # purged or deleted since an earlier run: it never comes back
