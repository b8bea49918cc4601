"""The leader lease of a singleton loop (the scheduler): one holder of a name at a time, until
its lease runs out, on the database clock."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Connection, or_, update

from purgekeeper.schema.content_queries import upsert_insert
from purgekeeper.schema.ledger import database_now
from purgekeeper.schema.tables import leader_leases


def take_leadership(conn: Connection, name: str, *, owner: str, lease: dt.timedelta) -> bool:
    """Become (or stay) the one holder of ``name`` until the lease runs out. The first lease
    of a name is inserted; an insert that waited for another transaction's insert of the same
    name takes the row that one committed if it may (the same owner racing itself: an
    embedded scheduler's thread and a ``lead()`` call, or an expired lease)."""
    now = database_now(conn)
    renew = (
        update(leader_leases)
        .where(leader_leases.c.name == name)
        .where(or_(leader_leases.c.owner == owner, leader_leases.c.expires_at <= now))
        .values(owner=owner, expires_at=now + lease)
        .returning(leader_leases.c.name)
    )
    if conn.execute(renew).first() is not None:
        return True
    statement = upsert_insert(conn, leader_leases).values(name=name, owner=owner, expires_at=now + lease)
    inserted = conn.execute(
        statement.on_conflict_do_nothing(index_elements=["name"]).returning(leader_leases.c.name)
    ).first()
    return inserted is not None or conn.execute(renew).first() is not None


def give_up_leadership(conn: Connection, name: str, *, owner: str) -> bool:
    """End ``owner``'s lease of ``name`` now (a scheduler that stops): the next one leads at
    its next tick instead of waiting for the lease to run out."""
    now = database_now(conn)
    ended = conn.execute(
        update(leader_leases)
        .where(leader_leases.c.name == name, leader_leases.c.owner == owner, leader_leases.c.expires_at > now)
        .values(expires_at=now)
        .returning(leader_leases.c.name)
    ).first()
    return ended is not None
