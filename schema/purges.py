"""Queries of the purge machinery: resolving a scope, its dependency report, locking,
fencing, cleanup steps and purge status.

Every query here is bounded by the scope (an indexed id list) or by one id, never by the size
of a conversation: acceptance of a conversation purge does not read its events.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections import namedtuple
from collections.abc import Iterable, Mapping, Sequence
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
    func,
    insert,
    literal,
    literal_column,
    not_,
    null,
    or_,
    select,
    text,
    union_all,
    update,
)

from schema import holds, lifecycle
from schema.content import author_erased, live_event, upsert_insert
from schema.driver import DriverStatement
from schema.idlists import IdList, Ids, among_many, array_literal
from schema.ledger import database_now
from schema.states import ACTIVE_RUN_STATUSES, StepKind, StepStatus, TombstoneKind
from schema.steps import PARKED_UNTIL
from schema.tables import (
    admissions,
    attachments,
    blobs,
    bots,
    cleanup_steps,
    conversations,
    derivative_sources,
    derivatives,
    events,
    placements,
    purge_audit,
    purge_conversations,
    purge_ledger,
    purge_previews,
    runs,
    step_attempts,
    tombstones,
)

DEFAULT_MAX_ATTEMPTS = 5


def _ids(values: Iterable[str]) -> list[str]:
    """``values`` as a bound list: an ``Ids`` as it is (it keeps its encoding), else a list."""
    return values if isinstance(values, Ids) else list(values)


def ids_list(values: Iterable[str]) -> list[str]:
    return sorted(set(values))


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
# (``schema.idlists``): building a statement costs more than running it, and an expanding
# ``IN`` of a thousand ids costs a thousand placeholders to render, send and parse.
EVENT_IDS: Any = bindparam("event_ids", type_=IdList())
CONVERSATION_IDS: Any = bindparam("conversation_ids", type_=IdList())
_fence = tombstones.alias("fence")
_EVENT_ROWS = (
    select(
        events.c.id,
        events.c.provider_event_id,
        events.c.author,
        events.c.occurred_at,
        or_(_fence.c.id.is_not(None), author_erased(events.c.author, events.c.occurred_at)).label("fenced"),
    )
    # An outer join on the tombstone key: bounded by the scope whatever the statistics say.
    .outerjoin(_fence, and_(_fence.c.kind == TombstoneKind.EVENT.value, _fence.c.id == events.c.id))
    .where(among_many(events.c.id, EVENT_IDS))
    .order_by(events.c.id)
)
_EVENT_ROWS_LOCKED = _EVENT_ROWS.with_for_update(of=events)
_PLACEMENTS = (
    select(placements.c.event_id, placements.c.conversation_id)
    .where(among_many(placements.c.event_id, EVENT_IDS))
    .order_by(placements.c.event_id, placements.c.conversation_id)
)
_CONVERSATIONS_OF = select(placements.c.conversation_id).where(among_many(placements.c.event_id, EVENT_IDS)).distinct()
_RUN_COLUMNS = (runs.c.conversation_id, runs.c.bot_id, runs.c.status, runs.c.output.is_not(None).label("has_output"))
_ADMISSIONS = (
    select(admissions.c.id, admissions.c.event_id, admissions.c.run_id, *_RUN_COLUMNS)
    .join(runs, runs.c.id == admissions.c.run_id)
    .where(among_many(admissions.c.event_id, EVENT_IDS))
    .order_by(admissions.c.id)
)
_ACTIVE_RUNS = select(runs.c.id, *_RUN_COLUMNS).where(runs.c.status.in_(ACTIVE_RUN_STATUSES)).order_by(runs.c.id)
_ACTIVE_RUNS_IN = _ACTIVE_RUNS.where(among_many(runs.c.conversation_id, CONVERSATION_IDS))
_ACTIVE_RUNS_OF_BOT = _ACTIVE_RUNS.where(runs.c.bot_id == bindparam("bot_id"))
_DERIVATIVES = (
    select(derivatives.c.id, derivatives.c.conversation_id, derivatives.c.kind, derivative_sources.c.event_id)
    .join(derivative_sources, derivative_sources.c.derivative_id == derivatives.c.id)
    .where(
        derivatives.c.id.in_(
            select(derivative_sources.c.derivative_id).where(among_many(derivative_sources.c.event_id, EVENT_IDS))
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
    .where(among_many(attachments.c.event_id, EVENT_IDS))
    .order_by(attachments.c.id)
)


_EVENT_ROWS_ON_DRIVER = DriverStatement(_EVENT_ROWS, named=True)
_EVENT_ROWS_LOCKED_ON_DRIVER = DriverStatement(_EVENT_ROWS_LOCKED, named=True)


def event_rows(conn: Connection, event_ids: Sequence[str], *, lock: bool = False) -> list[Any]:
    """The events with a flag for an existing fence, by id; with ``lock``, locked FOR UPDATE."""
    statement = _EVENT_ROWS_LOCKED_ON_DRIVER if lock else _EVENT_ROWS_ON_DRIVER
    return statement.rows(conn, {"event_ids": _ids(event_ids)})


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
# round trips to save; it runs the parts one by one.
#   part  1 placement   2 admission   3 active run   4 derivative     5 attachment   6 other reference  7 hold
#   t1    event_id      id            id             id               id             blob_id            event_id
#   t2    conv. id      event_id                     source event_id  event_id       id                 hold_id
#   t3                  run_id                       conversation_id  blob_id        event_id
#   t4                  conv. id      conv. id       kind             binding        binding
#   t5                  bot_id        bot_id                          name
#   t6                  status        status
#   b                   has_output    has_output
#   n                                                                 size
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


def _part(number: int, *columns: Any, flag: Any = None, size: Any = None) -> Any:
    """``columns`` as the report's text columns t1 .. t6, then ``flag`` as b and ``size`` as
    n; NULL where absent."""
    texts = [cast(c if c is not None else null(), Text()) for c in columns]
    texts += [cast(null(), Text())] * (6 - len(texts))
    return select(
        literal(number).label("part"),
        *(t.label(f"t{i + 1}") for i, t in enumerate(texts)),
        (flag if flag is not None else cast(null(), Boolean())).label("b"),
        (cast(size, BigInteger()) if size is not None else cast(null(), BigInteger())).label("n"),
    )


_SELECTED_CONVERSATIONS = select(placements.c.conversation_id).where(among_many(placements.c.event_id, EVENT_IDS))
_SELECTED_BLOBS = select(attachments.c.blob_id).where(among_many(attachments.c.event_id, EVENT_IDS))
_REPORT_PARTS = union_all(
    _part(1, placements.c.event_id, placements.c.conversation_id).where(among_many(placements.c.event_id, EVENT_IDS)),
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
    .where(among_many(admissions.c.event_id, EVENT_IDS)),
    _part(
        3, runs.c.id, None, None, runs.c.conversation_id, runs.c.bot_id, runs.c.status, flag=runs.c.output.is_not(None)
    )
    .where(runs.c.status.in_([literal_column(f"'{status}'") for status in ACTIVE_RUN_STATUSES]))
    .where(runs.c.conversation_id.in_(_SELECTED_CONVERSATIONS)),
    _part(4, derivatives.c.id, derivative_sources.c.event_id, derivatives.c.conversation_id, derivatives.c.kind)
    .select_from(derivatives.join(derivative_sources, derivative_sources.c.derivative_id == derivatives.c.id))
    .where(
        derivatives.c.id.in_(
            select(derivative_sources.c.derivative_id).where(among_many(derivative_sources.c.event_id, EVENT_IDS))
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
    .where(among_many(attachments.c.event_id, EVENT_IDS)),
    _part(6, attachments.c.blob_id, attachments.c.id, attachments.c.event_id, attachments.c.binding)
    .where(attachments.c.blob_id.in_(_SELECTED_BLOBS))
    .where(attachments.c.event_id.not_in(select(func.unnest(EVENT_IDS))))
    .where(live_event(attachments.c.event_id)),
    *(_part(7, held.c.event_id, held.c.hold_id) for held in holds.holds_of_events_parts(EVENT_IDS)),
).subquery("report")
_REPORT = DriverStatement(
    select(*_REPORT_PARTS.c).order_by(_REPORT_PARTS.c.part, _REPORT_PARTS.c.t1, _REPORT_PARTS.c.t2)
)


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
    parts: dict[int, list[Any]] = {number: [] for number in range(1, 8)}
    for part, t1, t2, t3, t4, t5, t6, b, n in _REPORT.rows(conn, {"event_ids": bound}):
        parts[part].append((t1, t2, t3, t4, t5, t6, b, n))
    return ReportRows(
        placements=[Placement(r[0], r[1]) for r in parts[1]],
        admissions=[AdmissionRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in parts[2]],
        active_runs=[RunRow(r[0], r[3], r[4], r[5], r[6]) for r in parts[3]],
        derivatives=[DerivativeRow(r[0], r[2], r[3], r[1]) for r in parts[4]],
        attachments=[AttachmentRow(r[0], r[1], r[2], r[3], r[4], r[7]) for r in parts[5]],
        other_references=[ReferenceRow(r[0], r[1], r[2], r[3]) for r in parts[6]],
        holds=[(r[0], r[1]) for r in parts[7]],
    )


# -- locks -----------------------------------------------------------------------------------


_LOCK_CONVERSATIONS = (
    select(conversations.c.id)
    .where(among_many(conversations.c.id, CONVERSATION_IDS))
    .order_by(conversations.c.id)
    .with_for_update()
)
_LOCK_CONVERSATIONS_OF_EVENTS = (
    select(conversations.c.id)
    .where(
        conversations.c.id.in_(select(placements.c.conversation_id).where(among_many(placements.c.event_id, EVENT_IDS)))
    )
    .order_by(conversations.c.id)
    .with_for_update()
)


def lock_conversations(conn: Connection, conversation_ids: Iterable[str]) -> None:
    """Exclusive locks in id order, taken before the events' (the ledger head comes last).
    Writers take FOR NO KEY UPDATE on the same rows, so a writer that began before this
    acceptance waits for it and then sees the fences. (SQLite: BEGIN IMMEDIATE already.)"""
    ids = ids_list(conversation_ids)
    if ids:
        conn.execute(_LOCK_CONVERSATIONS, {"conversation_ids": ids})


_LOCK_CONVERSATIONS_OF_EVENTS_ON_DRIVER = DriverStatement(_LOCK_CONVERSATIONS_OF_EVENTS)


def lock_conversations_of(conn: Connection, event_ids: Sequence[str]) -> None:
    """Lock the conversations the events are placed in, the same way, in one statement."""
    _LOCK_CONVERSATIONS_OF_EVENTS_ON_DRIVER.rows(conn, {"event_ids": _ids(event_ids)})


def conversations_of(conn: Connection, event_ids: Sequence[str]) -> list[str]:
    return list(conn.scalars(_CONVERSATIONS_OF, {"event_ids": _ids(event_ids)}))


def lock_conversation(conn: Connection, conversation_id: str) -> Row[Any] | None:
    query = select(conversations).where(conversations.c.id == conversation_id).with_for_update()
    return conn.execute(query).first()


def lock_bot(conn: Connection, bot_id: str) -> Row[Any] | None:
    return conn.execute(select(bots).where(bots.c.id == bot_id).with_for_update()).first()


# -- fences and tombstones ----------------------------------------------------------------


def tombstone_of(conn: Connection, kind: TombstoneKind, the_id: str) -> Any:
    """The tombstone with the seq of the purge that wrote it."""
    query = (
        select(tombstones.c.purge_id, purge_ledger.c.seq)
        .join(purge_ledger, purge_ledger.c.purge_id == tombstones.c.purge_id, isouter=True)
        .where(tombstones.c.kind == kind.value, tombstones.c.id == the_id)
    )
    return conn.execute(query).first()


def latest_covering_purge(conn: Connection, event_ids: Sequence[str]) -> Any:
    """The newest purge whose fence covers one of these events."""
    query = (
        select(tombstones.c.purge_id, purge_ledger.c.seq)
        .join(purge_ledger, purge_ledger.c.purge_id == tombstones.c.purge_id, isouter=True)
        .where(tombstones.c.kind == TombstoneKind.EVENT.value, tombstones.c.id.in_(list(event_ids)))
        .order_by(func.coalesce(purge_ledger.c.seq, 0).desc())
        .limit(1)
    )
    return conn.execute(query).first()


_STEP_COLUMNS = ("id", "purge_id", "kind", "max_attempts")
_INSERT_STEP = DriverStatement(
    insert(cleanup_steps).values({name: bindparam(name, type_=cleanup_steps.c[name].type) for name in _STEP_COLUMNS})
)
_INSERT_PARKED_STEP = DriverStatement(
    insert(cleanup_steps).values(
        {name: bindparam(name, type_=cleanup_steps.c[name].type) for name in (*_STEP_COLUMNS, "next_attempt_at")}
    )
)


# ONE statement whatever the kinds and the number of ids: the ids and their kinds are two
# parameters (array literals; on SQLite one JSON array of pairs), unnested by the server.
_INSERT_TOMBSTONES = {
    "postgresql": DriverStatement(
        text(
            "INSERT INTO tombstones (kind, id, purge_id) SELECT t.kind, t.id, :purge_id "
            "FROM unnest(CAST(:kinds AS TEXT[]), CAST(:ids AS TEXT[])) WITH ORDINALITY AS t(kind, id, n) "
            "ORDER BY t.n ON CONFLICT (kind, id) DO NOTHING"
        )
    ),
    "sqlite": DriverStatement(
        text(
            "INSERT INTO tombstones (kind, id, purge_id) "
            "SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), :purge_id "
            "FROM json_each(:pairs) WHERE true ON CONFLICT (kind, id) DO NOTHING"
        )
    ),
}


def insert_tombstones(conn: Connection, purge_id: str, by_kind: Mapping[TombstoneKind, Iterable[str]]) -> None:
    """Tombstone the ids, in one statement; an id that already has its tombstone keeps it."""
    pairs = [(kind.value, str(the_id)) for kind, ids in by_kind.items() for the_id in ids]
    if not pairs:
        return
    if conn.dialect.name == "postgresql":
        kinds, ids = zip(*pairs, strict=True)
        params = {"kinds": array_literal(kinds), "ids": array_literal(ids), "purge_id": purge_id}
    else:
        params = {"pairs": json.dumps(pairs), "purge_id": purge_id}
    _INSERT_TOMBSTONES[conn.dialect.name].execute(conn, params)


_BUMP_VERSIONS = (
    update(conversations)
    .where(among_many(conversations.c.id, CONVERSATION_IDS), conversations.c.state == "active")
    .values(version=conversations.c.version + 1)
)


_BUMP_VERSIONS_ON_DRIVER = DriverStatement(_BUMP_VERSIONS)


def bump_versions(conn: Connection, conversation_ids: Iterable[str]) -> None:
    ids = ids_list(conversation_ids)
    if ids:
        _BUMP_VERSIONS_ON_DRIVER.execute(conn, {"conversation_ids": ids})


def mark_memory_erasure(conn: Connection, bot_id: str) -> None:
    """Record that the bot's Memory is to be erased (before its tombstone: a deleted bot's row
    no longer changes). Marking it again changes nothing."""
    conn.execute(update(bots).where(bots.c.id == bot_id, bots.c.erase_memory.is_not(True)).values(erase_memory=True))


def kept_repositories(conn: Connection, *, except_bot: str) -> list[str]:
    """Memory repositories of every other bot whose Memory is kept (deleted bots included)."""
    query = select(bots.c.memory_path).where(
        bots.c.memory_path.is_not(None), bots.c.id != except_bot, not_(bots.c.erase_memory)
    )
    return list(conn.scalars(query))


def erased_repositories(conn: Connection) -> list[str]:
    """Memory repositories whose erasure was chosen."""
    return list(conn.scalars(select(bots.c.memory_path).where(bots.c.memory_path.is_not(None), bots.c.erase_memory)))


# -- cleanup steps --------------------------------------------------------------------------


def create_steps(
    conn: Connection,
    purge_id: str,
    kinds: Sequence[StepKind],
    *,
    parked: Sequence[StepKind] = (),
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> list[str]:
    """Pending cleanup steps; a ``parked`` one waits until another step unparks it."""
    rows: list[dict[str, Any]] = [
        {"id": uuid.uuid4().hex, "purge_id": purge_id, "kind": kind.value, "max_attempts": max_attempts}
        for kind in kinds
    ]
    for kind, row in zip(kinds, rows, strict=True):  # at most three
        if kind in parked:
            _INSERT_PARKED_STEP.execute(conn, {**row, "next_attempt_at": PARKED_UNTIL})
        else:
            _INSERT_STEP.execute(conn, row)
    return [str(row["id"]) for row in rows]


def steps_of(conn: Connection, purge_ids: Sequence[str]) -> list[Row[Any]]:
    query = (
        select(cleanup_steps)
        .where(cleanup_steps.c.purge_id.in_(list(purge_ids)))
        .order_by(cleanup_steps.c.purge_id, cleanup_steps.c.kind)
    )
    return list(conn.execute(query).all())


@dataclass(frozen=True)
class LedgerFilter:
    """Which ledger rows ``list_ledger`` returns: of one derived status, one kind, naming one
    conversation (``purge_conversations``), accepted in ``[since, until)``, none of
    ``hidden_kinds``."""

    status: str | None = None
    kind: str | None = None
    conversation_id: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    hidden_kinds: tuple[str, ...] = ()  # never these kinds (a caller who may not see them)


def list_ledger(conn: Connection, *, where: LedgerFilter, limit: int, before_seq: int | None) -> list[Row[Any]]:
    """Ledger rows newest first, before a seq cursor, as ``where`` says (by the primary key
    backwards, or the (kind, seq) index, or the conversation's rows)."""
    row = purge_ledger.c
    query = select(purge_ledger).order_by(row.seq.desc()).limit(limit)
    if where.status is not None:
        query = query.where(lifecycle.status_clause(where.status, row.purge_id))
    if where.kind is not None:
        query = query.where(row.kind == where.kind)
    if where.hidden_kinds:
        query = query.where(row.kind.not_in(where.hidden_kinds))
    if where.conversation_id is not None:
        named = select(purge_conversations.c.purge_id).where(
            purge_conversations.c.conversation_id == where.conversation_id
        )
        query = query.where(row.purge_id.in_(named))
    if where.since is not None:
        query = query.where(row.accepted_at >= where.since)
    if where.until is not None:
        query = query.where(row.accepted_at < where.until)
    if before_seq is not None:
        query = query.where(row.seq < before_seq)
    return list(conn.execute(query).all())


def record_conversations(conn: Connection, purge_id: str, conversation_ids: Iterable[str]) -> None:
    """The conversations the purge concerns, for listing by conversation (idempotent)."""
    rows = [{"conversation_id": c, "purge_id": purge_id} for c in sorted(set(conversation_ids))]
    if rows:
        statement = upsert_insert(conn, purge_conversations).on_conflict_do_nothing(
            index_elements=["conversation_id", "purge_id"]
        )
        conn.execute(statement, rows)


def audit_of(conn: Connection, purge_id: str) -> list[Row[Any]]:
    """Who re-armed the purge and why, oldest first."""
    query = select(purge_audit).where(purge_audit.c.purge_id == purge_id).order_by(purge_audit.c.created_at)
    return list(conn.execute(query).all())


def attempts_of(conn: Connection, purge_id: str) -> list[Row[Any]]:
    """Every attempt of the purge's steps, oldest first."""
    a = step_attempts.c
    return list(conn.execute(select(step_attempts).where(a.purge_id == purge_id).order_by(a.started_at, a.id)).all())


def live_leases(conn: Connection, *, limit: int) -> list[Any]:
    """The steps held under a lease that has not run out, by owner: what each worker does now."""
    c = cleanup_steps.c
    now = database_now(conn)
    query = (
        select(c.lease_owner, c.id, c.purge_id, c.kind, c.attempts, c.lease_expires_at)
        .where(c.status == StepStatus.RUNNING.value, c.lease_expires_at > now)
        .order_by(c.lease_owner, c.lease_expires_at)
        .limit(limit)
    )
    return list(conn.execute(query).all())


def record_audit(
    conn: Connection, purge_id: str, *, action: str, actor: str, reason: str, step_ids: Sequence[str]
) -> None:
    conn.execute(
        insert(purge_audit).values(
            id=uuid.uuid4().hex,
            purge_id=purge_id,
            action=action,
            actor=actor,
            reason=reason,
            step_ids=json.dumps(list(step_ids)),
        )
    )


# -- previews ---------------------------------------------------------------------------------


def save_preview(conn: Connection, scope_digest: str, report: dict[str, Any], *, keep_for: dt.timedelta) -> None:
    """Remember what a preview showed (ids only), and forget previews older than ``keep_for``."""
    now = dt.datetime.now(dt.UTC)
    conn.execute(purge_previews.delete().where(purge_previews.c.created_at < now - keep_for))
    statement = upsert_insert(conn, purge_previews).values(
        scope_digest=scope_digest, report=json.dumps(report), created_at=now
    )
    conn.execute(statement.on_conflict_do_nothing(index_elements=["scope_digest"]))


def saved_preview(conn: Connection, scope_digest: str) -> dict[str, Any] | None:
    text = conn.scalar(select(purge_previews.c.report).where(purge_previews.c.scope_digest == scope_digest))
    return json.loads(text) if text else None
