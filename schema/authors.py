"""Queries of an author erasure: one row erases every event an author wrote before a time.

Acceptance is O(1): ``lock_author`` then ``insert_erasure``; from that commit on, readers and
the triggers (schema/sql/*/0008_author_erasure.sql) treat the author's events in the window
as fenced. ``erase_batch`` is the cleanup: it tombstones the events and NULLs their content
in keyset batches. ``erasure_totals`` is the preview, the one query here that costs the
author's volume.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    Text,
    and_,
    bindparam,
    exists,
    func,
    literal_column,
    not_,
    select,
    text,
    tuple_,
    type_coerce,
)

from purgekeeper.schema import cleanup_queries, ledger
from purgekeeper.schema.content_queries import live_event, upsert_insert
from purgekeeper.schema.errors import ValidationError
from purgekeeper.schema.states import ACTIVE_RUN_STATUSES
from purgekeeper.schema.tables import (
    IS_EVENT_TOMBSTONE,
    UtcDateTime,
    admissions,
    attachments,
    author_erasures,
    derivative_sources,
    derivatives,
    events,
    placements,
    purge_ledger,
    runs,
    tombstones,
)

# The class of the authors' advisory locks (two int4 keys: this, hashtext(author)): 'pkau'.
# schema/sql/postgresql/0008_author_erasure.sql spells the same number.
AUTHOR_LOCK_CLASS = 1886085493
ONE_MICROSECOND = dt.timedelta(microseconds=1)

_AUTHOR: Any = bindparam("author", type_=Text())
_WINDOW_END: Any = bindparam("window_end", type_=UtcDateTime())
_IN_WINDOW = and_(events.c.author == _AUTHOR, events.c.occurred_at < _WINDOW_END)
_FENCED = exists().where(IS_EVENT_TOMBSTONE, tombstones.c.id == events.c.id)
_ACTIVE = runs.c.status.in_([literal_column(f"'{status}'") for status in ACTIVE_RUN_STATUSES])


def _params(author: str, window_end: dt.datetime) -> dict[str, Any]:
    return {"author": author, "window_end": window_end}


# -- acceptance ------------------------------------------------------------------------------


def lock_author(conn: Connection, author: str) -> None:
    """Hold the author's erasure lock exclusively until the transaction ends (PostgreSQL).
    Every trigger that checks the author's erasures takes it shared first, so a writer that
    began before this acceptance waits for its commit and then sees the erasure. SQLite
    serialises writers already."""
    if conn.dialect.name == "postgresql":
        conn.execute(text(f"SELECT pg_advisory_xact_lock({AUTHOR_LOCK_CLASS}, hashtext(:author))"), {"author": author})


_LATEST_OCCURRED = select(func.max(events.c.occurred_at)).where(events.c.author == _AUTHOR).scalar_subquery()


def window_end(conn: Connection, author: str, before: dt.datetime | None) -> dt.datetime:
    """``before`` if given; else the database clock's now, or one microsecond after the
    author's latest ``occurred_at`` if that is later, so every event the author has is
    inside the window (the max is one probe of ix_events_author_occurred_at)."""
    if before is not None:
        return before
    now, latest = conn.execute(
        select(type_coerce(ledger.clock(conn), UtcDateTime()), _LATEST_OCCURRED), {"author": author}
    ).one()
    if latest is not None and latest >= now:
        return _just_after(latest, author)
    return now


def _just_after(latest: dt.datetime, author: str) -> dt.datetime:
    """The window's end past the author's latest event. An ingest takes no time past year
    9998 (purgekeeper.commands.validation), but a database written before may hold one at the very end."""
    try:
        return latest + ONE_MICROSECOND
    except OverflowError:
        raise ValidationError(
            f"an event by {author} occurred at {latest.isoformat()}, the latest time there is, so no window can "
            "end after it; purge that event by its id"
        ) from None


def erasures_of(conn: Connection, author: str) -> list[Row[Any]]:
    """The author's erasures as (purge_id, window_end, close_author), by window_end."""
    c = author_erasures.c
    query: Any = (
        select(c.purge_id, c.window_end, c.close_author).where(c.author == author).order_by(c.window_end, c.purge_id)
    )
    return list(conn.execute(query).all())


