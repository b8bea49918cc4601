"""Resolving a purge's scope, and its dependency report: the events a conversation's filter
selects, the scope's rows (read, or locked, in one statement each), and everything that
depends on them (placements, admissions, active runs, derivatives, attachments, other live
references, holds), read in one round trip (``report_rows``).

Every query here is bounded by the scope (an indexed id list) or by one id, never by the size
of a conversation. ``purgekeeper.schema.purges`` names all of it.
"""

from __future__ import annotations

import datetime as dt
from collections import namedtuple
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Connection,
    Row,
    Text,
    and_,
    bindparam,
    cast,
    exists,
    func,
    literal,
    literal_column,
    null,
    or_,
    select,
    text,
    union_all,
)

from purgekeeper.schema import holds
from purgekeeper.schema.content_queries import author_erased, live_event
from purgekeeper.schema.content_tables import PLAIN_CONTENT
from purgekeeper.schema.conversation_read import utc_from_text
from purgekeeper.schema.driver import DriverStatement
from purgekeeper.schema.idlists import IdList, Ids, among
from purgekeeper.schema.ledger import HEAD_GATE
from purgekeeper.schema.states import ACTIVE_RUN_STATUSES, TombstoneKind
from purgekeeper.schema.tables import (
    UtcDateTime,
    admissions,
    attachments,
    blobs,
    derivative_sources,
    derivatives,
    events,
    ledger_head,
    placements,
    runs,
    tombstones,
)


def _ids(values: Iterable[str]) -> list[str]:
    """``values`` as a bound list: an ``Ids`` as it is (it keeps its encoding), else a list."""
    return values if isinstance(values, Ids) else list(values)


# -- resolving a scope --------------------------------------------------------------------


def events_in_conversation(
    conn: Connection,
    conversation_id: str,
    *,
    after: dt.datetime | None,
    before: dt.datetime | None,
    author: str | None,
    limit: int,
) -> list[str]:
    """Event ids placed in the conversation, filtered, in time order, at most ``limit``."""
    query = (
        select(events.c.id)
        .join(placements, placements.c.event_id == events.c.id)
        .where(placements.c.conversation_id == conversation_id)
        .order_by(events.c.occurred_at, events.c.id)
        .limit(limit)
    )
    if after is not None:
        query = query.where(events.c.occurred_at >= after)
    if before is not None:
        query = query.where(events.c.occurred_at < before)
    if author is not None:
        query = query.where(events.c.author == author)
    return list(conn.scalars(query))


