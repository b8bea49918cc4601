"""What the benchmarks share: connection strings, a scratch database that is always dropped,
and a handle whose roots are all under one directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

import purgekeeper


def open_under(url: str, root: Path, **options: Any) -> purgekeeper.Purgekeeper:
    """``purgekeeper.open(url)`` with its blob, file, checkpoint and Memory roots under ``root``
    and no workers (``options`` go to ``purgekeeper.open`` too)."""
    return purgekeeper.open(
        url,
        blob_root=root / "blobs",
        file_root=root / "files",
        checkpoint_dir=root / "ledger",
        memory_roots=[root / "memory"],
        **{"workers": "none", **options},
    )


def libpq_url(url: str, database: str | None = None) -> str:
    """A plain ``postgresql://`` URL (psycopg wants no ``+driver``), optionally another database."""
    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


def shown_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


class ScratchDatabase:
    """``CREATE DATABASE`` on enter, ``DROP DATABASE ... WITH (FORCE)`` on exit."""

    def __init__(self, server_url: str, name: str) -> None:
        self.admin_url = libpq_url(server_url)
        self.name = name
        self.url = libpq_url(server_url, name)

    def __enter__(self) -> ScratchDatabase:
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self.name}"')
        return self

    def __exit__(self, *exc: object) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
