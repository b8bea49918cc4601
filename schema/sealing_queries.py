"""Queries of the background sealing of content written before sealing (0019, 0020).

The plain rows of a table are its partial index ``ix_<table>_plain`` (``PLAIN_CONTENT``): the
index IS the progress, and a sealed row leaves it. A row may be sealed now when the triggers
would take its sealing (``schema/sql/<dialect>/0020_sealing_older_content.sql``): its content
is live (no purge fenced it), its conversation is not purged, and no hold in force covers it;
a finished run's output only. Those conditions are asked here as the triggers ask them: the
database's own functions on PostgreSQL (``pk_event_is_live``, ``pk_event_held``, ...), its
views on SQLite (``pk_live_events``, ``pk_held_events``, ``pk_held_subjects``), so the two
cannot drift apart.

A batch finds candidates without a lock (``candidates``: how many keys to take, before any
transaction), then locks those still plain and sealable (``lock``; PostgreSQL: ``FOR NO KEY
UPDATE SKIP LOCKED``, so two sealers never take one row, and a row another writer holds is
left for the next round) and writes them (``seal``), under the holds' lock taken shared
(``lock_holds``): a hold cannot be placed between the look and the write.

Events are sealed with the names of their attachments: an event's candidates are those with a
plain body and those without a body whose attachments have plain names. ``attachments`` are
the names left plain under an event already sealed (a raw writer's), sealed under its key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table, and_, bindparam, func, select, text, update

from purgekeeper.schema.content_tables import PLAIN_CONTENT
from purgekeeper.schema.holds import any_in_force, lock_policies
from purgekeeper.schema.tables import admissions, attachments, derivatives, events, runs

__all__ = [
    "SEALED_TABLES",
    "PlainRow",
    "Sealed",
    "candidates",
    "content_left",
    "event_keys",
    "held_left",
    "lock",
    "lock_holds",
    "names_of",
    "seal",
]

SEALED_TABLES = ("events", "attachments", "admissions", "runs", "derivatives")
TABLES: dict[str, Table] = {t.name: t for t in (events, attachments, admissions, runs, derivatives)}
COLUMN = {"events": "body", "attachments": "name", "admissions": "payload", "runs": "output", "derivatives": "payload"}
# PLAIN_CONTENT's predicates, with their columns named by table (a query may join two tables
# that have a key_id); the planner proves the partial index from them all the same
PLAIN = {name: and_(table.c.key_id.is_(None), table.c[COLUMN[name]].is_not(None)) for name, table in TABLES.items()}
TERMINAL = "('succeeded', 'failed', 'cancelled', 'abandoned')"

# -- what may be sealed now, and what a hold keeps plain: as the triggers ask it ---------------

_LIVE = {
    "postgresql": "pk_event_is_live({})",
    "sqlite": "EXISTS (SELECT 1 FROM pk_live_events WHERE event_id = {})",
}
_EVENT_HELD = {
    "postgresql": "pk_event_held({})",
    "sqlite": "EXISTS (SELECT 1 FROM pk_held_events WHERE event_id = {})",
}
_CONVERSATION_HELD = "EXISTS (SELECT 1 FROM pk_held_subjects WHERE kind = 'conversation' AND subject_id = {})"
_NOT_PURGED = "(SELECT state FROM conversations WHERE id = {}) <> 'purged'"


def _held(dialect: str, table: str) -> str:
    """SQL: the row's content is held (a hold in force covers it, and it is live)."""
    live, event_held = _LIVE[dialect].format, _EVENT_HELD[dialect].format
    if table in ("events", "attachments"):
        return event_held(f"{table}.{'id' if table == 'events' else 'event_id'}")
    if dialect == "postgresql":
        return {
            "admissions": "pk_admission_held(admissions.event_id, admissions.run_id)",
            "runs": "pk_run_held(runs.id, runs.conversation_id)",
            "derivatives": "pk_derivative_held(derivatives.id, derivatives.conversation_id)",
        }[table]
    if table == "admissions":
        run_conversation = "(SELECT conversation_id FROM runs WHERE id = admissions.run_id)"
        return (
            f"{live('admissions.event_id')} AND {_NOT_PURGED.format(run_conversation)}"
            f" AND ({_CONVERSATION_HELD.format(run_conversation)} OR {event_held('admissions.event_id')})"
        )
    link, own = ("admissions", "run_id") if table == "runs" else ("derivative_sources", "derivative_id")
    sources = f"SELECT s.event_id FROM {link} s WHERE s.{own} = {table}.id"
    return (
        f"{_NOT_PURGED.format(f'{table}.conversation_id')}"
        f" AND NOT EXISTS (SELECT 1 FROM ({sources}) AS src WHERE NOT {live('src.event_id')})"
        f" AND ({_CONVERSATION_HELD.format(f'{table}.conversation_id')}"
        f" OR EXISTS (SELECT 1 FROM ({sources}) AS src WHERE {event_held('src.event_id')}))"
    )


