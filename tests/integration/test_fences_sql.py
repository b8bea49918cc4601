"""The purge invariants hold for a client that bypasses the library and writes raw SQL.

Each test seeds rows with plain INSERTs, fences something by writing a tombstone row (the
way a purge does), then tries the forbidden write and checks the domain error it maps to.
Runs on SQLite and PostgreSQL; everything is rolled back at the end.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from purgekeeper.schema.errors import (
    BotDeleted,
    ContentPurged,
    ConversationDeleted,
    ConversationPurged,
    IdReserved,
    ValidationError,
)
from tests.helpers.databases import RawSQL

GENESIS = "0" * 64


def seed(raw: RawSQL) -> None:
    """Two conversations, a channel, a bot, events e1 (in c1 only), e2 (in c1 and c2), e3
    (in the channel), a present blob, a running run r1 in c1, and a derivative d1 in c1."""
    raw.run("INSERT INTO bots (id, name) VALUES ('b1', 'Bot')")
    for conv, kind in (("c1", "conversation"), ("c2", "conversation"), ("ch", "channel")):
        raw.run("INSERT INTO conversations (id, kind, bot_id) VALUES (:id, :kind, 'b1')", id=conv, kind=kind)
    for event, provider in (("e1", "p1"), ("e2", "p2"), ("e3", "p3"), ("e4", "p4")):
        raw.run(
            "INSERT INTO events (id, provider_event_id, author, occurred_at, body) "
            "VALUES (:id, :p, 'ada', CURRENT_TIMESTAMP, 'secret')",
            id=event,
            p=provider,
        )
    for event, conv in (("e1", "c1"), ("e2", "c1"), ("e2", "c2"), ("e3", "ch"), ("e4", "c2")):
        raw.run("INSERT INTO placements (event_id, conversation_id) VALUES (:e, :c)", e=event, c=conv)
    raw.run(
        "INSERT INTO blobs (id, kind, sha256, size, path) VALUES ('bl01', 'cas', :sha, 3, :path)",
        sha="a" * 64,
        path=f"aa/aa/{'a' * 64}-bl01",
    )
    raw.run("INSERT INTO runs (id, conversation_id, bot_id, status) VALUES ('r1', 'c1', 'b1', 'running')")
    raw.run("INSERT INTO derivatives (id, conversation_id, kind, payload) VALUES ('d1', 'c1', 'summary', '\"s\"')")


def tombstone(raw: RawSQL, kind: str, the_id: str) -> None:
    raw.run("INSERT INTO tombstones (kind, id, purge_id) VALUES (:k, :i, 'purge-1')", k=kind, i=the_id)


def version(raw: RawSQL, conv: str) -> int:
    return int(raw.scalar("SELECT version FROM conversations WHERE id = :c", c=conv))


@pytest.fixture
def seeded(raw: RawSQL) -> RawSQL:
    seed(raw)
    return raw


def insert_ledger_row(raw: RawSQL) -> None:
    raw.run(
        "INSERT INTO purge_ledger (seq, purge_id, kind, selectors, scope_digest, actor, reason, accepted_at, "
        "prev_hash, row_hash) VALUES (1, 'p-1', 'content', '{}', :h, 'op', 'why', CURRENT_TIMESTAMP, :g, :h)",
        h="1" * 64,
        g=GENESIS,
    )


# -- append-only tables -------------------------------------------------------------------


def test_purge_ledger_rejects_update_and_delete(raw: RawSQL) -> None:
    insert_ledger_row(raw)
    raw.refused("UPDATE purge_ledger SET reason = 'rewritten'", ValidationError)
    raw.refused("DELETE FROM purge_ledger WHERE seq = 1", ValidationError)
    raw.refused("DELETE FROM purge_ledger", ValidationError)
    assert raw.scalar("SELECT reason FROM purge_ledger WHERE seq = 1") == "why"


def test_purge_ledger_rows_must_extend_the_head(raw: RawSQL) -> None:
    """The chain is enforced by the database too: a row out of sequence, or one that does not
    link to the head's hash, is refused; a row that extends the head moves it."""
    columns = "seq, purge_id, kind, selectors, scope_digest, actor, reason, accepted_at, prev_hash, row_hash"
    row = "(:seq, :pid, 'content', '{}', 'd', 'op', 'why', CURRENT_TIMESTAMP, :prev, :hash)"
    insert = f"INSERT INTO purge_ledger ({columns}) VALUES {row}"
    raw.refused(insert, ValidationError, seq=2, pid="skip", prev=GENESIS, hash="2" * 64)
    raw.refused(insert, ValidationError, seq=1, pid="fork", prev="f" * 64, hash="2" * 64)
    raw.run(insert, seq=1, pid="first", prev=GENESIS, hash="1" * 64)
    assert raw.conn.execute(text("SELECT seq, head_hash FROM ledger_head")).one() == (1, "1" * 64)
    raw.refused(insert, ValidationError, seq=2, pid="fork", prev=GENESIS, hash="2" * 64)


