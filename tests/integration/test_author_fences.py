"""An author erasure fences everything the author wrote before its window's end (0008).

Each test seeds rows with raw SQL, writes one ``author_erasures`` row the way an acceptance
does (``purgekeeper.schema.authors.insert_erasure``), and then tries raw writes, each in its own
transaction: the refusals are the triggers' own. Reads, the cleanup's batches and the
preview's totals are the queries of ``purgekeeper.schema.authors`` and
``purgekeeper.schema.content_queries``. Both backends.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import pytest
from sqlalchemy import Connection, text

from purgekeeper.schema import authors, cleanup_queries, content_queries, restore
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import AuthorErased, ContentPurged, PurgekeeperError, ValidationError
from tests.helpers.raw import refused, statement, value, write

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
WINDOW_END = T0 + dt.timedelta(hours=3)
HOUR = dt.timedelta(hours=1)


def add_event(
    db: Database,
    event_id: str,
    author: str,
    at: dt.datetime,
    *,
    conversations: tuple[str, ...] = ("c1",),
    key_id: str | None = None,
) -> None:
    """A raw event; with ``key_id``, as if its body were sealed under that key (the body
    stays the plain 'secret': these tests never open it)."""
    write(
        db,
        "INSERT INTO events (id, provider_event_id, author, occurred_at, body, key_id) "
        "VALUES (:id, :p, :author, :at, 'secret', :k)",
        id=event_id,
        p=f"p-{event_id}",
        author=author,
        at=at,
        k=key_id,
    )
    for conversation in conversations:
        write(db, "INSERT INTO placements (event_id, conversation_id) VALUES (:e, :c)", e=event_id, c=conversation)


def add_blob(db: Database, blob_id: str, digit: str) -> None:
    sha = digit * 64
    write(
        db,
        "INSERT INTO blobs (id, kind, sha256, size, path) VALUES (:id, 'cas', :sha, 3, :path)",
        id=blob_id,
        sha=sha,
        path=f"{sha[:2]}/{sha[2:4]}/{sha}-{blob_id}",
    )


def attach(db: Database, attachment_id: str, event_id: str, blob_id: str) -> None:
    write(
        db,
        "INSERT INTO attachments (id, event_id, blob_id, binding, name) VALUES (:a, :e, :b, 'legacy_cas', 'n.txt')",
        a=attachment_id,
        e=event_id,
        b=blob_id,
    )


def erase(db: Database, author: str = "ada", *, close_author: bool = False, purge_id: str = "pa") -> None:
    db.transact(
        lambda conn: authors.insert_erasure(
            conn, purge_id=purge_id, author=author, window_end=WINDOW_END, close_author=close_author
        )
    )


@pytest.fixture
def chat(db: Database) -> Database:
    """A bot, conversations c1 and c2, a running run r1 and a derivative d1 in c1, a present
    blob bl01; ada's a1 and a2 (in c1) before the window's end and a-late after it; bob's
    b-1, in the window's time."""
    write(db, "INSERT INTO bots (id, name) VALUES ('b1', 'Bot')")
    for conversation in ("c1", "c2"):
        write(db, "INSERT INTO conversations (id, bot_id) VALUES (:c, 'b1')", c=conversation)
    add_event(db, "a1", "ada", T0 + HOUR)
    add_event(db, "a2", "ada", T0 + 2 * HOUR)
    add_event(db, "a-late", "ada", T0 + 5 * HOUR)
    add_event(db, "b-1", "bob", T0 + HOUR)
    add_blob(db, "bl01", "a")
    write(db, "INSERT INTO runs (id, conversation_id, bot_id, status) VALUES ('r1', 'c1', 'b1', 'running')")
    write(db, "INSERT INTO derivatives (id, conversation_id, kind, payload) VALUES ('d1', 'c1', 'summary', 's')")
    return db


# -- writers ---------------------------------------------------------------------------------


