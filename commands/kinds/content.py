"""A content purge: the events a scope selects (by ids, or a conversation with a window or
an author), previewed with their dependency report and confirmed with its digest.

``scope_digest`` is the SHA-256 of the canonical JSON of exactly what the report shows,
except the marks on events that are already fenced: a purge that fences some of them in the
meantime does not make a confirmation stale, it only leaves less to fence, and one that fences
them all makes it ``already_purged``, whatever the digest (its cleanup changes the report). The records the
report is made of are the API's (``purgekeeper.commands.scope``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import operator
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from purgekeeper.commands import scope as scopes  # MAX_SCOPE_EVENTS read at each call (a test narrows it)
from purgekeeper.commands import sealed_content
from purgekeeper.commands.kinds import selector_fields, skeleton
from purgekeeper.commands.kinds.kind import Already, Decision, Env, Kind
from purgekeeper.commands.scope import (
    DIGEST_VERSION,
    DISCLOSURES,
    EventScope,
    HeldEvent,
    PreviewAdmission,
    PreviewAttachment,
    PreviewDerivative,
    PreviewEvent,
    PreviewRun,
    PurgePreview,
    Reference,
    require_purgeable_conversation,
)
from purgekeeper.schema import authors, cleanup_queries, content_queries, ledger, purge_scope, purges, restore, steps
from purgekeeper.schema.errors import NotFound, StaleConfirmation, ValidationError
from purgekeeper.schema.idlists import Ids
from purgekeeper.schema.ledger import canonical_json, sha256_hex, utc_text
from purgekeeper.schema.states import PurgeKind, RunStatus, StepKind, TombstoneKind
from purgekeeper.storage.content_keys import ContentKeys
from purgekeeper.workers import cleanup


@dataclass(frozen=True)
class ScopeConfirmation:
    scope: EventScope
    scope_digest: str


# -- the bodies step (the workers run it: ``purgekeeper.commands.kinds.bodies_steps``) --------------


def null_fenced_content(ctx: cleanup.StepContext, held: steps.Claim, entry: ledger.LedgerEntry) -> cleanup.Ran:
    """NULL the content of the events the ledger row lists (they were fenced at acceptance)."""
    event_ids = list(entry.selectors.get("event_ids", []))
    for start in range(0, len(event_ids), ctx.batch_size):
        batch = event_ids[start : start + ctx.batch_size]
        remaining = max(len(event_ids) - start - len(batch), 0)
        cleanup.run_batch(ctx, held, functools.partial(_null_batch, event_ids=batch, remaining=remaining))
    return cleanup.Ran(finished=bool(event_ids))


def _null_batch(conn: Connection, *, event_ids: list[str], remaining: int) -> dict[str, Any]:
    return {"removed": cleanup_queries.null_content_of(conn, event_ids), "remaining": remaining, "done": remaining == 0}


# -- the kind ---------------------------------------------------------------------------------


class ContentKind(Kind[ScopeConfirmation, PurgePreview]):
    label = "content purge"
    name = PurgeKind.CONTENT
    head_first = False  # the events' row locks serialise it; the head is taken last, for the least time
    policy_lock = "shared"  # a hold on the events waits for it, or it for the hold
    bodies = staticmethod(null_fenced_content)

    def preview(self, conn: Connection, env: Env, scope: EventScope) -> tuple[PurgePreview, dict[str, Any]]:
        report, remembered, _plain = self.preview_read(conn, env, scope)
        return report, remembered

    def preview_read(self, conn: Connection, env: Env, scope: EventScope) -> tuple[PurgePreview, dict[str, Any], bool]:
        """The preview, the gate checked on the head that the report's own statement read
        (``purge_scope.preview_rows``: one statement on PostgreSQL), what to remember of it
        (a stale confirmation names what changed), and whether content not sealed yet is left."""
        if scope.event_ids is None:
            env.gate.require_open(conn)  # before a conversation's filter says what it holds
        event_ids = _resolved(conn, scope)
        read = purge_scope.preview_rows(conn, event_ids)
        env.gate.check_values(conn, read.seq, read.head_hash, read.gate_reason)  # before anything is returned
        _require_found(event_ids, read.events)
        report = report_of(scope, read.events, read.report)
        PREVIEWED.remember(report, read.events, read.report)
        report = _names_opened(conn, report, env.keys)
        return report, report.id_summary(), read.plain_content

    def conversations(self, conn: Connection, selectors: Mapping[str, Any]) -> list[str]:
        """Where its events are placed, as accepted (``conversation_ids``); a row from before
        0010 lacks them: where its events are placed now, and its scope's conversation."""
        if "conversation_ids" in selectors:
            return [str(c) for c in selectors["conversation_ids"]]
        scoped = ((selectors.get("request") or {}).get("scope") or {}).get("conversation_id")
        placed = purges.conversations_of(conn, [str(e) for e in selectors.get("event_ids", [])])
        return sorted({*placed, *([str(scoped)] if scoped else [])})

    def check_selectors(self, selectors: Mapping[str, Any]) -> None:
        selector_fields.ids(selectors, "event_ids", required=True)
        selector_fields.ids(selectors, "already_fenced")
        selector_fields.provider_ids(selectors, "provider_event_ids")
        selector_fields.ids(selectors, "conversation_ids")

    def lock(self, conn: Connection, env: Env, args: ScopeConfirmation) -> PurgePreview:
        """The report, read under the locks; its digest is recomputed from what they read,
        or is the digest this process's preview computed from the very same rows
        (``PREVIEWED``: the report is a function of the scope and the rows alone)."""
        event_ids, rows = _select_events(conn, args.scope, lock=True)
        found = purges.report_rows(conn, event_ids)
        return PREVIEWED.report_of(args.scope_digest, args.scope, rows, found) or report_of(args.scope, rows, found)

    def decide(self, conn: Connection, env: Env, args: ScopeConfirmation, locked: PurgePreview) -> Decision | Already:
        """Nothing left to fence is ``already_purged`` before anything else is looked at: it
        writes nothing, so neither the digest (the covering purge's cleanup changes the report
        it hashed) nor a run started since may refuse it; a repeat after a lost response gets
        the purge it repeats."""
        report = locked
        fresh = [e for e in report.events if not e.already_fenced]
        if not fresh:
            return _covering(conn, report.event_ids)
        fresh_ids = {e.id for e in fresh}
        held = [mark for mark in report.held if mark.event_id in fresh_ids]  # read under the locks
        hold_ids = sorted({hold_id for mark in held for hold_id in mark.hold_ids})
        skeleton.refuse_held(hold_ids, f"events {_few([mark.event_id for mark in held])}")
        if report.scope_digest != args.scope_digest:
            raise StaleConfirmation(describe_changes(purges.saved_preview(conn, args.scope_digest), report))
        skeleton.refuse_active_runs([r.id for r in report.blocking_runs])
        event_ids = sorted(fresh_ids)
        attachments = report.exclusive_attachments + report.shared_attachments
        attached = any(a.event_id in fresh_ids for a in attachments)
        selectors = {
            "event_ids": event_ids,
            "provider_event_ids": sorted(e.provider_event_id for e in fresh if e.provider_event_id),
            "already_fenced": sorted(report.already_fenced),
            "conversation_ids": list(report.conversation_ids),  # where they are placed: for listing
        }
        steps = (StepKind.BODIES, StepKind.ATTACHMENTS) if attached else (StepKind.BODIES,)
        return Decision(selectors, steps, digest=report.scope_digest, touched=report.conversation_ids)

    def fence(self, conn: Connection, purge_id: str, selectors: Mapping[str, Any]) -> None:
        purges.insert_tombstones(
            conn,
            purge_id,
            {
                TombstoneKind.EVENT: selectors.get("event_ids", []),
                TombstoneKind.PROVIDER_EVENT: selectors.get("provider_event_ids", []),
            },
        )

    def left_after_restore(self, conn: Connection, entry: ledger.LedgerEntry) -> list[tuple[StepKind, bool]]:
        needed = []
        if restore.content_left(conn, list(entry.selectors.get("event_ids", []))):
            needed.append((StepKind.BODIES, False))
        if restore.bytes_left(conn, entry.purge_id):
            needed.append((StepKind.ATTACHMENTS, False))
        return needed