# Statements on the confirmation path are built once, each list of ids ONE parameter
# (``purgekeeper.schema.idlists``): building a statement costs more than running it, and an expanding
# ``IN`` of a thousand ids costs a thousand placeholders to render, send and parse.
EVENT_IDS: Any = bindparam("event_ids", type_=IdList())
CONVERSATION_IDS: Any = bindparam("conversation_ids", type_=IdList())
_fence = tombstones.alias("fence")
_FENCED = or_(_fence.c.id.is_not(None), author_erased(events.c.author, events.c.occurred_at))
# An outer join on the tombstone key: bounded by the scope whatever the statistics say.
_EVENTS_FENCED = events.outerjoin(_fence, and_(_fence.c.kind == TombstoneKind.EVENT.value, _fence.c.id == events.c.id))
_EVENT_ROWS = (
    select(events.c.id, events.c.provider_event_id, events.c.author, events.c.occurred_at, _FENCED.label("fenced"))
    .select_from(_EVENTS_FENCED)
    .where(among(events.c.id, EVENT_IDS))
    .order_by(events.c.id)
)
_EVENT_ROWS_LOCKED = _EVENT_ROWS.with_for_update(of=events)
_PLACEMENTS = (
    select(placements.c.event_id, placements.c.conversation_id)
    .where(among(placements.c.event_id, EVENT_IDS))
    .order_by(placements.c.event_id, placements.c.conversation_id)
)
_CONVERSATIONS_OF = select(placements.c.conversation_id).where(among(placements.c.event_id, EVENT_IDS)).distinct()
_RUN_COLUMNS = (runs.c.conversation_id, runs.c.bot_id, runs.c.status, runs.c.output.is_not(None).label("has_output"))
_ADMISSIONS = (
    select(admissions.c.id, admissions.c.event_id, admissions.c.run_id, *_RUN_COLUMNS)
    .join(runs, runs.c.id == admissions.c.run_id)
    .where(among(admissions.c.event_id, EVENT_IDS))
    .order_by(admissions.c.id)
)
_ACTIVE_RUNS = select(runs.c.id, *_RUN_COLUMNS).where(runs.c.status.in_(ACTIVE_RUN_STATUSES)).order_by(runs.c.id)
_ACTIVE_RUNS_IN = _ACTIVE_RUNS.where(among(runs.c.conversation_id, CONVERSATION_IDS))
_ACTIVE_RUNS_OF_BOT = _ACTIVE_RUNS.where(runs.c.bot_id == bindparam("bot_id"))
_DERIVATIVES = (
    select(derivatives.c.id, derivatives.c.conversation_id, derivatives.c.kind, derivative_sources.c.event_id)
    .join(derivative_sources, derivative_sources.c.derivative_id == derivatives.c.id)
    .where(
        derivatives.c.id.in_(
            select(derivative_sources.c.derivative_id).where(among(derivative_sources.c.event_id, EVENT_IDS))
        )
    )
    .order_by(derivatives.c.id, derivative_sources.c.event_id)
)
_ATTACHMENTS = (
    select(
        attachments.c.id,
        attachments.c.event_id,
        attachments.c.blob_id,
        attachments.c.binding,
        attachments.c.name,
        blobs.c.size,
    )
    .join(blobs, blobs.c.id == attachments.c.blob_id)
    .where(among(attachments.c.event_id, EVENT_IDS))
    .order_by(attachments.c.id)
)


# The rows as the driver gives them, the timestamp made UTC here (``_utc``): a thousand rows'
# conversions cost more than their reading.
_EVENT_ROWS_ON_DRIVER = {
    False: DriverStatement(_EVENT_ROWS, convert=False),
    True: DriverStatement(_EVENT_ROWS_LOCKED, convert=False),
}


def event_rows(conn: Connection, event_ids: Sequence[str], *, lock: bool = False) -> list[Any]:
    """The events as ``(id, provider_event_id, author, occurred_at, fenced)``, by id, the
    flag set for an existing fence; with ``lock``, locked FOR UPDATE."""
    rows = _EVENT_ROWS_ON_DRIVER[lock].rows(conn, {"event_ids": _ids(event_ids)})
    return [(r[0], r[1], r[2], _utc(r[3]), r[4]) for r in rows]


def placements_of(conn: Connection, event_ids: Sequence[str]) -> list[Any]:
    return list(conn.execute(_PLACEMENTS, {"event_ids": _ids(event_ids)}).all())


def admissions_of(conn: Connection, event_ids: Sequence[str]) -> list[Any]:
    """The admissions of these events, each with its run."""
    return list(conn.execute(_ADMISSIONS, {"event_ids": _ids(event_ids)}).all())


def active_runs(conn: Connection, *, conversation_ids: Sequence[str] = (), bot_id: str | None = None) -> list[Row[Any]]:
    """Non-terminal runs in these conversations, or of this bot (partial indexes)."""
    if bot_id is not None:
        return list(conn.execute(_ACTIVE_RUNS_OF_BOT, {"bot_id": bot_id}).all())
    if not conversation_ids:
        return []
    return list(conn.execute(_ACTIVE_RUNS_IN, {"conversation_ids": list(conversation_ids)}).all())


def active_run_ids(conn: Connection, *, conversation_ids: Sequence[str] = (), bot_id: str | None = None) -> list[str]:
    return [row.id for row in active_runs(conn, conversation_ids=conversation_ids, bot_id=bot_id)]


