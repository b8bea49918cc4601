"""``commands.open()`` and the handle a host application holds."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from commands.content import ContentCommands
from commands.operations import STALL_AFTER, OperatorCommands
from commands.purges import EnqueueHook, PurgeCommands
from commands.settings import Settings
from schema import migrate
from schema.db import Database
from schema.errors import ValidationError
from workers.blobstore import BlobStore

log = logging.getLogger(__name__)

WORKER_MODES = ("auto", "none")


class Purgekeeper(ContentCommands, PurgeCommands, OperatorCommands):
    """One database and its roots. Use ``commands.open()`` to get one; ``close()`` it after."""

    def __init__(
        self,
        settings: Settings,
        *,
        db: Database,
        workers: str = "auto",
        enqueue: EnqueueHook | None = None,
        stall_after: dt.timedelta = STALL_AFTER,
    ) -> None:
        self.settings = settings
        self.stall_after = stall_after
        self.db = db
        self.blobs = BlobStore(blob_root=settings.blob_root, file_root=settings.file_root)
        self.workers = workers
        self.enqueue: EnqueueHook = enqueue or _no_enqueue
        self._closed = False

    def close(self) -> None:
        """Stop the in-process parts and release the database connections."""
        if not self._closed:
            self._closed = True
            self.db.dispose()

    def __enter__(self) -> Purgekeeper:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open(
    database_url: str | None = None,
    *,
    blob_root: str | Path | None = None,
    file_root: str | Path | None = None,
    memory_roots: Sequence[str | Path] | None = None,
    checkpoint_dir: str | Path | None = None,
    broker_url: str | None = None,
    workers: str = "auto",
    enqueue: EnqueueHook | None = None,
    migrate_schema: bool = True,
) -> Purgekeeper:
    """Open purgekeeper. ``None`` arguments come from the environment or the embedded default
    (a SQLite file in the data directory). The schema is migrated to this code's head unless
    ``migrate_schema=False``; a database newer than the code is refused (``SchemaMismatch``)."""
    if workers not in WORKER_MODES:
        raise ValidationError(f"workers must be one of {', '.join(WORKER_MODES)}")
    settings = _settings(
        Settings.from_env(),
        database_url=database_url,
        blob_root=blob_root,
        file_root=file_root,
        memory_roots=memory_roots,
        checkpoint_dir=checkpoint_dir,
        broker_url=broker_url,
    )
    settings.make_directories()
    db = Database(settings.database_url)
    try:
        if migrate_schema:
            migrate.upgrade(db)
        else:
            migrate.check_current(db)
    except BaseException:
        db.dispose()
        raise
    return Purgekeeper(settings, db=db, workers=workers, enqueue=enqueue)


def _settings(base: Settings, **given: Any) -> Settings:
    changes: dict[str, Any] = {}
    for name, value in given.items():
        if value is None:
            continue
        if name == "memory_roots":
            changes[name] = tuple(Path(p).expanduser().absolute() for p in value)
        elif name in ("database_url", "broker_url"):
            changes[name] = value
        else:
            changes[name] = Path(value).expanduser().absolute()
    return replace(base, **changes)


def _no_enqueue(step_ids: Sequence[str]) -> None:
    """Until the workers are wired, an acceptance wakes nothing; the scheduler sweeps."""