def test_an_erased_event_takes_no_body_placement_admission_attachment_or_derivation(chat: Database) -> None:
    erase(chat)
    refused(chat, "UPDATE events SET body = 'back' WHERE id = 'a1'", ContentPurged)
    refused(chat, "INSERT INTO placements (event_id, conversation_id) VALUES ('a1', 'c2')", ContentPurged)
    refused(
        chat, "INSERT INTO admissions (id, event_id, run_id, payload) VALUES ('ad', 'a1', 'r1', 'x')", ContentPurged
    )
    refused(
        chat,
        "INSERT INTO attachments (id, event_id, blob_id, binding, name) VALUES ('at', 'a1', 'bl01', 'legacy_cas', 'n')",
        ContentPurged,
    )
    refused(chat, "INSERT INTO derivative_sources (derivative_id, event_id) VALUES ('d1', 'a1')", ContentPurged)
    assert write(chat, "UPDATE events SET body = NULL WHERE id = 'a1'") == 1  # the cleanup's own write
    # after the window's end, and by another author, everything stays writable
    assert write(chat, "UPDATE events SET body = 'edited' WHERE id IN ('a-late', 'b-1')") == 2
    write(chat, "INSERT INTO placements (event_id, conversation_id) VALUES ('a-late', 'c2')")
    write(chat, "INSERT INTO admissions (id, event_id, run_id, payload) VALUES ('ad', 'a-late', 'r1', 'x')")
    attach(chat, "at", "b-1", "bl01")


def test_outputs_and_payloads_from_an_erased_event_stay_null(chat: Database) -> None:
    write(chat, "INSERT INTO admissions (id, event_id, run_id, payload) VALUES ('ad', 'a1', 'r1', 'x')")
    write(chat, "INSERT INTO derivative_sources (derivative_id, event_id) VALUES ('d1', 'a2')")
    erase(chat)
    refused(chat, "UPDATE runs SET output = 'about a1' WHERE id = 'r1'", ContentPurged)
    refused(chat, "UPDATE runs SET output = 'about a1', status = 'succeeded' WHERE id = 'r1'", ContentPurged)
    refused(chat, "UPDATE derivatives SET payload = 'about a2' WHERE id = 'd1'", ContentPurged)
    refused(chat, "DELETE FROM admissions WHERE id = 'ad'", ContentPurged)  # the link to it stays
    assert write(chat, "UPDATE derivatives SET payload = NULL WHERE id = 'd1'") == 1
    assert write(chat, "UPDATE runs SET status = 'succeeded' WHERE id = 'r1'") == 1


def test_a_blob_bound_only_by_erased_events_is_bound_to_nothing_new(chat: Database) -> None:
    attach(chat, "at1", "a1", "bl01")
    erase(chat)
    refused(
        chat,
        "INSERT INTO attachments (id, event_id, blob_id, binding, name) "
        "VALUES ('at2', 'b-1', 'bl01', 'legacy_cas', 'n')",
        ContentPurged,
    )
    with chat.read() as conn:
        assert content_queries.blob_holds_purged_content(conn, "bl01")


def test_an_erased_author_takes_new_events_only_after_the_window(chat: Database) -> None:
    erase(chat, close_author=False)
    insert = "INSERT INTO events (id, author, occurred_at, body) VALUES (:id, :author, :at, 'again')"
    refused(chat, insert, AuthorErased, id="backfill", author="ada", at=T0 + 150 * dt.timedelta(minutes=1))
    refused(chat, insert, AuthorErased, id="edge", author="ada", at=WINDOW_END - dt.timedelta(microseconds=1))
    assert write(chat, insert, id="after", author="ada", at=WINDOW_END) == 1
    assert write(chat, insert, id="bob-2", author="bob", at=T0) == 1


def test_a_closed_author_takes_no_new_event_at_any_time(chat: Database) -> None:
    erase(chat, close_author=True)
    insert = "INSERT INTO events (id, author, occurred_at, body) VALUES (:id, :author, :at, 'again')"
    refused(chat, insert, AuthorErased, id="later", author="ada", at=T0 + 1000 * HOUR)
    refused(chat, "UPDATE events SET author = 'ada' WHERE id = 'b-1'", AuthorErased)  # a move to ada is new too
    assert write(chat, insert, id="bob-2", author="bob", at=T0 + 1000 * HOUR) == 1
    assert write(chat, "UPDATE events SET occurred_at = :at WHERE id = 'a-late'", at=T0 + 9 * HOUR) == 1