def derivatives_of(conn: Connection, event_ids: Sequence[str]) -> list[Any]:
    """Derivatives with a selected source event, each with all of its source ids."""
    return list(conn.execute(_DERIVATIVES, {"event_ids": _ids(event_ids)}).all())


def attachments_of(conn: Connection, event_ids: Sequence[str]) -> list[Any]:
    return list(conn.execute(_ATTACHMENTS, {"event_ids": _ids(event_ids)}).all())


def other_live_references(conn: Connection, blob_ids: Sequence[str], event_ids: Sequence[str]) -> list[Any]:
    """References to these blobs from live events outside the selection, of both binding kinds."""
    query = (
        select(attachments.c.blob_id, attachments.c.id, attachments.c.event_id, attachments.c.binding)
        .where(attachments.c.blob_id.in_(list(blob_ids)))
        .where(attachments.c.event_id.not_in(list(event_ids)))
        .where(live_event(attachments.c.event_id))
        .order_by(attachments.c.blob_id, attachments.c.id)
    )
    return list(conn.execute(query).all())


# The whole report of a content purge in ONE statement on PostgreSQL: every part in the same
# columns, tagged by ``part``, in each part's own order (a confirmation's round trips and
# statement executions cost more than the reads themselves). SQLite, in process, has no
# round trips to save; it runs the parts one by one. A preview reads, in the same statement,
# the ledger head (for the gate), the events and the probe of content not sealed yet
# (``_PREVIEW``): one snapshot, one round trip.
#   part  1 placement   2 admission   3 active run   4 derivative     5 attachment   6 other reference  7 hold
#   t1    event_id      id            id             id               id             blob_id            event_id
#   t2    conv. id      event_id                     source event_id  event_id       id                 hold_id
#   t3                  run_id                       conversation_id  blob_id        event_id
#   t4                  conv. id      conv. id       kind             binding        binding
#   t5                  bot_id        bot_id                          name
#   t6                  status        status
#   b                   has_output    has_output
#   n                                                                 size
# and the preview's own parts:
#   part  -1 head       0 event            8 content not sealed yet
#   t1    head_hash     id
#   t2    gate_reason   provider_event_id
#   t3                  author
#   at                  occurred_at
#   b                   fenced             whether any is left
#   n     seq
Placement = namedtuple("Placement", "event_id conversation_id")
AdmissionRow = namedtuple("AdmissionRow", "id event_id run_id conversation_id bot_id status has_output")
RunRow = namedtuple("RunRow", "id conversation_id bot_id status has_output")
DerivativeRow = namedtuple("DerivativeRow", "id conversation_id kind event_id")
AttachmentRow = namedtuple("AttachmentRow", "id event_id blob_id binding name size")
ReferenceRow = namedtuple("ReferenceRow", "blob_id id event_id binding")


@dataclass(frozen=True)
class ReportRows:
    """What a content purge's report is made of, each part in its order (the columns of
    ``placements_of``, ``admissions_of``, ``active_runs``, ``derivatives_of``,
    ``attachments_of`` and ``other_live_references``)."""

    placements: Sequence[Any]
    admissions: Sequence[Any]
    active_runs: Sequence[Any]
    derivatives: Sequence[Any]
    attachments: Sequence[Any]
    other_references: Sequence[Any]
    holds: Sequence[tuple[str, str]] = ()  # (event_id, hold_id): the legal holds that cover an event


@dataclass(frozen=True)
class PreviewRows:
    """A content purge's preview as one snapshot saw it: the ledger head (for the gate), the
    events (``event_rows``' columns, by id), the report's rows, and whether content written
    before sealing is left (``content_queries.holds_plain_content``)."""

    seq: int
    head_hash: str
    gate_reason: str | None
    events: Sequence[Any]
    report: ReportRows
    plain_content: bool