def _sealable(dialect: str, table: str) -> str:
    """SQL: the row may be sealed now (the triggers take it): live, not purged, not held."""
    live = _LIVE[dialect].format
    if table in ("events", "attachments"):
        alive = live(f"{table}.{'id' if table == 'events' else 'event_id'}")
    elif table == "admissions":
        run_conversation = "(SELECT conversation_id FROM runs WHERE id = admissions.run_id)"
        alive = f"{_NOT_PURGED.format(run_conversation)} AND {live('admissions.event_id')}"
    else:
        link, own = ("admissions", "run_id") if table == "runs" else ("derivative_sources", "derivative_id")
        alive = (
            f"{_NOT_PURGED.format(f'{table}.conversation_id')}"
            f" AND NOT EXISTS (SELECT 1 FROM {link} s WHERE s.{own} = {table}.id AND NOT {live('s.event_id')})"
        )
        if table == "runs":  # a run under way is sealed by its finish
            alive = f"runs.status IN {TERMINAL} AND {alive}"
    return f"{alive} AND NOT ({_held(dialect, table)})"


def _sealable_now(conn: Connection, table: str) -> Any:
    return text(_sealable(conn.dialect.name, table))


# -- records -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlainRow:
    """A row whose content is still plain: its id and value (None: an event without a body),
    and for an attachment its event and the event's key (None while the event is plain)."""

    id: str
    value: str | None
    event_id: str = ""
    event_key_id: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> PlainRow:
        return cls(*row)


@dataclass(frozen=True)
class Sealed:
    """A row's content sealed, and the id of the key that seals it."""

    id: str
    value: str | None
    key_id: str


# -- the statements ------------------------------------------------------------------------------


def lock_holds(conn: Connection) -> None:
    """The holds' lock, shared (PostgreSQL): no hold is placed until this batch commits, and
    its selection, a statement after this, sees every hold placed before."""
    lock_policies(conn, exclusive=False)


def _query(conn: Connection, table: str, *columns: Any) -> Any:
    """The plain rows of ``table`` that may be sealed now, in id order."""
    own = TABLES[table]
    query = select(*columns).select_from(own)
    if table == "events":  # with a body; those without one come through their names
        query = query.where(PLAIN["events"])
    elif table == "attachments":  # under an event already sealed
        query = query.join(events, events.c.id == attachments.c.event_id).where(events.c.key_id.is_not(None))
        query = query.where(PLAIN["attachments"])
    else:
        query = query.where(PLAIN[table])
    return query.where(_sealable_now(conn, table)).order_by(own.c.id)


def candidates(conn: Connection, table: str, limit: int) -> list[str]:
    """Up to ``limit`` ids of ``table`` to seal in the next batch (no lock taken)."""
    found = list(conn.scalars(_query(conn, table, TABLES[table].c.id).limit(limit)))
    if table == "events" and len(found) < limit:
        found += conn.scalars(_bodiless(conn).limit(limit - len(found)))
    return found


