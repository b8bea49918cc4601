"""Forward-only migrations: bring a database to this code's schema, or refuse a newer one."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from sqlalchemy import Connection, text

from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import SchemaMismatch

if TYPE_CHECKING:
    from alembic.config import Config

# alembic (with mako) is imported inside the functions that need it: a purgectl command that
# only reads the revision starts faster.

# Any constant will do; it keeps two processes from migrating one PostgreSQL at once.
MIGRATION_LOCK_KEY = 0x70757267656B6565  # "purgekee"


@dataclass(frozen=True)
class MigrationResult:
    before: str | None
    after: str
    changed: bool


def alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    location = resources.files("purgekeeper.schema").joinpath("migrations")
    config.set_main_option("script_location", str(location))
    return config


# A migration's file is named after its revision, ``0013_worker_processes.py`` for "0013", and
# each revision follows the one before: the head is the highest number.
_MIGRATION_FILE = re.compile(r"(\d{4})_\w+\.py")


@functools.cache
def shipped_revisions() -> frozenset[str]:
    """Every revision of the migrations this code ships, read from their file names (once per
    process: the files do not change under a running program). Not from alembic: loading its
    runtime and each migration module cost every one-shot ``purgectl`` command a quarter of a
    second. ``tests/integration/test_migrations.py`` checks that alembic reads the same."""
    versions = resources.files("purgekeeper.schema").joinpath("migrations", "versions")
    found = frozenset(m.group(1) for item in versions.iterdir() if (m := _MIGRATION_FILE.fullmatch(item.name)))
    if not found:  # pragma: no cover - the package always ships migrations
        raise SchemaMismatch("purgekeeper ships no migrations")
    return found


def head_revision() -> str:
    return max(shipped_revisions())


def current_revision(conn: Connection) -> str | None:
    """The revision alembic recorded in ``alembic_version``; None when it has none (a database
    never initialised). One query, as alembic's ``MigrationContext`` reads it."""
    if conn.dialect.name == "sqlite":
        exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
    else:
        exists = "SELECT 1 WHERE to_regclass('alembic_version') IS NOT NULL"
    if conn.execute(text(exists)).first() is None:
        return None
    revisions = list(conn.scalars(text("SELECT version_num FROM alembic_version")))
    if len(revisions) > 1:
        raise SchemaMismatch(
            f"the database has {len(revisions)} schema revisions, {sorted(revisions)}: it has branches"
        )
    return revisions[0] if revisions else None


def upgrade(db: Database) -> MigrationResult:
    """Migrate to head. A no-op on an up-to-date database; refuses a newer one."""
    from alembic import command

    config = alembic_config()
    with db.write() as conn:
        if not db.is_sqlite:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        before = current_revision(conn)
        check_not_newer(before, database=db.name)
        head = head_revision()
        if before != head:
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
    return MigrationResult(before=before, after=head, changed=before != head)


def check_current(db: Database) -> str | None:
    """The database's revision, after refusing a schema newer than this code."""
    with db.read() as conn:
        revision = current_revision(conn)
    check_not_newer(revision, database=db.name)
    return revision


def require_head(db: Database) -> str:
    """Refuse a database that is not at this code's head: uninitialised, older (run
    ``purgectl init``) or newer (upgrade purgekeeper)."""
    revision = check_current(db)
    head = head_revision()
    if revision is None:
        raise SchemaMismatch(f"the database {db.name} is not initialised: run purgectl init")
    if revision != head:
        raise SchemaMismatch(
            f"the schema of the database {db.name} is at revision {revision!r}, this code needs {head!r}: "
            "run purgectl init"
        )
    return revision


def check_not_newer(revision: str | None, *, database: str = "") -> None:
    """Refuse a revision this code does not know; ``database`` (redacted) names it."""
    if revision is None:
        return
    if revision not in shipped_revisions():
        named = f" {database}" if database else ""
        raise SchemaMismatch(
            f"the schema of the database{named} is at revision {revision!r}, which this purgekeeper "
            f"(head {head_revision()!r}) does not know: it is newer than this code. "
            "Upgrade purgekeeper; never run an older version against a newer database."
        )
