"""The purge ledger: an append-only, gapless, hash-chained list of accepted purges.

``row_hash = SHA-256(prev_hash ‖ canonical JSON)``. The canonical JSON holds every field of
the row except ``prev_hash`` and ``row_hash``, with sorted keys, compact separators and UTC
timestamps with microseconds and a ``Z``. Rows written since migration 0018 also hold their
``salts`` (``purgekeeper.schema.ledger_salts``); a row without them hashes as it always did.
The genesis ``prev_hash`` is 64 zeros. ``seq`` is handed out under the one-row
``ledger_head`` lock, so concurrent acceptances never fork or reorder the chain. No row ever
holds a body, a payload or file content.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import JSON, Connection, Row, bindparam, cast, func, insert, literal_column, select

from purgekeeper.schema.driver import DriverStatement, Reader
from purgekeeper.schema.ledger_salts import COMMITTED_FIELDS as COMMITTED_FIELDS
from purgekeeper.schema.ledger_salts import new_salts, salt_map
from purgekeeper.schema.tables import ledger_head, purge_ledger

GENESIS_HASH = "0" * 64
HASHED_FIELDS = (
    "seq",
    "purge_id",
    "kind",
    "selectors",
    "scope_digest",
    "actor",
    "reason",
    "request_id",
    "idempotency_key",
    "origin",
    "accepted_at",
    "salts",  # only in rows that have them (since 0018): ``hashed_fields`` leaves it out otherwise
)
VERIFY_BATCH = 1000
MAX_PROBLEMS = 20


def utc_text(moment: dt.datetime) -> str:
    """``2026-11-30T06:18:18.123456Z``: the one timestamp form the chain hashes (a report
    of a thousand events formats a thousand: ``isoformat`` is the fast path, ``strftime``
    the definition, and they agree from the year 1000 on)."""
    utc = moment if moment.tzinfo is dt.UTC else moment.astimezone(dt.UTC)
    if utc.year >= 1000:
        return utc.isoformat(timespec="microseconds")[:-6] + "Z"  # without its "+00:00"
    return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def from_utc_text(text: str) -> dt.datetime:
    """The moment ``utc_text`` wrote (``...Z``); ValueError when ``text`` is no ISO time. A
    text without a zone parses as naive: callers that need one check ``tzinfo``."""
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return utc_text(value)
    raise TypeError(f"{type(value).__name__} is not canonical JSON")


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class LedgerEntry:
    """One ledger row, as hashed."""

    seq: int
    purge_id: str
    kind: str
    selectors: Mapping[str, Any]
    scope_digest: str
    actor: str
    reason: str
    request_id: str | None
    idempotency_key: str | None
    origin: str | None
    accepted_at: dt.datetime
    prev_hash: str
    row_hash: str
    salts: str | None = None

    @classmethod
    def from_row(cls, row: Row[Any]) -> LedgerEntry:
        return cls(
            seq=int(row.seq),
            purge_id=row.purge_id,
            kind=row.kind,
            selectors=json.loads(row.selectors),
            scope_digest=row.scope_digest,
            actor=row.actor,
            reason=row.reason,
            request_id=row.request_id,
            idempotency_key=row.idempotency_key,
            origin=row.origin,
            accepted_at=row.accepted_at,
            prev_hash=row.prev_hash,
            row_hash=row.row_hash,
            salts=row.salts,
        )

    @classmethod
    def from_checkpoint(cls, row: Mapping[str, Any]) -> LedgerEntry:
        """A row as a checkpoint file holds it (its hashed fields, ``prev_hash`` and
        ``row_hash``); raises KeyError, TypeError or ValueError when it is malformed."""
        accepted_at = from_utc_text(str(row["accepted_at"]))
        if accepted_at.tzinfo is None:
            raise ValueError("accepted_at has no timezone")
        selectors = row["selectors"]
        if not isinstance(selectors, Mapping):
            raise TypeError("selectors is not an object")
        text = {
            name: row[name] for name in ("purge_id", "kind", "scope_digest", "actor", "reason", "prev_hash", "row_hash")
        }
        if not all(isinstance(value, str) for value in text.values()):
            raise TypeError("a text field is not a string")
        optional: dict[str, Any] = {name: row.get(name) for name in ("request_id", "idempotency_key", "origin")}
        if not all(value is None or isinstance(value, str) for value in optional.values()):
            raise TypeError("an optional text field is not a string")
        seq = row["seq"]
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise TypeError("seq is not an integer")
        salts = row.get("salts")  # absent in rows written before 0018
        if salts is not None:
            salt_map(salts)  # ValueError or TypeError when they are not salts
        return cls(
            seq=seq,
            selectors=dict(selectors),
            accepted_at=accepted_at.astimezone(dt.UTC),
            salts=salts,
            **text,
            **optional,
        )

    def content(self) -> dict[str, Any]:
        """What a purge IS, wherever its row sits: the hashed fields without the chain
        position (``seq``) and without ``origin``, which a merge rewrites to name the source."""
        fields = self.hashed_fields()
        del fields["seq"], fields["origin"]
        fields.pop("salts", None)  # random: a merge re-chaining the purge draws new ones
        return fields

    def hashed_fields(self) -> dict[str, Any]:
        """The fields ``row_hash`` covers: ``salts`` only when the row has them, so a row of
        before 0018 keeps its hash (and its leaf) byte for byte."""
        fields = {name: getattr(self, name) for name in HASHED_FIELDS}
        if self.salts is None:
            del fields["salts"]
        return fields

    def expected_hash(self) -> str:
        return row_hash(self.prev_hash, self.hashed_fields())


def row_hash(prev_hash: str, fields: Mapping[str, Any]) -> str:
    return sha256_hex(prev_hash + canonical_json(dict(fields)))


@dataclass(frozen=True)
class Head:
    seq: int
    head_hash: str
    database_id: str
    now: dt.datetime
    gate_reason: str | None = None


def lock_head(conn: Connection) -> Head:
    """The ledger head and the database clock, the head locked until the transaction ends
    (taken last by acceptances, for the least time)."""
    return _head(conn, lock=True)


# What the read gate checks of the head on every content call: one primary-key read.
HEAD_GATE = select(ledger_head.c.seq, ledger_head.c.head_hash, ledger_head.c.gate_reason).where(ledger_head.c.id == 1)


def read_head(conn: Connection) -> Head:
    return _head(conn, lock=False)


_HEAD = {
    dialect: select(ledger_head, clock.label("now")).where(ledger_head.c.id == 1)
    for dialect, clock in (
        ("sqlite", literal_column("strftime('%Y-%m-%d %H:%M:%f000', 'now')")),
        ("postgresql", func.clock_timestamp()),
    )
}
_HEAD_LOCKED = {dialect: query.with_for_update() for dialect, query in _HEAD.items()}
_READ_HEAD = {dialect: DriverStatement(query, named=True) for dialect, query in _HEAD.items()}
_LOCK_HEAD = {dialect: DriverStatement(query, named=True) for dialect, query in _HEAD_LOCKED.items()}
_INSERT = insert(purge_ledger)


def _head(conn: Connection, *, lock: bool) -> Head:
    row = (_LOCK_HEAD if lock else _READ_HEAD)[conn.dialect.name].first(conn)
    if row is None:
        raise LookupError("the ledger head row is missing")
    return Head(
        seq=int(row.seq),
        head_hash=row.head_hash,
        database_id=row.database_id,
        now=_utc(row.now),
        gate_reason=row.gate_reason,
    )


def set_gate(conn: Connection, reason: str | None) -> None:
    """Close content reads and writes with ``reason`` (durably, for every process), or reopen
    them with None."""
    conn.execute(ledger_head.update().where(ledger_head.c.id == 1).values(gate_reason=reason))


def clock(conn: Connection, *, plus: dt.timedelta = dt.timedelta(0)) -> Any:
    """The database clock (plus an interval) as a SQL expression, for a statement that writes
    a time without reading the clock first. SQLite's text has the layout its datetimes are
    stored in, so times compare as text."""
    if conn.dialect.name == "postgresql":
        return func.clock_timestamp() + plus if plus else func.clock_timestamp()
    return literal_column(f"strftime('%Y-%m-%d %H:%M:%f000', 'now', '{plus.total_seconds():+.6f} seconds')")


def database_now(conn: Connection) -> dt.datetime:
    """The database clock, to the microsecond where the database keeps them."""
    return read_head(conn).now


def _utc(value: Any) -> dt.datetime:
    if isinstance(value, str):
        return dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def append(
    conn: Connection,
    head: Head,
    *,
    purge_id: str,
    kind: str,
    selectors: Mapping[str, Any],
    scope_digest: str,
    actor: str,
    reason: str,
    request_id: str | None,
    idempotency_key: str | None,
    origin: str | None,
    accepted_at: dt.datetime | None = None,
    salted: bool = True,
) -> LedgerEntry:
    """Append one row after ``head`` (which the caller locked); the database checks that it
    extends the ledger and moves the head to it (the chain triggers). ``salted=False`` writes
    a row as before 0018 (no salts: its leaf holds every field in clear), for tests of them."""
    entry = next_entry(
        head,
        purge_id=purge_id,
        kind=kind,
        selectors=selectors,
        scope_digest=scope_digest,
        actor=actor,
        reason=reason,
        request_id=request_id,
        idempotency_key=idempotency_key,
        origin=origin,
        accepted_at=accepted_at,
        salted=salted,
    )
    insert_entries(conn, [entry])
    return entry


def next_entry(
    head: Head,
    *,
    purge_id: str,
    kind: str,
    selectors: Mapping[str, Any],
    scope_digest: str,
    actor: str,
    reason: str,
    request_id: str | None,
    idempotency_key: str | None,
    origin: str | None,
    accepted_at: dt.datetime | None = None,
    salted: bool = True,
) -> LedgerEntry:
    """The row that would extend ``head``, hashed (nothing is written), with fresh salts
    unless ``salted=False`` (a row as before 0018)."""
    fields: dict[str, Any] = {
        "seq": head.seq + 1,
        "purge_id": purge_id,
        "kind": kind,
        "selectors": json.loads(canonical_json(selectors)),
        "scope_digest": scope_digest,
        "actor": actor,
        "reason": reason,
        "request_id": request_id,
        "idempotency_key": idempotency_key,
        "origin": origin,
        "accepted_at": accepted_at or head.now,
    }
    if salted:
        fields["salts"] = new_salts()
    return LedgerEntry(**fields, prev_hash=head.head_hash, row_hash=row_hash(head.head_hash, fields))


def following(head: Head, entry: LedgerEntry) -> Head:
    """The head once ``entry`` extends it."""
    return Head(entry.seq, entry.row_hash, head.database_id, head.now, head.gate_reason)


INSERT_CHUNK = 1000  # rows per INSERT statement of a bulk append on PostgreSQL

# PostgreSQL: a chunk of rows as ONE statement and one parameter (the rows as a JSON array):
# the head moves once per statement (migration 0007), and the statement is compiled once.
_COLUMNS = [*HASHED_FIELDS, "prev_hash", "row_hash"]
_INSERT_JSON_ROWS = insert(purge_ledger).from_select(
    _COLUMNS,
    select(*(literal_column(name) for name in _COLUMNS)).select_from(
        func.json_populate_recordset(literal_column("NULL::purge_ledger"), cast(bindparam("rows"), JSON))
    ),
)


# One row by itself, with its salts or (a row as before 0018, which a database of before 0018
# can take too) without them.
_INSERT_ONE = {
    salted: DriverStatement(
        insert(purge_ledger).values(
            {name: bindparam(name, type_=purge_ledger.c[name].type) for name in _COLUMNS if salted or name != "salts"}
        )
    )
    for salted in (True, False)
}


def insert_entries(conn: Connection, entries: Sequence[LedgerEntry]) -> None:
    """Insert chained rows. PostgreSQL: ``INSERT_CHUNK`` rows to a statement, so a merge of n
    rows moves the head n / INSERT_CHUNK times, not n times. SQLite updates its head in
    place, row by row, at no growing cost."""
    values = [
        {
            **entry.hashed_fields(),
            "selectors": canonical_json(entry.selectors),
            "salts": entry.salts,
            "prev_hash": entry.prev_hash,
            "row_hash": entry.row_hash,
        }
        for entry in entries
    ]
    if not values:
        return
    if len(values) == 1:
        salted = values[0]["salts"] is not None
        _INSERT_ONE[salted].execute(conn, values[0] if salted else {k: v for k, v in values[0].items() if k != "salts"})
        return
    if conn.dialect.name != "postgresql":
        conn.execute(_INSERT, values)
        return
    for start in range(0, len(values), INSERT_CHUNK):
        conn.execute(_INSERT_JSON_ROWS, {"rows": canonical_json(values[start : start + INSERT_CHUNK])})


_ENTRY_BY_PURGE_ID = DriverStatement(
    select(purge_ledger).where(purge_ledger.c.purge_id == bindparam("purge_id")), named=True
)


def entry_by_purge_id(conn: Reader, purge_id: str) -> LedgerEntry | None:
    """The purge's row (its unique index), by the driver: in ``Database.single`` one round trip."""
    row = _ENTRY_BY_PURGE_ID.first(conn, {"purge_id": purge_id})
    return LedgerEntry.from_row(row) if row else None


