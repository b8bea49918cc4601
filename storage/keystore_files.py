"""The key store's directory, its files and its SQLite database (``purgekeeper.storage.keystore``
says what they are for)::

    keys/                 0700, refused when open to others or a symlink
        keys.db           the wrapped keys, the tombstones, the KEKs' check values, the state
        keys.db-wal       SQLite's write-ahead log (and keys.db-shm, its index: no key bytes)
        kek.<version>     a key-encryption key: 32 random bytes, 0600, read like a private key
        lock              the flock that initialisation and rotation hold (empty)

A key is wrapped with :func:`purgekeeper.storage.sealing.seal` under the KEK, bound to
``key:<kek version>:<id>``; each KEK has a check value (an empty message sealed under it for
``kek:<version>``) in ``keks``, so a KEK file that does not belong to this store is refused
instead of unwrapping garbage. The SQL is here rather than in ``schema/``: this database is
not the content database, and is never migrated with it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

from purgekeeper.storage import failpoints
from purgekeeper.storage.files import (
    PrivateFileUnusable,
    create_private,
    flocked,
    fsync_directory,
    read_private,
    reason_of,
)
from purgekeeper.storage.sealing import KEY_BYTES, SealedInvalid, seal, unseal

DATABASE = "keys.db"
SIDE_FILES = ("keys.db-wal", "keys.db-shm", "keys.db-journal")
LOCK = "lock"
KEK_PREFIX = "kek."
KEK_NAME = re.compile(r"kek\.([1-9][0-9]{0,8})")
ASIDE_PREFIX = ".kek."  # create_private's file written aside, left by a crash before its unlink
BUSY_TIMEOUT_S = 30.0

SCHEMA = (
    "CREATE TABLE state (one INTEGER PRIMARY KEY CHECK (one = 1), current_kek INTEGER NOT NULL,"
    " generation INTEGER NOT NULL, destroyed_since_rotation INTEGER NOT NULL, rotated_at REAL NOT NULL)",
    "CREATE TABLE keks (version INTEGER PRIMARY KEY, check_value BLOB NOT NULL)",
    "CREATE TABLE keys (id TEXT PRIMARY KEY, kek_version INTEGER NOT NULL, wrapped BLOB NOT NULL) WITHOUT ROWID",
    "CREATE INDEX keys_by_kek ON keys (kek_version)",
    "CREATE TABLE destroyed (id TEXT PRIMARY KEY, destroyed_at REAL NOT NULL) WITHOUT ROWID",
)
PRAGMAS = (
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = FULL",
    "PRAGMA secure_delete = ON",
)
READ_STATE = "SELECT current_kek, generation, destroyed_since_rotation, rotated_at FROM state"
HAS_SCHEMA = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'state'"


class FileUnusable(Exception):
    """A file of the key store that cannot be used; ``reason`` never holds what it holds."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path} {reason}")
        self.path = path
        self.reason = reason


class KekMissing(FileUnusable):
    """A KEK file that is missing or does not match its check value: retired by a rotation
    since the snapshot that named it was read, or lost."""


# File systems SQLite's WAL does not work on (its index is shared memory, which a network file
# system does not keep the same on two machines: https://www.sqlite.org/wal.html), by the type
# /proc/self/mountinfo gives their mount.
NETWORK_FILE_SYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "9p", "afs", "ncpfs", "davfs"}
)


def prepare_directory(directory: Path) -> None:
    """The directory, made 0700 when missing (and its entry made durable); FileUnusable when
    it is a symlink, not a directory, open to others, or on a network file system."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    else:
        fsync_directory(directory.parent)
    _check_private(directory, directory=True)
    kind = file_system_type(directory)
    if kind in NETWORK_FILE_SYSTEMS or kind.startswith("fuse."):
        raise FileUnusable(
            directory,
            f"is on a {kind} file system, where SQLite's write-ahead log does not work: keep the key store on "
            "a local disk, and let other machines reach it through `purgectl keys serve` (docs/guides/encryption.md)",
        )


def file_system_type(path: Path, mountinfo: str | None = None) -> str:
    """The type of the file system ``path`` is on (the longest mount point above it in
    ``mountinfo``, by default /proc/self/mountinfo's); "" where that cannot be read."""
    try:
        lines = (Path("/proc/self/mountinfo").read_text() if mountinfo is None else mountinfo).splitlines()
    except OSError:
        return ""
    resolved, best, kind = str(path.resolve()), -1, ""
    for line in lines:
        fields, _, after = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not after:
            continue
        mount = parts[4].replace("\\040", " ")
        inside = resolved == mount or resolved.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) > best:
            best, kind = len(mount), after.split()[0]
    return kind


