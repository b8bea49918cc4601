"""Opening an initialised database for a one-shot read, without the handle: ``purgectl status``
and ``list`` read purges (``purgekeeper.commands.purge_reads``) and need no gate, no broker, no worker and
no kind they do not show, so they start in a fraction of the time the whole handle takes
(``bench/cli_startup.py``). Every other command opens the handle (``purgekeeper.commands.processes``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from purgekeeper.commands.purge_reads import PurgeReads
from purgekeeper.commands.touched import FailurePlaces
from purgekeeper.schema import migrate
from purgekeeper.schema.errors import SchemaMismatch

if TYPE_CHECKING:
    from purgekeeper.commands.settings import Settings
    from purgekeeper.schema.db import Database


def require_initialised(settings: Settings, db: Database) -> str:
    """The database's revision; ``SchemaMismatch`` naming the database when it has none (a
    SQLite file is not even created: connecting would leave an empty one behind)."""
    sqlite_file = settings.sqlite_file
    if (sqlite_file is not None and not sqlite_file.exists()) or (revision := migrate.check_current(db)) is None:
        raise SchemaMismatch(
            f"no purgekeeper database at {settings.database_name}: run `purgectl init` to create it "
            "(PURGEKEEPER_DATABASE_URL or PURGEKEEPER_DATA_DIR choose another)"
        )
    return revision


@contextlib.contextmanager
def reading(settings: Settings, *, role: str = "cli") -> Iterator[PurgeReads]:
    """The purge reads of the initialised database ``settings`` names, as the handle's
    ``status`` and ``list_purges`` answer them (stalled after the same ``STALL_AFTER``), with
    the roots ``settings`` name for where to act on a failed unlink."""
    db = settings.open_database(role=role)
    try:
        require_initialised(settings, db)
        yield PurgeReads(db, places=FailurePlaces.of(settings))
    finally:
        db.dispose()
