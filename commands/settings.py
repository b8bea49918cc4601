"""The one settings object, read from the environment only at the process edge.

========================== ==============================================================
variable                   meaning
========================== ==============================================================
PURGEKEEPER_DATABASE_URL   default ``sqlite:///<data dir>/purgekeeper.db``
PURGEKEEPER_BROKER_URL     ``redis://...``; unset means the in-process worker
PURGEKEEPER_DATA_DIR       default ``$XDG_DATA_HOME/purgekeeper`` (``~/.local/share/...``),
                           for every process: ``purgectl``, ``make run``, ``purgekeeper.open()``
PURGEKEEPER_BLOB_ROOT      default ``<data dir>/blobs``
PURGEKEEPER_FILE_ROOT      default ``<data dir>/files``
PURGEKEEPER_MEMORY_ROOTS   ``os.pathsep``-separated; default ``<data dir>/memory``
PURGEKEEPER_CHECKPOINT_DIR default ``<data dir>/ledger``; keep it outside database backups
PURGEKEEPER_API_TOKEN      the host token
PURGEKEEPER_OPERATOR_TOKEN optional; when set, the operator endpoints require it
PURGEKEEPER_STEP_LEASE     seconds a claimed step is leased for (default 30)
PURGEKEEPER_SWEEP_INTERVAL seconds between scheduler sweeps (default 5)
PURGEKEEPER_BACKOFF_BASE   seconds of the first retry backoff (default 2)
PURGEKEEPER_CLEANUP_YIELD  after a cleanup batch that ran while other sessions were running
                           statements, pause this share of its time, at most 1 s (default 1;
                           0 never pauses): the foreground's latency before cleanup speed
PURGEKEEPER_RETENTION_INTERVAL
                           seconds between two runs of a retention policy (default 3600)
PURGEKEEPER_IDLE_IN_TRANSACTION_TIMEOUT
                           PostgreSQL: seconds after which the server ends a session idle
                           inside a transaction, releasing its locks (default 10)
PURGEKEEPER_LOG_FORMAT     ``text`` (default) or ``json``: one format for every process
PURGEKEEPER_LOG_LEVEL      ``DEBUG``, ``INFO`` (default), ``WARNING`` or ``ERROR``
PURGEKEEPER_WORKER_METRICS_PORT
                           the port of a dramatiq worker group's own /metrics (its
                           Prometheus middleware); unset: none (the Procfile sets 9191)
PURGEKEEPER_LOG_ORIGIN     the signed log's origin; default ``purgekeeper/<database id>``
PURGEKEEPER_SIGNING_KEY_FILE
                           the log's Ed25519 signing key (Go's skey form); default
                           ``<data dir>/ledger-signing.key``, created (0600) when missing
PURGEKEEPER_WITNESSES      the log's witnesses (C2SP tlog-witness), separated by commas:
                           each ``<URL> <cosigner vkey>``; unset: none
PURGEKEEPER_WITNESS_QUORUM cosignatures a checkpoint needs to be published (default: all)
PURGEKEEPER_FAILPOINTS     fault tests only: ``bodies.batch=exit`` and the like
========================== ==============================================================

Build it once per process (``Settings.from_env()`` in an entry point) and hand it down:
``purgekeeper.open(settings=...)``, ``purgekeeper.commands.processes``.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from purgekeeper.schema.errors import ValidationError
from purgekeeper.schema.session_defaults import IDLE_IN_TRANSACTION_TIMEOUT

if TYPE_CHECKING:
    from purgekeeper.schema.db import Database

ENV_PREFIX = "PURGEKEEPER_"
RETENTION_INTERVAL = dt.timedelta(hours=1)  # between two runs of a retention policy
DATABASE_FILE = "purgekeeper.db"
SIGNING_KEY_FILE = "ledger-signing.key"
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
CLEANUP_YIELD = (
    1.0  # purgekeeper.workers.cleanup.DEFAULT_YIELD_SHARE (not imported: reading settings loads no SQLAlchemy)
)


@dataclass(frozen=True)
class Settings:
    database_url: str
    data_dir: Path
    blob_root: Path
    file_root: Path
    memory_roots: tuple[Path, ...]
    checkpoint_dir: Path
    broker_url: str | None = None
    api_token: str | None = None
    operator_token: str | None = None
    step_lease: dt.timedelta = dt.timedelta(seconds=30)
    sweep_interval: dt.timedelta = dt.timedelta(seconds=5)
    backoff_base: dt.timedelta = dt.timedelta(seconds=2)
    cleanup_yield: float = CLEANUP_YIELD
    retention_interval: dt.timedelta = RETENTION_INTERVAL
    idle_in_transaction_timeout: dt.timedelta = IDLE_IN_TRANSACTION_TIMEOUT
    failpoints: str = ""
    log_format: str = "text"
    log_level: str = "INFO"
    worker_metrics_port: int | None = None
    log_origin: str | None = None
    signing_key_file: Path | None = None
    witnesses: str | None = None  # purgekeeper.commands.witnessing.parse_witnesses reads it
    witness_quorum: int | None = None  # None: every witness
    key_store_url: str | None = None  # a key server's (`purgectl keys serve`); None: the file store
    key_store_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(ENV_PREFIX + name, "").strip()
            return value or None

        data_dir = Path(get("DATA_DIR") or default_data_dir(env)).expanduser().absolute()
        roots = get("MEMORY_ROOTS")
        return cls(
            database_url=get("DATABASE_URL") or sqlite_url(data_dir / DATABASE_FILE),
            data_dir=data_dir,
            blob_root=_path(get("BLOB_ROOT"), data_dir / "blobs"),
            file_root=_path(get("FILE_ROOT"), data_dir / "files"),
            memory_roots=tuple(_path(p, data_dir) for p in roots.split(os.pathsep) if p)
            if roots
            else (data_dir / "memory",),
            checkpoint_dir=_path(get("CHECKPOINT_DIR"), data_dir / "ledger"),
            broker_url=get("BROKER_URL"),
            api_token=get("API_TOKEN"),
            operator_token=get("OPERATOR_TOKEN"),
            step_lease=_seconds(get("STEP_LEASE"), 30),
            sweep_interval=_seconds(get("SWEEP_INTERVAL"), 5),
            backoff_base=_seconds(get("BACKOFF_BASE"), 2),
            cleanup_yield=_share("CLEANUP_YIELD", get("CLEANUP_YIELD"), CLEANUP_YIELD),
            retention_interval=_seconds(get("RETENTION_INTERVAL"), RETENTION_INTERVAL.total_seconds()),
            idle_in_transaction_timeout=_seconds(
                get("IDLE_IN_TRANSACTION_TIMEOUT"), IDLE_IN_TRANSACTION_TIMEOUT.total_seconds()
            ),
            failpoints=get("FAILPOINTS") or "",
            log_format=_choice("LOG_FORMAT", (get("LOG_FORMAT") or "text").lower(), LOG_FORMATS),
            log_level=_choice("LOG_LEVEL", (get("LOG_LEVEL") or "INFO").upper(), LOG_LEVELS),
            worker_metrics_port=_port("WORKER_METRICS_PORT", get("WORKER_METRICS_PORT")),
            log_origin=_origin(get("LOG_ORIGIN")),
            signing_key_file=_optional_path(get("SIGNING_KEY_FILE")),
            witnesses=get("WITNESSES"),
            witness_quorum=_count("WITNESS_QUORUM", get("WITNESS_QUORUM")),
            key_store_url=get("KEY_STORE_URL"),
            key_store_token=get("KEY_STORE_TOKEN"),
        )

    def open_database(self, *, role: str = "handle") -> Database:
        """The configured database, its PostgreSQL sessions named ``purgekeeper-<role>``."""
        from purgekeeper.schema.db import Database  # here: reading the settings must not load SQLAlchemy

        return Database(
            self.database_url,
            idle_in_transaction_timeout=self.idle_in_transaction_timeout,
            application_name=f"purgekeeper-{role}",
        )

    @property
    def database_name(self) -> str:
        """The database URL with its password masked: what messages name."""
        from purgekeeper.schema.db import redacted_or_raw  # here: reading the settings must not load SQLAlchemy

        return redacted_or_raw(self.database_url)

    @property
    def signing_key_path(self) -> Path:
        """The signed log's key: the file named, else ``<data dir>/ledger-signing.key``."""
        return self.signing_key_file or self.data_dir / SIGNING_KEY_FILE

    def key_store_dir(self, database_key: str) -> Path:
        """The file key store that seals the database's content (``purgekeeper.storage.keystore``)
        when no key server is set (``key_store_url``): ``<checkpoint dir>/<database id>.keys``,
        beside the ledger's copy and governed like it (outside the database's backups:
        docs/guides/encryption.md)."""
        return self.checkpoint_dir / f"{database_key}.keys"

    @property
    def sqlite_file(self) -> Path | None:
        """The file of a SQLite database (None for PostgreSQL)."""
        if self.database_url.startswith("sqlite:///"):
            return Path(self.database_url.removeprefix("sqlite:///"))
        return None

    def make_directories(self) -> None:
        """Create the roots purgekeeper writes to, and the directory of a SQLite database file
        (the data directory itself only when something lives in it)."""
        directories = [self.blob_root, self.file_root, self.checkpoint_dir]
        if self.sqlite_file is not None:
            directories.append(self.sqlite_file.parent)
        for directory in directories:
            directory.mkdir(parents=True, exist_ok=True)


