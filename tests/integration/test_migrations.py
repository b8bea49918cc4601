"""The migrations build exactly the schema the table definitions describe, on both backends,
and ``purgectl init`` is idempotent and refuses a database newer than the code."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

import purgekeeper
from purgekeeper.commands.kinds import kind_of
from purgekeeper.schema import fences, ledger, migrate
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import SchemaMismatch
from purgekeeper.schema.tables import with_dialect_indexes
from tests.helpers.databases import create_database, drop_database, open_rooted, postgres_url


def installed_triggers(db: Database) -> set[str]:
    query = (
        "SELECT name FROM sqlite_master WHERE type = 'trigger'"
        if db.is_sqlite
        else "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
    )
    with db.read() as conn:
        return set(conn.scalars(text(query)))


def test_migrations_match_the_table_definitions(db: Database) -> None:
    with db.read() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), with_dialect_indexes())
    assert diff == []


def test_the_revision_is_read_without_alembic_as_alembic_reads_it(db: Database) -> None:
    """``purgectl status`` and ``list`` check the revision on every call; alembic's runtime
    (and mako, and pygments) cost them a quarter of a second to import. The plain query and
    the migrations' file names must answer what alembic answers."""
    with db.read() as conn:
        assert migrate.current_revision(conn) == MigrationContext.configure(conn).get_current_revision()
        assert migrate.current_revision(conn) == migrate.head_revision()
    script = ScriptDirectory.from_config(migrate.alembic_config())
    assert migrate.head_revision() == script.get_current_head()
    assert migrate.shipped_revisions() == frozenset(rev.revision for rev in script.walk_revisions())