def any_event_between(conn: Connection, author: str, start: dt.datetime, end: dt.datetime) -> bool:
    """Whether the author has an event with ``start <= occurred_at < end`` (one probe of
    ix_events_author_occurred_at)."""
    query = select(exists().where(events.c.author == author, events.c.occurred_at >= start, events.c.occurred_at < end))
    return bool(conn.scalar(query))


def covering_erasure(conn: Connection, event_ids: Sequence[str]) -> Any:
    """The newest author erasure (``purge_id``, ``seq``) that covers one of these events."""
    query = (
        select(author_erasures.c.purge_id, purge_ledger.c.seq)
        .join(
            events,
            and_(events.c.author == author_erasures.c.author, author_erasures.c.window_end > events.c.occurred_at),
        )
        .join(purge_ledger, purge_ledger.c.purge_id == author_erasures.c.purge_id, isouter=True)
        .where(events.c.id.in_(list(event_ids)))
        .order_by(func.coalesce(purge_ledger.c.seq, 0).desc())
        .limit(1)
    )
    return conn.execute(query).first()


def insert_erasure(
    conn: Connection, *, purge_id: str, author: str, window_end: dt.datetime, close_author: bool
) -> None:
    """Write the erasure; writing it again (a restore merge) changes nothing."""
    statement = upsert_insert(conn, author_erasures).values(
        author=author, purge_id=purge_id, window_end=window_end, close_author=close_author
    )
    conn.execute(statement.on_conflict_do_nothing(index_elements=["author", "purge_id"]))


# PostgreSQL: ix_events_author_created_at read backwards from the author's end, one probe
# whatever the ties (a bulk import in one transaction shares one created_at).
_NEWEST_INGEST = text(
    "SELECT created_at, id FROM events WHERE author = :author ORDER BY created_at DESC, id DESC LIMIT 1"
).columns(created_at=UtcDateTime(), id=Text())
# SQLite: created_at has whole seconds, and a new event's id may sort before the others': the
# greatest rowid (it only grows: an event row is never deleted) among the author's events of
# the latest second. Its cost follows the author's events of that one second.
_NEWEST_INGEST_SQLITE = text(
    "SELECT created_at, max(rowid) FROM events WHERE author = :author AND created_at = "
    "(SELECT max(created_at) FROM events WHERE author = :author)"
)


def newest_ingest(conn: Connection, author: str) -> tuple[str, str] | None:
    """A mark of the author's newest event by ingest, as two texts: (created_at, id) on
    PostgreSQL, (created_at, rowid) on SQLite. It changes when an event by the author is
    ingested."""
    if conn.dialect.name == "sqlite":
        created_at, rowid = conn.execute(_NEWEST_INGEST_SQLITE, {"author": author}).one()
        return None if rowid is None else (str(created_at), str(rowid))
    row = conn.execute(_NEWEST_INGEST, {"author": author}).first()
    return None if row is None else (ledger.utc_text(row.created_at), str(row.id))


# A scalar subquery with LIMIT 1 per active run (PostgreSQL would otherwise pull an EXISTS up
# into a semi-join that may start from the author's admissions): the active runs come from a
# partial index, each probed through its admissions.
_ADMITTED_ONE = (
    select(literal_column("1"))
    .select_from(admissions.join(events, events.c.id == admissions.c.event_id))
    .where(admissions.c.run_id == runs.c.id, _IN_WINDOW)
    .limit(literal_column("1"))
    .scalar_subquery()
)
_ADMITTING = select(runs.c.id).where(_ACTIVE, _ADMITTED_ONE.is_not(None)).order_by(runs.c.id)


