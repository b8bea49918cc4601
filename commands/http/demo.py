"""``purgectl serve --demo``: a small world, seeded idempotently (``seed_demo``): a bot with
a Memory repository, a conversation and a channel with events, and an operator's day of
purges, one complete, one retrying and one incomplete."""

from __future__ import annotations

import datetime as dt
import functools
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import purgekeeper
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.purge_reads import MAX_PAGE
from purgekeeper.commands.scope import EventScope
from purgekeeper.commands.settings import Settings
from purgekeeper.schema.errors import Fenced, NotFound, ValidationError
from purgekeeper.storage import blobstore
from purgekeeper.workers import runner

DEMO_BOT = "demo-bot"
DEMO_CONVERSATION = "demo-welcome"
DEMO_CHANNEL = "demo-announcements"
DEMO_PURGED_EVENT = "demo-welcome-3"
DEMO_PURGE_KEY = "demo-purge-welcome-3"
DEMO_ACTOR = "demo"


@dataclass(frozen=True)
class DemoEvent:
    conversation_id: str
    event_id: str  # its provider id is "demo:<event id>"
    author: str
    body: str
    attachment: tuple[str, str, bytes] | None = None  # (binding kind, name, bytes)
    file_in_the_way: bool = False  # its file becomes a non-empty directory: unlink fails


@dataclass(frozen=True)
class DemoPurge:
    """A confirmed purge of one event, and what its cleanup is left to show."""

    conversation_id: str
    event_id: str
    idempotency_key: str
    reason: str
    policy: runner.Policy  # how the seeding runs its attempts
    settled: frozenset[str]  # the step statuses the seeding stops at


DEMO_EVENTS: tuple[DemoEvent, ...] = (
    DemoEvent(DEMO_CONVERSATION, "demo-welcome-1", "ada", "Hello! Can you summarise the design doc?"),
    DemoEvent(DEMO_CONVERSATION, "demo-welcome-2", "demo-bot", "Sure: previews, confirmation, a ledger, then cleanup."),
    DemoEvent(
        DEMO_CONVERSATION,
        DEMO_PURGED_EVENT,
        "ada",
        "Oops, here is my home address: 1 Example Lane.",
        ("file", "address.txt", b"1 Example Lane\n"),
    ),
    DemoEvent(
        DEMO_CONVERSATION,
        "demo-welcome-4",
        "ada",
        "And a scan of my passport, sorry.",
        ("file", "passport.txt", b"P<EXAMPLE<<ADA\n"),
        file_in_the_way=True,
    ),
    DemoEvent(
        DEMO_CHANNEL,
        "demo-announcements-1",
        "grace",
        "Release notes are attached.",
        ("cas", "release-notes.txt", b"Release 1.0\n"),
    ),
    DemoEvent(
        DEMO_CHANNEL,
        "demo-announcements-2",
        "grace",
        "Next year's salaries, posted here by mistake.",
        ("file", "salaries.csv", b"name,salary\nada,1\n"),
        file_in_the_way=True,
    ),
)
FINISHED = frozenset({"done", "incomplete"})
DEMO_PURGES: tuple[DemoPurge, ...] = (
    DemoPurge(
        DEMO_CONVERSATION,
        DEMO_PURGED_EVENT,
        DEMO_PURGE_KEY,
        "the demo purges a message that shared a home address",
        runner.Policy(),
        FINISHED,
    ),
    DemoPurge(  # one failed attempt, the next in 30 to 60 minutes: "retrying"
        DEMO_CONVERSATION,
        "demo-welcome-4",
        "demo-purge-welcome-4",
        "the demo purges a passport scan; its file is in the way, so cleanup retries",
        runner.Policy(backoff_base=dt.timedelta(hours=1), backoff_cap=dt.timedelta(hours=1)),
        FINISHED | {"retrying"},
    ),
    DemoPurge(  # every attempt fails at once: "incomplete", for an operator to retry
        DEMO_CHANNEL,
        "demo-announcements-2",
        "demo-purge-announcements-2",
        "the demo purges a salary list; its file is in the way, so cleanup ends incomplete",
        runner.Policy(backoff_base=dt.timedelta(milliseconds=1), backoff_cap=dt.timedelta(milliseconds=1)),
        FINISHED,
    ),
)
DEMO_STEPS_S = 30.0  # at most, for the seeding's own attempts


