"""Factories for what most tests start from, made through the handle's own API (never raw SQL):
a conversation with some events, an event with CAS and real-file attachments, and purges (a
content purge previewed and confirmed, a conversation purge).

    conversation(pk, "c1", events=3)                    # c1-e0, c1-e1, c1-e2 by ada
    event = event_with_attachments(pk, "c1", cas=[b"x"], files=[("notes.txt", b"y")])
    purge_id = purge_events(pk, event.id)               # previewed, confirmed, accepted
    purge_id = purge_conversation(pk, "c1")

Attachments go through ``pk.ingest_event`` as a host sends them: a CAS attachment is stored
once by its hash under the blob root (``NewAttachment.cas``), a real-file one as a file of its
own under the file root (``NewAttachment.file``). Each is given as its bytes (named
``cas-<n>.txt`` or ``file-<n>.txt``, ``n`` counting from 0 in each list) or as
``(name, bytes)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import purgekeeper
from purgekeeper import EventScope, NewAttachment

Pk = purgekeeper.Purgekeeper
Attachable = bytes | tuple[str, bytes]
WHO: dict[str, Any] = {"actor": "ops@example.org", "reason": "the user asked"}


def conversation(
    pk: Pk,
    conversation_id: str = "c1",
    *,
    events: int = 0,
    author: str = "ada",
    prefix: str | None = None,
    **options: Any,
) -> list[purgekeeper.Event]:
    """Conversation ``conversation_id`` (``options`` go to ``create_conversation``: ``kind``,
    ``bot_id``) with ``events`` events by ``author``: ids ``<prefix>0``, ``<prefix>1``, ...
    (``prefix`` is ``<conversation_id>-e`` unless given), bodies ``body 0``, ``body 1``, ..."""
    pk.create_conversation(conversation_id, **options)
    start = f"{conversation_id}-e" if prefix is None else prefix
    return [
        pk.ingest_event(conversation_id, author=author, body=f"body {n}", event_id=f"{start}{n}") for n in range(events)
    ]


def _named(items: Sequence[Attachable], kind: str) -> list[tuple[str, bytes]]:
    return [item if isinstance(item, tuple) else (f"{kind}-{n}.txt", item) for n, item in enumerate(items)]


def event_with_attachments(
    pk: Pk,
    conversation_id: str,
    *,
    cas: Sequence[Attachable] = (),
    files: Sequence[Attachable] = (),
    author: str = "ada",
    body: str | None = "a body",
    **options: Any,
) -> purgekeeper.Event:
    """One event in ``conversation_id`` (which must exist) with the CAS attachments ``cas`` and
    then the real-file attachments ``files``; ``options`` go to ``ingest_event`` (``event_id``,
    ``provider_event_id``, ``occurred_at``)."""
    attachments = [NewAttachment.cas(data, name=name) for name, data in _named(cas, "cas")]
    attachments += [NewAttachment.file(data, name=name) for name, data in _named(files, "file")]
    return pk.ingest_event(conversation_id, author=author, body=body, attachments=attachments, **options)


def confirm_events(pk: Pk, *event_ids: str, who: dict[str, Any] = WHO, **options: Any) -> purgekeeper.Acceptance:
    """A content purge of ``event_ids``, previewed and confirmed with the preview's digest
    (``options`` go to ``confirm_purge``: ``idempotency_key``, ...), whatever its outcome."""
    scope = EventScope(event_ids=tuple(event_ids))
    return pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **who, **options)


def purge_events(pk: Pk, *event_ids: str, who: dict[str, Any] = WHO, **options: Any) -> str:
    """``confirm_events``, accepted: the new purge's id."""
    acceptance = confirm_events(pk, *event_ids, who=who, **options)
    assert acceptance.outcome == "accepted"
    return acceptance.purge_id


def purge_conversation(pk: Pk, conversation_id: str, *, who: dict[str, Any] = WHO, **options: Any) -> str:
    """A conversation purge, accepted: the new purge's id."""
    acceptance = pk.purge_conversation(conversation_id, **who, **options)
    assert acceptance.outcome == "accepted"
    return acceptance.purge_id