def active_runs_admitting(conn: Connection, author: str, window_end: dt.datetime) -> list[str]:
    """Non-terminal runs that admitted an event of the author in the window: driven by the
    active runs (partial indexes) and their admissions, not by the author's volume."""
    return list(conn.scalars(_ADMITTING, _params(author, window_end)))


# -- the preview -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AuthorTotals:
    """What an erasure of the window would fence: counts over the author's events in it that
    no event tombstone fences yet (``already_fenced`` counts those). ``conversation_counts``
    is (conversation_id, events), most events first; ``shared`` is (attachment_id, event_id,
    blob_id, other_references): both at most the ``conversation_limit`` asked for."""

    events: int
    placements: int
    conversations: int
    admissions: int
    run_outputs: int
    derivatives: int
    exclusive_attachments: int
    shared_attachments: int
    already_fenced: int
    conversation_counts: tuple[tuple[str, int], ...]
    shared: tuple[tuple[str, str, str, int], ...]


def _selected() -> Any:
    """The author's events in the window with no event tombstone."""
    return select(events.c.id).where(_IN_WINDOW, not_(_FENCED)).cte("selected")


def _other_references(selected: Any) -> Any:
    """Per attachment of a selected event, the live bindings of its blob by events outside
    the selection."""
    other = attachments.alias("other")
    return (
        select(func.count())
        .where(other.c.blob_id == attachments.c.blob_id, other.c.event_id.not_in(select(selected.c.id).correlate(None)))
        .where(live_event(other.c.event_id))
        .correlate(attachments)
        .scalar_subquery()
    )


def _attachment_rows(selected: Any) -> Any:
    return (
        select(
            attachments.c.id,
            attachments.c.event_id,
            attachments.c.blob_id,
            _other_references(selected).label("others"),
        )
        .join(selected, selected.c.id == attachments.c.event_id)
        .subquery("attached")
    )


def _counts(selected: Any) -> Any:
    """Every total in one row."""
    ids = select(selected.c.id)
    attached = _attachment_rows(selected)

    def count(*where: Any, of: Any = None) -> Any:
        return select(func.count(of) if of is not None else func.count()).where(*where).scalar_subquery()

    return select(
        select(func.count()).select_from(selected).scalar_subquery().label("events"),
        count(placements.c.event_id.in_(ids)).label("placements"),
        count(placements.c.event_id.in_(ids), of=placements.c.conversation_id.distinct()).label("conversations"),
        count(admissions.c.event_id.in_(ids)).label("admissions"),
        count(
            runs.c.output.is_not(None),
            runs.c.id.in_(select(admissions.c.run_id).where(admissions.c.event_id.in_(ids))),
        ).label("run_outputs"),
        count(derivative_sources.c.event_id.in_(ids), of=derivative_sources.c.derivative_id.distinct()).label(
            "derivatives"
        ),
        select(func.count()).where(attached.c.others == 0).scalar_subquery().label("exclusive"),
        select(func.count()).where(attached.c.others > 0).scalar_subquery().label("shared"),
        count(_IN_WINDOW, _FENCED).label("already_fenced"),
    )


def erasure_totals(conn: Connection, author: str, window_end: dt.datetime, *, conversation_limit: int) -> AuthorTotals:
    """The preview's counts, set-based (it costs the author's volume)."""
    selected = _selected()
    params = _params(author, window_end)
    totals = conn.execute(_counts(selected), params).one()
    per_conversation = (
        select(placements.c.conversation_id, func.count().label("n"))
        .join(selected, selected.c.id == placements.c.event_id)
        .group_by(placements.c.conversation_id)
        .order_by(func.count().desc(), placements.c.conversation_id)
        .limit(conversation_limit)
    )
    attached = _attachment_rows(selected)
    shared = select(*attached.c).where(attached.c.others > 0).order_by(attached.c.id).limit(conversation_limit)
    return AuthorTotals(
        events=int(totals.events),
        placements=int(totals.placements),
        conversations=int(totals.conversations),
        admissions=int(totals.admissions),
        run_outputs=int(totals.run_outputs),
        derivatives=int(totals.derivatives),
        exclusive_attachments=int(totals.exclusive),
        shared_attachments=int(totals.shared),
        already_fenced=int(totals.already_fenced),
        conversation_counts=tuple((row[0], int(row[1])) for row in conn.execute(per_conversation, params)),
        shared=tuple((row[0], row[1], row[2], int(row[3])) for row in conn.execute(shared, params)),
    )


