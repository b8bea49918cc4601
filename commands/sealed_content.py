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

import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from sqlalchemy import Connection

from purgekeeper.commands.records import Attachment, Event, make_event
from purgekeeper.schema import content_queries
from purgekeeper.schema.errors import ContentPurged, InfrastructureError
from purgekeeper.schema.states import Binding
from purgekeeper.storage.content_keys import ContentKeys
from purgekeeper.storage.sealed_files import open_sealed
from purgekeeper.storage.sealing import SealedInvalid, seal_text, unseal_text


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
    """The keys of a read's events (their ``key_id`` values), looked up once."""

    def __init__(self, keys: ContentKeys, key_ids: Iterable[str | None]) -> None:
        self._keys = keys.lookup(key_id for key_id in key_ids if key_id)
        missing = [key_id for key_id, key in self._keys.items() if key is None]
        if missing:
            never = set(missing) - keys.destroyed(missing)
            if never:
                raise InfrastructureError(
                    f"the key store holds no key for {len(never)} item(s) of content, and never destroyed one: "
                    "it is not the key store this content was sealed with (docs/guides/encryption.md)"
                )

    def readable(self, key_id: str | None) -> bool:
        """Whether content sealed under ``key_id`` can be opened (plain content can)."""
        return key_id is None or self._keys.get(key_id) is not None

    def open(self, key_id: str | None, value: str | None, *, bound_to: str) -> str | None:
        """``value`` opened (as it is when plain or NULL); SealedInvalid when it does not open."""
        if value is None or key_id is None:
            return value
        key = self._keys.get(key_id)
        if key is None:
            raise LookupError(f"key {key_id} is destroyed: check readable() first")
        return unseal_text(key, value, bound_to=bound_to)


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
    key was destroyed is purged, and left out."""
    # part, id, provider_event_id, author, body, key_id, occurred_at
    rows = [row for row in read.events if opened.readable(row[5])]
    keys = {row[1]: row[5] for row in rows}
    attached: dict[str, list[Attachment]] = defaultdict(list)
    for row in read.attachments:  # part, id, event_id, blob_id, binding, name, -, size
        if row[2] in keys:
            name = opened.open(keys[row[2]], row[5], bound_to=name_bound(row[1]))
            attached[row[2]].append(Attachment(row[1], row[3], Binding(row[4]), name, int(row[7])))  # type: ignore[arg-type]
    when = content_queries.utc_from_texts([row[6] for row in rows])
    return [
        make_event(
            row[1],
            row[2],
            row[3],
            at,
            opened.open(row[5], row[4], bound_to=body_bound(row[1])),
            tuple(attached[row[1]]) if row[1] in attached else (),
        )
        for row, at in zip(rows, when, strict=True)
    ]


def opened_blob(raw: BinaryIO, key: bytes, blob_id: str) -> BinaryIO:
    """A blob's file opened under its key, its first chunk already checked (so a file that
    does not open fails here, before a response begins, not in the middle of one)."""
    stream = open_sealed(raw, key, bound_to=blob_bound(blob_id))
    try:
        stream.peek(1)
    except SealedInvalid:
        stream.close()
        raise InfrastructureError(
            f"blob {blob_id}: its file does not open under its key (damaged or replaced)"
        ) from None
    except BaseException:
        stream.close()
        raise
    return stream
