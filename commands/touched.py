"""What a purge touched and where its failures are, and finding purges: the operator's reads
behind the console's page of one purge and its search box.

- **What it touched** (:class:`PurgeTouched`) comes from its ledger row's selectors (the
  conversations, the erased author, the deleted bot, a hold's subjects, a policy) and from its
  own event tombstones (how many events it fenced so far, how many attachments those carry,
  and where an author erasure reached). Ids and counts only: never a body, a payload or an
  attachment's name.
- **Where a failure is** (:class:`FailurePlace`): a step's error names a blob by id
  (``purgekeeper.storage.blobstore.discard_failed``); the place is the root it lives under, by its setting
  and the root directory's own name, and its path relative to that root. A canonical path
  holds no attachment name; a path of the layout before 0005 does, so only its directory is
  given.
- **Finding** (:class:`PurgeSearch`): the purges whose id begins with what was typed, the
  purges that name a conversation of that id, the rows of the legal hold and of the retention
  policy of that id, and the purges of that actor (the rows they accepted, the purges they
  retried). What is no id (an operator's name with a space) is looked for as an actor only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from purgekeeper.commands import kinds, validation
from purgekeeper.commands.kinds.selector_fields import RowInvalid
from purgekeeper.commands.settings import Settings
from purgekeeper.schema import ledger, purge_touched, purges
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import NotFound, ValidationError
from purgekeeper.schema.states import BlobKind
from purgekeeper.storage import blobstore

COUNT_CAP = 10_000  # counts stop here ("10000+"): a page of one purge reads a bounded number of rows
LISTED_CONVERSATIONS = 50
SEARCH_LIMIT = 20
MAX_QUERY_LENGTH = 200  # an id's, and an actor's (purgekeeper.commands.kinds.skeleton.MAX_ACTOR_LENGTH)
# The text ``purgekeeper.storage.blobstore.discard_failed`` gives a failed unlink: its blob, by id.
FAILED_BLOB = re.compile(r"could not unlink the file of blob ([0-9A-Za-z_-]{4,64})")
ROOTS = {
    BlobKind.FILE: ("file root", "PURGEKEEPER_FILE_ROOT"),
    BlobKind.CAS: ("blob root", "PURGEKEEPER_BLOB_ROOT"),
}


@dataclass(frozen=True)
class FailurePlace:
    """Where to act on a failed unlink: ``root`` ("file root") set by ``setting``, whose
    directory is called ``directory``, and ``path`` below it (``05/7b/<blob id>``; ``complete``
    False: only the directory of an older layout's file, whose name is the attachment's)."""

    blob_id: str
    root: str
    setting: str
    directory: str
    path: str
    complete: bool = True

    @property
    def shown(self) -> str:
        """``files/05/7b/<blob id>``: the root directory's name and the path below it."""
        return f"{self.directory}/{self.path}"


@dataclass(frozen=True)
class PurgeTouched:
    """What a purge touched, in ids and counts. ``events`` and ``attachments`` count what it
    fenced so far (up to ``cap``; None for a kind that fences no events), ``already_fenced`` the
    events an earlier purge had fenced. ``conversations``: those its row names, or where its
    fenced events are placed (``more_conversations``: the list is cut)."""

    purge_id: str
    kind: str
    conversations: tuple[str, ...] = ()
    more_conversations: bool = False
    authors: tuple[str, ...] = ()
    bot_id: str | None = None
    erase_memory: bool = False
    hold_id: str | None = None
    policy_id: str | None = None
    events: int | None = None
    attachments: int | None = None
    already_fenced: int = 0
    cap: int = COUNT_CAP
    failures: Mapping[str, FailurePlace] = field(default_factory=dict)  # by blob id

    def places_in(self, error: str | None) -> list[FailurePlace]:
        """The places an error text names (its failed blobs), in the order it names them."""
        return places_in(error, self.failures)


