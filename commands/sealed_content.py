"""Content as the database holds it: sealed under keys of its own (issue 36).

An event's body and its attachments' names are sealed (``purgekeeper.storage.sealing``)
under the key the event's ``key_id`` names; an admission's payload, a run's output and a
derivative's payload each under a key of its own row (their ``key_id``). Every value is bound
to its row and column, so a sealed value moved to another row does not open. A blob's bytes
are sealed under the blob's own key (``purgekeeper.storage.sealed_files``).

A read opens what it returns with :class:`Opened`: the keys of all its events in one lookup
of the key store, after the fences were checked in the same read. An event whose key was
destroyed is purged content, whatever the database says (a restore of an old backup, before
the ledger's merge fences it again): the read leaves it out. Content written before sealing
(``key_id`` NULL) is returned as it is, until the background sealing seals it.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TypeAlias, TypeVar

from sqlalchemy import Connection, Table

from purgekeeper.commands.records import Attachment, Event, make_event
from purgekeeper.schema import content_queries
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import ContentPurged, InfrastructureError
from purgekeeper.schema.states import Binding
from purgekeeper.storage.content_keys import ContentKeys
from purgekeeper.storage.sealed_files import open_sealed
from purgekeeper.storage.sealing import SealedInvalid, open_text, seal_text

log = logging.getLogger(__name__)
_T = TypeVar("_T")
Rows: TypeAlias = Mapping[Table, Sequence[str]]  # ids of rows by table, whose key_id a stored row names


def body_bound(event_id: str) -> str:
    return f"event:{event_id}:body"


def name_bound(attachment_id: str) -> str:
    return f"attachment:{attachment_id}:name"


def blob_bound(blob_id: str) -> str:
    """What a blob's sealed bytes are bound to (``purgekeeper.storage.sealed_files``)."""
    return f"blob:{blob_id}"


def payload_bound(admission_id: str) -> str:
    return f"admission:{admission_id}:payload"


def output_bound(run_id: str) -> str:
    return f"run:{run_id}:output"


def derivative_bound(derivative_id: str) -> str:
    return f"derivative:{derivative_id}:payload"


def seal_optional(key: bytes, text: str | None, *, bound_to: str) -> str | None:
    return None if text is None else seal_text(key, text, bound_to=bound_to)


class Opened:
    """The keys of a read's values (their ``key_id``), looked up once, after the fences.

    A value whose key was destroyed is purged content: ``readable`` says no, and the read
    leaves it out. A key the store never held, or a value that does not open under its key,
    is content lost or damaged (a key store restored from an older backup, a hand-edited
    row): logged at ERROR, naming the row, and left out too, so one bad row never makes the
    rest unreadable."""

    def __init__(self, keys: ContentKeys, key_ids: Iterable[str | None]) -> None:
        self.ciphers = keys.ciphers(key_id for key_id in key_ids if key_id)  # None: destroyed or lost
        missing = [key_id for key_id, found in self.ciphers.items() if found is None]
        self.lost = set(missing) - keys.destroyed(missing) if missing else set()
        if self.lost:
            log.error(
                "%d item(s) of content cannot be opened: the key store holds no key for them and never destroyed "
                "one (a key store restored from an older backup?); they are left out (docs/guides/encryption.md)",
                len(self.lost),
            )

    def readable(self, key_id: str | None) -> bool:
        """Whether content sealed under ``key_id`` can be opened (plain content can)."""
        return key_id is None or self.ciphers.get(key_id) is not None

    def open(self, key_id: str | None, value: str | None, *, bound_to: str) -> str | None:
        """``value`` opened (as it is when plain or NULL); SealedInvalid when it does not open."""
        if value is None or key_id is None:
            return value
        aead = self.ciphers.get(key_id)
        if aead is None:
            raise LookupError(f"key {key_id} is destroyed: check readable() first")
        return open_text(aead, value, bound_to=bound_to)

    def opened(self, key_id: str | None, value: str | None, *, bound_to: str) -> tuple[bool, str | None]:
        """``(True, value opened)``, or ``(False, None)`` for a value that does not open (logged
        at ERROR, naming ``bound_to``: ids, never content)."""
        try:
            return True, self.open(key_id, value, bound_to=bound_to)
        except SealedInvalid:
            self.damaged(bound_to)
            return False, None

    @staticmethod
    def damaged(bound_to: str) -> None:
        log.error("%s does not open under its key (damaged or moved); it is left out", bound_to)


# -- writing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SealedEvent:
    """An event's content as an ingest writes it: its new key's id, its body sealed, and each
    attachment's new id with its name sealed (in the order given)."""

    key_id: str
    body: str | None
    attachments: tuple[tuple[str, str], ...]
    names: dict[str, str] = field(repr=False)  # the plain names, by attachment id

    @classmethod
    def of(cls, keys: ContentKeys, event_id: str, body: str | None, names: Sequence[str]) -> SealedEvent:
        """Sealed under a new key (``ContentKeys.take``: in the key store before any row names it)."""
        key_id, key = keys.take()
        ids = [uuid.uuid4().hex for _ in names]
        return cls(
            key_id=key_id,
            body=seal_optional(key, body, bound_to=body_bound(event_id)),
            attachments=tuple(
                (i, seal_text(key, name, bound_to=name_bound(i))) for i, name in zip(ids, names, strict=True)
            ),
            names=dict(zip(ids, names, strict=True)),
        )

    def attached(self, rows: Iterable[Any]) -> tuple[Attachment, ...]:
        """The attachment rows just written (``content_queries.attachments_of``), with their plain names."""
        return tuple(attachment(row, self.names[row.id]) for row in rows)


