"""The key store: one key per item of content, kept outside the restorable database, and
destroyed when the content is purged (crypto-shredding, issue 36).

:class:`KeyStore` is the interface (``create``, ``get``, ``destroy``, ``destroyed``), small
enough for an external KMS to implement later (HashiCorp Vault's transit engine, say: a key
per id, ``destroy`` as its key deletion). :class:`FileKeyStore` is the embedded one, in
``<checkpoint dir>/<database id>.keys/`` (0700); its files are drawn in ``purgekeeper.storage.keystore_files``.

**Why SQLite** (the standard library's ``sqlite3``): the store needs a transaction over
several rows (a tombstone and a deleted key, a generation bumped with them), shared by several
processes, durable at commit, with deleted rows overwritten in place. SQLite gives all of it
in one file, with no server. It runs with ``synchronous=FULL`` (a commit is fsynced before
``destroy`` returns), ``secure_delete=ON`` (a deleted row's bytes are zeroed in its page) and
``journal_mode=WAL``: every ingest creates a key and every read reads some, and WAL lets
readers go on while one process writes, with one fsync a commit.

**What remains on disk, and where.** ``keys.db``: every surviving key, *wrapped* (AES-256-GCM
under the key-encryption key, the KEK, bound to the id and the KEK's version), and the
tombstones (ids only). ``keys.db-wal``: pages written since the last checkpoint, among them a
destroyed key's wrapped form from before its destruction, until a rotation checkpoints and
truncates it. The device: blocks freed by a truncation or an unlink, which may hold old WAL
frames. ``kek.<version>``: the KEK. No file ever holds a key unwrapped, and a destroyed
key's leftover wrapped bytes die with their KEK at the next rotation
(``purgekeeper.storage.keystore_rotation``, which says why each of its steps is crash-safe).

**The trust root** is the KEK file. Back up ``keys.db`` and the ``kek.*`` files together
(a copy of the directory, taken under the store's flock or with SQLite's backup API), apart
from the database's backups; a backup of the key store brings destroyed keys back only if it
was taken before their rotation, so keep it no longer than needed. Losing the key store loses
every sealed piece of content.

**Tombstones.** A destroyed id stays in ``destroyed`` for ever: ``create`` refuses it
(:class:`KeyDestroyed`), so a content database restored from an old backup can never get a
purged item a new key, and ``get`` answers None for it.

**Concurrency.** Several processes on one host share the directory. Each write is one SQLite
transaction begun with ``BEGIN IMMEDIATE`` (SQLite's own lock, across processes);
initialisation and rotation also hold an flock of ``lock``, since they create and shred KEK
files. Within a process one connection serves the threads in turn; a rotation has its own.

**The cache** keeps up to ``CACHE_KEYS`` unwrapped keys (least recently used first out), for
reads and ingest to stay fast. ``destroy`` drops its ids from this process's cache before it
returns. Other processes learn of it through the **generation**, a counter in ``state`` that
every ``destroy`` bumps in its transaction: each ``get`` (once a request or a batch) reads it
in the snapshot it reads keys in, and a process that finds it moved drops its whole cache.
So no process serves a key destroyed before its batch began. The purge's fence comes first,
at acceptance, so no reader asks for the content's key between the acceptance and the
destruction.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from purgekeeper.schema.errors import Fenced, InfrastructureError, ValidationError
from purgekeeper.storage import keystore_files, keystore_rotation
from purgekeeper.storage.files import PrivateFileUnusable, read_private
from purgekeeper.storage.keystore_rotation import ROTATE_EVERY, StoreState
from purgekeeper.storage.sealing import KEY_BYTES, SealedInvalid, new_key

__all__ = [
    "CACHE_KEYS",
    "ROTATE_EVERY",
    "FileKeyStore",
    "KeyDestroyed",
    "KeyStore",
    "KeyStoreUnusable",
    "RotatingKeyStore",
    "checked_ids",
]

CACHE_KEYS = 4096  # unwrapped keys kept in memory: a batch's worth, many times over
IDS_PER_STATEMENT = 500  # below SQLite's bound on a statement's parameters
MAX_ID_LENGTH = 200
READ_ATTEMPTS = 3  # a read that meets a KEK a rotation just retired reads its rows again


class KeyDestroyed(Fenced):
    """A key was destroyed for this id: its content was purged, and it never gets a new key."""

    def __init__(self, detail: str | None = None, *, ids: Sequence[str] = ()) -> None:
        self.ids = tuple(ids)
        super().__init__(detail)


class KeyStoreUnusable(InfrastructureError):
    """The key store cannot be read or written (a full or read-only disk, permissions, a
    symlink, a file open to others, a missing key-encryption key); nothing was written. The
    message names its path, never a key."""


class KeyStore(Protocol):
    """Keys by id, outside the content database."""

    def create(self, ids: Iterable[str]) -> dict[str, bytes]:
        """A new 32-byte key for each id without one, and the existing key of each id that
        has one; KeyDestroyed, with nothing created, when any id's key was destroyed."""

    def get(self, ids: Iterable[str]) -> dict[str, bytes | None]:
        """Each id's key, or None when it was destroyed or never made; never creates one."""

    def destroy(self, ids: Iterable[str], *, held_only: bool = False) -> int:
        """Destroy the ids' keys, durably before it returns, and remember the ids as destroyed
        (also those that had no key, unless ``held_only``: then KeyStoreUnusable, with nothing
        destroyed, when an id was never held here, the sign of a wrong store); returns how
        many keys it destroyed. Idempotent."""

    def close(self) -> None:
        """Release what the store holds open (its cached keys among it)."""

    def check(self) -> None:
        """KeyStoreUnusable unless the store can be written now."""

    def destroyed(self, ids: Iterable[str]) -> set[str]:
        """The ids whose keys were destroyed."""


