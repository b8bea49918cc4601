"""Times a fence compares are the instants they say (issue 23, item 12).

SQLite compares times as text. The library writes one form, ``YYYY-MM-DD HH:MM:SS.ffffff``
in UTC (the column defaults, SQLite's ``CURRENT_TIMESTAMP``, write ``YYYY-MM-DD HH:MM:SS``,
which sorts as the start of its second); any other ISO-8601 spelling of an instant sorts
elsewhere than the instant, so the triggers refuse it (``ValidationError``) in every time
column that a fence compares. On PostgreSQL ``timestamptz`` stores the instant itself: the
same raw writes land in the erased window and are refused as erased. Both backends.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import text

import purgekeeper
from purgekeeper.schema.errors import AuthorErased, ValidationError

Pk = purgekeeper.Purgekeeper

WINDOW_END = dt.datetime(2026, 6, 1, 12, tzinfo=dt.UTC)
# Each is 11:00Z, inside a window that ends at 12:00Z; as SQLite text, each sorts after it.
INSIDE_THE_WINDOW = (
    "2026-06-01T11:00:00",
    "2026-06-01T11:00:00Z",
    "2026-06-01T11:00:00+00:00",
    "2026-06-01T16:00+05:00",
    "2026-06-01 16:00:00+05:00",
)
# Not a time, or not one the library writes (SQLite only: PostgreSQL parses or rejects each).
MALFORMED = (
    "2026-13-01 00:00:00.000000",
    "2026-02-30 11:00:00.000000",
    "2026-06-01 24:00:00.000000",
    "2026-06-01 11:00:00.5",
    "2026-06-01 11:00",
    "tomorrow",
    "0000-01-01 00:00:00.000000",  # a year no datetime holds: the reads raised an untyped ValueError
)


def write(pk: Pk, sql: str, **params: Any) -> int:
    with pk.db.write() as conn:
        return int(conn.execute(text(sql), params).rowcount or 0)


def refused(pk: Pk, sql: str, **params: Any) -> type[Exception]:
    """The error a raw write raised: on SQLite the malformed time, on PostgreSQL the erasure."""
    expected = ValidationError if pk.db.engine.dialect.name == "sqlite" else AuthorErased
    with pytest.raises(expected) as info:
        write(pk, sql, **params)
    return type(info.value)


@pytest.fixture
def erased(pk: Pk) -> Pk:
    """Conversation c1; u's content before 12:00Z erased (u stays open for later events)."""
    pk.create_conversation("c1")
    preview = pk.preview_author_erasure("u", before=WINDOW_END)
    pk.erase_author(
        "u", before=WINDOW_END, close_author=False, scope_digest=preview.scope_digest, actor="dpo", reason="GDPR"
    )
    return pk


EVENT = "INSERT INTO events (id, author, occurred_at, body) VALUES (:id, 'u', :at, 'back from the window')"


@pytest.mark.parametrize("at", INSIDE_THE_WINDOW)
def test_an_event_inside_an_erased_window_is_refused_however_its_time_is_spelled(erased: Pk, at: str) -> None:
    refused(erased, EVENT, id="e-raw", at=at)
    assert erased.read_conversation("c1") == []
    with erased.db.read() as conn:
        assert conn.scalar(text("SELECT count(*) FROM events WHERE id = 'e-raw'")) == 0


def test_the_forms_the_library_and_the_database_write_are_taken(erased: Pk) -> None:
    """After the window: the library's form, and SQLite's CURRENT_TIMESTAMP (the defaults')."""
    assert write(erased, EVENT, id="e-late", at="2026-06-01 13:00:00.000000") == 1
    assert write(erased, EVENT, id="e-now", at="2026-06-01 13:00:01") == 1
    write(erased, "INSERT INTO placements (event_id, conversation_id) VALUES ('e-late', 'c1')")
    assert [e.id for e in erased.read_conversation("c1")] == ["e-late"]
    with pytest.raises(AuthorErased):  # and the fence still holds on the library's own form
        write(erased, EVENT, id="e-in", at="2026-06-01 11:59:59.999999")


@pytest.mark.sqlite_only
@pytest.mark.parametrize("at", MALFORMED)
def test_sqlite_refuses_a_time_not_in_the_canonical_form(erased: Pk, at: str) -> None:
    with pytest.raises(ValidationError, match="time"):
        write(erased, EVENT, id="e-bad", at=at)


@pytest.mark.sqlite_only
def test_sqlite_refuses_every_compared_time_in_another_form(erased: Pk) -> None:
    """events.created_at and occurred_at (insert and update), placements.created_at,
    author_erasures.window_end, retention_fences' cutoff, window_start and placed_before,
    retention_policies' pending_cutoff and expired_through (a past cutoff: a planned one is
    never later than now - max_age)."""
    good = "2026-06-01 13:00:00.000000"
    bad = "2026-06-01T13:00:00Z"
    write(erased, EVENT, id="e1", at=good)
    statements = [
        "INSERT INTO events (id, author, occurred_at, body, created_at) VALUES ('e2', 'v', :good, 'b', :bad)",
        "UPDATE events SET occurred_at = :bad WHERE id = 'e1'",
        "UPDATE events SET created_at = :bad WHERE id = 'e1'",
        "INSERT INTO placements (event_id, conversation_id, created_at) VALUES ('e1', 'c1', :bad)",
        "INSERT INTO author_erasures (author, purge_id, window_end, close_author) VALUES ('w', 'p-w', :bad, 0)",
        "INSERT INTO retention_fences (purge_id, policy_id, cutoff, placed_before) VALUES ('p-f', 'pol', :bad, :good)",
        "INSERT INTO retention_fences (purge_id, policy_id, cutoff, placed_before) VALUES ('p-f', 'pol', :good, :bad)",
        "INSERT INTO retention_fences (purge_id, policy_id, cutoff, window_start, placed_before) "
        "VALUES ('p-f', 'pol', :good, :bad, :good)",
    ]
    for sql in statements:
        with pytest.raises(ValidationError, match="time"):
            write(erased, sql, good=good, bad=bad)
    max_age = dt.timedelta(days=1)
    preview = erased.preview_retention(max_age=max_age, conversation_id="c1")
    erased.set_retention(
        "pol", max_age=max_age, conversation_id="c1", scope_digest=preview.scope_digest, actor="op", reason="r"
    )
    past = "2020-01-01 00:00:00.000000"
    for column in ("pending_cutoff", "expired_through"):
        with pytest.raises(ValidationError, match="time"):
            write(erased, f"UPDATE retention_policies SET {column} = :bad WHERE policy_id = 'pol'", bad=bad)
        assert write(erased, f"UPDATE retention_policies SET {column} = :past WHERE policy_id = 'pol'", past=past)
