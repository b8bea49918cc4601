"""What the at-rest tests seed, and how they look for it on disk.

Every field that is sealed at rest (an event's body, an attachment's name and bytes, an
admission's payload) gets a marker of its own, ``MARK`` and 32 random hex digits, so a hit
names the field that leaked. The event's author is a *control*: it is never sealed, so a
search that finds nothing else must still find it where the rows are, which shows the search
could have found a marker there.

A search reads every regular file below the given directories (symlinks are not followed)
and counts each marker's UTF-8 bytes in it; a file's path is searched too (a name on disk is
content as much as the bytes in the file). Attachment bytes are random, about 200 KiB, with
their marker at the start, the end, and across every 64 KiB boundary, where a chunked
encryption cuts.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from sqlalchemy.engine import make_url

import purgekeeper
from purgekeeper import NewAttachment
from purgekeeper.storage.keystore import FileKeyStore
from tests.helpers.databases import create_database, drop_database, postgres_url
from tests.helpers.reads import rows

Pk = purgekeeper.Purgekeeper

MARKED_BYTES = 200 * 1024
CHUNK_BOUNDARY = 64 * 1024  # a marker straddles every multiple of it in the attachment bytes
BOT = "b-marked"
RUN = "r-marked"


def marker() -> str:
    return "MARK" + uuid.uuid4().hex


@dataclass(frozen=True)
class Markers:
    """One marker a field; ``author`` is the control, never sealed."""

    body: str
    cas_name: str
    cas_bytes: str
    file_name: str
    file_bytes: str
    payload: str
    author: str

    @classmethod
    def new(cls) -> Markers:
        return cls(**{f.name: marker() for f in fields(cls)})

    def sealed(self) -> dict[str, bytes]:
        """The markers of the sealed fields, by field, as the bytes searched for."""
        return {f.name: getattr(self, f.name).encode() for f in fields(self) if f.name != "author"}

    def control(self) -> dict[str, bytes]:
        return {"author": self.author.encode()}


@dataclass(frozen=True)
class Seeded:
    conversation_id: str
    event_id: str
    cas_attachment: str
    file_attachment: str
    cas_bytes: bytes
    file_bytes: bytes


def marked_bytes(mark: str, *, size: int = MARKED_BYTES) -> bytes:
    """``size`` random bytes with ``mark`` at the start, at the end, and across every
    ``CHUNK_BOUNDARY``."""
    needle = mark.encode()
    data = bytearray(os.urandom(size))
    spots = [0, size - len(needle), *(edge - len(needle) // 2 for edge in range(CHUNK_BOUNDARY, size, CHUNK_BOUNDARY))]
    for at in spots:
        data[at : at + len(needle)] = needle
    assert data.count(needle) == len(spots)
    return bytes(data)


def seed_marked(pk: Pk, markers: Markers, conversation_id: str = "c-marked") -> Seeded:
    """A conversation with one event: a marked body, a CAS and a real-file attachment with
    marked names and bytes, admitted to a run with a marked payload (the run then finishes)."""
    pk.register_bot(BOT, name="Runner")
    pk.create_conversation(conversation_id)
    cas_bytes, file_bytes = marked_bytes(markers.cas_bytes), marked_bytes(markers.file_bytes)
    event = pk.ingest_event(
        conversation_id,
        author=markers.author,
        body=markers.body,
        event_id="e-marked",
        attachments=[
            NewAttachment.cas(cas_bytes, name=markers.cas_name),
            NewAttachment.file(file_bytes, name=markers.file_name),
        ],
    )
    pk.start_run(conversation_id, bot_id=BOT, run_id=RUN)
    pk.admit(event.id, RUN, payload={"text": markers.payload})
    pk.finish_run(RUN, status="succeeded", output="done")
    cas, file = (a.id for a in event.attachments)
    return Seeded(conversation_id, event.id, cas, file, cas_bytes, file_bytes)


# -- searching files ---------------------------------------------------------------------------------


def files_under(*roots: Path) -> list[Path]:
    """Every regular file below the roots (none of them followed through a symlink)."""
    return sorted(
        Path(folder) / name
        for root in roots
        for folder, _dirs, names in os.walk(root)
        for name in names
        if (Path(folder) / name).is_file() and not (Path(folder) / name).is_symlink()
    )


def occurrences(needles: Mapping[str, bytes], files: Iterable[Path]) -> dict[str, dict[str, int]]:
    """For each needle found, the files that hold it (in their bytes or their path) and how
    many times; ``{}`` when none is anywhere. A file removed during the search is skipped
    (a server's temporary file)."""
    found: dict[str, dict[str, int]] = {}
    for path in files:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        name = os.fsencode(path)
        for label, needle in needles.items():
            count = data.count(needle) + name.count(needle)
            if count:
                found.setdefault(label, {})[str(path)] = count
    return found


# -- an old backup, restored into a new database ---------------------------------------------------


def _plain_url(database_url: str) -> str:
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


def _sqlite_path(database_url: str) -> str:
    return str(make_url(database_url).database)


def dump(database_url: str, target: Path) -> Path:
    """A backup of the whole database in one file, uncompressed so it can be searched:
    ``pg_dump -Fc -Z0`` (PostgreSQL), ``VACUUM INTO`` (SQLite)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if database_url.startswith("sqlite"):
        conn = sqlite3.connect(_sqlite_path(database_url))
        try:
            conn.execute("VACUUM INTO ?", (str(target),))
        finally:
            conn.close()
        return target
    argv = ["pg_dump", "-Fc", "-Z0", "--no-owner", f"--dbname={_plain_url(database_url)}", f"--file={target}"]
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    return target


def restore_into(backup: Path, database_url: str) -> None:
    """``dump``'s file into a new, empty database: ``pg_restore`` (PostgreSQL), a copy of the
    file (SQLite)."""
    if database_url.startswith("sqlite"):
        shutil.copyfile(backup, _sqlite_path(database_url))
        return
    argv = ["pg_restore", "--no-owner", "--exit-on-error", f"--dbname={_plain_url(database_url)}", str(backup)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def open_on(database_url: str, roots: Mapping[str, Path]) -> Pk:
    """A handle on ``database_url`` with the test's roots (so its checkpoint directory, and
    the key store in it), and no in-process worker."""
    return purgekeeper.open(
        database_url,
        blob_root=roots["blob_root"],
        file_root=roots["file_root"],
        checkpoint_dir=roots["checkpoint_dir"],
        memory_roots=[roots["memory_root"]],
        workers="none",
    )


def file_store(pk: Pk) -> FileKeyStore:
    """The handle's key store, which is the file store in its checkpoint directory."""
    store = pk.key_store
    assert isinstance(store, FileKeyStore), store
    return store