@dataclass(frozen=True)
class PurgeSearch:
    """What a search found, each list newest first: purges whose id begins with ``query``
    (``by_id``), that name the conversation ``query`` (``by_conversation``), the rows that
    placed and released the legal hold ``query`` (``by_hold``), that set, removed and ran the
    retention policy ``query`` (``by_policy``), and the purges the actor ``query`` accepted or
    retried (``by_actor``); ``more``: a list was cut at the limit."""

    query: str
    by_id: tuple[str, ...]
    by_conversation: tuple[str, ...]
    more: bool
    by_hold: tuple[str, ...] = ()
    by_policy: tuple[str, ...] = ()
    by_actor: tuple[str, ...] = ()

    @property
    def purge_ids(self) -> tuple[str, ...]:
        """Every purge found, once."""
        found = (*self.by_id, *self.by_conversation, *self.by_hold, *self.by_policy, *self.by_actor)
        return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class FailurePlaces:
    """Where failed unlinks are, under ``blob_root`` and ``file_root``: a place names the root
    by its setting and its directory's name, never its whole path (the console's purge page
    and ``purgectl status`` both show them)."""

    blob_root: Path
    file_root: Path

    @classmethod
    def of(cls, settings: Settings) -> FailurePlaces:
        return cls(settings.blob_root, settings.file_root)

    def found(self, conn: Connection, errors: Iterable[str | None]) -> dict[str, FailurePlace]:
        """The places of the blobs these error texts name, by blob id."""
        blob_ids = {blob_id for error in errors if error for blob_id in FAILED_BLOB.findall(error)}
        if not blob_ids:
            return {}
        return {row.id: self.place(row) for row in purge_touched.blob_places(conn, sorted(blob_ids))}

    def place(self, row: Any) -> FailurePlace:
        """Where a blob's file is: its root and the path below it, never an attachment name."""
        kind = BlobKind(row.kind)
        root, setting = ROOTS[kind]
        directory = (self.file_root if kind is BlobKind.FILE else self.blob_root).name
        if row.path in blobstore.canonical_paths(row.id, kind, row.sha256):
            return FailurePlace(row.id, root, setting, directory, row.path)
        return FailurePlace(row.id, root, setting, directory, "/".join(row.path.split("/")[:2]) + "/", complete=False)


def places_in(error: str | None, failures: Mapping[str, FailurePlace]) -> list[FailurePlace]:
    """The places an error text names (its failed blobs), in the order it names them."""
    found = FAILED_BLOB.findall(error or "")
    return [failures[blob_id] for blob_id in dict.fromkeys(found) if blob_id in failures]