@pytest.mark.postgres_only
def test_purge_ledger_and_tombstones_reject_truncate(raw: RawSQL) -> None:
    insert_ledger_row(raw)
    raw.refused("TRUNCATE purge_ledger", ValidationError)
    raw.refused("TRUNCATE tombstones", ValidationError)
    assert raw.scalar("SELECT count(*) FROM purge_ledger") == 1


def test_tombstones_reject_delete_and_update(seeded: RawSQL) -> None:
    tombstone(seeded, "event", "e1")
    seeded.refused("DELETE FROM tombstones WHERE id = 'e1'", ValidationError)
    seeded.refused("DELETE FROM tombstones", ValidationError)
    seeded.refused("UPDATE tombstones SET purge_id = 'other' WHERE id = 'e1'", ValidationError)
    assert seeded.scalar("SELECT count(*) FROM tombstones WHERE id = 'e1'") == 1


# -- reserved ids -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["conversation", "channel"])
def test_tombstoned_conversation_id_cannot_be_created(raw: RawSQL, kind: str) -> None:
    tombstone(raw, kind, "gone")
    raw.refused("INSERT INTO conversations (id) VALUES ('gone')", IdReserved)


def test_tombstoned_bot_id_cannot_be_created(raw: RawSQL) -> None:
    tombstone(raw, "bot", "old-bot")
    raw.refused("INSERT INTO bots (id, name) VALUES ('old-bot', 'New')", IdReserved)


def test_tombstoned_event_id_cannot_be_created(raw: RawSQL) -> None:
    tombstone(raw, "event", "ev-gone")
    raw.refused(
        "INSERT INTO events (id, author, occurred_at, body) VALUES ('ev-gone', 'a', CURRENT_TIMESTAMP, 'x')",
        IdReserved,
    )


def test_fenced_provider_event_id_cannot_be_ingested_again(seeded: RawSQL) -> None:
    tombstone(seeded, "provider_event", "p-dup")
    seeded.refused(
        "INSERT INTO events (id, provider_event_id, author, occurred_at, body) "
        "VALUES ('fresh', 'p-dup', 'a', CURRENT_TIMESTAMP, 'again')",
        ContentPurged,
    )


def test_the_provider_event_id_of_a_fenced_event_cannot_be_ingested_again(seeded: RawSQL) -> None:
    """A conversation purge's bodies step fences events only: the provider event id that a
    fenced event carries is fenced through it. Tried: a raw INSERT of a new event reusing p1
    after e1 was fenced (ContentPurged, before the unique constraint could say anything
    else), then p4, whose event e4 is not fenced (the unique constraint refuses it, not the
    fence)."""
    tombstone(seeded, "event", "e1")
    seeded.refused(
        "INSERT INTO events (id, provider_event_id, author, occurred_at, body) "
        "VALUES ('fresh', 'p1', 'a', CURRENT_TIMESTAMP, 'again')",
        ContentPurged,
    )
    with pytest.raises(IntegrityError):
        seeded.run(
            "INSERT INTO events (id, provider_event_id, author, occurred_at, body) "
            "VALUES ('fresh', 'p4', 'a', CURRENT_TIMESTAMP, 'again')"
        )


