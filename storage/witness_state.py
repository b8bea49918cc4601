"""A witness's durable state: for each log it follows, the latest checkpoint it cosigned.

One SQLite database, ``witness.sqlite3`` in the witness's state directory, with one row per
origin: the size and root of the latest checkpoint cosigned, its signed note (evidence, for
whoever asks what the witness saw) and when it was cosigned (POSIX seconds).

**Why SQLite and not a file.** C2SP tlog-witness demands that checking a request's old size
against the recorded one and recording the new checkpoint be one atomic step, or two
requests can roll the state back (a request for N checked, one for N+K checked and
recorded, then N recorded over it). A file would need an flock around a read, a check, a
write to a temporary file, an fsync, a rename and a directory fsync, for every origin, and
every process would have to take it the same way. SQLite gives that in one transaction:
``BEGIN IMMEDIATE`` takes the database's write lock before the row is read, so between the
read and the commit no other connection, in this process or another witness process on the
same directory, can write; ``synchronous=FULL`` (with the rollback journal) makes the commit
durable before the cosignature is returned, as the spec requires. The standard library has
it, and the state is a few rows.

:meth:`WitnessState.advance` runs the caller's decision (``decide``: the spec's rules, in
``purgekeeper.commands.witness_app``) between that read and the write: it sees the record as
it is, refuses by raising (nothing is written), or returns the new record.

The witness's SQL lives here, not in ``purgekeeper.schema``: it is this file's format, as the
signed log's tiles are ``purgekeeper.storage``'s, not a table of the service's database.

**Its owner's alone.** The directory must be its owner's alone (mode & 0o077 clear) and the
database a regular file, never a symlink (SQLite would follow one, and write the witness's
state wherever it points), 0600. Each connection only opens the database ``__init__`` made:
one that vanished while the witness runs is an error, never a fresh start (a witness that
forgot what it cosigned can cosign a fork).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from purgekeeper.schema.errors import InfrastructureError

__all__ = ["STATE_FILE", "Cosigned", "WitnessState", "WitnessStateUnusable"]

STATE_FILE = "witness.sqlite3"
BUSY_TIMEOUT_S = 10.0  # another witness process's transaction is a few statements
_VERSION = 1

_CREATE = """
CREATE TABLE IF NOT EXISTS cosigned (
    origin TEXT PRIMARY KEY,
    size INTEGER NOT NULL CHECK (size >= 0),
    root BLOB NOT NULL CHECK (length(root) = 32),
    note TEXT NOT NULL,
    cosigned_at INTEGER NOT NULL
)
"""
_SELECT = "SELECT origin, size, root, note, cosigned_at FROM cosigned"
_SELECT_ONE = _SELECT + " WHERE origin = ?"
_UPSERT = """
INSERT INTO cosigned (origin, size, root, note, cosigned_at) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (origin) DO UPDATE SET
    size = excluded.size, root = excluded.root, note = excluded.note, cosigned_at = excluded.cosigned_at
"""


class WitnessStateUnusable(InfrastructureError):
    """The witness's state directory or database cannot be used: a symlink, not a directory or
    regular file, or open to others. The message names the path; nothing was written."""


@dataclass(frozen=True)
class Cosigned:
    """The latest checkpoint the witness cosigned for one origin."""

    origin: str
    size: int
    root: bytes
    note: str
    cosigned_at: int

    @classmethod
    def from_row(cls, row: tuple[str, int, bytes, str, int]) -> Cosigned:
        origin, size, root, note, cosigned_at = row
        return cls(origin=origin, size=size, root=bytes(root), note=note, cosigned_at=cosigned_at)


class WitnessState:
    """The state in ``directory`` (made 0700 if missing; see "Its owner's alone" above:
    WitnessStateUnusable otherwise). Each call opens its own connection: calls come from a
    server's thread pool, and from other processes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        _check_private(directory, "state directory", stat.S_ISDIR, "chmod 700", follow=True)
        self.path = directory / STATE_FILE
        _create_private(self.path)
        _check_private(self.path, "state database", stat.S_ISREG, "chmod 600", follow=False)
        with self._connection() as db:
            if db.execute("PRAGMA user_version").fetchone()[0] < _VERSION:
                db.execute("BEGIN IMMEDIATE")
                db.execute(_CREATE)
                db.execute(f"PRAGMA user_version = {_VERSION}")
                db.execute("COMMIT")

    def latest(self, origin: str) -> Cosigned | None:
        with self._connection() as db:
            row = db.execute(_SELECT_ONE, (origin,)).fetchone()
        return None if row is None else Cosigned.from_row(row)

    def all(self) -> list[Cosigned]:
        with self._connection() as db:
            return [Cosigned.from_row(row) for row in db.execute(_SELECT + " ORDER BY origin")]

    def advance(self, origin: str, decide: Callable[[Cosigned | None], Cosigned]) -> Cosigned:
        """In one transaction: read ``origin``'s record, ask ``decide`` for the new one (it
        raises to refuse: nothing is written) and write it, durably, before returning it."""
        with self._connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(_SELECT_ONE, (origin,)).fetchone()
                new = decide(None if row is None else Cosigned.from_row(row))
                if new.origin != origin:
                    raise ValueError(f"a decision about {origin!r} recorded {new.origin!r}")
                db.execute(_UPSERT, (new.origin, new.size, new.root, new.note, new.cosigned_at))
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        return new

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        # isolation_level=None: the transactions are the explicit BEGIN IMMEDIATE above, not
        # the module's implicit ones (which begin DEFERRED and would read before locking).
        # mode=rw: the database is never made here (__init__ made it): one that vanished is an
        # error, not an empty state.
        uri = f"{self.path.absolute().as_uri()}?mode=rw"
        db = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            db.execute("PRAGMA synchronous = FULL")
            yield db
        finally:
            db.close()


def _check_private(path: Path, what: str, is_kind: Callable[[int], bool], fix: str, *, follow: bool) -> None:
    """``path`` is of the kind and its owner's alone; ``follow=False``: a symlink is refused
    (the directory may be one the operator made, its database never)."""
    try:
        mode = (os.stat if follow else os.lstat)(path).st_mode
    except OSError as exc:
        raise WitnessStateUnusable(f"the witness's {what} {path} cannot be read ({exc.strerror})") from None
    if stat.S_ISLNK(mode):
        raise WitnessStateUnusable(f"the witness's {what} {path} is a symlink: refused, not followed")
    if not is_kind(mode):
        kind = "a directory" if is_kind is stat.S_ISDIR else "a regular file"
        raise WitnessStateUnusable(f"the witness's {what} {path} is not {kind}")
    if mode & 0o077:
        raise WitnessStateUnusable(
            f"the witness's {what} {path} is open to others (mode {stat.S_IMODE(mode):04o}): {fix} it"
        )


def _create_private(path: Path) -> None:
    """An empty database file, 0600, when nothing is there: O_EXCL never opens what is (a
    symlink included, which ``_check_private`` then refuses), nor another process's new one."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        return
    except OSError as exc:
        raise WitnessStateUnusable(f"the witness's state database {path} cannot be made ({exc.strerror})") from None