def transact_sealed(
    db: Database, keys: ContentKeys, work: Callable[[Connection], _T], key_id: str | None, rows: Rows
) -> _T:
    """``work`` in a transaction; when it fails, the key taken for it destroyed unless a
    stored row names it (``discard_keys``)."""
    try:
        return db.transact(work)
    except BaseException:
        discard_keys(db, keys, [key_id] if key_id else [], rows)
        raise


def discard_keys(db: Database, keys: ContentKeys, key_ids: Sequence[str], rows: Rows | None = None) -> None:
    """Destroy keys taken for a write that did not keep them (a duplicate delivery, a CAS
    twin, a failed transaction): what they sealed may have reached the WAL or a file, and no
    purge would ever destroy them. A key that one of ``rows`` names is kept (a commit whose
    answer was lost did commit). Best effort: a store or a database that fails here leaves
    the keys in the store, sealing nothing any row names, and is logged."""
    if not key_ids:
        return
    try:
        named: set[str] = set()
        if rows:
            with db.read() as conn:
                named = content_queries.named_keys(conn, rows)
        keys.destroy([key_id for key_id in key_ids if key_id not in named])
    except Exception:
        log.warning("could not destroy %d key(s) taken for a write that did not keep them", len(key_ids))


# -- reading ------------------------------------------------------------------------------------


def attachment(row: Any, name: str | None) -> Attachment:
    """An attachment row (``content_queries.attachments_of``'s) with its name opened."""
    return Attachment(row.id, row.blob_id, Binding(row.binding), name, int(row.size))  # type: ignore[arg-type]


def stored_event(conn: Connection, keys: ContentKeys, row: Any) -> Event:
    """An event already stored (a duplicate delivery's), opened; ContentPurged when its key
    was destroyed."""
    opened = Opened(keys, [row.key_id])
    if not opened.readable(row.key_id):
        raise ContentPurged(f"event {row.id} is purged content: its key was destroyed")
    attached = [
        attachment(a, opened.open(row.key_id, a.name, bound_to=name_bound(a.id)))
        for a in content_queries.attachments_of(conn, [row.id])
    ]
    body = opened.open(row.key_id, row.body, bound_to=body_bound(row.id))
    return Event(row.id, row.provider_event_id, row.author, row.occurred_at, body, tuple(attached))


def events_of(read: content_queries.ConversationRead, opened: Opened) -> list[Event]:
    """The events of a conversation read, each with its attachments, opened; an event whose
    key was destroyed is purged, and one that does not open is damaged (``Opened``): both
    are left out. The loop is the read's hot path: ``Opened.open`` written out in it (a read
    of 10,000 events opens 10,000 bodies)."""
    events: list[Event] = []
    attached = _attachments_of(read, opened)
    ciphers = {key_id: aead for key_id, aead in opened.ciphers.items() if aead is not None}
    # part, id, provider_event_id, author, body, key_id, occurred_at
    rows = [row for row in read.events if row[5] is None or row[5] in ciphers]
    when = content_queries.utc_from_texts([row[6] for row in rows])
    for row, at in zip(rows, when, strict=True):
        event_id, body, key_id = row[1], row[4], row[5]
        if key_id is not None and body is not None:
            try:
                body = open_text(ciphers[key_id], body, bound_to=f"event:{event_id}:body")  # body_bound
            except SealedInvalid:
                opened.damaged(body_bound(event_id))
                continue
        files = tuple(attached[event_id]) if event_id in attached else ()
        events.append(make_event(event_id, row[2], row[3], at, body, files))
    return events


def _attachments_of(read: content_queries.ConversationRead, opened: Opened) -> dict[str, list[Attachment]]:
    """The read's attachments by event, their names opened (those of an event that cannot be
    opened are left out with it)."""
    keys = {row[1]: row[5] for row in read.events}
    attached: dict[str, list[Attachment]] = defaultdict(list)
    for row in read.attachments:  # part, id, event_id, blob_id, binding, name, -, size
        key_id = keys.get(row[2])
        if row[2] in keys and opened.readable(key_id):
            ok, name = opened.opened(key_id, row[5], bound_to=name_bound(row[1]))
            if ok:
                attached[row[2]].append(Attachment(row[1], row[3], Binding(row[4]), name, int(row[7])))  # type: ignore[arg-type]
    return attached


def opened_blob(raw: BinaryIO, key: bytes, blob_id: str) -> BinaryIO:
    """A blob's file opened under its key, its first chunk already checked (so a file that
    does not open fails here, before a response begins, not in the middle of one)."""
    try:
        return open_sealed(raw, key, bound_to=blob_bound(blob_id), check_first=True)
    except SealedInvalid:
        raise InfrastructureError(
            f"blob {blob_id}: its file does not open under its key (damaged or replaced)"
        ) from None
