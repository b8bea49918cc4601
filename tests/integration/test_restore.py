"""Restore from an old backup, end to end, and ``merge_ledger``'s refusal of bad files.

The end-to-end tests follow what an operator does (docs/guides/backups.md): the database dump
first (PostgreSQL: ``pg_dump -Fc``; SQLite: ``VACUUM INTO``), then the attachment roots and
the Memory repository, then a ledger export. Purges follow and their cleanup completes;
each acceptance added its ledger row to the copy in the checkpoint directory, which lives
outside the backups, before it returned. Then the old dump and the old files come back (PostgreSQL: ``pg_restore --clean
--if-exists`` into the same database; SQLite: the file copied back) and a new handle opens.

From that moment nothing purged may be readable: content is closed until the merge, and
fenced after it, before cleanup has run again. Purged content carries the marker ``SECRET``;
content that must survive never does.

The tampering tests start from a valid checkpoint of purges that the (restored) destination
lacks, so an accepted merge would change it; each damaged variant must be refused with the
reason, and every row of the purge tables must stay as it was.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.schema import ledger
from purgekeeper.schema.tables import metadata
from purgekeeper.storage import checkpoint, ledger_copy
from purgekeeper.workers.cleanup import ASIDE_PREFIX
from tests.helpers import all_opened, blob_bytes, body_of, rows, scalar
from tests.helpers.databases import POSTGRES_ADMIN_URL
from tests.helpers.restore import clean

Pk = purgekeeper.Purgekeeper
Roots = dict[str, Path]

SECRET = "S3CR3T-restored"
WHO = {"actor": "ops@example.org", "reason": "the user asked"}
PURGE_TABLES = ("purge_ledger", "tombstones", "cleanup_steps", "ledger_head")
SHARED_BYTES = b"shared bytes, kept"


# -- handles, rows and cleanup ------------------------------------------------------------------


def snapshot(pk: Pk) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the purge tables, sorted."""
    with pk.db.read() as conn:
        return {
            table: sorted((tuple(row) for row in conn.execute(text(f"SELECT * FROM {table}"))), key=repr)
            for table in PURGE_TABLES
        }


def assert_all_done(pk: Pk) -> None:
    unfinished = rows(pk, "SELECT purge_id, kind, status, last_error FROM cleanup_steps WHERE status <> 'done'")
    assert unfinished == [], unfinished


def read_attachment(pk: Pk, attachment_id: str) -> bytes:
    with pk.open_attachment(attachment_id) as handle:
        return handle.read()


def blob_path(pk: Pk, blob_id: str) -> Path:
    row = rows(pk, "SELECT kind, path FROM blobs WHERE id = :id", id=blob_id)[0]
    return pk.blobs.root(row.kind) / row.path


def blob_state(pk: Pk, blob_id: str) -> str:
    return str(scalar(pk, "SELECT state FROM blobs WHERE id = :id", id=blob_id))


def files_under(*roots: Path) -> dict[str, bytes]:
    return {
        os.path.join(folder, name): (Path(folder) / name).read_bytes()
        for root in roots
        for folder, _dirs, names in os.walk(root)
        for name in names
        if not (Path(folder) / name).is_symlink()
    }


def assert_no_secret_in_any_table(pk: Pk) -> None:
    with pk.db.read() as conn:
        for table in metadata.sorted_tables:
            for row in conn.execute(select(table)):
                found = [v for v in row if isinstance(v, str) and SECRET in v]
                assert found == [], f"{table.name} still holds purged content: {row}"


# -- backups ----------------------------------------------------------------------------------------


class DatabaseBackup:
    """The database half of a backup: ``dump`` before, ``restore`` after (handles closed)."""

    def __init__(self, database_url: str, target: Path) -> None:
        self.database_url = database_url
        self.target = target

    def dump(self) -> None:
        raise NotImplementedError

    def restore(self) -> None:
        raise NotImplementedError


