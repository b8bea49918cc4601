"""The host's content commands: write conversations, bots, events and runs; read them fenced."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy import Connection

from purgekeeper.commands import attachments as attachments_module
from purgekeeper.commands import collection, event_ingest, ingest_batch, sealed_content, validation
from purgekeeper.commands.attachments import NewAttachment, stage
from purgekeeper.commands.gate import Gate
from purgekeeper.commands.ingest_batch import IngestResult, NewEvent
from purgekeeper.commands.records import (
    Admission,
    Bot,
    Conversation,
    Derivative,
    Event,
    Placement,
    Run,
)
from purgekeeper.schema import content_queries
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import (
    Conflict,
    ContentPurged,
    ConversationPurged,
    IdReserved,
    InfrastructureError,
    NotFound,
    PurgekeeperError,
    ValidationError,
)
from purgekeeper.schema.states import (
    BlobState,
    ConversationKind,
    ConversationState,
    RunStatus,
    TombstoneKind,
)
from purgekeeper.schema.tables import admissions, derivatives, events, runs
from purgekeeper.schema.tables import blobs as blob_table
from purgekeeper.storage import memory
from purgekeeper.storage.blobstore import BlobStore
from purgekeeper.storage.content_keys import ContentKeys
from purgekeeper.storage.files import reason_of
from purgekeeper.storage.sealing import seal_text

CONVERSATION_IDS = (TombstoneKind.CONVERSATION, TombstoneKind.CHANNEL)


class ContentCommands:
    """The content commands of :class:`commands.Purgekeeper` (each documented there): rows
    in ``db``, attachment bytes in ``blobs``; every content read and write first checks the
    ``gate`` (``MessagingUnavailable`` while closed). Content is written sealed under keys
    from ``keys`` and opened on the way out (``purgekeeper.commands.sealed_content``)."""

    def __init__(self, db: Database, blobs: BlobStore, gate: Gate, keys: ContentKeys) -> None:
        self.db = db
        self.blobs = blobs
        self.gate = gate
        self.keys = keys

    # -- conversations and bots -----------------------------------------------------------

    def create_conversation(
        self, conversation_id: str, *, kind: str = "conversation", bot_id: str | None = None
    ) -> Conversation:
        """Create a conversation or channel; repeating an identical create returns it."""
        validation.check_id(conversation_id, "conversation_id")
        kind = validation.check_choice(kind, "kind", [k.value for k in ConversationKind])
        validation.check_optional_id(bot_id, "bot_id")

        def work(conn: Connection) -> Conversation:
            self.gate.require_open(conn)
            if content_queries.is_tombstoned(conn, CONVERSATION_IDS, conversation_id):
                raise IdReserved(f"conversation id {conversation_id} belongs to a purge or deletion")
            existing = content_queries.conversation_row(conn, conversation_id)
            if existing is not None:
                return _same_conversation(existing, kind, bot_id)
            if bot_id is not None:
                _require(content_queries.bot_row(conn, bot_id), f"no bot {bot_id}")
            content_queries.insert_conversation(conn, conversation_id, kind, bot_id)
            return Conversation.from_row(_require(content_queries.conversation_row(conn, conversation_id), ""))

        return self.db.transact(work)

    def register_bot(self, bot_id: str, *, name: str, memory_path: str | Path | None = None) -> Bot:
        """Register a bot; with a Memory repository, write its ownership marker in ``.git/``."""
        validation.check_id(bot_id, "bot_id")
        validation.check_text(name, "name", max_length=validation.MAX_BOT_NAME_LENGTH)
        repository = _check_memory_path(memory_path, bot_id)
        with self.db.read() as conn:
            self.gate.require_open(conn)
            _require_new_bot(conn, bot_id)
        marker = _write_marker(repository, bot_id) if repository else None

        def work(conn: Connection) -> Bot:
            self.gate.require_open(conn)
            content_queries.insert_bot(
                conn,
                bot_id,
                name=name,
                memory_path=str(repository) if repository else None,
                marker_id=marker.marker_id if marker else None,
            )
            return Bot.from_row(_require(content_queries.bot_row(conn, bot_id), ""))

        try:
            return self.db.transact(work)
        except BaseException:
            if repository and marker:
                memory.remove_marker(repository, marker)
            raise

    def get_conversation(self, conversation_id: str) -> Conversation | None:
        """The conversation, or None when it is unknown or purged."""
        validation.check_id(conversation_id, "conversation_id")
        with self.db.read() as conn:
            self.gate.require_open(conn)
            if content_queries.is_tombstoned(conn, [TombstoneKind.CONVERSATION], conversation_id):
                return None
            row = content_queries.conversation_row(conn, conversation_id)
        if row is None or row.state == ConversationState.PURGED:
            return None
        return Conversation.from_row(row)

    def why_unreadable(self, conversation_id: str) -> PurgekeeperError:
        """Why ``get_conversation`` gives None: ``ConversationPurged`` for a purged
        conversation, else ``NotFound`` (for a surface that reports the difference)."""
        validation.check_id(conversation_id, "conversation_id")
        with self.db.read() as conn:
            if content_queries.is_tombstoned(conn, [TombstoneKind.CONVERSATION], conversation_id):
                return ConversationPurged(f"conversation {conversation_id} is purged")
            row = content_queries.conversation_row(conn, conversation_id)
        if row is not None and row.state == ConversationState.PURGED:
            return ConversationPurged(f"conversation {conversation_id} is purged")
        return NotFound(f"no conversation {conversation_id}")

    def list_conversations(self) -> list[Conversation]:
        """The catalog: every conversation and channel that is not purged, by id."""
        with self.db.read() as conn:
            self.gate.require_open(conn)
            return [Conversation.from_row(row) for row in content_queries.catalog(conn)]

    # -- events ---------------------------------------------------------------------------

    def ingest_event(
        self,
        conversation_id: str,
        *,
        author: str,
        body: str | None,
        provider_event_id: str | None = None,
        event_id: str | None = None,
        occurred_at: dt.datetime | None = None,
        attachments: Sequence[NewAttachment] = (),
    ) -> Event:
        """Add an event to a conversation. Idempotent on ``provider_event_id``: a duplicate
        delivery returns the event already ingested and writes nothing."""
        validation.check_id(conversation_id, "conversation_id")
        validation.check_text(author, "author", max_length=validation.MAX_AUTHOR_LENGTH)
        body = validation.check_body(body)
        validation.check_optional_provider_id(provider_event_id)
        event_id = validation.check_optional_id(event_id, "event_id") or uuid.uuid4().hex
        when = validation.check_occurred_at(occurred_at) or dt.datetime.now(dt.UTC)
        new = attachments_module.check_attachments(attachments)
        sealed = sealed_content.SealedEvent.of(self.keys, event_id, body, [a.name for a in new])
        staged = [stage(a, self.keys) for a in new]

        row = event_ingest.StoredRow(event_id, provider_event_id, author, when, sealed.body, sealed.key_id)

        def work(conn: Connection) -> tuple[Event, set[str], bool]:
            used: set[str] = set()  # fresh on every attempt: a rolled-back attempt bound nothing
            duplicate = event_ingest.store_event(conn, self.gate, self.keys, row, conversation_id)
            if duplicate is not None:
                return duplicate, used, False
            attached = attachments_module.bind_all(conn, event_id, new, staged, sealed, used) if new else ()
            return Event(event_id, provider_event_id, author, when, body, attached), used, True

        blobs = [blob for blob in staged if blob is not None]
        taken = [sealed.key_id, *(blob.key_id for blob in blobs)]
        try:
            attachments_module.write_staged(self.blobs, new, staged)
            event, used, inserted = event_ingest.transact_fenced(self.db, self.gate, work)
        except BaseException:
            attachments_module.discard_staged(self.blobs, staged)
            sealed_content.discard_keys(
                self.db, self.keys, taken, {events: [event_id], blob_table: [blob.blob_id for blob in blobs]}
            )
            raise
        unused = [blob for blob in blobs if blob.blob_id not in used]
        attachments_module.discard_staged(self.blobs, unused)
        sealed_content.discard_keys(
            self.db, self.keys, [*([] if inserted else [sealed.key_id]), *(blob.key_id for blob in unused)]
        )
        return event

    def ingest_events(self, conversation_id: str, events: Sequence[NewEvent]) -> list[IngestResult]:
        """Add many events to a conversation in one transaction (at most ``MAX_BATCH_EVENTS``,
        1,000), each as ``ingest_event`` adds it, attachments aside. One result per event, in
        order: ``accepted``, ``duplicate`` (its provider event id was ingested already: the
        event stored then) or ``refused`` (a fence of that event, or its id taken: the error's
        code and message; it is not written, the others are). A refusal of the whole batch
        (the conversation unknown or purged, the gate closed) is raised, nothing written."""
        return ingest_batch.ingest_events(self.db, self.gate, self.keys, conversation_id, events)

    def place_event(self, event_id: str, conversation_id: str) -> Placement:
        """Place a live event in another conversation too; it stays one piece of content."""
        validation.check_id(event_id, "event_id")
        validation.check_id(conversation_id, "conversation_id")

        def work(conn: Connection) -> Placement:
            self.gate.require_open(conn)
            _require_live_event(conn, event_id)
            _require_conversation(conn, conversation_id)
            if not content_queries.placement_exists(conn, event_id, conversation_id):
                content_queries.insert_placement(conn, event_id, conversation_id)
            return Placement(event_id=event_id, conversation_id=conversation_id)

        return self.db.transact(work)

    def read_conversation(self, conversation_id: str) -> list[Event]:
        """The conversation's events that no purge fences; ``[]`` for a purged one."""
        validation.check_id(conversation_id, "conversation_id")
        with collection.paused():  # the rows and events hold no cycles
            with self.db.single() as conn:
                read = content_queries.read_conversation(conn, conversation_id)
                self.gate.check_values(conn, read.seq, read.head_hash, read.gate_reason)  # before anything is returned
            opened = sealed_content.Opened(self.keys, (row[5] for row in read.events))  # after the fences
            return sealed_content.events_of(read, opened)

    def open_attachment(self, attachment_id: str) -> BinaryIO:
        """The attachment's bytes as a binary file; ``ContentPurged`` once it is fenced."""
        validation.check_id(attachment_id, "attachment_id")
        with self.db.read() as conn:
            self.gate.require_open(conn)
            row = _require(content_queries.attachment_with_blob(conn, attachment_id), f"no attachment {attachment_id}")
            if not content_queries.is_event_live(conn, row.event_id):
                raise ContentPurged(f"attachment {attachment_id} belongs to purged content")
            if row.blob_state != BlobState.PRESENT:
                raise ContentPurged(f"attachment {attachment_id} bytes are {row.blob_state}")
            key = self.keys.lookup([row.blob_key_id]).get(row.blob_key_id) if row.blob_key_id else None
            if row.blob_key_id and key is None:
                if not self.keys.destroyed([row.blob_key_id]):  # lost, not purged: the host must not take it as purged
                    raise InfrastructureError(
                        f"attachment {attachment_id}: the key store holds no key for its bytes, and never destroyed "
                        "one (a key store restored from an older backup?)"
                    )
                raise ContentPurged(f"attachment {attachment_id} bytes are shredded: their key was destroyed")
            try:
                raw = self.blobs.open(row.blob_id, row.blob_kind, row.path)
                return raw if key is None else sealed_content.opened_blob(raw, key, row.blob_id)
            except FileNotFoundError as exc:
                raise ContentPurged(f"attachment {attachment_id} bytes are gone") from exc
            except (OSError, ValueError) as exc:  # a symlink or a hand-edited path: never followed
                raise InfrastructureError(
                    f"attachment {attachment_id}: its file cannot be read safely: {reason_of(exc)}"
                ) from None

    # -- runs, admissions, derivatives ----------------------------------------------------

    def start_run(self, conversation_id: str, *, bot_id: str, run_id: str | None = None) -> Run:
        """Start an agent run of ``bot_id`` in the conversation (status ``running``)."""
        validation.check_id(conversation_id, "conversation_id")
        validation.check_id(bot_id, "bot_id")
        run_id = validation.check_optional_id(run_id, "run_id") or uuid.uuid4().hex

        def work(conn: Connection) -> Run:
            self.gate.require_open(conn)
            _require_conversation(conn, conversation_id)
            _require(content_queries.bot_row(conn, bot_id), f"no bot {bot_id}")
            content_queries.insert_run(conn, run_id=run_id, conversation_id=conversation_id, bot_id=bot_id)
            return Run.from_row(_require(content_queries.run_row(conn, run_id), ""))

        return self.db.transact(work)

    def finish_run(self, run_id: str, *, status: str, output: Any = None) -> Run:
        """Settle a run with a terminal status, keeping its assistant ``output``."""
        validation.check_id(run_id, "run_id")
        terminal = sorted(s.value for s in RunStatus if s.is_terminal)
        status = validation.check_choice(status, "status", terminal)
        text = validation.check_optional_json(output, "output", max_bytes=validation.MAX_OUTPUT_BYTES)
        key_id, sealed = self._sealed(text, sealed_content.output_bound(run_id)) if text is not None else (None, None)

        def work(conn: Connection) -> Run:
            self.gate.require_open(conn)
            run = _require(content_queries.run_row(conn, run_id), f"no run {run_id}")
            if RunStatus(run.status).is_terminal:
                raise ValidationError(f"run {run_id} is already {run.status}")
            content_queries.finish_run(conn, run_id, status=status, output=sealed, key_id=key_id)
            stored = _require(content_queries.run_row(conn, run_id), "")
            return Run.from_row(stored, output=text)  # the output as given: not opened again

        return sealed_content.transact_sealed(self.db, self.keys, work, key_id, {runs: [run_id]})

    def admit(self, event_id: str, run_id: str, *, payload: Any) -> Admission:
        """Record that a live event was admitted to a non-terminal run, with its input."""
        validation.check_id(event_id, "event_id")
        validation.check_id(run_id, "run_id")
        text = validation.check_json(payload, "payload", max_bytes=validation.MAX_PAYLOAD_BYTES)
        admission_id = uuid.uuid4().hex
        key_id, sealed = self._sealed(text, sealed_content.payload_bound(admission_id))

        def work(conn: Connection) -> Admission:
            self.gate.require_open(conn)
            run = _require(content_queries.run_row(conn, run_id), f"no run {run_id}")
            if RunStatus(run.status).is_terminal:
                raise ValidationError(f"run {run_id} is already {run.status}; it admits nothing")
            _require_live_event(conn, event_id)
            content_queries.insert_admission(
                conn,
                admission_id=admission_id,
                event_id=event_id,
                run_id=run_id,
                payload=sealed,
                key_id=key_id,
            )
            return Admission(id=admission_id, event_id=event_id, run_id=run_id, payload=payload)

        return sealed_content.transact_sealed(self.db, self.keys, work, key_id, {admissions: [admission_id]})

    def add_derivative(
        self,
        conversation_id: str,
        *,
        kind: str,
        payload: Any,
        source_event_ids: Sequence[str] = (),
    ) -> Derivative:
        """Record data derived from events: a summary, an inactive history row, an index entry."""
        validation.check_id(conversation_id, "conversation_id")
        validation.check_text(kind, "kind", max_length=validation.MAX_DERIVATIVE_KIND_LENGTH)
        text = validation.check_json(payload, "payload", max_bytes=validation.MAX_PAYLOAD_BYTES)
        sources = validation.check_id_list(
            source_event_ids, "source_event_ids", max_count=validation.MAX_DERIVATIVE_SOURCES
        )
        derivative_id = uuid.uuid4().hex
        key_id, sealed = self._sealed(text, sealed_content.derivative_bound(derivative_id))

        def work(conn: Connection) -> Derivative:
            self.gate.require_open(conn)
            _require_conversation(conn, conversation_id)
            missing = set(sources) - content_queries.existing_event_ids(conn, sources)
            if missing:
                raise NotFound(f"no event {sorted(missing)[0]}")
            content_queries.insert_derivative(
                conn,
                derivative_id=derivative_id,
                conversation_id=conversation_id,
                kind=kind,
                payload=sealed,
                key_id=key_id,
                source_event_ids=sources,
            )
            return Derivative(derivative_id, conversation_id, kind, payload, tuple(sources))

        return sealed_content.transact_sealed(self.db, self.keys, work, key_id, {derivatives: [derivative_id]})

    def _sealed(self, text: str, bound_to: str) -> tuple[str, str]:
        """``text`` sealed under a new key of its own, with the key's id."""
        key_id, key = self.keys.take()
        return key_id, seal_text(key, text, bound_to=bound_to)