def test_an_erased_event_keeps_its_author_and_time_and_nothing_moves_into_the_window(chat: Database) -> None:
    erase(chat)
    refused(chat, "UPDATE events SET author = 'bob' WHERE id = 'a1'", AuthorErased)
    refused(chat, "UPDATE events SET author = 'bob', body = NULL WHERE id = 'a1'", AuthorErased)
    refused(chat, "UPDATE events SET occurred_at = :at WHERE id = 'a2'", AuthorErased, at=T0 + 9 * HOUR)
    refused(chat, "UPDATE events SET occurred_at = :at WHERE id = 'a-late'", AuthorErased, at=T0 + HOUR)
    refused(chat, "UPDATE events SET author = 'ada' WHERE id = 'b-1'", AuthorErased)
    assert value(chat, "SELECT author FROM events WHERE id = 'a1'") == "ada"
    assert write(chat, "UPDATE events SET author = 'eve' WHERE id = 'b-1'") == 1


def test_author_erasures_are_never_changed_or_removed(chat: Database) -> None:
    erase(chat)
    refused(chat, "UPDATE author_erasures SET window_end = :at", ValidationError, at=T0)
    refused(chat, "UPDATE author_erasures SET close_author = :c", ValidationError, c=True)
    refused(chat, "DELETE FROM author_erasures", ValidationError)
    if not chat.is_sqlite:
        refused(chat, "TRUNCATE author_erasures", ValidationError)
    erase(chat)  # re-applied (a restore merge): nothing changes
    with chat.read() as conn:
        assert [tuple(row) for row in authors.erasures_of(conn, "ada")] == [("pa", WINDOW_END, False)]


def test_the_ledger_takes_an_author_erasure(chat: Database) -> None:
    columns = "seq, purge_id, kind, selectors, scope_digest, actor, reason, accepted_at, prev_hash, row_hash"
    write(
        chat,
        f"INSERT INTO purge_ledger ({columns}) VALUES (1, 'pa', 'author', '{{}}', 'd', 'op', 'why', :at, :g, :h)",
        at=T0,
        g="0" * 64,
        h="1" * 64,
    )
    refused(chat, "UPDATE purge_ledger SET reason = 'rewritten'", ValidationError)
    refused(chat, "DELETE FROM purge_ledger", ValidationError)


# -- readers and restores --------------------------------------------------------------------


def test_a_read_omits_the_erased_events_only(chat: Database) -> None:
    attach(chat, "at1", "a1", "bl01")
    erase(chat)
    with chat.single() as reader:
        read = content_queries.read_conversation(reader, "c1")
    assert [row[1] for row in read.events] == ["b-1", "a-late"]
    with chat.read() as conn:
        assert not content_queries.is_event_live(conn, "a1")
        assert content_queries.is_event_live(conn, "a-late")


def test_a_restore_abandons_the_runs_that_admitted_an_erased_event(chat: Database) -> None:
    write(chat, "INSERT INTO runs (id, conversation_id, bot_id, status) VALUES ('r2', 'c1', 'b1', 'running')")
    write(chat, "INSERT INTO admissions (id, event_id, run_id, payload) VALUES ('ad', 'a1', 'r1', 'x')")
    write(chat, "INSERT INTO admissions (id, event_id, run_id, payload) VALUES ('ad2', 'a-late', 'r2', 'x')")
    erase(chat)
    assert chat.transact(restore.abandon_runs_in_purged_scopes) == 1
    assert value(chat, "SELECT status FROM runs WHERE id = 'r1'") == "abandoned"
    assert value(chat, "SELECT status FROM runs WHERE id = 'r2'") == "running"


# -- cleanup -----------------------------------------------------------------------------------