def entries_by_purge_ids(conn: Connection, purge_ids: Sequence[str]) -> dict[str, LedgerEntry]:
    """The rows of these purges, by purge id (one statement; unknown ids are left out)."""
    if not purge_ids:
        return {}
    rows = conn.execute(select(purge_ledger).where(purge_ledger.c.purge_id.in_(list(purge_ids))))
    return {entry.purge_id: entry for entry in map(LedgerEntry.from_row, rows)}


def entry_by_idempotency_key(conn: Connection, key: str) -> LedgerEntry | None:
    query = select(purge_ledger).where(purge_ledger.c.idempotency_key == key).order_by(purge_ledger.c.seq).limit(1)
    row = conn.execute(query).first()
    return LedgerEntry.from_row(row) if row else None


def entries(
    conn: Connection, *, batch: int = VERIFY_BATCH, after: int = 0, upto: int | None = None
) -> Iterator[LedgerEntry]:
    """The rows with ``after < seq <= upto`` (every row by default) in seq order, read in
    batches by the primary key, so memory does not grow with the ledger and the rows before
    ``after`` are never read."""
    last = after
    while True:
        query = select(purge_ledger).where(purge_ledger.c.seq > last).order_by(purge_ledger.c.seq).limit(batch)
        if upto is not None:
            query = query.where(purge_ledger.c.seq <= upto)
        rows = list(conn.execute(query))
        for row in rows:
            yield LedgerEntry.from_row(row)
        if len(rows) < batch:
            return
        last = rows[-1].seq


