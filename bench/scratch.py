"""What the benchmarks share: connection strings and a scratch database that is always dropped."""

from __future__ import annotations

import psycopg
from sqlalchemy.engine import make_url


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