def test_erase_batch_fences_and_nulls_in_keyset_batches_and_again_changes_nothing(chat: Database) -> None:
    for n in range(3):  # three more at a1's time: the keyset's id breaks ties
        add_event(chat, f"a-{n}", "ada", T0 + HOUR, key_id="k-a-1" if n == 1 else None)
    add_event(chat, "b-2", "bob", T0 + HOUR, key_id="k-b-2")  # bob's, in the window's time: not erased
    write(
        chat, "INSERT INTO admissions (id, event_id, run_id, payload, key_id) VALUES ('ad', 'a-1', 'r1', 'x', 'k-ad')"
    )
    write(chat, "UPDATE runs SET status = 'succeeded', output = 'pk1:o', key_id = 'k-r1' WHERE id = 'r1'")  # sealed
    write(chat, "INSERT INTO tombstones (kind, id, purge_id) VALUES ('event', 'a2', 'earlier')")
    erase(chat)
    shred: list[str] = []  # the keys the batches give their cleanup batch to destroy

    def batch(after: tuple[Any, ...] | None) -> tuple[list[str], tuple[Any, ...] | None]:
        def work(conn: Connection) -> tuple[list[str], tuple[Any, ...] | None]:
            conn.info[cleanup_queries.SHRED] = shred  # as workers.cleanup.run_batch does
            try:
                return authors.erase_batch(
                    conn, purge_id="pa", author="ada", window_end=WINDOW_END, after=after, limit=2
                )
            finally:
                del conn.info[cleanup_queries.SHRED]

        return chat.transact(work)

    def batches() -> list[list[str]]:
        ids, after = batch(None)
        found = [ids]
        while after is not None:
            ids, after = batch(after)
            found.append(ids)
        return found

    with chat.read() as conn:
        assert authors.content_left(conn, "ada", WINDOW_END)
    assert batches() == [["a-0", "a-1"], ["a-2", "a1"], ["a2"]]
    assert sorted(shred) == ["k-a-1", "k-ad", "k-r1"]  # bob's b-2 keeps its key
    assert batches() == [["a-0", "a-1"], ["a-2", "a1"], ["a2"]]
    fences = "SELECT purge_id FROM tombstones WHERE kind = :k AND id = :i"
    assert value(chat, fences, k="event", i="a-1") == "pa"
    assert value(chat, fences, k="provider_event", i="p-a-1") is None  # fenced with its event:
    refused(  # a provider's duplicate delivery of it stays refused once the event is tombstoned
        chat,
        "INSERT INTO events (id, provider_event_id, author, occurred_at, body) VALUES ('x', 'p-a-1', 'eve', :at, 'b')",
        ContentPurged,
        at=T0,
    )
    assert value(chat, fences, k="event", i="a2") == "earlier"  # an earlier purge keeps its fence
    assert value(chat, "SELECT count(*) FROM events WHERE author = 'ada' AND body IS NOT NULL") == 1  # a-late
    assert value(chat, "SELECT payload FROM admissions WHERE id = 'ad'") is None
    assert value(chat, "SELECT output FROM runs WHERE id = 'r1'") is None
    assert value(chat, "SELECT count(*) FROM tombstones WHERE id = 'a-late'") == 0
    with chat.read() as conn:
        assert not authors.content_left(conn, "ada", WINDOW_END)


def test_the_window_ends_now_or_after_the_latest_event(chat: Database) -> None:
    with chat.read() as conn:
        assert authors.window_end(conn, "ada", T0) == T0
        now = dt.datetime.now(dt.UTC)
        assert abs(authors.window_end(conn, "nobody", None) - now) < dt.timedelta(minutes=5)  # the database clock
        end = authors.window_end(conn, "ada", None)
        assert end == max(T0 + 5 * HOUR + dt.timedelta(microseconds=1), end) and abs(end - now) < dt.timedelta(
            minutes=5
        )
    future = dt.datetime(2999, 1, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)
    add_event(chat, "a-future", "ada", future)
    with chat.read() as conn:
        assert authors.window_end(conn, "ada", None) == future + dt.timedelta(microseconds=1)
        assert authors.any_event_between(conn, "ada", T0, T0 + 2 * HOUR)
        assert not authors.any_event_between(conn, "ada", T0 + 6 * HOUR, future)


# -- the preview ---------------------------------------------------------------------------------


