"""``purgekeeper.open()``: the settings resolved, the schema migrated, the handle built."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from purgekeeper.commands.acceptance import EnqueueHook
from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.settings import Settings
from purgekeeper.schema import migrate
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import ValidationError
from purgekeeper.workers import runner
from purgekeeper.workers.scheduler import DEFAULT_SWEEP_INTERVAL

WORKER_MODES = ("auto", "none")


def open(
    database_url: str | None = None,
    *,
    settings: Settings | None = None,
    blob_root: str | Path | None = None,
    file_root: str | Path | None = None,
    memory_roots: Sequence[str | Path] | None = None,
    checkpoint_dir: str | Path | None = None,
    broker_url: str | None = None,
    workers: str = "auto",
    enqueue: EnqueueHook | None = None,
    migrate_schema: bool = True,
    policy: runner.Policy | None = None,
    sweep_interval: dt.timedelta = DEFAULT_SWEEP_INTERVAL,
    retention_interval: dt.timedelta | None = None,
    sign_checkpoints: bool = True,
) -> Purgekeeper:
    """Open purgekeeper. ``None`` arguments come from ``settings`` (a process builds them once:
    ``Settings.from_env()``), by default from the environment, then the embedded default (a
    SQLite file in the data directory ``purgectl`` and ``make run`` use too). The schema is
    migrated to this code's head unless ``migrate_schema=False``; a database newer than the
    code is refused (``SchemaMismatch``). ``retention_interval`` (default
    ``PURGEKEEPER_RETENTION_INTERVAL``, an hour): the time between two runs of a retention
    policy. Every group commit of the ledger's copy signs a checkpoint of its Merkle log
    with the data directory's key (created when missing); ``sign_checkpoints=False`` writes
    the copy alone (no tiles, no checkpoint, no receipts)."""
    _check_options(settings, workers, sign_checkpoints)
    settings = _settings(
        Settings.from_env() if settings is None else settings,
        database_url=database_url,
        blob_root=blob_root,
        file_root=file_root,
        memory_roots=memory_roots,
        checkpoint_dir=checkpoint_dir,
        broker_url=broker_url,
    )
    settings.make_directories()
    db = _migrated(settings.open_database(), migrate_schema)
    if retention_interval is not None and (
        not isinstance(retention_interval, dt.timedelta) or retention_interval <= dt.timedelta(0)
    ):
        db.dispose()
        raise ValidationError("retention_interval must be a positive datetime.timedelta")
    try:
        return Purgekeeper(
            settings,
            db=db,
            workers=workers,
            enqueue=enqueue,
            policy=policy,
            sweep_interval=sweep_interval,
            retention_interval=retention_interval,
            sign_checkpoints=sign_checkpoints,
        )
    except BaseException:  # a handle that could not be built (a key store refused, say) holds no connection
        db.dispose()
        raise


def _check_options(settings: Any, workers: Any, sign_checkpoints: Any) -> None:
    if not isinstance(sign_checkpoints, bool):
        raise ValidationError("sign_checkpoints must be true or false")
    if workers not in WORKER_MODES:
        raise ValidationError(f"workers must be one of {', '.join(WORKER_MODES)}")
    if settings is not None and not isinstance(settings, Settings):
        raise ValidationError("settings must be a commands.Settings (Settings.from_env())")


def _migrated(db: Database, migrate_schema: bool) -> Database:
    """The database at this code's head (migrated, or checked with ``migrate_schema=False``);
    disposed of when it cannot be."""
    try:
        if migrate_schema:
            migrate.upgrade(db)
        else:
            migrate.require_head(db)
    except BaseException:
        db.dispose()
        raise
    return db


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