# -- cleanup and restore ---------------------------------------------------------------------


# The keyset is (occurred_at as the database holds it, id): on SQLite its stored text, which
# a raw writer may have written in another ISO form, compared as that text and never as a
# re-rendered datetime, so no row is skipped or read twice.
def _batch_statement(dialect: str, *, after: bool) -> Any:
    key_type = Text() if dialect == "sqlite" else UtcDateTime()
    query = (
        select(events.c.id, events.c.provider_event_id, type_coerce(events.c.occurred_at, key_type).label("key_at"))
        .where(_IN_WINDOW)
        .order_by(events.c.occurred_at, events.c.id)
        .limit(bindparam("limit"))
    )
    if after:
        keyset = tuple_(bindparam("after_at", type_=key_type), bindparam("after_id"))
        query = query.where(tuple_(events.c.occurred_at, events.c.id) > keyset)
    return query


_BATCHES = {
    (dialect, after): _batch_statement(dialect, after=after)
    for dialect in ("postgresql", "sqlite")
    for after in (False, True)
}


def erase_batch(
    conn: Connection,
    *,
    purge_id: str,
    author: str,
    window_end: dt.datetime,
    after: tuple[Any, ...] | None,
    limit: int,
) -> tuple[list[str], tuple[Any, ...] | None]:
    """The next ``limit`` events of the author in the window after the keyset ``after``:
    their ``event`` tombstones written for ``purge_id`` (an event an earlier purge fenced keeps
    its tombstone; a provider event id is fenced with its event, see
    ``cleanup_queries.tombstone_events``), their content NULLed. Returns their ids and
    the keyset to pass next (opaque), or None once a batch comes back short."""
    params: dict[str, Any] = {**_params(author, window_end), "limit": limit}
    if after is not None:
        params.update(after_at=after[0], after_id=after[1])
    found = conn.execute(_BATCHES[conn.dialect.name, after is not None], params).all()
    ids = [row.id for row in found]
    cleanup_queries.tombstone_events(conn, purge_id, ids)  # their provider event ids stay fenced with them
    cleanup_queries.null_content_of(conn, ids)
    last = (found[-1].key_at, found[-1].id) if found and len(found) >= limit else None
    return ids, last


_OF_WINDOW = admissions.c.event_id.in_(select(events.c.id).where(_IN_WINDOW))
_CONTENT_LEFT = select(
    exists().where(_IN_WINDOW, events.c.body.is_not(None) | not_(_FENCED))
    | exists().where(_OF_WINDOW, admissions.c.payload.is_not(None))
    | exists().where(runs.c.output.is_not(None), runs.c.id.in_(select(admissions.c.run_id).where(_OF_WINDOW)))
    | exists().where(
        derivatives.c.payload.is_not(None),
        derivatives.c.id.in_(
            select(derivative_sources.c.derivative_id).where(
                derivative_sources.c.event_id.in_(select(events.c.id).where(_IN_WINDOW))
            )
        ),
    )
    | exists().where(attachments.c.name.is_not(None), attachments.c.event_id.in_(select(events.c.id).where(_IN_WINDOW)))
)


def content_left(conn: Connection, author: str, window_end: dt.datetime) -> bool:
    """After a restore: an event of the author in the window with a body or without its
    event tombstone, or an admission payload, run output, derivative payload or attachment
    name from one of them, that is not NULL (again)."""
    return bool(conn.scalar(_CONTENT_LEFT, _params(author, window_end)))