def test_erasure_totals_count_what_the_window_holds(chat: Database) -> None:
    """a1 is placed in c1 and c2; a1 has an exclusive attachment, a2 one whose blob bob's b-1
    binds too; r1 admitted a1 and has an output, r2 admitted a2 and is running; d1 comes
    from a1 and a2; a-old was fenced by an earlier purge."""
    write(chat, "INSERT INTO placements (event_id, conversation_id) VALUES ('a1', 'c2')")
    add_blob(chat, "bl02", "b")
    attach(chat, "at-ex", "a1", "bl01")
    attach(chat, "at-sh", "a2", "bl02")
    attach(chat, "at-bob", "b-1", "bl02")
    write(chat, "INSERT INTO admissions (id, event_id, run_id, payload) VALUES ('ad1', 'a1', 'r1', 'x')")
    write(chat, "UPDATE runs SET output = 'o', status = 'succeeded' WHERE id = 'r1'")
    write(chat, "INSERT INTO runs (id, conversation_id, bot_id, status) VALUES ('r2', 'c1', 'b1', 'running')")
    write(chat, "INSERT INTO admissions (id, event_id, run_id, payload) VALUES ('ad2', 'a2', 'r2', 'x')")
    write(chat, "INSERT INTO derivative_sources (derivative_id, event_id) VALUES ('d1', 'a1'), ('d1', 'a2')")
    add_event(chat, "a-old", "ada", T0)
    write(chat, "INSERT INTO tombstones (kind, id, purge_id) VALUES ('event', 'a-old', 'earlier')")

    with chat.read() as conn:
        totals = authors.erasure_totals(conn, "ada", WINDOW_END, conversation_limit=10)
        assert authors.active_runs_admitting(conn, "ada", WINDOW_END) == ["r2"]
        assert authors.active_runs_admitting(conn, "ada", T0 + HOUR) == []
        newest = authors.newest_ingest(conn, "ada")
    assert totals == authors.AuthorTotals(
        events=2,
        placements=3,
        conversations=2,
        admissions=2,
        run_outputs=1,
        derivatives=1,
        exclusive_attachments=1,
        shared_attachments=1,
        already_fenced=1,
        conversation_counts=(("c1", 2), ("c2", 1)),
        shared=(("at-sh", "a2", "bl02", 1),),
    )
    with chat.read() as conn:
        assert authors.erasure_totals(conn, "ada", WINDOW_END, conversation_limit=1).conversation_counts == (("c1", 2),)
    assert newest is not None
    add_event(chat, "0-newest", "ada", T0)  # within the same second, and an id smaller than any before
    with chat.read() as conn:
        assert authors.newest_ingest(conn, "ada") != newest


# -- a writer that began before the erasure ------------------------------------------------------


@pytest.mark.postgres_only
@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("INSERT INTO events (id, author, occurred_at, body) VALUES ('late-writer', 'ada', :at, 'x')", AuthorErased),
        ("INSERT INTO placements (event_id, conversation_id) VALUES ('a1', 'c2')", ContentPurged),
    ],
)
def test_a_writer_waiting_on_the_erasure_sees_it_after_its_commit(
    chat: Database, sql: str, expected: type[PurgekeeperError]
) -> None:
    """The acceptance holds the author's lock; a writer whose transaction has begun waits for
    it in the trigger, and checks after the erasure's commit."""
    outcome: list[BaseException | int] = []

    def writer() -> None:
        try:
            with chat.write() as conn:
                conn.execute(text("SELECT 1"))  # the writer's transaction has begun
                params = {"at": T0} if ":at" in sql else {}
                outcome.append(int(conn.execute(statement(sql, params), params).rowcount or 0))
        except Exception as exc:  # seen by the assertion below
            outcome.append(exc)

    with chat.engine.connect() as conn, conn.begin():
        authors.lock_author(conn, "ada")
        thread = threading.Thread(target=writer)
        thread.start()
        wait_for_a_waiting_lock(chat)
        authors.insert_erasure(conn, purge_id="pa", author="ada", window_end=WINDOW_END, close_author=False)
    thread.join(timeout=30)
    assert len(outcome) == 1 and isinstance(outcome[0], expected), outcome


def wait_for_a_waiting_lock(db: Database) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with db.read() as conn:
            if conn.scalar(text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")):
                return
        time.sleep(0.02)
    raise AssertionError("the writer never waited for the author's lock")
