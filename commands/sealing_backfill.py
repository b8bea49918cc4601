"""Sealing, in the background, the content written before encryption at rest (issue 36).

Rows written before 0019 hold their content in plain text, ``key_id`` NULL; a partial index
per table finds them (``ix_<table>_plain``), and while any is left every preview and
acceptance discloses it. :func:`seal_older_content` seals one batch per table, in place, each
row under a key of its own taken from the key store as an ingest takes one, its value bound to
its row and column as an ingest binds it (``purgekeeper.commands.sealed_content``); an event's
attachments' names go with it, under its key, in the same transaction. The partial indexes are
the progress: a sealed row leaves its index, so a round remembers nothing and any number of
them, in any number of processes, seal each row once.

A batch is one transaction: its rows locked (PostgreSQL: ``FOR NO KEY UPDATE SKIP LOCKED``;
SQLite: ``BEGIN IMMEDIATE``), their keys durable in the key store before it begins
(``ContentKeys.take``), its content and keys written together. A crash anywhere leaves each
row plain with no key, or sealed with its key; a key taken for a batch that never committed
seals nothing (a few, 32 bytes each, in the store).

Not sealed: what a hold in force covers (the triggers refuse it: a raw writer could otherwise
replace held content; it is counted in ``held`` and sealed once the hold is released), what a
purge fenced (its cleanup NULLs it), a run still under way (its finish seals its output), and
attachment files written before 0019 (their old blocks stay on the device whatever is written
over them: ``content_left`` still counts them under ``blobs``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqlalchemy import Connection

from purgekeeper.commands import sealed_content
from purgekeeper.schema import sealing_queries
from purgekeeper.schema.db import Database
from purgekeeper.schema.sealing_queries import PlainRow, Sealed
from purgekeeper.storage import failpoints
from purgekeeper.storage.content_keys import ContentKeys

__all__ = ["BATCH", "LEFT_CAP", "SealingRound", "content_left", "seal_older_content"]

BATCH = 500  # rows per table per round, each table's batch one transaction
LEFT_CAP = 10_001  # what is left is counted up to this many rows per table, never in full

BOUND_TO: dict[str, Callable[[str], str]] = {
    "events": sealed_content.body_bound,
    "attachments": sealed_content.name_bound,
    "admissions": sealed_content.payload_bound,
    "runs": sealed_content.output_bound,
    "derivatives": sealed_content.derivative_bound,
}


@dataclass(frozen=True)
class SealingRound:
    """What a round sealed, per table (``attachments``: names), what is left plain after it
    (counted up to ``LEFT_CAP``), and of that what a hold in force keeps plain (skipped)."""

    sealed: Mapping[str, int]
    left: Mapping[str, int]
    held: Mapping[str, int] = field(default_factory=dict)

    @property
    def sealed_any(self) -> bool:
        return any(self.sealed.values())

    @property
    def done(self) -> bool:
        """Nothing is left plain that a sealing seals."""
        return not any(self.left.values())

    def then(self, later: SealingRound) -> SealingRound:
        """This round and a later one together: what both sealed, what is left after the later."""
        sealed = {table: self.sealed.get(table, 0) + later.sealed.get(table, 0) for table in later.sealed}
        return SealingRound(sealed, later.left, later.held)


def seal_older_content(db: Database, keys: ContentKeys, *, batch: int = BATCH) -> SealingRound:
    """Seal one batch of each table's plain rows (each table's in a transaction of its own),
    then count what is left."""
    events, names = _seal_events(db, keys, batch)
    sealed = {"events": events, "attachments": names + _seal_names(db, keys, batch)}
    for table in ("admissions", "runs", "derivatives"):
        sealed[table] = _seal_rows(db, keys, table, batch)
    with db.read() as conn:
        left = sealing_queries.content_left(conn, cap=LEFT_CAP)
        held = sealing_queries.held_left(conn, cap=LEFT_CAP)
    return SealingRound(sealed, {table: left[table] for table in sealing_queries.SEALED_TABLES}, held)


def content_left(db: Database) -> dict[str, int]:
    """Per table, the content still in plain text (``blobs``: attachment files, which the
    sealing leaves), counted up to ``LEFT_CAP``: for the console and the metrics."""
    with db.read() as conn:
        return sealing_queries.content_left(conn, cap=LEFT_CAP)


# -- one batch per table --------------------------------------------------------------------------


def _candidates(db: Database, table: str, batch: int) -> list[str]:
    with db.read() as conn:
        return sealing_queries.candidates(conn, table, batch)


def _seal_events(db: Database, keys: ContentKeys, batch: int) -> tuple[int, int]:
    """Events, each under a new key, with their attachments' names: how many of each."""
    ids = _candidates(db, "events", batch)
    if not ids:
        return 0, 0
    taken = keys.take_many(len(ids))  # durable before any row names them

    def work(conn: Connection) -> tuple[int, int]:
        sealing_queries.lock_holds(conn)
        rows = sealing_queries.lock(conn, "events", ids)
        given = {row.id: key for row, key in zip(rows, taken, strict=False)}
        names = sealing_queries.names_of(conn, list(given))
        events = sealing_queries.seal(conn, "events", [_sealed("events", row, given[row.id]) for row in rows])
        sealed_names = [_sealed("attachments", name, given[name.event_id]) for name in names]
        count = sealing_queries.seal(conn, "attachments", sealed_names)
        failpoints.hit("sealing.batch")
        return events, count

    return db.transact(work)


def _seal_names(db: Database, keys: ContentKeys, batch: int) -> int:
    """Names left plain under an event already sealed, under the event's key."""
    with db.read() as conn:
        ids = sealing_queries.candidates(conn, "attachments", batch)
        named = sealing_queries.event_keys(conn, ids)
    if not ids:
        return 0
    found = keys.lookup(named.values())  # before the transaction: the store may be a server

    def work(conn: Connection) -> int:
        sealing_queries.lock_holds(conn)
        rows = sealing_queries.lock(conn, "attachments", ids)
        sealed = [
            _sealed("attachments", row, (row.event_key_id, key))
            for row in rows
            if row.event_key_id and (key := found.get(row.event_key_id)) is not None
        ]
        count = sealing_queries.seal(conn, "attachments", sealed)
        failpoints.hit("sealing.batch")
        return count

    return db.transact(work)


def _seal_rows(db: Database, keys: ContentKeys, table: str, batch: int) -> int:
    """Admissions, runs' outputs or derivatives, each under a new key of its own."""
    ids = _candidates(db, table, batch)
    if not ids:
        return 0
    taken = keys.take_many(len(ids))

    def work(conn: Connection) -> int:
        sealing_queries.lock_holds(conn)
        rows = sealing_queries.lock(conn, table, ids)
        count = sealing_queries.seal(conn, table, [_sealed(table, r, k) for r, k in zip(rows, taken, strict=False)])
        failpoints.hit("sealing.batch")
        return count

    return db.transact(work)


def _sealed(table: str, row: PlainRow, key: tuple[str, bytes]) -> Sealed:
    key_id, secret = key
    value = sealed_content.seal_optional(secret, row.value, bound_to=BOUND_TO[table](row.id))
    return Sealed(row.id, value, key_id)