# -- a purged conversation ------------------------------------------------------------------

PURGED_CONVERSATION_WRITES = {
    "new placement": "INSERT INTO placements (event_id, conversation_id) VALUES ('e4', 'c1')",
    "new run": "INSERT INTO runs (id, conversation_id, bot_id) VALUES ('r9', 'c1', 'b1')",
    "new derivative": "INSERT INTO derivatives (id, conversation_id, kind, payload) VALUES ('d9', 'c1', 'k', '1')",
    "derivative source": "INSERT INTO derivative_sources (derivative_id, event_id) VALUES ('d1', 'e4')",
    "new admission": "INSERT INTO admissions (id, event_id, run_id, payload) VALUES ('a9', 'e4', 'r1', '1')",
    "conversation row update": "UPDATE conversations SET bot_id = NULL WHERE id = 'c1'",
    "run update": "UPDATE runs SET status = 'succeeded', output = '\"late\"' WHERE id = 'r1'",
    "derivative re-payload": "UPDATE derivatives SET payload = '\"new\"' WHERE id = 'd1'",
}


@pytest.mark.parametrize("sql", PURGED_CONVERSATION_WRITES.values(), ids=PURGED_CONVERSATION_WRITES.keys())
def test_purged_conversation_takes_no_writes(seeded: RawSQL, sql: str) -> None:
    tombstone(seeded, "conversation", "c1")
    assert seeded.scalar("SELECT state FROM conversations WHERE id = 'c1'") == "purged"
    seeded.refused(sql, ConversationPurged)


def test_event_placed_only_in_a_purged_conversation_is_not_live(seeded: RawSQL) -> None:
    tombstone(seeded, "conversation", "c1")
    seeded.refused("INSERT INTO placements (event_id, conversation_id) VALUES ('e1', 'c2')", ContentPurged)
    seeded.refused("UPDATE events SET body = 'resurrected' WHERE id = 'e1'", ContentPurged)
    seeded.refused(
        "INSERT INTO attachments (id, event_id, blob_id, binding, name) VALUES ('at9', 'e1', 'bl01', 'real_file', 'f')",
        ContentPurged,
    )


def test_event_shared_with_a_live_conversation_stays_writable(seeded: RawSQL) -> None:
    tombstone(seeded, "conversation", "c1")
    before = version(seeded, "c2")
    seeded.run("UPDATE events SET body = 'edited' WHERE id = 'e2'")
    assert version(seeded, "c2") == before + 1


# -- a deleted channel ----------------------------------------------------------------------

DELETED_CHANNEL_WRITES = {
    "new placement": "INSERT INTO placements (event_id, conversation_id) VALUES ('e4', 'ch')",
    "new run": "INSERT INTO runs (id, conversation_id, bot_id) VALUES ('r9', 'ch', 'b1')",
    "new derivative": "INSERT INTO derivatives (id, conversation_id, kind, payload) VALUES ('d9', 'ch', 'k', '1')",
    "history edit": "UPDATE events SET body = 'rewritten' WHERE id = 'e3'",
    "history attachment": (
        "INSERT INTO attachments (id, event_id, blob_id, binding, name) VALUES ('at9', 'e3', 'bl01', 'real_file', 'f')"
    ),
    "channel row update": "UPDATE conversations SET bot_id = NULL WHERE id = 'ch'",
}


@pytest.mark.parametrize("sql", DELETED_CHANNEL_WRITES.values(), ids=DELETED_CHANNEL_WRITES.keys())
def test_deleted_channel_takes_no_new_content(seeded: RawSQL, sql: str) -> None:
    tombstone(seeded, "channel", "ch")
    assert seeded.scalar("SELECT state FROM conversations WHERE id = 'ch'") == "deleted"
    seeded.refused(sql, ConversationDeleted)
    assert seeded.scalar("SELECT body FROM events WHERE id = 'e3'") == "secret"


