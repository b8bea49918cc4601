"""Alembic environment: migrations run on a connection that purgekeeper hands in."""

from __future__ import annotations

from alembic import context

from purgekeeper.schema.tables import with_dialect_indexes

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - purgekeeper always passes its own connection
    raise RuntimeError("run migrations through `purgectl init` or purgekeeper.schema.migrate.upgrade()")

context.configure(
    connection=connection,
    target_metadata=with_dialect_indexes(),
    render_as_batch=connection.dialect.name == "sqlite",
    transaction_per_migration=False,
)
with context.begin_transaction():
    context.run_migrations()