def key_ids(pk: Pk, table: str, ids: Iterable[str]) -> dict[str, str]:
    """The ``key_id`` of each row of ``events`` or ``blobs``, read raw, by row id; each row
    has one."""
    found = {row.id: row.key_id for row in rows(pk, f"SELECT id, key_id FROM {table}")}
    named = {row_id: found.get(row_id) for row_id in ids}
    assert None not in named.values(), f"rows of {table} without a key: {named}"
    return {row_id: str(key_id) for row_id, key_id in named.items()}


def wrapped_forms(directory: Path, ids: Iterable[str]) -> dict[str, tuple[int, bytes]]:
    """Each id's row in the key store's own database, read raw: its KEK's version and its
    wrapped key."""
    conn = sqlite3.connect(directory / "keys.db")
    try:
        return {
            key_id: (int(version), bytes(wrapped))
            for key_id in ids
            for version, wrapped in conn.execute("SELECT kek_version, wrapped FROM keys WHERE id = ?", (key_id,))
        }
    finally:
        conn.close()


def new_database_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """An empty new database on the backend, dropped after (a fixture's body)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'restored.db'}"
        return
    name = f"pk_t_{uuid.uuid4().hex[:16]}"
    create_database(name)
    try:
        yield postgres_url(name)
    finally:
        drop_database(name)
