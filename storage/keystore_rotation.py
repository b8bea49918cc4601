"""Rotating the key store's key-encryption key (KEK), so that a destroyed key's leftover bytes
are ciphertext under a KEK that no longer exists.

A destroyed key's row is overwritten with zeros in ``keys.db`` (``secure_delete``), but its
wrapped form can remain where SQLite does not reach: WAL frames written before, the device's
blocks under a truncated WAL, a backup of the directory. A rotation makes all of them
unreadable. Its steps, each durable before the next, and what a crash after each leaves:

1. **A new KEK file** ``kek.<v+1>`` (0600, fsynced, linked into place, directory fsynced).
   Crash: nothing refers to it (no ``keks`` row), every key is still under ``kek.<v>``; the
   next rotation shreds the stray file first. (``keystore.rotate.kek_written``)
2. **The switch**, one transaction: its check value in ``keks``, ``state.current_kek =
   v+1``, the count of destructions reset. New keys are wrapped under ``v+1`` from now on.
   Crash: rows under ``v`` and ``v+1``, both KEK files present and in ``keks``: every key
   reads, by its row's version. (``keystore.rotate.switched``)
3. **Re-wrapping**, ``ROTATE_BATCH`` rows a transaction: each row moves from its old version
   to ``v+1`` with its wrapping. Crash: as after 2, fewer rows under ``v``.
   (``keystore.rotate.batch``, after each batch)
4. **Retiring**, one transaction, once no row is under an old version: the old ``keks`` rows
   are deleted. Then the WAL is checkpointed and truncated. Crash: every row is under
   ``v+1``; ``kek.<v>`` is a file no row and no ``keks`` row names.
   (``keystore.rotate.retired``)
5. **Shredding** ``kek.<v>``: overwritten with zeros in place, fsynced
   (``keystore.rotate.zeroed``), unlinked, the directory fsynced. Crash: a file named in no
   ``keks`` row, zeroed or not, which the next rotation shreds.

So at every point each surviving key's row names a KEK whose file is there, and a KEK file
is shredded only once no row and no ``keks`` row names it. Every rotation begins by finishing
an interrupted one (steps 3 to 5, and the strays of step 1). It runs under the store's flock,
so two rotations never interleave (one could shred the other's new file); creates, gets and
destroys go on meanwhile under SQLite's locks, on another connection. A process that read a
row under the old version just before it moved finds its KEK gone and reads the row again.

Zeroing reaches the KEK's own blocks on a file system that overwrites in place (ext4, XFS);
on a copy-on-write one (btrfs, ZFS) or behind an SSD's remapping, the old bytes may survive
on the device until reused, as any file's do: keep the directory on an encrypted volume.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from purgekeeper.storage import failpoints, keystore_files
from purgekeeper.storage.sealing import new_key

ROTATE_EVERY = 3600.0  # seconds: at most one rotation an hour, and only after destructions
ROTATE_BATCH = 500  # rows re-wrapped a transaction, so creates and destroys wait little


@dataclass(frozen=True)
class StoreState:
    """The store's one ``state`` row."""

    current_kek: int
    generation: int
    destroyed_since_rotation: int
    rotated_at: float

    @classmethod
    def from_row(cls, row: tuple[int, int, int, float]) -> StoreState:
        return cls(*row)

    @classmethod
    def read(cls, db: sqlite3.Connection) -> StoreState:
        return cls.from_row(db.execute(keystore_files.READ_STATE).fetchone())


def rotate(db: sqlite3.Connection, directory: Path, *, now: float | None = None) -> int:
    """A new KEK, every key re-wrapped under it, the old one shredded; returns its version.
    The caller holds the store's flock."""
    if pending(db, directory):
        finish(db, directory)
    version = _switch(db, directory, now=time.time() if now is None else now)
    finish(db, directory)
    return version