def _covering(conn: Connection, event_ids: Sequence[str]) -> Already:
    """The latest purge that fences these events: by event tombstones, or by an author
    erasure whose cleanup has not tombstoned them yet."""
    found = [purges.latest_covering_purge(conn, event_ids), authors.covering_erasure(conn, event_ids)]
    return skeleton.already(max((row for row in found if row is not None), key=lambda row: row.seq or 0))


# -- the preview: the dependency report -----------------------------------------------------


class Previewed:
    """The last few reports this process's previews built, each with the rows it was built
    from. A confirmation whose rows, read under its locks, equal those its digest's preview
    read gets that report as it is: ``report_of`` is a function of the scope and the rows
    alone, so recomputing it would give the same report and the same digest (a thousand
    events' report costs milliseconds to build; comparing the rows, microseconds). Rows that
    differ in anything, a fence's mark included, or a preview made by another process, and the
    report is built from the rows the confirmation read."""

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._reports: OrderedDict[str, tuple[Any, PurgePreview]] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, report: PurgePreview, rows: Sequence[Any], found: purge_scope.ReportRows) -> None:
        with self._lock:
            self._reports[report.scope_digest] = ((report.scope, list(rows), found), report)
            self._reports.move_to_end(report.scope_digest)
            while len(self._reports) > self.keep:
                self._reports.popitem(last=False)

    def report_of(
        self, digest: str, scope: EventScope, rows: Sequence[Any], found: purge_scope.ReportRows
    ) -> PurgePreview | None:
        """The report of ``scope`` and these rows, if a preview of this process built it."""
        with self._lock:
            remembered = self._reports.get(digest)
        if remembered is None or remembered[0] != (scope, list(rows), found):
            return None
        return remembered[1]


