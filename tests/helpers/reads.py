"""Raw reads of the database behind a handle."""

from __future__ import annotations

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
    admission, the ``output`` of a run or the payload of a ``derivative``, as stored, opened with the handle's key store: None when NULL (or no row),
    the value as it is when plain (``key_id`` NULL), and ``"<shredded>"`` when its key was
    destroyed."""
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