def default_data_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "purgekeeper"


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def _seconds(value: str | None, default: float) -> dt.timedelta:
    try:
        seconds = float(value) if value is not None else default
    except ValueError as exc:
        raise ValidationError(f"not a number of seconds: {value!r}") from exc
    if seconds <= 0:
        raise ValidationError(f"a number of seconds must be positive: {value!r}")
    return dt.timedelta(seconds=seconds)


def _share(name: str, value: str | None, default: float) -> float:
    try:
        share = float(value) if value is not None else default
    except ValueError as exc:
        raise ValidationError(f"{ENV_PREFIX}{name} is not a number: {value!r}") from exc
    if not share >= 0:
        raise ValidationError(f"{ENV_PREFIX}{name} must be 0 or more: {value!r}")
    return share


def _choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValidationError(f"{ENV_PREFIX}{name} must be one of {', '.join(choices)}, not {value!r}")
    return value


def _port(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise ValidationError(f"{ENV_PREFIX}{name} must be a TCP port (1-65535), not {value!r}")
    return int(value)


def _count(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValidationError(f"{ENV_PREFIX}{name} must be a whole number from 1, not {value!r}")
    return int(value)


def _path(value: str | None, default: Path) -> Path:
    return Path(value).expanduser().absolute() if value else default


def _optional_path(value: str | None) -> Path | None:
    return Path(value).expanduser().absolute() if value else None


def _origin(value: str | None) -> str | None:
    """A checkpoint's origin is one line of printable text (C2SP tlog-checkpoint)."""
    if value is not None and (not value.isprintable() or "\n" in value):
        raise ValidationError(f"{ENV_PREFIX}LOG_ORIGIN must be one line of printable text, not {value!r}")
    return value