def pending(db: sqlite3.Connection, directory: Path) -> bool:
    """Whether a rotation was interrupted: an old KEK still in use or in ``keks``, or a KEK
    file that no ``keks`` row names (a stray, or one not yet shredded)."""
    versions = {row[0] for row in db.execute("SELECT version FROM keks")}
    return (
        len(versions) > 1
        or keystore_files.kek_versions(directory) != versions
        or bool(keystore_files.leftovers(directory))
    )


def finish(db: sqlite3.Connection, directory: Path) -> None:
    """Steps 3 to 5 of an interrupted rotation (nothing, when none was), and the strays."""
    current = StoreState.read(db).current_kek
    _rewrap(db, directory, current)
    _retire(db, current)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the WAL's old frames leave the file
    live = {row[0] for row in db.execute("SELECT version FROM keks")}
    for version in sorted(keystore_files.kek_versions(directory) - live):
        keystore_files.shred(keystore_files.kek_path(directory, version))
    for path in keystore_files.leftovers(directory):
        keystore_files.remove_leftover(path)


def _switch(db: sqlite3.Connection, directory: Path, *, now: float) -> int:
    """Steps 1 and 2: the new KEK's file, then the transaction that makes it current."""
    with keystore_files.read(db):
        current = StoreState.read(db).current_kek
    version = max({current} | keystore_files.kek_versions(directory)) + 1
    kek = new_key()
    keystore_files.create_kek(directory, version, kek)
    failpoints.hit("keystore.rotate.kek_written")
    with keystore_files.write(db):
        db.execute(
            "INSERT INTO keks (version, check_value) VALUES (?, ?)", (version, keystore_files.check_value(kek, version))
        )
        db.execute("UPDATE state SET current_kek = ?, destroyed_since_rotation = 0, rotated_at = ?", (version, now))
    failpoints.hit("keystore.rotate.switched")
    return version


def _rewrap(db: sqlite3.Connection, directory: Path, current: int) -> None:
    """Step 3: every row under an old version moved to ``current``, a batch a transaction."""
    keks: dict[int, bytes] = {}
    while True:
        with keystore_files.write(db):
            rows = db.execute(
                "SELECT id, kek_version, wrapped FROM keys WHERE kek_version != ? LIMIT ?", (current, ROTATE_BATCH)
            ).fetchall()
            if not rows:
                return
            new = _kek(db, directory, keks, current)
            moved = [_moved(db, directory, keks, row, new, current) for row in rows]
            db.executemany("UPDATE keys SET kek_version = ?, wrapped = ? WHERE id = ?", moved)
        failpoints.hit("keystore.rotate.batch")


def _moved(
    db: sqlite3.Connection,
    directory: Path,
    keks: dict[int, bytes],
    row: tuple[str, int, bytes],
    new: bytes,
    current: int,
) -> tuple[int, bytes, str]:
    key_id, version, wrapped = row
    key = keystore_files.unwrap(_kek(db, directory, keks, version), version, key_id, wrapped)
    return current, keystore_files.wrap(new, current, key_id, key), key_id


def _kek(db: sqlite3.Connection, directory: Path, keks: dict[int, bytes], version: int) -> bytes:
    if version not in keks:
        row = db.execute("SELECT check_value FROM keks WHERE version = ?", (version,)).fetchone()
        if row is None:
            raise keystore_files.KekMissing(
                keystore_files.kek_path(directory, version), "is named by a key but not known"
            )
        keks[version] = keystore_files.read_kek(directory, version, row[0])
    return keks[version]


def _retire(db: sqlite3.Connection, current: int) -> None:
    """Step 4: the old versions forgotten, none while a row is still under it (a create
    wraps under ``current`` only, since the switch)."""
    with keystore_files.write(db):
        db.execute(
            "DELETE FROM keks WHERE version != ? AND NOT EXISTS (SELECT 1 FROM keys WHERE kek_version = keks.version)",
            (current,),
        )
    failpoints.hit("keystore.rotate.retired")