def connect(directory: Path) -> sqlite3.Connection:
    """A connection to the store's database (made 0600 when missing), in autocommit mode:
    every transaction is begun explicitly."""
    database = directory / DATABASE
    with contextlib.suppress(FileExistsError):
        os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    for path in (database, *(directory / name for name in SIDE_FILES)):
        if path == database or os.path.lexists(path):
            _check_private(path, directory=False)
    db = sqlite3.connect(database, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_S)
    for pragma in PRAGMAS:
        db.execute(pragma)
    return db


def _check_private(path: Path, *, directory: bool) -> None:
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        raise FileUnusable(path, "is a symlink (never followed)")
    if not (stat.S_ISDIR(mode) if directory else stat.S_ISREG(mode)):
        raise FileUnusable(path, "is not a directory" if directory else "is not a regular file")
    if mode & 0o077:
        raise FileUnusable(
            path, f"is open to others (mode {stat.S_IMODE(mode):04o}): chmod {'700' if directory else '600'} it"
        )


@contextlib.contextmanager
def write(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction: ``BEGIN IMMEDIATE`` takes SQLite's write lock at once (shared by
    every process), so a read, a check and a write inside it see no other writer between
    them. Rolled back on any error: nothing is half-written."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        failpoints.hit("keystore.write")  # a fault test's ENOSPC or EROFS, at the commit
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def read(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One read transaction: one snapshot for every statement inside it."""
    db.execute("BEGIN")
    try:
        yield db
    finally:
        if db.in_transaction:
            db.execute("COMMIT")


@contextlib.contextmanager
def exclusive(directory: Path) -> Iterator[None]:
    """The store's flock (``lock``), held while the block runs: initialisation and rotation
    create and shred KEK files, which SQLite's lock does not cover."""
    with flocked(directory / LOCK):
        yield


def has_schema(db: sqlite3.Connection) -> bool:
    return db.execute(HAS_SCHEMA).fetchone() is not None


def wrap(kek: bytes, version: int, key_id: str, key: bytes) -> bytes:
    return seal(kek, key, bound_to=f"key:{version}:{key_id}")


def unwrap(kek: bytes, version: int, key_id: str, wrapped: bytes) -> bytes:
    return unseal(kek, wrapped, bound_to=f"key:{version}:{key_id}")


def check_value(kek: bytes, version: int) -> bytes:
    return seal(kek, b"", bound_to=f"kek:{version}")


def kek_path(directory: Path, version: int) -> Path:
    return directory / f"{KEK_PREFIX}{version}"


def kek_versions(directory: Path) -> set[int]:
    """The versions of the KEK files in the directory."""
    return {int(match.group(1)) for name in os.listdir(directory) if (match := KEK_NAME.fullmatch(name))}


def leftovers(directory: Path) -> list[Path]:
    """Files written aside by ``create_private`` and left by a crash before its unlink."""
    return [directory / name for name in os.listdir(directory) if name.startswith(ASIDE_PREFIX)]


def create_kek(directory: Path, version: int, kek: bytes) -> None:
    """``kek`` as the new file ``kek.<version>`` (0600, fsynced, never over anything)."""
    create_private(kek_path(directory, version), kek)


def read_kek(directory: Path, version: int, check: bytes) -> bytes:
    """The KEK of ``version``, once its file opens ``check``; KekMissing otherwise, and
    FileUnusable for a file that is not private (a symlink, open to others)."""
    path = kek_path(directory, version)
    try:
        kek = read_private(path, KEY_BYTES + 1, follow=False)
    except FileNotFoundError:
        raise KekMissing(path, "is missing (restore it with keys.db from the same backup)") from None
    except PrivateFileUnusable as exc:
        raise FileUnusable(path, exc.reason) from None
    try:
        unseal(kek, check, bound_to=f"kek:{version}")
    except SealedInvalid:
        raise KekMissing(path, "does not match the key store (a KEK of another store, or damaged)") from None
    return kek


def shred(path: Path) -> None:
    """Overwrite ``path`` with zeros in place, fsync it, unlink it and fsync its directory. A
    crash at any point leaves it for the next rotation to shred again. A link planted there
    is unlinked, never followed."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    else:
        try:
            os.pwrite(fd, bytes(os.fstat(fd).st_size), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
    failpoints.hit("keystore.rotate.zeroed")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fsync_directory(path.parent)


def remove_leftover(path: Path) -> None:
    """A file written aside and left by a crash: only unlinked while it is still linked as a
    KEK too (zeroing it would zero that KEK), shredded otherwise."""
    try:
        links = os.lstat(path).st_nlink
    except FileNotFoundError:
        return
    if links > 1:
        os.unlink(path)
        fsync_directory(path.parent)
    else:
        shred(path)


def reason(exc: BaseException) -> str:
    """What went wrong, never a key: the system's reason or SQLite's message."""
    return str(exc) if isinstance(exc, sqlite3.Error) else reason_of(exc)