class PgDump(DatabaseBackup):
    """``pg_dump -Fc``, and ``pg_restore --clean --if-exists`` into the same live database
    (its other sessions terminated first)."""

    @property
    def plain_url(self) -> str:
        return make_url(self.database_url).set(drivername="postgresql").render_as_string(hide_password=False)

    def dump(self) -> None:
        subprocess.run(
            ["pg_dump", "-Fc", "--no-owner", f"--dbname={self.plain_url}", f"--file={self.target}"],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def restore(self) -> None:
        name = make_url(self.database_url).database
        admin = make_url(POSTGRES_ADMIN_URL).render_as_string(hide_password=False)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
        done = subprocess.run(
            [
                "pg_restore",
                "--clean",
                "--if-exists",
                "--no-owner",
                "--exit-on-error",
                f"--dbname={self.plain_url}",
                str(self.target),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr


class VacuumInto(DatabaseBackup):
    """``VACUUM INTO`` a consistent copy, and the copy put back over the closed database
    file (its ``-wal`` and ``-shm`` removed)."""

    @property
    def path(self) -> str:
        return str(make_url(self.database_url).database)

    def dump(self) -> None:
        conn = sqlite3.connect(self.path)
        try:
            conn.execute("VACUUM INTO ?", (str(self.target),))
        finally:
            conn.close()

    def restore(self) -> None:
        for suffix in ("-wal", "-shm"):
            Path(self.path + suffix).unlink(missing_ok=True)
        shutil.copyfile(self.target, self.path)


def database_backup(database_url: str, directory: Path) -> DatabaseBackup:
    directory.mkdir(parents=True, exist_ok=True)
    if database_url.startswith("sqlite"):
        return VacuumInto(database_url, directory / "purgekeeper.db")
    return PgDump(database_url, directory / "purgekeeper.dump")


@dataclass
class FileBackup:
    """Copies of directories (symlinks kept as symlinks), put back in place later."""

    directory: Path
    sources: tuple[Path, ...]

    def take(self) -> None:
        for index, source in enumerate(self.sources):
            shutil.copytree(source, self.directory / str(index), symlinks=True)

    def restore(self) -> None:
        for index, source in enumerate(self.sources):
            if source.exists():
                shutil.rmtree(source)
            shutil.copytree(self.directory / str(index), source, symlinks=True)


# -- the end-to-end scenario ------------------------------------------------------------------------


@dataclass
class World:
    repository: Path
    exclusive: tuple[str, ...]  # blob ids only e-doomed or e-whole-1 use
    shared: str  # a CAS blob bound to e-doomed and (as a forward) to e-kept
    doomed_attachments: tuple[str, ...]
    whole_attachment: str
    kept_attachment: str


def memory_repository(roots: Roots, name: str) -> Path:
    path = roots["memory_root"].resolve() / name
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True, capture_output=True)
    (path / "MEMORY.md").write_text(f"{SECRET} what the bot remembers\n")
    return path


def build_world(pk: Pk, roots: Roots) -> World:
    """c-content: e-doomed (purged by events) and e-spared; c-whole (purged whole, with a
    run still running at backup time); c-keep: e-kept, sharing a blob with e-doomed; a bot
    b-mem with a real Git Memory repository (deleted with erasure later)."""
    repository = memory_repository(roots, "b-mem")
    pk.register_bot("b-mem", name="Memory", memory_path=repository)
    pk.register_bot("b-run", name="Runner")
    for conversation in ("c-content", "c-whole", "c-keep"):
        pk.create_conversation(conversation)
    doomed = pk.ingest_event(
        "c-content",
        author="ada",
        body=f"{SECRET} doomed body",
        event_id="e-doomed",
        provider_event_id="p-doomed",
        attachments=[
            NewAttachment.cas(f"{SECRET} cas bytes".encode(), name="a.txt"),
            NewAttachment.file(f"{SECRET} file bytes".encode(), name="b.txt"),
            NewAttachment.cas(SHARED_BYTES, name="shared.txt"),
        ],
    )
    pk.ingest_event("c-content", author="bob", body="spared body", event_id="e-spared")
    cas, file, shared = (a.blob_id for a in doomed.attachments)
    kept = pk.ingest_event(
        "c-keep",
        author="bob",
        body="kept body",
        event_id="e-kept",
        attachments=[NewAttachment.reuse(shared, name="forwarded.txt", binding="real_file")],
    )
    whole = pk.ingest_event(
        "c-whole",
        author="cy",
        body=f"{SECRET} whole body 1",
        event_id="e-whole-1",
        attachments=[NewAttachment.file(f"{SECRET} whole file".encode(), name="w.txt")],
    )
    pk.ingest_event("c-whole", author="cy", body=f"{SECRET} whole body 2", event_id="e-whole-2")
    pk.start_run("c-whole", bot_id="b-run", run_id="r-whole")
    return World(
        repository=repository,
        exclusive=(cas, file, whole.attachments[0].blob_id),
        shared=shared,
        doomed_attachments=tuple(a.id for a in doomed.attachments),
        whole_attachment=whole.attachments[0].id,
        kept_attachment=kept.attachments[0].id,
    )


def purge_after_backup(pk: Pk, *, erase: bool) -> tuple[str, str, str]:
    """The content purge, the conversation purge and the bot deletion (erasing Memory or not)."""
    scope = EventScope(event_ids=["e-doomed"])
    digest = pk.preview_purge(scope).scope_digest
    content = pk.confirm_purge(scope, scope_digest=digest, **WHO)
    pk.admit("e-spared", pk.start_run("c-content", bot_id="b-run", run_id="r-after").id, payload={"x": 1})
    pk.finish_run("r-after", status="succeeded", output="fine")
    pk.finish_run("r-whole", status="succeeded", output=f"{SECRET} run output")
    whole = pk.purge_conversation("c-whole", **WHO)
    identity = pk.preview_bot_deletion("b-mem").memory.identity
    bot = pk.delete_bot("b-mem", **WHO, erase_memory=erase, reviewed_repository=identity if erase else None)
    assert {a.outcome for a in (content, whole, bot)} == {"accepted"}
    return content.purge_id, whole.purge_id, bot.purge_id


def restore_from_backup(
    database_url: str, roots: Roots, tmp_path: Path, open_pk: Callable[[], Pk], *, erase: bool
) -> None:
    pk = open_pk()
    world = build_world(pk, roots)
    early = pk.purge_conversation("c-early", **WHO).purge_id  # known to the dump

    # 2. the backup, in the documented order: database, then files, then a checkpoint
    dump = database_backup(database_url, tmp_path / "backup")
    files = FileBackup(tmp_path / "backup" / "files", (roots["blob_root"], roots["file_root"], world.repository))
    dump.dump()
    files.take()
    at_backup = pk.checkpoint_ledger(tmp_path / "backup" / "ledger.jsonl")
    assert at_backup.seq == 1

    # 3. purges and their cleanup (each acceptance in the copy outside before it returned)
    purged = purge_after_backup(pk, erase=erase)
    clean(pk)
    assert_all_done(pk)
    assert os.path.lexists(world.repository) is not erase
    assert all(not blob_path(pk, b).exists() for b in world.exclusive)
    outside = pk.copy.directory  # every acceptance added its row to the ledger's copy
    assert ledger_copy.open_source(outside, pk.database_key).seq == 4 > at_backup.seq

    # 4. everything back as it was at backup time
    pk.close()
    dump.restore()
    files.restore()
    assert world.repository.is_dir()

    # 5. a new handle: content is closed, the restore brought the purged content back (sealed,
    # under keys the cleanup destroyed: the key store lives outside the backups)
    restored = open_pk()
    assert scalar(restored, "SELECT COUNT(*) FROM purge_ledger") == 1
    assert_back_but_shredded(restored)
    assert all(blob_path(restored, b).exists() for b in world.exclusive)
    for attempt in (
        lambda: restored.read_conversation("c-whole"),
        lambda: restored.read_conversation("c-content"),
        lambda: restored.open_attachment(world.doomed_attachments[0]),
        lambda: restored.open_attachment(world.kept_attachment),
    ):
        with pytest.raises(purgekeeper.MessagingUnavailable) as refused:
            attempt()
        assert SECRET not in " ".join([str(refused.value), *refused.value.diagnostics])

    report = restored.merge_ledger(restored.settings.checkpoint_dir)
    assert report.verbatim == 3
    assert report.appended == purged
    assert (report.already_known, report.runs_abandoned) == (1, 1)
    assert report.gate.open and report.steps_rearmed
    assert_fenced_before_cleanup(restored, world)

    clean(restored)
    assert_all_done(restored)
    assert_cleaned_again(restored, world, roots, erase=erase)
    assert restored.verify_ledger().ok and restored.verify_ledger().rows == 4
    assert restored.status(early).status == "complete"
    assert {restored.status(p).status for p in purged} == {"complete"}

    before = snapshot(restored)  # merging again (with the backup's own checkpoint, too) appends nothing
    again = restored.merge_ledger(outside, at_backup.path)
    assert (again.appended, again.already_known, again.runs_abandoned) == ((), 5, 0)
    after = snapshot(restored)
    for table in ("purge_ledger", "tombstones", "ledger_head"):
        assert after[table] == before[table], table
    assert len(after["cleanup_steps"]) == len(before["cleanup_steps"])
    clean(restored)  # whatever the second merge re-armed finds nothing to remove
    assert_cleaned_again(restored, world, roots, erase=erase)


def assert_fenced_before_cleanup(pk: Pk, world: World) -> None:
    """Right after the merge, before any cleanup ran again: the restored rows and files are
    still there, and none of them is readable."""
    assert_back_but_shredded(pk)
    assert world.repository.is_dir()
    assert pk.read_conversation("c-whole") == []
    assert pk.get_conversation("c-whole") is None
    assert "c-whole" not in [c.id for c in pk.list_conversations()]
    content = pk.read_conversation("c-content")
    assert [e.id for e in content] == ["e-spared"]
    assert all(SECRET not in (e.body or "") for e in content)
    for attachment in (*world.doomed_attachments, world.whole_attachment):
        with pytest.raises(purgekeeper.ContentPurged):
            read_attachment(pk, attachment)
    assert read_attachment(pk, world.kept_attachment) == SHARED_BYTES
    with pytest.raises(purgekeeper.ConversationPurged):
        pk.ingest_event("c-whole", author="ada", body="again")
    with pytest.raises(purgekeeper.ContentPurged):
        pk.ingest_event("c-content", author="ada", body="again", provider_event_id="p-doomed")
    with pytest.raises(purgekeeper.IdReserved):
        pk.register_bot("b-mem", name="again")
    assert scalar(pk, "SELECT status FROM runs WHERE id = 'r-whole'") == "abandoned"


def assert_back_but_shredded(pk: Pk) -> None:
    """The purged body is back in its row, sealed under the key the first cleanup destroyed:
    no key store restore brings it back."""
    body, key_id = rows(pk, "SELECT body, key_id FROM events WHERE id = 'e-doomed'")[0]
    assert body is not None and key_id is not None
    assert pk.key_store.get([key_id]) == {key_id: None} and pk.key_store.destroyed([key_id]) == {key_id}
    assert body_of(pk, "e-doomed") == "<shredded>"


def assert_cleaned_again(pk: Pk, world: World, roots: Roots, *, erase: bool) -> None:
    """Cleanup removed what the restore brought back, and only that."""
    assert not list(world.repository.parent.glob(f"{ASIDE_PREFIX}*"))
    if erase:
        assert not os.path.lexists(world.repository)
    else:  # a deleted bot whose Memory was kept, as chosen: the repository stays
        assert (world.repository / "MEMORY.md").read_text().startswith(SECRET)
    for blob_id in world.exclusive:
        assert blob_state(pk, blob_id) == "deleted"
        assert not os.path.lexists(blob_path(pk, blob_id))
    shared = blob_path(pk, world.shared)
    assert blob_state(pk, world.shared) == "present"
    assert hashlib.sha256(blob_bytes(pk, world.shared)).hexdigest() == hashlib.sha256(SHARED_BYTES).hexdigest()
    assert (
        scalar(
            pk, "SELECT COUNT(*) FROM events WHERE body IS NOT NULL AND id IN ('e-doomed', 'e-whole-1', 'e-whole-2')"
        )
        == 0
    )
    assert scalar(pk, "SELECT COUNT(*) FROM placements WHERE conversation_id = 'c-whole'") == 0
    assert scalar(pk, "SELECT COUNT(*) FROM runs WHERE conversation_id = 'c-whole'") == 0
    assert_no_secret_in_any_table(pk)  # finds ciphertext only: what opens is searched too
    assert [where for where, value in all_opened(pk).items() if SECRET in value] == []
    assert [Path(path).resolve() for path in files_under(roots["blob_root"], roots["file_root"])] == [shared.resolve()]
    memory = files_under(roots["memory_root"]) if erase else {}
    assert [path for path, data in memory.items() if SECRET.encode() in data] == []
    kept = pk.read_conversation("c-keep")
    assert [(e.id, e.body) for e in kept] == [("e-kept", "kept body")]
    assert [(e.id, e.body) for e in pk.read_conversation("c-content")] == [("e-spared", "spared body")]
    assert read_attachment(pk, world.kept_attachment) == SHARED_BYTES


ERASURE = [
    pytest.param(False, id="memory-kept"),
    pytest.param(True, id="memory-erased"),
]


@pytest.mark.postgres_only
@pytest.mark.parametrize("erase", ERASURE)
def test_restore_of_a_pg_dump_is_closed_until_merged_and_purges_everything_again(
    database_url: str, roots: Roots, tmp_path: Path, open_pk: Callable[[], Pk], erase: bool
) -> None:
    restore_from_backup(database_url, roots, tmp_path, open_pk, erase=erase)


@pytest.mark.sqlite_only
@pytest.mark.parametrize("erase", ERASURE)
def test_restore_of_a_vacuum_into_copy_is_closed_until_merged_and_purges_everything_again(
    database_url: str, roots: Roots, tmp_path: Path, open_pk: Callable[[], Pk], erase: bool
) -> None:
    restore_from_backup(database_url, roots, tmp_path, open_pk, erase=erase)


# -- tampered checkpoint files ----------------------------------------------------------------------


@dataclass
class Tampering:
    destination: Pk
    valid: Path
    data: dict[str, Any]
    purges: tuple[str, ...]


@pytest.fixture
def tampering(database_url: str, roots: Roots, tmp_path: Path, open_pk: Callable[[], Pk]) -> Tampering:
    """A database with three purges and a valid checkpoint of them, restored to a backup
    taken after the first: the destination knows purge 1 and lacks purges 2 and 3."""
    pk = open_pk()
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body=f"{SECRET} one", event_id="e1", provider_event_id="p1")
    pk.ingest_event("c1", author="ada", body="two", event_id="e2")
    first = pk.purge_conversation("c-gone", **WHO).purge_id
    dump = database_backup(database_url, tmp_path / "backup")
    dump.dump()
    scope = EventScope(event_ids=["e1"])
    second = pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO).purge_id
    third = pk.purge_conversation("c-other", **WHO).purge_id
    valid = checkpoint.write(pk.db, tmp_path / "valid.json").path  # version 1, as an earlier version wrote
    pk.close()
    dump.restore()
    destination = open_pk()
    return Tampering(destination, valid, json.loads(valid.read_text("utf-8")), (first, second, third))


