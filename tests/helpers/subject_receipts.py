"""Receipts for a data subject under test: a purge accepted with an operator's e-mail, a
ticket's text and request metadata that its leaf must not hold, and a ledger row as the
ledger held it before migration 0018 (no salts: a version 1 leaf)."""

from __future__ import annotations

from typing import Any

import purgekeeper
from purgekeeper.schema import ledger

Pk = purgekeeper.Purgekeeper
WHO = {
    "actor": "jane.operator@support.example.org",
    "reason": "ticket SUP-4411: the customer wrote to complain about her ex-husband",
    "request_id": "req-7f3a9c",
    "idempotency_key": "idem-5521-b",
    "origin": "helpdesk-bridge",
}
SECRETS = tuple(str(value) for value in WHO.values())


def purge_with_who(pk: Pk, conversation_id: str = "c-subject") -> str:
    """A conversation purge whose actor, reason and request metadata are WHO's (another
    conversation's purge takes its own idempotency key: a key names one request)."""
    key = WHO["idempotency_key"] if conversation_id == "c-subject" else f"idem-{conversation_id}"
    return pk.purge_conversation(conversation_id, **{**WHO, "idempotency_key": key}).purge_id


def old_row(pk: Pk, purge_id: str = "p-before-0018") -> ledger.LedgerEntry:
    """A ledger row without salts, as a row accepted before migration 0018 is: appended the
    way an acceptance appends, its leaf version 1 (every field in clear)."""
    with pk.db.write() as conn:
        return ledger.append(
            conn, ledger.lock_head(conn), purge_id=purge_id, kind="bot", selectors={"bot_id": "b-old"},
            scope_digest="0" * 64, salted=False, **{**WHO, "idempotency_key": f"idem-{purge_id}"},
        )  # fmt: skip


def disclosed_values(document: dict[str, Any]) -> dict[str, Any]:
    return {name: item["value"] for name, item in document["disclosed"].items()}