class TouchedCommands:
    """The reads of :class:`commands.Purgekeeper` behind the console's purge page and search
    (each documented there): on ``db``, with the roots ``settings`` name."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self.places = FailurePlaces.of(settings)

    def purge_touched(self, purge_id: str) -> PurgeTouched:
        """What the purge touched, in ids and counts (its conversations, events and attachments
        fenced so far, the erased author, the deleted bot, a hold's subjects), and where each
        failed unlink its steps report is (the root and the path below it). Never content."""
        validation.check_id(purge_id, "purge_id")
        with self.db.read() as conn:
            entry = ledger.entry_by_purge_id(conn, purge_id)
            if entry is None:
                raise NotFound(f"no purge {purge_id}")
            return PurgeTouched(
                purge_id=purge_id,
                kind=entry.kind,
                **_subjects(conn, entry),
                **_fenced(conn, entry),
                failures=self._failures(conn, purge_id),
            )

    def find_purges(self, query: str, *, limit: int = SEARCH_LIMIT) -> PurgeSearch:
        """The purges whose id begins with ``query``, those that name the conversation, the
        legal hold or the retention policy ``query``, and those the actor ``query`` accepted or
        retried, newest first, at most ``limit`` of each. A query that is no id is looked for
        as an actor only; one too long for an actor is a ValidationError."""
        typed = query.strip() if isinstance(query, str) else query
        wanted = validation.check_text(typed, "search", max_length=MAX_QUERY_LENGTH)
        with self.db.read() as conn:
            found = _by_ids(conn, wanted, limit + 1) if _is_id(wanted) else {}
            found["actor"] = purge_touched.actor_rows(conn, wanted, limit=limit + 1)
        more = any(len(ids) > limit for ids in found.values())
        way = {name: tuple(found.get(name, [])[:limit]) for name in ("id", "conversation", "hold", "policy", "actor")}
        return PurgeSearch(
            wanted, way["id"], way["conversation"], more, way["hold"], way["policy"], by_actor=way["actor"]
        )

    def _failures(self, conn: Connection, purge_id: str) -> dict[str, FailurePlace]:
        errors = [row.last_error for row in purges.steps_of(conn, [purge_id])]
        errors += [row.error for row in purges.attempts_of(conn, purge_id)]
        return self.places.found(conn, errors)

    def place(self, row: Any) -> FailurePlace:
        """Where a blob's file is (``FailurePlaces.place``)."""
        return self.places.place(row)


def _is_id(text: str) -> bool:
    try:
        validation.check_id(text, "search")
    except ValidationError:
        return False
    return True


def _by_ids(conn: Connection, wanted: str, limit: int) -> dict[str, list[str]]:
    """What an id finds, newest first, at most ``limit`` of each: purges whose id begins with
    it, and the rows of the conversation, the hold and the policy of that id."""
    where = purges.LedgerFilter(conversation_id=wanted)
    return {
        "id": purge_touched.purge_ids_starting(conn, wanted, limit=limit),
        "conversation": [row.purge_id for row in purges.list_ledger(conn, where=where, limit=limit, before_seq=None)],
        "hold": purge_touched.hold_rows(conn, wanted),
        "policy": purge_touched.policy_rows(conn, wanted, limit=limit),
    }


def _subjects(conn: Connection, entry: ledger.LedgerEntry) -> dict[str, Any]:
    """Who and what the row names: conversations, authors (an erasure's ``author``, a hold's
    ``authors``; a retention run's ``held_authors`` are the holds' to show), a bot, a hold, a
    policy."""
    selectors = entry.selectors
    named = _conversations_named(conn, entry)
    authors = [str(selectors["author"])] if "author" in selectors else _texts(selectors.get("authors"))
    return {
        "conversations": tuple(named[:LISTED_CONVERSATIONS]),
        "more_conversations": len(named) > LISTED_CONVERSATIONS,
        "authors": tuple(authors),
        "bot_id": str(selectors["bot_id"]) if "bot_id" in selectors else None,
        "erase_memory": bool(selectors.get("erase_memory")),
        "hold_id": str(selectors["hold_id"]) if "hold_id" in selectors else None,
        "policy_id": str(selectors["policy_id"]) if "policy_id" in selectors else None,
    }


def _conversations_named(conn: Connection, entry: ledger.LedgerEntry) -> list[str]:
    try:
        named = kinds.kind_of(entry.kind).conversations(conn, entry.selectors)
    except RowInvalid:
        named = []
    if not named and _cleans(entry):
        named = purge_touched.conversations_of_fenced(conn, entry.purge_id, limit=LISTED_CONVERSATIONS + 1)
    return sorted(set(named))


def _fenced(conn: Connection, entry: ledger.LedgerEntry) -> dict[str, Any]:
    """How many events the purge fenced so far and how many attachments they carry."""
    if not _cleans(entry):
        return {}
    return {
        "events": purge_touched.fenced_event_count(conn, entry.purge_id, cap=COUNT_CAP),
        "attachments": purge_touched.attachment_count(conn, entry.purge_id, cap=COUNT_CAP),
        "already_fenced": len(entry.selectors.get("already_fenced") or []),
    }


def _cleans(entry: ledger.LedgerEntry) -> bool:
    """Whether the row's kind has a bodies step: those fence events as they clean (tombstones
    by this purge), the others fence no event."""
    try:
        return kinds.kind_of(entry.kind).bodies is not None
    except RowInvalid:
        return False


def _texts(values: Iterable[Any] | None) -> list[str]:
    return [str(value) for value in values or []]
