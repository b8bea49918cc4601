"""No writer writes as an erased author, whatever its snapshot (issue 23, item 11).

A REPEATABLE READ transaction takes its snapshot, an erasure of the author commits, and only
then does the old transaction write: it cannot see the erasure's row. Every erasure writes
the author's row of ``author_erasure_marks`` (a trigger on ``author_erasures``, so the
acceptance, a restore's merge and a raw writer alike), and a writer under a transaction
snapshot probes that row's key before it trusts what it sees: a row committed after its
snapshot is a serialization failure, and the retry, in a fresh snapshot, is refused with
``AuthorErased``. Two real PostgreSQL connections; the marks on both backends.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

import purgekeeper
from purgekeeper.schema import authors
from purgekeeper.schema.errors import AuthorErased, is_retryable, translate_db_error
from tests.helpers import scalar

Pk = purgekeeper.Purgekeeper

NEW_EVENT = (
    "INSERT INTO events (id, author, occurred_at, body) "
    "VALUES ('e-stale', 'u', clock_timestamp(), 'as a closed author')"
)
PLACE_NEW = "INSERT INTO placements (event_id, conversation_id) VALUES ('e-stale', 'c1')"
PLACE_OLD = "INSERT INTO placements (event_id, conversation_id) VALUES ('e-old', 'c2')"


def erase(pk: Pk, author: str = "u") -> None:
    preview = pk.preview_author_erasure(author)
    pk.erase_author(author, scope_digest=preview.scope_digest, actor="dpo", reason="GDPR", close_author=True)


@pytest.fixture
def snapshot_writer(pk: Pk) -> Iterator[Connection]:
    """A raw client's REPEATABLE READ transaction, its snapshot taken by a first SELECT."""
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    pk.ingest_event("c1", author="u", body="before", event_id="e-old")
    conn = pk.db.engine.connect().execution_options(isolation_level="REPEATABLE READ")
    transaction = conn.begin()
    conn.execute(text("SELECT count(*) FROM author_erasures")).scalar()
    try:
        yield conn
    finally:
        if transaction.is_active:
            transaction.rollback()
        conn.close()


def refused_then_erased(pk: Pk, stale: Connection, statements: list[str]) -> None:
    """The stale transaction fails as a serialization failure; run again in a fresh snapshot,
    it is refused with AuthorErased."""
    with pytest.raises(DBAPIError) as info:
        for sql in statements:
            stale.execute(text(sql))
    assert is_retryable(info.value), info.value.orig
    stale.rollback()
    with pk.db.engine.connect().execution_options(isolation_level="REPEATABLE READ") as fresh, fresh.begin():
        with pytest.raises(DBAPIError) as again:
            for sql in statements:
                fresh.execute(text(sql))
    assert isinstance(translate_db_error(again.value), AuthorErased), again.value.orig


@pytest.mark.postgres_only
def test_a_snapshot_from_before_an_erasure_cannot_write_as_the_closed_author(pk: Pk, snapshot_writer: Any) -> None:
    erase(pk)
    refused_then_erased(pk, snapshot_writer, [NEW_EVENT, PLACE_NEW])
    assert scalar(pk, "SELECT count(*) FROM events WHERE id = 'e-stale'") == 0
    assert pk.read_conversation("c1") == []


@pytest.mark.postgres_only
def test_a_snapshot_from_before_an_erasure_cannot_place_an_erased_event(pk: Pk, snapshot_writer: Any) -> None:
    erase(pk)
    with pytest.raises(DBAPIError) as info:
        snapshot_writer.execute(text(PLACE_OLD))
    assert is_retryable(info.value), info.value.orig
    assert scalar(pk, "SELECT count(*) FROM placements WHERE event_id = 'e-old' AND conversation_id = 'c2'") == 0


@pytest.mark.postgres_only
def test_a_second_erasure_is_seen_by_a_snapshot_that_saw_the_first(pk: Pk) -> None:
    """u's first erasure (with a window, u stays open) is in the writer's snapshot; the second
    (closing u) commits after it: the mark's row changed under the snapshot."""
    pk.create_conversation("c1")
    before = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    preview = pk.preview_author_erasure("u", before=before)
    pk.erase_author("u", before=before, close_author=False, scope_digest=preview.scope_digest, actor="d", reason="r")
    with pk.db.engine.connect().execution_options(isolation_level="REPEATABLE READ") as stale:
        stale.begin()
        stale.execute(text("SELECT count(*) FROM author_erasures")).scalar()
        erase(pk)
        refused_then_erased(pk, stale, [NEW_EVENT, PLACE_NEW])


@pytest.mark.postgres_only
def test_read_committed_ingest_writes_no_mark(pk: Pk) -> None:
    """The library's ingest (READ COMMITTED) probes nothing: the author's lock is enough."""
    pk.create_conversation("c1")
    for n in range(3):
        pk.ingest_event("c1", author="busy", body=str(n))
    assert scalar(pk, "SELECT count(*) FROM author_erasure_marks") == 0


def test_every_erasure_row_marks_its_author_once(pk: Pk) -> None:
    """The acceptance's row, and the same row written again (a merge) or another one."""
    window_end = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with pk.db.write() as conn:
        for purge_id in ("p-1", "p-1", "p-2"):
            authors.insert_erasure(conn, purge_id=purge_id, author="u", window_end=window_end, close_author=False)
    assert scalar(pk, "SELECT erasures FROM author_erasure_marks WHERE author = 'u'") == 2