def _part(number: int, *columns: Any, at: Any = None, flag: Any = None, size: Any = None) -> Any:
    """``columns`` as the report's text columns t1 .. t6, then ``at`` (a time), ``flag`` as
    b and ``size`` as n; NULL where absent."""
    texts = [cast(c if c is not None else null(), Text()) for c in columns]
    texts += [cast(null(), Text())] * (6 - len(texts))
    return select(
        literal(number).label("part"),
        *(t.label(f"t{i + 1}") for i, t in enumerate(texts)),
        (at if at is not None else cast(null(), UtcDateTime())).label("at"),
        (flag if flag is not None else cast(null(), Boolean())).label("b"),
        (cast(size, BigInteger()) if size is not None else cast(null(), BigInteger())).label("n"),
    )


_SELECTED_CONVERSATIONS = select(placements.c.conversation_id).where(among(placements.c.event_id, EVENT_IDS))
_SELECTED_BLOBS = select(attachments.c.blob_id).where(among(attachments.c.event_id, EVENT_IDS))
_REPORT_SELECTS = (
    _part(1, placements.c.event_id, placements.c.conversation_id).where(among(placements.c.event_id, EVENT_IDS)),
    _part(
        2,
        admissions.c.id,
        admissions.c.event_id,
        admissions.c.run_id,
        runs.c.conversation_id,
        runs.c.bot_id,
        runs.c.status,
        flag=runs.c.output.is_not(None),
    )
    .select_from(admissions.join(runs, runs.c.id == admissions.c.run_id))
    .where(among(admissions.c.event_id, EVENT_IDS)),
    _part(
        3, runs.c.id, None, None, runs.c.conversation_id, runs.c.bot_id, runs.c.status, flag=runs.c.output.is_not(None)
    )
    .where(runs.c.status.in_([literal_column(f"'{status}'") for status in ACTIVE_RUN_STATUSES]))
    .where(runs.c.conversation_id.in_(_SELECTED_CONVERSATIONS)),
    _part(4, derivatives.c.id, derivative_sources.c.event_id, derivatives.c.conversation_id, derivatives.c.kind)
    .select_from(derivatives.join(derivative_sources, derivative_sources.c.derivative_id == derivatives.c.id))
    .where(
        derivatives.c.id.in_(
            select(derivative_sources.c.derivative_id).where(among(derivative_sources.c.event_id, EVENT_IDS))
        )
    ),
    _part(
        5,
        attachments.c.id,
        attachments.c.event_id,
        attachments.c.blob_id,
        attachments.c.binding,
        attachments.c.name,
        size=blobs.c.size,
    )
    .select_from(attachments.join(blobs, blobs.c.id == attachments.c.blob_id))
    .where(among(attachments.c.event_id, EVENT_IDS)),
    _part(6, attachments.c.blob_id, attachments.c.id, attachments.c.event_id, attachments.c.binding)
    .where(attachments.c.blob_id.in_(_SELECTED_BLOBS))
    .where(attachments.c.event_id.not_in(select(func.unnest(EVENT_IDS))))
    .where(live_event(attachments.c.event_id)),
    *(_part(7, held.c.event_id, held.c.hold_id) for held in holds.holds_of_events_parts(EVENT_IDS)),
)
_HEAD_PART = _part(-1, ledger_head.c.head_hash, ledger_head.c.gate_reason, size=ledger_head.c.seq).where(
    ledger_head.c.id == 1
)
_EVENTS_PART = (
    _part(0, events.c.id, events.c.provider_event_id, events.c.author, at=events.c.occurred_at, flag=_FENCED)
    .select_from(_EVENTS_FENCED)
    .where(among(events.c.id, EVENT_IDS))
)
_PLAIN_PART = _part(
    8, flag=or_(*(exists().where(text(predicate)).select_from(table) for table, predicate in PLAIN_CONTENT.items()))
)