def _require(row: Any, message: str) -> Any:
    if row is None:
        raise NotFound(message or "not found")
    return row


def _same_conversation(existing: Any, kind: str, bot_id: str | None) -> Conversation:
    if existing.kind != kind or existing.bot_id != bot_id:
        raise Conflict(f"conversation {existing.id} already exists as a {existing.kind} with bot {existing.bot_id}")
    return Conversation.from_row(existing)


def _require_conversation(conn: Connection, conversation_id: str) -> None:
    """NotFound for an unknown id; the triggers refuse a purged or deleted one."""
    if content_queries.conversation_row(conn, conversation_id) is None and not content_queries.is_tombstoned(
        conn, CONVERSATION_IDS, conversation_id
    ):
        raise NotFound(f"no conversation {conversation_id}")


def _require_new_bot(conn: Connection, bot_id: str) -> None:
    if content_queries.is_tombstoned(conn, [TombstoneKind.BOT], bot_id):
        raise IdReserved(f"bot id {bot_id} belongs to a deleted bot")
    if content_queries.bot_row(conn, bot_id) is not None:
        raise Conflict(f"a bot with id {bot_id} already exists")


def _require_live_event(conn: Connection, event_id: str) -> None:
    _require(content_queries.event_row(conn, event_id), f"no event {event_id}")
    if not content_queries.is_event_live(conn, event_id):
        raise ContentPurged(f"event {event_id} is purged or no longer live")


