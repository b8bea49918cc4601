"""purgekeeper's PostgreSQL advisory locks that a transaction holds to its end: two int4 keys,
a class of lock (four letters as a number: 'pkrh' is 1886089832) and 0. SQLite serialises
writers (``BEGIN IMMEDIATE``), so taking one there does nothing. The statements run on the
driver's connection: an acceptance's statements do."""

from __future__ import annotations

from sqlalchemy import Connection, text

from purgekeeper.schema.driver import DriverStatement


class AdvisoryLock:
    """One class of transaction-level advisory lock, taken shared or exclusively."""

    def __init__(self, class_key: int) -> None:
        self.class_key = class_key
        self._statements = {
            exclusive: DriverStatement(text(f"SELECT {function}({class_key}, 0)"))
            for exclusive, function in ((True, "pg_advisory_xact_lock"), (False, "pg_advisory_xact_lock_shared"))
        }

    def take(self, conn: Connection, *, exclusive: bool) -> None:
        """Wait for the lock; hold it until the transaction ends."""
        if conn.dialect.name == "postgresql":
            self._statements[exclusive].rows(conn, {})