def test_deleted_channel_can_still_be_purged(seeded: RawSQL) -> None:
    tombstone(seeded, "channel", "ch")
    tombstone(seeded, "conversation", "ch")
    assert seeded.scalar("SELECT state FROM conversations WHERE id = 'ch'") == "purged"


# -- a fenced event -------------------------------------------------------------------------

FENCED_EVENT_WRITES = {
    "re-body": "UPDATE events SET body = 'back again' WHERE id = 'e2'",
    "re-author": "UPDATE events SET author = 'mallory' WHERE id = 'e2'",
    "place": "INSERT INTO placements (event_id, conversation_id) VALUES ('e2', 'ch')",
    "attach": (
        "INSERT INTO attachments (id, event_id, blob_id, binding, name) VALUES ('at9', 'e2', 'bl01', 'legacy_cas', 'f')"
    ),
    "admit": "INSERT INTO admissions (id, event_id, run_id, payload) VALUES ('a9', 'e2', 'r1', '1')",
    "derive": "INSERT INTO derivative_sources (derivative_id, event_id) VALUES ('d1', 'e2')",
}


@pytest.mark.parametrize("sql", FENCED_EVENT_WRITES.values(), ids=FENCED_EVENT_WRITES.keys())
def test_fenced_event_is_not_live(seeded: RawSQL, sql: str) -> None:
    tombstone(seeded, "event", "e2")
    seeded.refused(sql, ContentPurged)


def test_fenced_event_refuses_placement_even_in_an_active_conversation(seeded: RawSQL) -> None:
    seeded.run("INSERT INTO conversations (id) VALUES ('c3')")
    tombstone(seeded, "event", "e2")
    seeded.refused("INSERT INTO placements (event_id, conversation_id) VALUES ('e2', 'c3')", ContentPurged)


# -- a deleted bot ----------------------------------------------------------------------------

DELETED_BOT_WRITES = {
    "new run": "INSERT INTO runs (id, conversation_id, bot_id) VALUES ('r9', 'c2', 'b1')",
    "new admission": "INSERT INTO admissions (id, event_id, run_id, payload) VALUES ('a9', 'e2', 'r1', '1')",
    "new conversation": "INSERT INTO conversations (id, bot_id) VALUES ('c9', 'b1')",
    "bot revival": "UPDATE bots SET state = 'active' WHERE id = 'b1'",
    "bot rename": "UPDATE bots SET name = 'Other' WHERE id = 'b1'",
}


@pytest.mark.parametrize("sql", DELETED_BOT_WRITES.values(), ids=DELETED_BOT_WRITES.keys())
def test_deleted_bot_gets_no_new_runs_or_admissions(seeded: RawSQL, sql: str) -> None:
    tombstone(seeded, "bot", "b1")
    assert seeded.scalar("SELECT state FROM bots WHERE id = 'b1'") == "deleted"
    seeded.refused(sql, BotDeleted)


# -- blobs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["deleting", "deleted"])
def test_attachment_binds_only_to_a_present_blob(seeded: RawSQL, state: str) -> None:
    seeded.run("UPDATE blobs SET state = 'deleting' WHERE id = 'bl01'")
    if state == "deleted":
        seeded.run("UPDATE blobs SET state = 'deleted' WHERE id = 'bl01'")
    seeded.refused(
        "INSERT INTO attachments (id, event_id, blob_id, binding, name) VALUES ('at9', 'e4', 'bl01', 'real_file', 'f')",
        ContentPurged,
    )


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE blobs SET state = 'deleted' WHERE id = 'bl01'",
        "UPDATE blobs SET path = 'elsewhere' WHERE id = 'bl01'",
    ],
    ids=["skip deleting", "move path"],
)
def test_blob_changes_only_forward_in_state(seeded: RawSQL, sql: str) -> None:
    seeded.refused(sql, ValidationError)


