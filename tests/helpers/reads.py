"""Raw reads of the database behind a handle."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from sqlalchemy import text

import purgekeeper


def rows(pk: purgekeeper.Purgekeeper, sql: str, **params: Any) -> list[Any]:
    with pk.db.read() as conn:
        return list(conn.execute(text(sql), params))


def scalar(pk: purgekeeper.Purgekeeper, sql: str, **params: Any) -> Any:
    with pk.db.read() as conn:
        return conn.execute(text(sql), params).scalar()


# Content is sealed at rest (purgekeeper.commands.sealed_content): these open what a raw read
# finds, with the handle's key store, as a test that checks a value needs it.
_SEALED = {
    "body": ("SELECT body, key_id FROM events WHERE id = :id", "event:{id}:body"),
    "name": (
        "SELECT a.name, e.key_id FROM attachments a JOIN events e ON e.id = a.event_id WHERE a.id = :id",
        "attachment:{id}:name",
    ),
    "payload": ("SELECT payload, key_id FROM admissions WHERE id = :id", "admission:{id}:payload"),
    "output": ("SELECT output, key_id FROM runs WHERE id = :id", "run:{id}:output"),
    "derivative": ("SELECT payload, key_id FROM derivatives WHERE id = :id", "derivative:{id}:payload"),
}


def opened(pk: purgekeeper.Purgekeeper, what: str, row_id: str) -> str | None:
    """The ``body`` of an event, the ``name`` of an attachment, the ``payload`` of an
    admission, the ``output`` of a run or the payload of a ``derivative``, as stored, opened
    with the handle's key store: None when NULL (or no row), the value as it is when plain
    (``key_id`` NULL), and ``"<shredded>"`` when its key was destroyed."""
    from purgekeeper.storage.sealing import unseal_text

    sql, bound = _SEALED[what]
    found = rows(pk, sql, id=row_id)
    if not found or found[0][0] is None:
        return None
    value, key_id = found[0]
    if key_id is None:
        return str(value)
    key = pk.key_store.get([key_id])[key_id]
    if key is None:
        return "<shredded>"
    return unseal_text(key, value, bound_to=bound.format(id=row_id))


def body_of(pk: purgekeeper.Purgekeeper, event_id: str) -> str | None:
    """The event's body as stored, opened (``opened``)."""
    return opened(pk, "body", event_id)


def bodies(pk: purgekeeper.Purgekeeper, sql: str = "SELECT id FROM events", **params: Any) -> dict[str, str | None]:
    """Each event's body (``body_of``), for the event ids ``sql`` selects."""
    return {row[0]: body_of(pk, row[0]) for row in rows(pk, sql, **params)}


def blob_bytes(pk: purgekeeper.Purgekeeper, blob_id: str, path: Path | None = None) -> bytes:
    """The blob's bytes as its file holds them, opened with the blob's key (``blobs.key_id``),
    as they are when plain (``key_id`` NULL). ``path``: where the file is, when not at the
    blob's path under its root (a test that moved it). A missing file raises
    FileNotFoundError, a destroyed key AssertionError, a file that does not open
    SealedInvalid."""
    from purgekeeper.storage.sealed_files import open_sealed

    found = rows(pk, "SELECT kind, path, key_id FROM blobs WHERE id = :id", id=blob_id)
    assert found, f"no blob {blob_id}"
    kind, relative, key_id = found[0]
    raw = (path or pk.blobs.root(kind) / relative).read_bytes()
    if key_id is None:
        return raw
    key = pk.key_store.get([key_id])[key_id]
    assert key is not None, f"the key of blob {blob_id} was destroyed"
    with open_sealed(io.BytesIO(raw), key, bound_to=f"blob:{blob_id}") as plain:
        return plain.read()


_CONTENT_ROWS = {
    "body": "SELECT id FROM events",
    "name": "SELECT id FROM attachments",
    "payload": "SELECT id FROM admissions",
    "output": "SELECT id FROM runs",
    "derivative": "SELECT id FROM derivatives",
}


def all_opened(pk: purgekeeper.Purgekeeper) -> dict[tuple[str, str], str]:
    """Every value of content the database holds (sealed or plain), opened (``opened``), by
    what it is and its row's id; NULL ones are left out, and one whose key was destroyed
    reads ``"<shredded>"``. A raw scan of the tables finds ciphertext only: search this."""
    found = {(what, row[0]): opened(pk, what, row[0]) for what, sql in _CONTENT_ROWS.items() for row in rows(pk, sql)}
    return {where: value for where, value in found.items() if value is not None}
