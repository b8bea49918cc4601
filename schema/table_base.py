"""The schema's metadata (its naming convention) and what every table is built from: the
UTC datetime column type, the ``created_at`` column, the enum checks and the enum values
they allow. The tables themselves are in ``content_tables`` and ``purge_tables``;
``purgekeeper.schema.tables`` names them all.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    CheckConstraint,
    Column,
    DateTime,
    MetaData,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from purgekeeper.schema import states
from purgekeeper.schema.states import values

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

ID_LENGTH = 200
# Server-side "now" in UTC with microseconds, on each dialect (SQLite's %f has milliseconds).
SQLITE_NOW = "(strftime('%Y-%m-%d %H:%M:%f000', 'now'))"


class UtcDateTime(TypeDecorator[dt.datetime]):
    """Timezone-aware UTC datetimes on both dialects (SQLite stores naive UTC text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: purgekeeper stores timezone-aware UTC only")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = dt.datetime.fromisoformat(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


def now_default() -> Any:
    """A server default of the database clock's current UTC time."""
    return text("CURRENT_TIMESTAMP")


def created_at_column() -> Column[Any]:
    return Column("created_at", UtcDateTime(), nullable=False, server_default=now_default())


def enum_check(column: str, values: tuple[str, ...], name: str) -> CheckConstraint:
    listed = ", ".join(f"'{v}'" for v in values)
    return CheckConstraint(f"{column} IN ({listed})", name=name)


CONVERSATION_KINDS = values(states.ConversationKind)
CONVERSATION_STATES = values(states.ConversationState)
RUN_STATUSES = values(states.RunStatus)
BLOB_KINDS = values(states.BlobKind)
BLOB_STATES = values(states.BlobState)
BINDINGS = values(states.Binding)
BOT_STATES = values(states.BotState)
PURGE_KINDS = values(states.PurgeKind)
TOMBSTONE_KINDS = values(states.TombstoneKind)
STEP_KINDS = values(states.StepKind)
HOLD_SUBJECTS = values(states.HoldSubject)
EXEMPTIONS = values(states.Exemption)
STEP_STATUSES = values(states.StepStatus)

ACTIVE_RUNS_PREDICATE = "status IN ({})".format(", ".join(f"'{s}'" for s in states.ACTIVE_RUN_STATUSES))