BAD_BLOB_ROWS = {
    "a second spelling of a live file's path": ("bl02", "cas", "a" * 64, f"aa/./aa/{'a' * 64}-bl01"),
    "another blob's path": ("bl02", "cas", "a" * 64, f"aa/aa/{'a' * 64}-bl01"),
    "a path climbing out": ("bl02", "file", "a" * 64, "../../etc/bl02"),
    "a real file under its name": ("bl02", "file", "a" * 64, "bl/bl02/divorce.pdf"),
    "a path of another kind": ("bl02", "file", "a" * 64, f"aa/aa/{'a' * 64}-bl02"),
    "an id with a slash": ("bl/b2", "file", "a" * 64, "bl//b/bl/b2"),
    "an id with dots": ("..b2", "file", "a" * 64, "../b2/..b2"),
    "a hash that is not hex": ("bl02", "cas", "z" * 64, f"zz/zz/{'z' * 64}-bl02"),
}


@pytest.mark.parametrize("row", BAD_BLOB_ROWS.values(), ids=BAD_BLOB_ROWS.keys())
def test_a_blob_lives_only_at_its_canonical_path(seeded: RawSQL, row: tuple[str, str, str, str]) -> None:
    """Tried: raw blob rows whose path is not exactly ``ab/cd/<sha256>-<id>`` (CAS) or
    ``ab/cd/<id>`` (file) for their own id, or whose id or hash could spell a path."""
    blob_id, kind, sha, path = row
    seeded.refused(
        "INSERT INTO blobs (id, kind, sha256, size, path) VALUES (:id, :kind, :sha, 1, :path)",
        ValidationError,
        id=blob_id,
        kind=kind,
        sha=sha,
        path=path,
    )
    seeded.run(
        "INSERT INTO blobs (id, kind, sha256, size, path) VALUES ('bl02', 'file', :sha, 1, 'bl/02/bl02')", sha="a" * 64
    )


def test_a_blob_path_changes_only_to_its_canonical_one_once_deleted(seeded: RawSQL) -> None:
    """An earlier version's layout kept a real file under its attachment name; once its bytes
    are deleted its row may take the canonical path (the name goes with the old one)."""
    seeded.refused("UPDATE blobs SET path = 'bl/01/bl01' WHERE id = 'bl01'", ValidationError)
    seeded.run("UPDATE blobs SET state = 'deleting' WHERE id = 'bl01'")
    seeded.refused(
        f"UPDATE blobs SET path = 'aa/aa/{'a' * 64}-bl09', state = 'deleted' WHERE id = 'bl01'", ValidationError
    )
    seeded.run(f"UPDATE blobs SET path = 'aa/aa/{'a' * 64}-bl01', state = 'deleted' WHERE id = 'bl01'")


def test_deleting_blob_never_becomes_present_again(seeded: RawSQL) -> None:
    seeded.run("UPDATE blobs SET state = 'deleting' WHERE id = 'bl01'")
    seeded.refused("UPDATE blobs SET state = 'present' WHERE id = 'bl01'", ValidationError)


# -- versions -----------------------------------------------------------------------------------

VERSIONED_WRITES = {
    "placement": ("c2", "INSERT INTO placements (event_id, conversation_id) VALUES ('e1', 'c2')"),
    "body edit": ("c2", "UPDATE events SET body = 'edited' WHERE id = 'e4'"),
    "attachment": (
        "c2",
        "INSERT INTO attachments (id, event_id, blob_id, binding, name) VALUES ('at9', 'e4', 'bl01', 'real_file', 'f')",
    ),
    "run": ("c2", "INSERT INTO runs (id, conversation_id, bot_id) VALUES ('r9', 'c2', 'b1')"),
    "run finish": ("c1", "UPDATE runs SET status = 'succeeded' WHERE id = 'r1'"),
    "admission": ("c1", "INSERT INTO admissions (id, event_id, run_id, payload) VALUES ('a9', 'e4', 'r1', '1')"),
    "derivative": ("c2", "INSERT INTO derivatives (id, conversation_id, kind, payload) VALUES ('d9', 'c2', 'k', '1')"),
    "conversation row": ("c2", "UPDATE conversations SET bot_id = NULL WHERE id = 'c2'"),
    "placement removed": ("c2", "DELETE FROM placements WHERE event_id = 'e2' AND conversation_id = 'c2'"),
}