PURGE_ID_CHUNK = 1000


def entries_by_purge_id(conn: Connection, purge_ids: Iterable[str]) -> dict[str, LedgerEntry]:
    """The rows of these purges that the ledger holds, looked up by the unique purge_id
    index a chunk at a time (never a read of the whole ledger)."""
    wanted = list(dict.fromkeys(purge_ids))
    found: dict[str, LedgerEntry] = {}
    for start in range(0, len(wanted), PURGE_ID_CHUNK):
        chunk = wanted[start : start + PURGE_ID_CHUNK]
        for row in conn.execute(select(purge_ledger).where(purge_ledger.c.purge_id.in_(chunk))):
            found[row.purge_id] = LedgerEntry.from_row(row)
    return found


_ENTRY_AT = DriverStatement(select(purge_ledger).where(purge_ledger.c.seq == bindparam("seq")), named=True)


def entry_at(conn: Reader, seq: int) -> LedgerEntry | None:
    row = _ENTRY_AT.first(conn, {"seq": seq})
    return LedgerEntry.from_row(row) if row else None


@dataclass(frozen=True)
class LedgerReport:
    """What walking the chain found: ``ok``, the row count, the head hash, bounded problems."""

    ok: bool
    rows: int
    head_hash: str
    problems: tuple[str, ...]