def test_an_uninitialised_database_has_no_revision(tmp_path: Path) -> None:
    empty = Database(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        with empty.read() as conn:
            assert migrate.current_revision(conn) is None
    finally:
        empty.dispose()
    name = f"pk_blank_{uuid.uuid4().hex[:12]}"
    create_database(name)
    try:
        blank = Database(postgres_url(name))
        try:
            with blank.read() as conn:
                assert migrate.current_revision(conn) is None
        finally:
            blank.dispose()
    finally:
        drop_database(name)


def test_migrations_install_every_named_trigger(db: Database) -> None:
    assert installed_triggers(db) == fences.triggers(db.dialect)


def test_tables_carry_the_contract_names(db: Database) -> None:
    with db.read() as conn:
        tables = set(inspect(conn).get_table_names())
    assert {
        "conversations",
        "events",
        "placements",
        "runs",
        "admissions",
        "derivatives",
        "derivative_sources",
        "blobs",
        "attachments",
        "bots",
        "purge_ledger",
        "ledger_head",
        "tombstones",
        "cleanup_steps",
    } <= tables


def test_init_on_an_up_to_date_database_does_nothing(db: Database) -> None:
    with db.read() as conn:
        head_before = conn.execute(text("SELECT database_id, seq, head_hash FROM ledger_head")).one()
    result = migrate.upgrade(db)
    assert (result.before, result.after, result.changed) == (migrate.head_revision(), migrate.head_revision(), False)
    with db.read() as conn:
        assert conn.execute(text("SELECT database_id, seq, head_hash FROM ledger_head")).one() == head_before


def test_a_new_database_gets_a_random_id_and_a_genesis_head(tmp_path: Path) -> None:
    ids = set()
    for name in ("a.db", "b.db"):
        db = Database(f"sqlite:///{tmp_path / name}")
        assert migrate.upgrade(db).changed
        with db.read() as conn:
            database_id, seq, head = conn.execute(text("SELECT database_id, seq, head_hash FROM ledger_head")).one()
        db.dispose()
        assert (seq, head) == (0, "0" * 64)
        ids.add(database_id)
    assert len(ids) == 2


def test_a_database_newer_than_the_code_is_refused(db: Database, database_url: str, tmp_path: Path) -> None:
    with db.write() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    with pytest.raises(SchemaMismatch, match="newer than this code"):
        migrate.upgrade(db)
    with pytest.raises(SchemaMismatch):
        purgekeeper.open(
            database_url, blob_root=tmp_path / "b", file_root=tmp_path / "f", checkpoint_dir=tmp_path / "l"
        )
    with db.read() as conn:
        assert conn.scalar(text("SELECT version_num FROM alembic_version")) == "9999_from_the_future"


def run_purgectl(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "purgekeeper.commands.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_purgectl_init_creates_migrates_and_refuses_newer(tmp_path: Path) -> None:
    env = {"PURGEKEEPER_DATA_DIR": str(tmp_path / "data")}
    first = run_purgectl("init", "--json", env=env)
    assert first.returncode == 0, first.stderr
    created = json.loads(first.stdout)
    assert created["migrated"] is True and created["revision"] == migrate.head_revision()
    assert (tmp_path / "data" / "purgekeeper.db").is_file()

    again = json.loads(run_purgectl("init", "--json", env=env).stdout)
    assert again["migrated"] is False

    with sqlite3.connect(tmp_path / "data" / "purgekeeper.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'zzzz'")
    refused = run_purgectl("init", "--json", env=env)
    assert refused.returncode == 4
    error = json.loads(refused.stdout)
    assert error["error"] == "schema_mismatch" and "newer than this code" in error["detail"]


@pytest.mark.sqlite_only
def test_sqlite_runs_in_wal_with_secure_delete_and_a_busy_timeout(db: Database) -> None:
    with db.read() as conn:
        pragmas = {
            name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
            for name in ("journal_mode", "busy_timeout", "secure_delete", "foreign_keys")
        }
    assert pragmas["journal_mode"] == "wal"
    assert pragmas["busy_timeout"] > 0
    assert pragmas["secure_delete"] == 1
    assert pragmas["foreign_keys"] == 1


@pytest.mark.sqlite_only
def test_sqlite_write_transactions_begin_immediate(db: Database, database_url: str) -> None:
    path = database_url.removeprefix("sqlite:///")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with db.write():
            # The write lock is taken at BEGIN, before any write: nobody else can start one.
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        with db.read():
            other.execute("BEGIN IMMEDIATE")  # a read transaction does not hold the write lock
            other.execute("ROLLBACK")
    finally:
        other.close()


def test_an_upgrade_from_0004_with_data_purges_what_0004_wrote(empty_database_url: str, tmp_path: Path) -> None:
    """Migrations 0005 and 0006 on a database in use: a real file stored by 0004 in its own directory
    (``<id[:2]>/<blob id>/<name>``), an event with a provider event id. After the upgrade a
    conversation purge removes the file and its emptied directory, and the provider event id
    is fenced through its event (0005 writes no provider tombstone for a conversation purge).
    Tried on both backends: the whole purge after the upgrade, then a redelivery through the
    library and a raw INSERT of the same provider event id."""
    from alembic import command

    from purgekeeper.workers import runner

    db = Database(empty_database_url)
    config = migrate.alembic_config()
    with db.write() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0004")
    file_root, blob_id = tmp_path / "files", "ab" + "7" * 30
    old_path = f"{blob_id[:2]}/{blob_id}/report.pdf"
    (file_root / old_path).parent.mkdir(parents=True)
    (file_root / old_path).write_bytes(b"written by 0004")
    with db.write() as conn:
        for sql in (
            "INSERT INTO conversations (id) VALUES ('c-old')",
            "INSERT INTO events (id, provider_event_id, author, occurred_at, body) "
            "VALUES ('e-old', 'p-old', 'ada', CURRENT_TIMESTAMP, 'secret from 0004')",
            "INSERT INTO placements (event_id, conversation_id) VALUES ('e-old', 'c-old')",
            f"INSERT INTO blobs (id, kind, sha256, size, path) "
            f"VALUES ('{blob_id}', 'file', '{'c' * 64}', 15, '{old_path}')",
            f"INSERT INTO attachments (id, event_id, blob_id, binding, name) "
            f"VALUES ('a-old', 'e-old', '{blob_id}', 'real_file', 'report.pdf')",
        ):
            conn.execute(text(sql))
    assert migrate.upgrade(db).changed
    db.dispose()

    pk = purgekeeper.open(
        empty_database_url,
        blob_root=tmp_path / "blobs",
        file_root=file_root,
        memory_roots=[tmp_path / "memory"],
        checkpoint_dir=tmp_path / "ledger",
        workers="none",
    )
    try:
        purge_id = pk.purge_conversation("c-old", actor="op", reason="after the upgrade").purge_id
        for kind in ("bodies", "attachments"):
            [step] = [s for s in pk.status(purge_id).steps if s.kind == kind]
            assert runner.run_step(pk.step_context(), step.id, policy=runner.Policy()).status == "done"
        assert pk.status(purge_id).status == "complete"
        assert not (file_root / old_path).exists() and not (file_root / old_path).parent.exists()
        with pk.db.read() as conn:
            assert conn.scalar(text("SELECT body FROM events WHERE id = 'e-old'")) is None
            assert conn.scalar(text(f"SELECT state FROM blobs WHERE id = '{blob_id}'")) == "deleted"
            # 0006: the old layout's path held the attachment's name; deleted, the row takes
            # the canonical path, and the bodies step NULLed the name itself
            path = conn.scalar(text(f"SELECT path FROM blobs WHERE id = '{blob_id}'"))
            assert path == f"{blob_id[:2]}/{blob_id}"
            assert conn.scalar(text("SELECT name FROM attachments WHERE id = 'a-old'")) is None
        pk.create_conversation("c-new")
        with pytest.raises(purgekeeper.ContentPurged):
            pk.ingest_event("c-new", author="ada", body="again", provider_event_id="p-old")
        with pytest.raises(purgekeeper.ContentPurged), pk.db.write() as conn:
            conn.execute(
                text(
                    "INSERT INTO events (id, provider_event_id, author, occurred_at, body) "
                    "VALUES ('e-raw', 'p-old', 'ada', CURRENT_TIMESTAMP, 'raw again')"
                )
            )
    finally:
        pk.close()


def test_0010_backfills_the_conversations_of_the_purges_already_in_the_ledger(
    empty_database_url: str, tmp_path: Path
) -> None:
    """The rows acceptance writes into ``purge_conversations`` are the rows 0010's backfill
    derives from the ledger rows written before it: a conversation purge, a channel deletion,
    a conversation-scoped content purge, a content purge by event ids of an event placed in
    two conversations, a hold on two conversations and a retention policy of one; an author
    erasure names none. The merge's derivation of a row from before 0010 (no
    ``conversation_ids`` in its selectors) agrees too. Both backends: the backfill's SQL is
    per dialect."""
    backfill = importlib.import_module(
        "purgekeeper.schema.migrations.versions.0010_attempts_and_purge_conversations"
    ).BACKFILL
    pk = open_rooted(empty_database_url, tmp_path)
    who = {"actor": "op", "reason": "r"}
    try:
        for conversation in ("c1", "c2", "c3"):
            pk.create_conversation(conversation)
        pk.create_conversation("ch1", kind="channel")
        pk.ingest_event("c3", author="ada", body="x", event_id="e3")
        pk.create_conversation("c4")
        pk.create_conversation("c5")
        pk.ingest_event("c4", author="ada", body="y", event_id="e4")
        pk.place_event("e4", "c5")
        by_ids = purgekeeper.EventScope(event_ids=["e4"])  # a content purge by ids, in two conversations
        pk.confirm_purge(by_ids, scope_digest=pk.preview_purge(by_ids).scope_digest, **who)
        pk.purge_conversation("c1", **who)
        pk.delete_channel("ch1", **who)
        scope = purgekeeper.EventScope(conversation_id="c3")
        pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **who)
        pk.place_hold("h1", conversation_ids=["c2", "c9"], **who)
        preview = pk.preview_retention(max_age=dt.timedelta(days=30), conversation_id="c2")
        pk.set_retention(
            "p1", max_age=dt.timedelta(days=30), conversation_id="c2", scope_digest=preview.scope_digest, **who
        )
        preview_author = pk.preview_author_erasure("bob")
        pk.erase_author("bob", scope_digest=preview_author.scope_digest, **who)
        query = text("SELECT conversation_id, purge_id FROM purge_conversations ORDER BY 1, 2")
        with pk.db.write() as conn:
            recorded = conn.execute(query).all()
            conn.execute(text("DELETE FROM purge_conversations"))
            conn.execute(text(backfill[conn.dialect.name]))
            backfilled = conn.execute(query).all()
        kinds = {r.purge_id: r.kind for r in pk.list_purges().purges}
        assert sorted((c, kinds[p]) for c, p in recorded) == [
            ("c1", "conversation"),
            ("c2", "hold"),
            ("c2", "retention"),
            ("c3", "content"),
            ("c4", "content"),
            ("c5", "content"),
            ("c9", "hold"),
            ("ch1", "channel"),
        ]
        assert backfilled == recorded
        content = kind_of("content")
        with pk.db.read() as conn:
            for entry in ledger.entries(conn):
                if entry.kind == "content":
                    before_0010 = {k: v for k, v in entry.selectors.items() if k != "conversation_ids"}
                    named = sorted(c for c, p in recorded if p == entry.purge_id)
                    assert content.conversations(conn, before_0010) == named
    finally:
        pk.close()