@pytest.mark.parametrize("conv, sql", VERSIONED_WRITES.values(), ids=VERSIONED_WRITES.keys())
def test_every_change_raises_the_conversation_version(seeded: RawSQL, conv: str, sql: str) -> None:
    before = version(seeded, conv)
    seeded.run(sql)
    assert version(seeded, conv) == before + 1


def test_version_never_falls_and_state_moves_only_by_tombstone(seeded: RawSQL) -> None:
    seeded.refused("UPDATE conversations SET version = 0 WHERE id = 'c1'", ValidationError)
    seeded.refused("UPDATE conversations SET state = 'purged' WHERE id = 'c1'", ValidationError)
    seeded.refused("UPDATE conversations SET state = 'deleted' WHERE id = 'ch'", ValidationError)
    seeded.refused("UPDATE conversations SET state = 'deleted' WHERE id = 'c1'", ValidationError)
    tombstone(seeded, "channel", "ch")
    seeded.refused("UPDATE conversations SET state = 'active' WHERE id = 'ch'", ConversationDeleted)


# -- the purge's own cleanup passes -------------------------------------------------------------

CLEANUP_WRITES = [
    "UPDATE events SET body = NULL WHERE id = 'e1'",
    "UPDATE runs SET output = NULL WHERE id = 'r1'",
    "UPDATE admissions SET payload = NULL WHERE id = 'a1'",
    "UPDATE derivatives SET payload = NULL WHERE id = 'd1'",
    "UPDATE runs SET status = 'abandoned', output = NULL WHERE id = 'r1'",
    "DELETE FROM derivative_sources WHERE derivative_id = 'd1'",
    "DELETE FROM derivatives WHERE id = 'd1'",
    "DELETE FROM admissions WHERE id = 'a1'",
    "UPDATE attachments SET name = NULL WHERE id = 'at1'",
    "UPDATE blobs SET state = 'deleting' WHERE id = 'bl01'",
    "UPDATE blobs SET state = 'deleted' WHERE id = 'bl01'",
    "DELETE FROM attachments WHERE id = 'at1'",  # once its bytes are gone
    "DELETE FROM placements WHERE conversation_id = 'c1'",
]


def test_cleanup_of_a_purged_conversation_is_let_through(seeded: RawSQL) -> None:
    seeded.run("INSERT INTO admissions (id, event_id, run_id, payload) VALUES ('a1', 'e1', 'r1', '\"in\"')")
    seeded.run("INSERT INTO derivative_sources (derivative_id, event_id) VALUES ('d1', 'e1')")
    seeded.run(
        "INSERT INTO attachments (id, event_id, blob_id, binding, name) VALUES ('at1', 'e1', 'bl01', 'real_file', 'f')"
    )
    tombstone(seeded, "conversation", "c1")
    tombstone(seeded, "event", "e1")
    for sql in CLEANUP_WRITES:
        seeded.run(sql)
    assert seeded.scalar("SELECT body FROM events WHERE id = 'e1'") is None
    assert seeded.scalar("SELECT count(*) FROM placements WHERE conversation_id = 'c1'") == 0
    seeded.run("DELETE FROM runs WHERE id = 'r1'")
    assert seeded.scalar("SELECT count(*) FROM runs WHERE id = 'r1'") == 0


def test_terminal_run_never_changes_status(seeded: RawSQL) -> None:
    seeded.run("UPDATE runs SET status = 'failed' WHERE id = 'r1'")
    seeded.refused("UPDATE runs SET status = 'succeeded' WHERE id = 'r1'", ValidationError)