PREVIEWED = Previewed()


def build_report(conn: Connection, scope: EventScope, *, lock: bool = False) -> PurgePreview:
    """Resolve the scope now and report everything the purge would touch. With ``lock``
    (confirmation), the conversations and then the events are locked exclusively first, in id
    order, and the report is read under those locks."""
    event_ids, rows = _select_events(conn, scope, lock=lock)
    return report_of(scope, rows, purges.report_rows(conn, event_ids))


def report_of(scope: EventScope, rows: Sequence[Any], found: purge_scope.ReportRows) -> PurgePreview:
    """The report of the scope's events (``rows``: ``purges.event_rows``' columns) and of what
    depends on them (``found``), with its digest."""
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


def _resolved(conn: Connection, scope: EventScope) -> Ids:
    """The scope's event ids, sorted (bound to every statement of the report, encoded once)."""
    if scope.event_ids is not None:
        return Ids(sorted(scope.event_ids))
    require_purgeable_conversation(conn, scope.conversation_id or "")
    return Ids(_events_in_scope(conn, scope))


def _require_found(chosen: Sequence[str], rows: Sequence[Any]) -> None:
    missing = sorted(set(chosen) - {row[0] for row in rows})
    if missing:
        raise NotFound(f"no event {missing[0]}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))


def _select_events(conn: Connection, scope: EventScope, *, lock: bool) -> tuple[list[str], list[Any]]:
    if scope.event_ids is not None:
        chosen = Ids(sorted(scope.event_ids))  # bound to every statement of the report, encoded once
        if lock:
            purges.lock_conversations_of(conn, chosen)
        rows = purges.event_rows(conn, chosen, lock=lock)
        _require_found(chosen, rows)
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
        limit=scopes.MAX_SCOPE_EVENTS + 1,
    )
    if len(ids) > scopes.MAX_SCOPE_EVENTS:
        raise ValidationError(
            f"the scope selects more than {scopes.MAX_SCOPE_EVENTS} events; narrow the time range, "
            "or purge the whole conversation"
        )
    if not ids:
        raise ValidationError("the scope selects no events")
    return sorted(ids)


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


def _names_opened(conn: Connection, report: PurgePreview, keys: ContentKeys) -> PurgePreview:
    """The preview with its attachments' names opened, for the person who confirms (the
    digest never holds a name: ``_fields_of``)."""
    attached = (*report.exclusive_attachments, *report.shared_attachments)
    if not attached:
        return report
    key_ids = content_queries.event_key_ids(conn, sorted({a.event_id for a in attached}))
    opened = sealed_content.Opened(keys, key_ids.values())

    def named(items: tuple[PreviewAttachment, ...]) -> tuple[PreviewAttachment, ...]:
        return tuple(dataclasses.replace(a, name=_name_of(opened, key_ids.get(a.event_id), a)) for a in items)

    return dataclasses.replace(
        report,
        exclusive_attachments=named(report.exclusive_attachments),
        shared_attachments=named(report.shared_attachments),
    )


def _name_of(opened: sealed_content.Opened, key_id: str | None, attachment: PreviewAttachment) -> str | None:
    """The name opened; None once the purge's cleanup cleared it, once its key is destroyed
    (an old backup's row, before the ledger's merge fences it again), or when it does not
    open (logged)."""
    if attachment.name is None or not opened.readable(key_id):
        return None
    return opened.opened(key_id, attachment.name, bound_to=sealed_content.name_bound(attachment.id))[1]


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
    # the mark is shown, never hashed; nor is an attachment's name: it is content, sealed in the
    # database, and a digest in the ledger must not fingerprint it
    names = tuple(n for n in fields if n != "already_fenced" and not (kind is PreviewAttachment and n == "name"))
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
