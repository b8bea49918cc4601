"""Ledger entries for the ledger copy's tests: a valid chain of conversation purges."""

from __future__ import annotations

import datetime as dt

from purgekeeper.schema import ledger

DATABASE = "d" * 32
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def chain(count: int, *, start: ledger.Head | None = None, tag: str = "p") -> list[ledger.LedgerEntry]:
    head = start or ledger.Head(0, ledger.GENESIS_HASH, DATABASE, NOW)
    rows = []
    for n in range(count):
        entry = ledger.next_entry(
            head,
            purge_id=f"{tag}-{head.seq + 1}",
            kind="conversation",
            selectors={"conversation_id": f"c{head.seq + 1}"},
            scope_digest=f"{n:064x}",
            actor="op",
            reason="copy test",
            request_id=None,
            idempotency_key=None,
            origin=None,
        )
        rows.append(entry)
        head = ledger.following(head, entry)
    return rows