def rechain(data: dict[str, Any]) -> dict[str, Any]:
    """Recompute every prev_hash, row_hash and the head: an internally valid file."""
    prev = ledger.GENESIS_HASH
    for row in data["rows"]:
        row["prev_hash"] = prev
        row["row_hash"] = prev = ledger.row_hash(prev, {name: row[name] for name in ledger.HASHED_FIELDS})
    data["head"] = {"seq": len(data["rows"]), "hash": prev}
    return data


def flip(text_: str, needle: str) -> str:
    """Change one character inside the first occurrence of ``needle``."""
    at = text_.index(needle) + len(needle) // 2
    return text_[:at] + ("0" if text_[at] != "0" else "1") + text_[at + 1 :]


def as_json(data: dict[str, Any]) -> str:
    return json.dumps(data)


VARIANTS: dict[str, tuple[Callable[[str, dict[str, Any]], str | bytes], str]] = {
    "flipped-byte-in-a-row-hash": (lambda raw, data: flip(raw, data["rows"][1]["row_hash"]), "does not verify"),
    "flipped-byte-in-a-prev-hash": (lambda raw, data: flip(raw, data["rows"][2]["prev_hash"]), "does not verify"),
    "flipped-byte-in-a-selector": (
        lambda raw, data: raw.replace('"event_ids":["e1"]', '"event_ids":["e0"]'),
        "tampered row at seq 2",
    ),
    "missing-row": (lambda raw, data: as_json({**data, "rows": [data["rows"][0], data["rows"][2]]}), "does not verify"),
    "rows-swapped": (
        lambda raw, data: as_json({**data, "rows": [data["rows"][0], data["rows"][2], data["rows"][1]]}),
        "does not verify",
    ),
    "head-not-the-last-row": (
        lambda raw, data: as_json({**data, "head": {"seq": 2, "hash": data["rows"][1]["row_hash"]}}),
        "head",
    ),
    "unknown-format-version": (lambda raw, data: as_json({**data, "version": 99}), "unsupported checkpoint version"),
    "another-format": (lambda raw, data: as_json({**data, "format": "something-else"}), "not a purgekeeper"),
    "truncated": (lambda raw, data: raw.encode()[: len(raw) // 2], "not a JSON document"),
    "empty": (lambda raw, data: b"", "not a JSON document"),
    "not-utf8": (lambda raw, data: b"\xff\xfe" + raw.encode(), "not a JSON document"),
    "a-malformed-row": (
        lambda raw, data: as_json({**data, "rows": [{**data["rows"][0], "seq": "1"}, *data["rows"][1:]]}),
        "malformed",
    ),
    "a-known-purge-with-another-reason": (
        lambda raw, data: as_json(
            rechain({**data, "rows": [{**data["rows"][0], "reason": "another reason"}, *data["rows"][1:]]})
        ),
        "differs from the one this ledger holds",
    ),
    "a-known-purge-with-other-selectors": (
        lambda raw, data: as_json(
            rechain(
                {
                    **data,
                    "rows": [
                        {**data["rows"][0], "selectors": {**data["rows"][0]["selectors"], "conversation_id": "c-x"}},
                        *data["rows"][1:],
                    ],
                }
            )
        ),
        "differs from the one this ledger holds",
    ),
    "a-purge-id-twice": (
        lambda raw, data: as_json(rechain({**data, "rows": [*data["rows"], {**data["rows"][1], "seq": 4}]})),
        "appears twice",
    ),
    # valid hashes, a row that its kind does not accept (issue 11, case 12): each is named
    "a-conversation-row-with-empty-selectors": (
        lambda raw, data: with_extra_row(data, kind="conversation", selectors={}),
        "row 4 (purge p-extra)",
    ),
    "an-unknown-kind": (
        lambda raw, data: with_extra_row(data, kind="erase_everything", selectors={"conversation_id": "c9"}),
        "unknown purge kind",
    ),
    "an-event-id-longer-than-the-column": (
        lambda raw, data: with_extra_row(
            data, kind="content", selectors={"event_ids": ["e" * 201], "provider_event_ids": [], "already_fenced": []}
        ),
        "event_ids",
    ),
    "a-bot-row-whose-erasure-is-not-a-flag": (
        lambda raw, data: with_extra_row(data, kind="bot", selectors={"bot_id": "b9", "erase_memory": "yes"}),
        "erase_memory",
    ),
    "a-channel-id-that-is-no-id": (
        lambda raw, data: with_extra_row(data, kind="channel", selectors={"channel_id": "../../etc"}),
        "channel_id",
    ),
    "a-retention-policy-of-no-age": (
        lambda raw, data: with_extra_row(
            data, kind="retention", selectors={"policy_id": "p9", "conversation_id": None, "max_age_seconds": 0}
        ),
        "max_age_seconds",
    ),
    "a-retention-run-without-its-cutoff": (
        lambda raw, data: with_extra_row(
            data, kind="retention_run", selectors={"policy_id": "p9", "policy_purge_id": "p-set"}
        ),
        "cutoff",
    ),
    "a-hold-that-covers-nothing": (
        lambda raw, data: with_extra_row(
            data, kind="hold", selectors={"hold_id": "h9", "conversation_ids": [], "authors": []}
        ),
        "at least one",
    ),
    "a-digest-that-is-not-a-digest": (
        lambda raw, data: as_json(
            rechain({**data, "rows": [*data["rows"][:2], {**data["rows"][2], "scope_digest": 7}]})
        ),
        "malformed",
    ),
}


def with_extra_row(data: dict[str, Any], *, kind: str, selectors: dict[str, Any]) -> str:
    """A fourth row, hashes recomputed: the file verifies, its row is what is wrong."""
    row = {**data["rows"][2], "seq": 4, "purge_id": "p-extra", "kind": kind, "selectors": selectors}
    return as_json(rechain({**data, "rows": [*data["rows"], row]}))


def write_variant(directory: Path, name: str, damaged: str | bytes) -> Path:
    path = directory / f"{name}.json"
    if isinstance(damaged, bytes):
        path.write_bytes(damaged)
    else:
        path.write_text(damaged, "utf-8")
    return path


def test_damaged_checkpoints_are_rejected_with_the_reason_and_change_nothing(
    tampering: Tampering, tmp_path: Path
) -> None:
    """Every variant against the same destination (a refused merge leaves it as it was, so
    the next variant meets the same one); the untouched file merges at the end (the control:
    the destination really lacks what the files hold)."""
    raw = tampering.valid.read_text("utf-8")
    destination = tampering.destination
    before = snapshot(destination)
    failures = []
    for name, (make, reason) in VARIANTS.items():
        bad = write_variant(tmp_path, name, make(raw, copy.deepcopy(tampering.data)))
        assert bad.read_bytes() != raw.encode(), f"{name}: the variant changed nothing"
        for paths in ((bad,), (tampering.valid, bad)):
            try:
                destination.merge_ledger(*paths)
            except purgekeeper.ValidationError as exc:
                said = str(exc)
                if reason not in said or "nothing changed" not in said or SECRET in said:
                    failures.append(f"{name}: the refusal does not say {reason!r}: {said}")
            else:
                failures.append(f"{name}: merged {[p.name for p in paths]}")
            if snapshot(destination) != before:
                failures.append(f"{name}: the destination changed")
                before = snapshot(destination)
    assert failures == []

    _first, second, third = tampering.purges
    report = destination.merge_ledger(tampering.valid)
    assert (report.appended, report.already_known) == ((second, third), 1)
    assert snapshot(destination) != before
    assert destination.verify_ledger().ok
    assert [e.id for e in destination.read_conversation("c1")] == ["e2"]


def test_two_files_that_disagree_about_an_unknown_purge_are_rejected(tampering: Tampering, tmp_path: Path) -> None:
    one = write_variant(tmp_path, "one", as_json(rechain(copy.deepcopy(tampering.data))))
    other = copy.deepcopy(tampering.data)
    other["rows"][2]["actor"] = "someone else"
    two = write_variant(tmp_path, "two", as_json(rechain(other)))
    before = snapshot(tampering.destination)
    with pytest.raises(purgekeeper.ValidationError, match="differs between"):
        tampering.destination.merge_ledger(one, two)
    assert snapshot(tampering.destination) == before
    assert tampering.destination.merge_ledger(one).appended == tampering.purges[1:]


# -- merging what this database already holds ---------------------------------------------------------


def purge_with_attachment(pk: Pk, *, shared: bool) -> str:
    """e1 (c1) has a CAS attachment; with ``shared``, e2 (c2, live) forwards the same blob."""
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    doomed = pk.ingest_event(
        "c1",
        author="ada",
        body=f"{SECRET} body",
        event_id="e1",
        attachments=[NewAttachment.cas(SHARED_BYTES, name="s")],
    )
    if shared:
        forward = NewAttachment.reuse(doomed.attachments[0].blob_id, name="fwd.txt", binding="real_file")
        pk.ingest_event("c2", author="bob", body="kept", event_id="e2", attachments=[forward])
    scope = EventScope(event_ids=["e1"])
    purge_id = pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO).purge_id
    clean(pk)
    assert pk.status(purge_id).status == "complete"
    return purge_id


def test_merging_a_database_s_own_checkpoint_changes_nothing(open_pk: Callable[[], Pk], tmp_path: Path) -> None:
    pk = open_pk()
    purge_id = purge_with_attachment(pk, shared=False)
    pk.purge_conversation("c-gone", **WHO)
    before = snapshot(pk)
    report = pk.merge_ledger(pk.checkpoint_ledger(tmp_path / "own.json").path)
    assert (report.appended, report.already_known, report.steps_rearmed, report.runs_abandoned) == ((), 2, (), 0)
    assert snapshot(pk) == before
    assert pk.status(purge_id).status == "complete"


def test_a_restored_file_of_a_deleted_blob_is_removed_by_the_merge(open_pk: Callable[[], Pk], tmp_path: Path) -> None:
    """Files restored from a backup older than the database: the blob row says ``deleted``,
    so nothing can bind to it again; a full merge unlinks the file at once (the default
    merge looks only at what the missing purges touch)."""
    pk = open_pk()
    purge_with_attachment(pk, shared=False)
    blob_id = str(scalar(pk, "SELECT blob_id FROM attachments WHERE event_id = 'e1'"))
    path = blob_path(pk, blob_id)
    assert (blob_state(pk, blob_id), path.exists()) == ("deleted", False)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(SHARED_BYTES)
    own = pk.checkpoint_ledger(tmp_path / "own.jsonl").path
    assert pk.merge_ledger(own).deleted_files_removed == 0 and path.exists()
    report = pk.merge_ledger(own, full=True)
    assert (report.deleted_files_removed, report.steps_rearmed) == (1, ())
    assert not os.path.lexists(path)
    attachment = str(scalar(pk, "SELECT id FROM attachments WHERE event_id = 'e1'"))
    with pytest.raises(purgekeeper.ContentPurged):
        read_attachment(pk, attachment)


def test_a_second_merge_re_arms_nothing_when_a_purge_retained_a_shared_blob(
    open_pk: Callable[[], Pk], tmp_path: Path
) -> None:
    pk = open_pk()
    purge_id = purge_with_attachment(pk, shared=True)
    before = snapshot(pk)
    report = pk.merge_ledger(pk.checkpoint_ledger(tmp_path / "own.json").path)
    assert report.appended == ()
    assert pk.status(purge_id).status == "complete"
    assert report.steps_rearmed == ()
    assert snapshot(pk) == before


def test_merging_a_ledger_that_holds_a_bot_deletion_with_erasure(
    open_pk: Callable[[], Pk], roots: Roots, tmp_path: Path
) -> None:
    pk = open_pk()
    pk.register_bot("b1", name="B", memory_path=memory_repository(roots, "b1"))
    identity = pk.preview_bot_deletion("b1").memory.identity
    pk.delete_bot("b1", **WHO, erase_memory=True, reviewed_repository=identity)
    report = pk.merge_ledger(pk.checkpoint_ledger(tmp_path / "own.json").path)
    assert report.appended == () and report.gate.open


# -- a merge is all or nothing ---------------------------------------------------------------------


def test_a_merge_that_fails_half_way_changes_nothing_and_leaves_the_gate_as_it_was(
    tampering: Tampering, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tried (issue 11, case 12): the merge fails after it appended the unknown rows (the
    fences cannot be re-applied). Nothing it wrote stays; the gate is as it found it (no merge
    flag left behind); the same file then merges."""

    destination = tampering.destination
    before, gate = snapshot(destination), destination.messaging_status()

    def broken(conn: Any, entries: Any) -> int:
        raise RuntimeError("the fences could not be re-applied")

    from purgekeeper.commands import restore_commands

    monkeypatch.setattr(restore_commands, "_reapply_fences", broken)
    with pytest.raises(RuntimeError):
        destination.merge_ledger(tampering.valid)
    assert snapshot(destination) == before
    state = destination.messaging_status()
    assert (state.open, state.problems) == (gate.open, gate.problems)
    monkeypatch.undo()
    assert destination.merge_ledger(tampering.valid).appended == tampering.purges[1:]
    assert destination.messaging_status().open


# -- another database's checkpoint -------------------------------------------------------------------


def other_database_checkpoint(tmp_path: Path) -> tuple[Path, str, str]:
    """A checkpoint written by another database (its own random id) that purges c1 here."""
    with purgekeeper.open(
        f"sqlite:///{tmp_path / 'other.db'}",
        blob_root=tmp_path / "other" / "blobs",
        file_root=tmp_path / "other" / "files",
        checkpoint_dir=tmp_path / "other" / "ledger",
        workers="none",
    ) as other:
        purge_id = other.purge_conversation("c1", **WHO).purge_id
        written = other.checkpoint_ledger(tmp_path / "other.json")
        return written.path, written.database_id, purge_id


def test_another_database_s_checkpoint_is_merged_only_when_asked_for(open_pk: Callable[[], Pk], tmp_path: Path) -> None:
    """Tried (issue 11, case 13): a checkpoint of another database (another database id)
    that would purge c1 here: refused, nothing changed; with ``allow_other_database`` it
    merges, and the report names the database it came from."""
    pk = open_pk()
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body=f"{SECRET} here", event_id="e1")
    path, other_id, purge_id = other_database_checkpoint(tmp_path)
    before = snapshot(pk)
    with pytest.raises(purgekeeper.ValidationError, match="another database") as refused:
        pk.merge_ledger(path)
    assert other_id in str(refused.value) and "nothing changed" in str(refused.value)
    assert snapshot(pk) == before and [e.id for e in pk.read_conversation("c1")] == ["e1"]

    report = pk.merge_ledger(path, allow_other_database=True)
    assert report.appended == (purge_id,)
    assert report.sources == (other_id,)
    assert pk.read_conversation("c1") == []
    own = pk.checkpoint_ledger(tmp_path / "own.json")
    assert pk.merge_ledger(own.path).sources == (pk.database_key,)