def verify(
    conn: Connection, *, max_problems: int = MAX_PROBLEMS, visit: Callable[[LedgerEntry], None] | None = None
) -> LedgerReport:
    """Walk the chain: gapless seq from 1, each prev_hash the previous row_hash, each row_hash
    recomputed, and the head on the last row. Reports at most ``max_problems`` problems.
    ``visit`` sees every row on the way, so a caller that needs the rows too reads them once."""
    chain = entries(conn)
    if visit is not None:
        chain = _visited(chain, visit)
    rows, last_hash, problems = walk_chain(chain)
    head = read_head(conn)
    if head.seq != rows or head.head_hash != last_hash:
        problems.append(f"head at seq {head.seq} does not match the last row (seq {rows})")
    return LedgerReport(ok=not problems, rows=rows, head_hash=last_hash, problems=tuple(problems[:max_problems]))


def _visited(chain: Iterator[LedgerEntry], visit: Callable[[LedgerEntry], None]) -> Iterator[LedgerEntry]:
    for entry in chain:
        visit(entry)
        yield entry


def walk_chain(
    chain: Iterable[LedgerEntry], *, start: int = 1, prev_hash: str = GENESIS_HASH
) -> tuple[int, str, list[str]]:
    """The chain checks of one ledger (a database's or a checkpoint file's), or of a stretch
    of it that begins at seq ``start`` after a row whose hash is ``prev_hash``: returns the
    rows walked, the last row_hash and the problems found (ids only, never content)."""
    problems: list[str] = []
    expected_seq, rows = start, 0
    for entry in chain:
        rows += 1
        if entry.seq != expected_seq:
            problems.append(f"gap: expected seq {expected_seq}, found {entry.seq}")
        if entry.prev_hash != prev_hash:
            problems.append(f"broken link at seq {entry.seq}: prev_hash does not match the row before")
        if entry.expected_hash() != entry.row_hash:
            problems.append(f"tampered row at seq {entry.seq} (purge {entry.purge_id}): row_hash does not match")
        expected_seq, prev_hash = entry.seq + 1, entry.row_hash
    return rows, prev_hash, problems
