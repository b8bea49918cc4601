"""A content purge's scope and its dependency report (the preview).

``scope_digest`` is the SHA-256 of the canonical JSON of exactly what the report shows,
except the marks on events that are already fenced: a purge that fences some of them in the
meantime does not make a confirmation stale, it only leaves less to fence.

A scope selects at most ``MAX_SCOPE_EVENTS`` events; a larger selection is refused with a
``ValidationError`` that asks for a narrower scope.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from commands import validation
from schema import content, purges
from schema.errors import ConversationPurged, NotFound, ValidationError
from schema.idlists import Ids
from schema.ledger import canonical_json, sha256_hex, utc_text
from schema.states import ConversationState, RunStatus, TombstoneKind

MAX_SCOPE_EVENTS = 10_000
DIGEST_VERSION = 2  # 2: the legal holds' marks

DISCLOSURES = (
    "Database backups, dumps and replicas made before the purge still hold the content; restore them "
    "only through `purgectl ledger merge`, which re-applies every purge before content is readable.",
    "PostgreSQL keeps removed rows in its data files until the space is reused (VACUUM FULL of the "
    "affected tables is the operator's option); SQLite overwrites removed rows (secure_delete), but its "
    "WAL may hold copies until the next checkpoint.",
    "Copies held by providers (the chat platform, model providers) are not recalled.",
    "Logs, exports and files outside purgekeeper's roots are not wiped.",
    "Attachment bytes shared with content outside the scope are kept, and the other references are named.",
)


@dataclass(frozen=True)
class EventScope:
    """What a content purge selects: ``event_ids``, or a ``conversation_id`` with an optional
    ``after <= occurred_at < before`` window or an ``author``. Time range and author are
    metadata of the resolved ids; the ledger records the ids."""

    event_ids: tuple[str, ...] | None = None
    conversation_id: str | None = None
    after: dt.datetime | None = None
    before: dt.datetime | None = None
    author: str | None = None

    def __post_init__(self) -> None:
        if self.event_ids is not None:
            ids = validation.check_id_list(self.event_ids, "event_ids", max_count=MAX_SCOPE_EVENTS)
            if not ids:
                raise ValidationError("event_ids must name at least one event")
            object.__setattr__(self, "event_ids", tuple(ids))
            if any(v is not None for v in (self.conversation_id, self.after, self.before, self.author)):
                raise ValidationError("a scope selects either event_ids or a conversation, not both")
            return
        if self.conversation_id is None:
            raise ValidationError("a scope needs event_ids or a conversation_id")
        validation.check_id(self.conversation_id, "conversation_id")
        object.__setattr__(self, "after", aware(self.after, "after"))
        object.__setattr__(self, "before", aware(self.before, "before"))
        if self.after and self.before and self.after >= self.before:
            raise ValidationError("after must be earlier than before")
        if self.author is not None:
            validation.check_text(self.author, "author", max_length=validation.MAX_AUTHOR_LENGTH)

    def canonical(self) -> dict[str, Any]:
        """The scope as the ledger records it (metadata beside the resolved ids)."""
        if self.event_ids is not None:
            return {"event_ids": sorted(self.event_ids)}
        return {
            "conversation_id": self.conversation_id,
            "after": self.after,
            "before": self.before,
            "author": self.author,
        }


def aware(value: Any, name: str) -> dt.datetime | None:
    if value is None:
        return None
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise ValidationError(f"{name} must be a timezone-aware datetime")
    return validation.to_utc(value, name)


# -- the report ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreviewEvent:
    id: str
    provider_event_id: str | None
    author: str
    occurred_at: dt.datetime
    placements: tuple[str, ...]
    already_fenced: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class PreviewAdmission:
    id: str
    event_id: str
    run_id: str


@dataclass(frozen=True)
class PreviewRun:
    id: str
    conversation_id: str
    bot_id: str
    status: str
    has_output: bool


@dataclass(frozen=True)
class PreviewDerivative:
    id: str
    conversation_id: str
    kind: str
    source_event_ids: tuple[str, ...]


@dataclass(frozen=True)
class Reference:
    attachment_id: str
    event_id: str
    binding: str


@dataclass(frozen=True)
class PreviewAttachment:
    id: str
    event_id: str
    blob_id: str
    binding: str
    name: str
    size: int
    other_references: tuple[Reference, ...] = ()


@dataclass(frozen=True)
class HeldEvent:
    """A selected event a legal hold covers (by its author, or a conversation it is placed
    in): a confirmation raises ``LegalHold`` while it does."""

    event_id: str
    hold_ids: tuple[str, ...]


@dataclass(frozen=True)
class PurgePreview:
    """The dependency report of a content purge. ``runs`` are the runs that admitted a
    selected event (their outputs are NULLed too); ``blocking_runs`` are the non-terminal
    runs that refuse the purge (in a conversation of a selected event, or admitting one);
    ``held`` marks the selected events legal holds cover (the digest covers the marks)."""

    scope: EventScope
    events: tuple[PreviewEvent, ...]
    admissions: tuple[PreviewAdmission, ...]
    runs: tuple[PreviewRun, ...]
    derivatives: tuple[PreviewDerivative, ...]
    exclusive_attachments: tuple[PreviewAttachment, ...]
    shared_attachments: tuple[PreviewAttachment, ...]
    blocking_runs: tuple[PreviewRun, ...]
    disclosures: tuple[str, ...]
    scope_digest: str
    held: tuple[HeldEvent, ...] = ()

    @property
    def event_ids(self) -> tuple[str, ...]:
        return tuple(e.id for e in self.events)

    @property
    def already_fenced(self) -> tuple[str, ...]:
        return tuple(e.id for e in self.events if e.already_fenced)

    @property
    def conversation_ids(self) -> tuple[str, ...]:
        return tuple(sorted({c for e in self.events for c in e.placements}))

    def id_summary(self) -> dict[str, list[str]]:
        """What the preview showed, as ids only: kept to name what changed when stale."""
        return {
            "events": list(self.event_ids),
            "placements": sorted(f"{e.id}@{c}" for e in self.events for c in e.placements),
            "admissions": [a.id for a in self.admissions],
            "runs with outputs": [r.id for r in self.runs],
            "derivatives": [d.id for d in self.derivatives],
            "exclusive attachments": [a.id for a in self.exclusive_attachments],
            "shared attachments": [a.id for a in self.shared_attachments],
            "blocking runs": [r.id for r in self.blocking_runs],
            "held events": [h.event_id for h in self.held],
        }


def build_report(conn: Connection, scope: EventScope, *, lock: bool = False) -> PurgePreview:
    """Resolve the scope now and report everything the purge would touch. With ``lock``
    (confirmation), the conversations and then the events are locked exclusively first, in id
    order, and the report is read under those locks."""
    event_ids, rows = _select_events(conn, scope, lock=lock)
    found = purges.report_rows(conn, event_ids)
    placements = _group(found.placements, "event_id", "conversation_id")
    events = []
    hashed_events = []  # what _hashable makes of each event, made here in the same pass
    for event_id, provider_id, author, occurred_at, fenced in rows:  # purges.event_rows' columns
        where = tuple(placements[event_id])
        events.append(PreviewEvent(event_id, provider_id, author, occurred_at, where, bool(fenced)))
        hashed_events.append(_hashed_event(event_id, provider_id, author, occurred_at, where))
    admitted = found.admissions
    admissions = tuple(PreviewAdmission(r.id, r.event_id, r.run_id) for r in admitted)
    runs = {r.run_id: PreviewRun(r.run_id, r.conversation_id, r.bot_id, r.status, bool(r.has_output)) for r in admitted}
    blocking = {r.id: _run(r) for r in found.active_runs}
    blocking.update({run.id: run for run in runs.values() if not RunStatus(run.status).is_terminal})
    exclusive, shared = _attachments(found)
    return _with_digest(
        {"events": hashed_events},
        scope=scope,
        events=tuple(events),
        admissions=admissions,
        runs=tuple(runs[run_id] for run_id in sorted(runs)),
        derivatives=_derivatives(found.derivatives),
        exclusive_attachments=exclusive,
        shared_attachments=shared,
        blocking_runs=tuple(blocking[run_id] for run_id in sorted(blocking)),
        disclosures=DISCLOSURES,
        held=_held(found.holds),
    )


def _select_events(conn: Connection, scope: EventScope, *, lock: bool) -> tuple[list[str], list[Any]]:
    if scope.event_ids is not None:
        chosen = Ids(sorted(scope.event_ids))  # bound to every statement of the report, encoded once
        if lock:
            purges.lock_conversations_of(conn, chosen)
        rows = purges.event_rows(conn, chosen, lock=lock)
        missing = sorted(set(chosen) - {r.id for r in rows})
        if missing:
            raise NotFound(f"no event {missing[0]}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        return chosen, rows
    conversation_id = scope.conversation_id or ""
    require_purgeable_conversation(conn, conversation_id)
    ids = _events_in_scope(conn, scope)
    if lock:  # events placed before the lock are re-read under it
        purges.lock_conversations(conn, [conversation_id, *purges.conversations_of(conn, ids)])
        ids = _events_in_scope(conn, scope)
    selected = Ids(ids)
    return selected, purges.event_rows(conn, selected, lock=lock)


def _events_in_scope(conn: Connection, scope: EventScope) -> list[str]:
    ids = purges.events_in_conversation(
        conn,
        scope.conversation_id or "",
        after=scope.after,
        before=scope.before,
        author=scope.author,
        limit=MAX_SCOPE_EVENTS + 1,
    )
    if len(ids) > MAX_SCOPE_EVENTS:
        raise ValidationError(
            f"the scope selects more than {MAX_SCOPE_EVENTS} events; narrow the time range, "
            "or purge the whole conversation"
        )
    if not ids:
        raise ValidationError("the scope selects no events")
    return sorted(ids)


def require_purgeable_conversation(conn: Connection, conversation_id: str) -> None:
    """NotFound for an unknown conversation, ConversationPurged for a purged one."""
    if content.is_tombstoned(conn, [TombstoneKind.CONVERSATION], conversation_id):
        raise ConversationPurged(f"conversation {conversation_id} is already purged")
    row = content.conversation_row(conn, conversation_id)
    if row is None:
        raise NotFound(f"no conversation {conversation_id}")
    if row.state == ConversationState.PURGED:
        raise ConversationPurged(f"conversation {conversation_id} is already purged")


def _run(row: Any) -> PreviewRun:
    return PreviewRun(row.id, row.conversation_id, row.bot_id, row.status, bool(row.has_output))


def _group(rows: Sequence[Any], key: str, value: str) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    if not rows:
        return grouped
    fields = rows[0]._fields
    at_key, at_value = fields.index(key), fields.index(value)  # by position: a thousand rows
    for row in rows:
        grouped[row[at_key]].append(row[at_value])
    return grouped


def _held(rows: Sequence[tuple[str, str]]) -> tuple[HeldEvent, ...]:
    by_event: dict[str, set[str]] = defaultdict(set)
    for event_id, hold_id in rows:
        by_event[event_id].add(hold_id)
    return tuple(HeldEvent(event_id, tuple(sorted(ids))) for event_id, ids in sorted(by_event.items()))


def _derivatives(rows: Sequence[Any]) -> tuple[PreviewDerivative, ...]:
    sources = _group(rows, "id", "event_id")
    found = {row.id: row for row in rows}
    return tuple(PreviewDerivative(d.id, d.conversation_id, d.kind, tuple(sources[d.id])) for d in found.values())


def _attachments(found: purges.ReportRows) -> tuple[tuple[PreviewAttachment, ...], tuple[PreviewAttachment, ...]]:
    """Split into exclusive (bytes deleted) and shared (bytes kept, other references named)."""
    rows = found.attachments
    others: dict[str, list[Reference]] = defaultdict(list)
    for ref in found.other_references:
        others[ref.blob_id].append(Reference(ref.id, ref.event_id, ref.binding))
    exclusive: list[PreviewAttachment] = []
    shared: list[PreviewAttachment] = []
    for r in rows:
        item = PreviewAttachment(r.id, r.event_id, r.blob_id, r.binding, r.name, int(r.size), tuple(others[r.blob_id]))
        (shared if item.other_references else exclusive).append(item)
    return tuple(exclusive), tuple(shared)


def _hashed_event(
    event_id: str, provider_event_id: str | None, author: str, occurred_at: dt.datetime, placements: tuple[str, ...]
) -> dict[str, Any]:
    """What ``_hashable`` makes of a ``PreviewEvent`` (its canonical JSON is the same)."""
    return {
        "id": event_id,
        "provider_event_id": provider_event_id,
        "author": author,
        "occurred_at": utc_text(occurred_at),
        "placements": placements,
    }


def _with_digest(hashed_already: dict[str, Any], **sections: Any) -> PurgePreview:
    """The preview and its digest; ``hashed_already`` holds sections in the form _hashable
    would give them (a thousand events, made in the pass that made the events)."""
    hashed = {
        name: hashed_already[name] if name in hashed_already else _hashable(value)
        for name, value in sections.items()
        if name != "scope"
    }
    hashed["scope"] = sections["scope"].canonical()
    hashed["digest_version"] = DIGEST_VERSION
    return PurgePreview(**sections, scope_digest=sha256_hex(canonical_json(hashed)))


# per type: its hashed fields and a getter of them all at once, or None (not a dataclass)
_HASHED_FIELDS: dict[type, tuple[tuple[str, ...], Callable[[Any], Any]] | None] = {}
_AS_IS = frozenset({str, int, bool, float, type(None), dt.datetime})  # hashed as they are


def _hashable(value: Any) -> Any:
    """The report as plain lists and dicts (a thousand events are 6,000 fields: the plain
    values are taken as they are, without a call each)."""
    if isinstance(value, tuple):
        return [v if type(v) in _AS_IS else _hashable(v) for v in value]
    kind = type(value)
    known = _HASHED_FIELDS.get(kind, ())
    if known == ():
        known = _HASHED_FIELDS[kind] = _fields_of(kind)
    if known is None:
        return value
    names, get = known  # type: ignore[misc]
    return dict(zip(names, [v if type(v) in _AS_IS else _hashable(v) for v in get(value)], strict=True))


def _fields_of(kind: type) -> tuple[tuple[str, ...], Callable[[Any], Any]] | None:
    fields = getattr(kind, "__dataclass_fields__", None)
    if not fields:
        return None
    names = tuple(n for n in fields if n != "already_fenced")  # the mark is shown, never hashed
    getter = operator.attrgetter(*names)
    return names, (getter if len(names) > 1 else lambda value: (getter(value),))


def describe_changes(before: dict[str, list[str]] | None, now: PurgePreview) -> str:
    """Name what changed between a saved preview and the scope as it is now."""
    if before is None:
        return "the scope no longer matches the reviewed digest (the preview is unknown or expired); preview it again"
    changes = []
    for section, ids in now.id_summary().items():
        added = sorted(set(ids) - set(before.get(section, [])))
        removed = sorted(set(before.get(section, [])) - set(ids))
        if added:
            changes.append(f"{section} added: {_few(added)}")
        if removed:
            changes.append(f"{section} removed: {_few(removed)}")
    detail = "; ".join(changes) or "the report's details changed"
    return f"the scope changed since the preview ({detail}); preview it again"


def _few(ids: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")