def _write_marker(repository: Path, bot_id: str) -> memory.Marker:
    try:
        return memory.write_marker(repository, bot_id)
    except OSError as exc:
        raise ValidationError(f"cannot write the ownership marker in {repository}/.git: {exc.strerror}") from exc


def _check_memory_path(memory_path: str | Path | None, bot_id: str) -> Path | None:
    """The repository as an absolute path (symlinks kept, so a later proof can see them)."""
    if memory_path is None:
        return None
    if not isinstance(memory_path, str | Path) or not str(memory_path).strip():
        raise ValidationError("memory_path must be a path")
    if "\x00" in str(memory_path):
        raise ValidationError("memory_path must not contain NUL")
    repository = Path(memory_path).expanduser().absolute()
    if ".." in repository.parts:
        raise ValidationError("memory_path must not contain '..'; give the repository's own path")
    if not repository.exists():
        raise ValidationError(f"memory_path {repository} does not exist")
    if not repository.is_dir():
        raise ValidationError(f"memory_path {repository} is not a directory")
    if not memory.git_dir(repository).is_dir():
        raise ValidationError(f"memory_path {repository} is not a Git working tree (no .git/ directory)")
    owner = memory.read_marker(repository)
    if owner is not None and owner.bot_id != bot_id:
        raise ValidationError(f"memory_path {repository} is already owned by bot {owner.bot_id}")
    return repository