def _bodiless(conn: Connection) -> Any:
    """Events without a body whose attachments' names are plain (they get a key for them)."""
    return (
        select(attachments.c.event_id)
        .join(events, events.c.id == attachments.c.event_id)
        .where(PLAIN["attachments"], events.c.key_id.is_(None), events.c.body.is_(None))
        .where(_sealable_now(conn, "events"))
        .distinct()
    )


def event_keys(conn: Connection, attachment_ids: Sequence[str]) -> dict[str, str]:
    """The key id of each attachment's event (sealed events only), by attachment."""
    query = (
        select(attachments.c.id, events.c.key_id)
        .join(events, events.c.id == attachments.c.event_id)
        .where(attachments.c.id.in_(list(attachment_ids)), events.c.key_id.is_not(None))
    )
    return {row.id: row.key_id for row in conn.execute(query)} if attachment_ids else {}


def lock(conn: Connection, table: str, ids: Sequence[str]) -> list[PlainRow]:
    """The rows of ``ids`` still plain and sealable now, locked (PostgreSQL: a row another
    transaction holds is skipped)."""
    own = TABLES[table]
    columns = [own.c.id, own.c[COLUMN[table]]]
    if table == "attachments":
        columns += [attachments.c.event_id, events.c.key_id]
    query = _query(conn, table, *columns).where(own.c.id.in_(list(ids)))
    if table == "events":  # with a body or without: every plain one the candidates named
        query = select(*columns).where(own.c.id.in_(list(ids)), own.c.key_id.is_(None))
        query = query.where(_sealable_now(conn, "events")).order_by(own.c.id)
    query = query.with_for_update(of=own, key_share=True, skip_locked=True)
    return [PlainRow.from_row(row) for row in conn.execute(query)]


def names_of(conn: Connection, event_ids: Sequence[str]) -> list[PlainRow]:
    """The plain names of these (locked) events' attachments, locked."""
    query = (
        select(attachments.c.id, attachments.c.name, attachments.c.event_id)
        .where(attachments.c.event_id.in_(list(event_ids)), PLAIN["attachments"])
        .order_by(attachments.c.id)
        .with_for_update(key_share=True)
    )
    return [PlainRow.from_row(row) for row in conn.execute(query)] if event_ids else []


def seal(conn: Connection, table: str, sealed: Sequence[Sealed]) -> int:
    """Write the sealed values and their keys (a row sealed meanwhile is left as it is)."""
    if not sealed:
        return 0
    own = TABLES[table]
    statement = (
        update(own)
        .where(own.c.id == bindparam("row_id"), own.c.key_id.is_(None))
        .values({COLUMN[table]: bindparam("sealed_value"), "key_id": bindparam("sealed_key")})
    )
    rows = [{"row_id": s.id, "sealed_value": s.value, "sealed_key": s.key_id} for s in sealed]
    conn.execute(statement, rows)
    return len(rows)


# -- what is left ----------------------------------------------------------------------------------


def content_left(conn: Connection, *, cap: int) -> dict[str, int]:
    """Per table of ``PLAIN_CONTENT``, its plain rows, counted up to ``cap`` (one walk of its
    partial index, never a full count)."""
    counts = select(
        *(
            select(func.count())
            .select_from(select(table.c.id).where(text(predicate)).limit(cap).subquery())
            .scalar_subquery()
            .label(table.name)
            for table, predicate in PLAIN_CONTENT.items()
        )
    )  # one statement: a scrape of /metrics runs it
    return {name: int(value or 0) for name, value in conn.execute(counts).one()._mapping.items()}


def held_left(conn: Connection, *, cap: int) -> dict[str, int]:
    """Per table a sealing seals, its plain rows a hold in force keeps plain, up to ``cap``."""
    if not any_in_force(conn):
        return dict.fromkeys(SEALED_TABLES, 0)
    dialect = conn.dialect.name
    return {
        table: _capped(conn, select(TABLES[table].c.id).where(PLAIN[table], text(_held(dialect, table))), cap)
        for table in SEALED_TABLES
    }


def _capped(conn: Connection, query: Any, cap: int) -> int:
    return int(conn.scalar(select(func.count()).select_from(query.limit(cap).subquery())) or 0)
