"""The one settings object, read from the environment only at the process edge.

========================== ==============================================================
variable                   meaning
========================== ==============================================================
PURGEKEEPER_DATABASE_URL   default ``sqlite:///<data dir>/purgekeeper.db``
PURGEKEEPER_BROKER_URL     ``redis://...``; unset means the in-process worker
PURGEKEEPER_DATA_DIR       default ``$XDG_DATA_HOME/purgekeeper`` (``~/.local/share/...``)
PURGEKEEPER_BLOB_ROOT      default ``<data dir>/blobs``
PURGEKEEPER_FILE_ROOT      default ``<data dir>/files``
PURGEKEEPER_MEMORY_ROOTS   ``os.pathsep``-separated; default ``<data dir>/memory``
PURGEKEEPER_CHECKPOINT_DIR default ``<data dir>/ledger``; keep it outside database backups
PURGEKEEPER_API_TOKEN      the host token
PURGEKEEPER_OPERATOR_TOKEN optional; when set, the operator endpoints require it
========================== ==============================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV_PREFIX = "PURGEKEEPER_"
DATABASE_FILE = "purgekeeper.db"


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
        )

    def make_directories(self) -> None:
        """Create the roots purgekeeper writes to, and the directory of a SQLite database file
        (the data directory itself only when something lives in it)."""
        directories = [self.blob_root, self.file_root, self.checkpoint_dir]
        if self.database_url.startswith("sqlite:///"):
            directories.append(Path(self.database_url.removeprefix("sqlite:///")).parent)
        for directory in directories:
            directory.mkdir(parents=True, exist_ok=True)


def default_data_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "purgekeeper"


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def _path(value: str | None, default: Path) -> Path:
    return Path(value).expanduser().absolute() if value else default