def seed_demo(pk: Purgekeeper, settings: Settings) -> dict[str, Any]:
    """A bot with a Memory repository, a conversation and a channel with events (one placed in
    both, four with attachments), and three confirmed purges, as an operator's day has them:
    one complete, one retrying and one incomplete. The last two meet a real fault: the file of
    their attachment was replaced by a non-empty directory, so unlinking it fails.

    The seeding runs the purges' attempts itself (``pk`` should wake no worker): the
    complete one until done, the retrying one once with an hour's backoff, the incomplete
    one until its attempts are spent. Running it again changes nothing: every step is
    idempotent (identical creates, provider event ids, the purges' idempotency keys, steps
    already settled), and a step whose target was purged or deleted since (through the API,
    say) is skipped, because purged content never comes back. A database holding a
    conversation that is not the demo's is in use: it is refused, and nothing is written."""
    foreign = sorted({c.id for c in pk.list_conversations()} - {DEMO_CONVERSATION, DEMO_CHANNEL})
    if foreign:
        raise ValidationError(
            f"--demo seeds an empty database only; {settings.database_name} is in use "
            f"(it holds conversations such as {foreign[0]!r}): point PURGEKEEPER_DATA_DIR "
            "or PURGEKEEPER_DATABASE_URL elsewhere"
        )
    _demo_bot(pk, settings)
    _unless_fenced(lambda: pk.create_conversation(DEMO_CONVERSATION, bot_id=DEMO_BOT))
    _unless_fenced(lambda: pk.create_conversation(DEMO_CHANNEL, kind="channel"))
    for event in DEMO_EVENTS:
        _unless_fenced(functools.partial(_demo_event, pk, settings, event))
    _unless_fenced(lambda: pk.place_event("demo-welcome-1", DEMO_CHANNEL))
    purges = {demo.idempotency_key: _demo_purge(pk, demo) for demo in DEMO_PURGES}
    return {
        "conversations": len(pk.list_conversations()),
        "bot_id": DEMO_BOT,
        "purge_id": purges[DEMO_PURGE_KEY],
        "purges": purges,
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


def _demo_event(pk: Purgekeeper, settings: Settings, demo: DemoEvent) -> None:
    attachments = []
    if demo.attachment is not None:
        kind, name, data = demo.attachment
        new = purgekeeper.NewAttachment.file if kind == "file" else purgekeeper.NewAttachment.cas
        attachments = [new(data, name=name)]
    event = pk.ingest_event(
        demo.conversation_id,
        author=demo.author,
        body=demo.body,
        event_id=demo.event_id,
        provider_event_id=f"demo:{demo.event_id}",
        attachments=attachments,
    )
    if demo.file_in_the_way:
        for attachment in event.attachments:
            _put_in_the_way(settings.file_root / blobstore.file_path(attachment.blob_id))


def _put_in_the_way(path: Path) -> None:
    """Replace a managed file by a non-empty directory (once): its unlink then fails."""
    if path.is_file() and not path.is_symlink():
        path.unlink()
        path.mkdir()
        (path / "in-the-way").write_text("not content: the demo's fault\n", encoding="utf-8")


def _demo_purge(pk: Purgekeeper, demo: DemoPurge) -> str | None:
    """The confirmed purge of one event, its attempts run. A repeat finds it by its
    conversation and reason and previews nothing (a preview of a purge whose cleanup failed
    differs from the first, and would be kept as a new one)."""
    purge_id = _accepted_before(pk, demo) or _confirm(pk, demo)
    if purge_id is not None:
        _run_steps(pk, purge_id, demo)
    return purge_id


def _accepted_before(pk: Purgekeeper, demo: DemoPurge) -> str | None:
    try:
        page = pk.list_purges(kind="content", conversation_id=demo.conversation_id, limit=MAX_PAGE)
    except NotFound:
        return None
    return next((p.purge_id for p in page.purges if (p.actor, p.reason) == (DEMO_ACTOR, demo.reason)), None)


def _confirm(pk: Purgekeeper, demo: DemoPurge) -> str | None:
    try:
        preview = pk.preview_purge(EventScope(event_ids=(demo.event_id,)))
    except (NotFound, Fenced):
        return None  # the whole conversation was purged since
    acceptance = pk.confirm_purge(
        preview.scope,
        scope_digest=preview.scope_digest,
        actor=DEMO_ACTOR,
        reason=demo.reason,
        idempotency_key=demo.idempotency_key,
        origin="demo",
    )
    return acceptance.purge_id


def _run_steps(pk: Purgekeeper, purge_id: str, demo: DemoPurge) -> None:
    """Run the purge's steps as a worker would, until each one's status is a settled one."""
    deadline = time.monotonic() + DEMO_STEPS_S
    while time.monotonic() < deadline:
        waiting = [step for step in pk.status(purge_id).steps if step.status not in demo.settled]
        if not waiting:
            return
        for step in waiting:
            runner.run_step(pk.step_context(), step.id, policy=demo.policy)
        time.sleep(0.005)  # a 1 ms backoff is due again by then


def purges_text(purges: dict[str, str | None]) -> str:
    ids = [purge_id for purge_id in purges.values() if purge_id]
    return f"purges {', '.join(ids)} (complete, retrying, incomplete): see /status" if ids else "no purges"


def no_wakeup(step_ids: Sequence[str]) -> None:
    """The seeding runs its steps itself: no worker is woken."""


def _unless_fenced(step: Callable[[], object]) -> None:
    try:
        step()
    except Fenced:
        pass  # purged or deleted since an earlier run: it never comes back