def _ordered(*selects: Any) -> DriverStatement:
    """The parts as one statement, each part in its order (by t1, then t2). The rows as the
    driver gives them: only the events' ``at`` needs a processor, and a row's conversion
    costs more than its reading (``_utc``)."""
    parts = union_all(*selects).subquery("parts")
    return DriverStatement(select(*parts.c).order_by(parts.c.part, parts.c.t1, parts.c.t2), convert=False)


_REPORT = _ordered(*_REPORT_SELECTS)
_PREVIEW = _ordered(_HEAD_PART, _EVENTS_PART, *_REPORT_SELECTS, _PLAIN_PART)


def report_rows(conn: Connection, event_ids: Sequence[str]) -> ReportRows:
    """The rows of a content purge's report of these events (see ``_REPORT``)."""
    bound = _ids(event_ids)
    if conn.dialect.name != "postgresql":
        attached = attachments_of(conn, bound)
        blob_ids = sorted({r.blob_id for r in attached})
        placed = placements_of(conn, bound)
        return ReportRows(
            placements=placed,
            admissions=admissions_of(conn, bound),
            active_runs=active_runs(conn, conversation_ids=sorted({r.conversation_id for r in placed})),
            derivatives=derivatives_of(conn, bound),
            attachments=attached,
            other_references=other_live_references(conn, blob_ids, bound) if blob_ids else [],
            holds=[(e, h) for e, ids in holds.holds_of_events(conn, bound).items() for h in ids],
        )
    return _report_of(_by_part(_REPORT.rows(conn, {"event_ids": bound})))


def preview_rows(conn: Connection, event_ids: Sequence[str]) -> PreviewRows:
    """What a content purge's preview of these events reads (see ``_PREVIEW``): on PostgreSQL
    one statement, on SQLite the head, the events, the report and the probe one by one in the
    read transaction the caller began."""
    bound = _ids(event_ids)
    if conn.dialect.name != "postgresql":
        head = conn.execute(HEAD_GATE).one()
        found = event_rows(conn, bound)
        plain = bool(conn.scalar(select(_PLAIN_PART.selected_columns.b)))
        return PreviewRows(int(head.seq), head.head_hash, head.gate_reason, found, report_rows(conn, bound), plain)
    parts = _by_part(_PREVIEW.rows(conn, {"event_ids": bound}))
    (head,), (plain,) = parts[-1], parts[8]
    found = [(r[0], r[1], r[2], _utc(r[6]), r[7]) for r in parts[0]]  # event_rows' columns
    return PreviewRows(int(head[8]), head[0], head[1], found, _report_of(parts), bool(plain[7]))


def _utc(moment: Any) -> dt.datetime:
    """A timestamp as ``UtcDateTime`` reads it: aware, in UTC (SQLite gives its stored text)."""
    if moment.__class__ is str:
        return utc_from_text(moment)
    return moment if moment.tzinfo is dt.UTC else moment.astimezone(dt.UTC)


def _by_part(rows: Sequence[Any]) -> dict[int, list[Any]]:
    """The rows of a union of parts, without their ``part``, by part (-1 .. 8)."""
    parts: dict[int, list[Any]] = {number: [] for number in range(-1, 9)}
    for row in rows:
        parts[row[0]].append(row[1:])
    return parts


def _report_of(parts: dict[int, list[Any]]) -> ReportRows:
    """The report's parts (1 .. 7) in the columns of their own queries."""
    return ReportRows(
        placements=[Placement(r[0], r[1]) for r in parts[1]],
        admissions=[AdmissionRow(r[0], r[1], r[2], r[3], r[4], r[5], r[7]) for r in parts[2]],
        active_runs=[RunRow(r[0], r[3], r[4], r[5], r[7]) for r in parts[3]],
        derivatives=[DerivativeRow(r[0], r[2], r[3], r[1]) for r in parts[4]],
        attachments=[AttachmentRow(r[0], r[1], r[2], r[3], r[4], r[8]) for r in parts[5]],
        other_references=[ReferenceRow(r[0], r[1], r[2], r[3]) for r in parts[6]],
        holds=[(r[0], r[1]) for r in parts[7]],
    )
