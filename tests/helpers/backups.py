"""Whole-database backups of a test database, and restores of them in place."""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import make_url

import purgekeeper
from tests.helpers.databases import copy_database, drop_database

Pk = purgekeeper.Purgekeeper


@dataclass
class Backups:
    """Whole-database backups of the test database, and restores of them in place.

    PostgreSQL: a template copy needs the database to have no other session, so every
    handle's pool is emptied first (a handle reconnects on its next use, as a running
    process does after a restore)."""

    database_url: str
    directory: Path
    handles: list[Pk] = field(default_factory=list)
    copies: list[str] = field(default_factory=list)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def name(self) -> str:
        return str(make_url(self.database_url).database)

    def take(self) -> str:
        self._release()
        label = f"pk_bak_{uuid.uuid4().hex[:12]}"
        if self.is_sqlite:
            target = self.directory / f"{label}.db"
            self.directory.mkdir(parents=True, exist_ok=True)
            with sqlite3.connect(self.name) as conn:
                conn.execute("VACUUM INTO ?", (str(target),))
            conn.close()
            return str(target)
        self._copy(label, template=self.name)
        self.copies.append(label)
        return label

    def restore(self, backup: str) -> None:
        self._release()
        if self.is_sqlite:
            for suffix in ("-wal", "-shm"):
                Path(self.name + suffix).unlink(missing_ok=True)
            shutil.copyfile(backup, self.name)
            return
        drop_database(self.name)
        self._copy(self.name, template=backup)

    def _release(self) -> None:
        for handle in self.handles:
            handle.db.dispose()

    def _copy(self, name: str, *, template: str) -> None:
        """A template copy (``copy_database``), the handles' pools emptied first."""
        self._release()
        copy_database(name, template=template)

    def drop_copies(self) -> None:
        for label in self.copies:
            drop_database(label)


def tracked(open_pk: Callable[..., Pk], backups: Backups) -> Callable[..., Pk]:
    """conftest's handle opener whose handles the backups also know (and release before a
    restore): a test module's ``open_pk`` fixture returns it."""

    def open_one(**options: object) -> Pk:
        handle = open_pk(**options)
        backups.handles.append(handle)
        return handle

    return open_one