class RotatingKeyStore(KeyStore, Protocol):
    """A key store whose key-encryption key the scheduler rotates (``FileKeyStore``); a key
    server's client (``purgekeeper.storage.key_client.HttpKeyStore``) is never due: its server
    rotates."""

    directory: Any  # where the keys are, for messages: a path, or a key server's URL

    def rotation_due(self) -> bool: ...

    def rotate(self) -> int: ...


class FileKeyStore:
    """The key store in a directory of this host (see the module's docstring)."""

    def __init__(self, directory: Path | str, *, cache_keys: int = CACHE_KEYS) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cache_keys = cache_keys
        self._generation: int | None = None  # the generation the cache is valid for
        self._keks: dict[int, bytes] = {}
        self._current_kek: int | None = None  # the version the KEKs held were read under
        with self._unusable():
            keystore_files.prepare_directory(self.directory)
            self._db = keystore_files.connect(self.directory)
            self._initialise()

    def close(self) -> None:
        with self._lock:
            self._db.close()
            self._forget()

    def __enter__(self) -> FileKeyStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the interface ------------------------------------------------------------------

    def create(self, ids: Iterable[str]) -> dict[str, bytes]:
        wanted = checked_ids(ids)
        with self._lock, self._unusable():
            with keystore_files.write(self._db) as db:
                refused = self._destroyed_among(db, wanted)
                if refused:
                    raise KeyDestroyed(
                        f"a key was destroyed for {len(refused)} of the ids: never made again", ids=refused
                    )
                keys = self._unwrapped(db, self._rows(db, wanted))
                made = {key_id: new_key() for key_id in wanted if key_id not in keys}
                self._insert(db, made)
            keys.update(made)
            self._remember(keys)  # after the commit, and before another thread's destroy
        return {key_id: keys[key_id] for key_id in wanted}

    def get(self, ids: Iterable[str]) -> dict[str, bytes | None]:
        wanted = checked_ids(ids)
        with self._lock, self._unusable():
            for attempt in range(1, READ_ATTEMPTS + 1):
                try:
                    return self._get(wanted)
                except keystore_files.KekMissing:
                    if attempt == READ_ATTEMPTS:
                        raise
        raise AssertionError("unreachable")

    def destroy(self, ids: Iterable[str], *, held_only: bool = False) -> int:
        wanted = checked_ids(ids)
        now = time.time()
        with self._lock, self._unusable():
            with keystore_files.write(self._db) as db:
                before = self._state(db).generation
                if held_only:
                    self._refuse_unknown(db, wanted)
                gone = sum(
                    db.execute(f"DELETE FROM keys WHERE id IN ({_marks(chunk)})", chunk).rowcount
                    for chunk in _chunks(wanted)
                )
                db.executemany(
                    "INSERT OR IGNORE INTO destroyed (id, destroyed_at) VALUES (?, ?)", [(i, now) for i in wanted]
                )
                if gone:  # a destroy that found no key leaves every cache as true as it was
                    db.execute(
                        "UPDATE state SET generation = generation + 1,"
                        " destroyed_since_rotation = destroyed_since_rotation + ?",
                        (gone,),
                    )
            for key_id in wanted:
                self._cache.pop(key_id, None)
            self._generation = before + (1 if gone else 0)  # reading ``before`` brought the cache up to it
        return gone

    def _refuse_unknown(self, db: sqlite3.Connection, wanted: list[str]) -> None:
        held = {row[0] for row in self._rows(db, wanted)} | set(self._destroyed_among(db, wanted))
        unknown = [key_id for key_id in wanted if key_id not in held]
        if unknown:
            raise keystore_files.FileUnusable(
                self.directory,
                f"never held {len(unknown)} of the keys asked to be destroyed: it is not the store "
                "they were made in (a wrong checkpoint directory, an empty store in its place?)",
            )

    def destroyed(self, ids: Iterable[str]) -> set[str]:
        wanted = checked_ids(ids)
        with self._lock, self._unusable(), keystore_files.read(self._db) as db:
            return set(self._destroyed_among(db, wanted))

    def check(self) -> None:
        """KeyStoreUnusable, naming the path and the reason, unless the store can be written
        now (one write of a row to itself, committed as ``destroy`` commits) and its current
        KEK read: what ``purgectl health`` and the console ask."""
        with self._lock, self._unusable(), keystore_files.write(self._db) as db:
            db.execute("UPDATE state SET generation = generation")
            self._kek(db, self._state(db).current_kek)

    # -- generation and rotation ---------------------------------------------------------

    def generation(self) -> int:
        """The count of ``destroy`` calls so far, in every process: cheap to read (one row)."""
        with self._lock, self._unusable():
            return self._state(self._db).generation

    def rotation_due(self, *, now: float | None = None, every: float = ROTATE_EVERY) -> bool:
        """Whether the scheduler should call :meth:`rotate`: keys were destroyed since the
        last rotation, and it was ``every`` seconds ago or more; or a rotation was
        interrupted."""
        now = time.time() if now is None else now
        with self._lock, self._unusable(), keystore_files.read(self._db) as db:
            state = self._state(db)
            if keystore_rotation.pending(db, self.directory):
                return True
            return state.destroyed_since_rotation > 0 and now - state.rotated_at >= every

    def rotate(self) -> int:
        """A new KEK, every surviving key re-wrapped under it, and the old KEK shredded
        (``purgekeeper.storage.keystore_rotation``); returns the new KEK's version."""
        with self._unusable(), keystore_files.exclusive(self.directory):
            db = keystore_files.connect(self.directory)
            try:
                return keystore_rotation.rotate(db, self.directory)
            finally:
                db.close()

    # -- inside -------------------------------------------------------------------------

    def _initialise(self) -> None:
        """The schema and the first KEK, once, under the flock (two processes may open a new
        directory at once). A KEK file left by a crash before the schema's commit wrapped
        nothing yet, and is used; other KEK files beside no database are refused."""
        if keystore_files.has_schema(self._db):
            return
        with keystore_files.exclusive(self.directory), keystore_files.write(self._db) as db:
            if keystore_files.has_schema(db):
                return
            kek = self._first_kek()
            for statement in keystore_files.SCHEMA:
                db.execute(statement)
            db.execute("INSERT INTO keks (version, check_value) VALUES (1, ?)", (keystore_files.check_value(kek, 1),))
            db.execute("INSERT INTO state VALUES (1, 1, 0, 0, ?)", (time.time(),))

    def _first_kek(self) -> bytes:
        versions = keystore_files.kek_versions(self.directory)
        path = keystore_files.kek_path(self.directory, 1)
        if versions - {1}:
            raise keystore_files.FileUnusable(
                self.directory, "holds key-encryption keys but no key database: restore keys.db with them"
            )
        if versions:
            kek = read_private(path, KEY_BYTES + 1, follow=False)
            if len(kek) == keystore_files.KEY_BYTES:
                return kek
            keystore_files.shred(path)
        kek = new_key()
        keystore_files.create_kek(self.directory, 1, kek)
        return kek

    def _get(self, wanted: list[str]) -> dict[str, bytes | None]:
        with keystore_files.read(self._db) as db:
            self._follow(self._state(db))
            keys: dict[str, bytes | None] = {}
            for key_id in wanted:
                if key_id in self._cache:
                    self._cache.move_to_end(key_id)
                    keys[key_id] = self._cache[key_id]
            found = self._unwrapped(db, self._rows(db, [i for i in wanted if i not in keys]))
        self._remember(found)
        keys.update(found)
        return {key_id: keys.get(key_id) for key_id in wanted}

    def _follow(self, state: StoreState) -> None:
        """Drop the cache when another process destroyed keys, and the KEKs when one rotated."""
        if state.generation != self._generation:
            self._cache.clear()
            self._generation = state.generation
        if state.current_kek != self._current_kek:
            self._keks.clear()
            self._current_kek = state.current_kek

    def _insert(self, db: sqlite3.Connection, made: dict[str, bytes]) -> None:
        version = self._state(db).current_kek
        kek = self._kek(db, version)
        db.executemany(
            "INSERT INTO keys (id, kek_version, wrapped) VALUES (?, ?, ?)",
            [(key_id, version, keystore_files.wrap(kek, version, key_id, key)) for key_id, key in made.items()],
        )

    def _state(self, db: sqlite3.Connection) -> StoreState:
        state = StoreState.read(db)
        self._follow(state)
        return state

    def _remember(self, keys: dict[str, bytes]) -> None:
        for key_id, key in keys.items():
            self._cache[key_id] = key
            self._cache.move_to_end(key_id)
        while len(self._cache) > self._cache_keys:
            self._cache.popitem(last=False)

    def _forget(self) -> None:
        self._cache.clear()
        self._keks.clear()
        self._generation = self._current_kek = None

    def _rows(self, db: sqlite3.Connection, ids: list[str]) -> list[tuple[str, int, bytes]]:
        return [
            row
            for chunk in _chunks(ids)
            for row in db.execute(f"SELECT id, kek_version, wrapped FROM keys WHERE id IN ({_marks(chunk)})", chunk)
        ]

    def _unwrapped(self, db: sqlite3.Connection, rows: list[tuple[str, int, bytes]]) -> dict[str, bytes]:
        return {
            key_id: keystore_files.unwrap(self._kek(db, version), version, key_id, wrapped)
            for key_id, version, wrapped in rows
        }

    def _kek(self, db: sqlite3.Connection, version: int) -> bytes:
        """The KEK of ``version``, read from its file once and checked against ``keks`` (in
        the caller's snapshot); KekMissing when a rotation retired it since."""
        if version not in self._keks:
            row = db.execute("SELECT check_value FROM keks WHERE version = ?", (version,)).fetchone()
            path = keystore_files.kek_path(self.directory, version)
            if row is None:
                raise keystore_files.KekMissing(path, "is retired")
            self._keks[version] = keystore_files.read_kek(self.directory, version, row[0])
        return self._keks[version]

    def _destroyed_among(self, db: sqlite3.Connection, ids: list[str]) -> list[str]:
        return [
            row[0]
            for chunk in _chunks(ids)
            for row in db.execute(f"SELECT id FROM destroyed WHERE id IN ({_marks(chunk)}) ORDER BY id", chunk)
        ]

    @contextlib.contextmanager
    def _unusable(self) -> Iterator[None]:
        """The store's faults as KeyStoreUnusable, naming a path and the reason, never a key."""
        try:
            yield
        except keystore_files.FileUnusable as exc:
            raise KeyStoreUnusable(f"the key store's {exc.path} {exc.reason}") from None
        except PrivateFileUnusable as exc:
            raise KeyStoreUnusable(f"a key-encryption key in {self.directory} {exc.reason}") from None
        except SealedInvalid:
            raise KeyStoreUnusable(f"the key store {self.directory} holds a wrapped key that does not open") from None
        except (OSError, sqlite3.Error) as exc:
            raise KeyStoreUnusable(f"the key store {self.directory}: {keystore_files.reason(exc)}") from None


def checked_ids(ids: Iterable[str]) -> list[str]:  # the one rule for ids, a key server's too
    """The ids, each once, in their order; ValidationError for one that is not a short
    non-empty string."""
    wanted = list(dict.fromkeys(ids))
    for key_id in wanted:
        if not isinstance(key_id, str) or not 0 < len(key_id) <= MAX_ID_LENGTH:
            raise ValidationError(f"a key's id is a string of 1 to {MAX_ID_LENGTH} characters")
    return wanted


def _chunks(ids: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(ids), IDS_PER_STATEMENT):
        yield ids[start : start + IDS_PER_STATEMENT]


def _marks(chunk: list[str]) -> str:
    return ", ".join("?" * len(chunk))
