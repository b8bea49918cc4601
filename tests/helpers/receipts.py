"""Purge receipts under test: conversation purges accepted in turn, the signed log's directory and
checkpoint, and the offline check that a later checkpoint extends an earlier one."""

from __future__ import annotations

import base64
from pathlib import Path

import purgekeeper
from purgekeeper.storage import signed_log
from purgekeeper.tlog.verify import Verifier, open_checkpoint, verify_consistency

Pk = purgekeeper.Purgekeeper
WHO = {"actor": "op", "reason": "receipt test"}
SECRET = "S3CR3T-receipt"


def accept(pk: Pk, n: int, *, prefix: str = "c") -> list[purgekeeper.Acceptance]:
    """``n`` conversation purges (each its own group commit)."""
    return [pk.purge_conversation(f"{prefix}-{i}-{SECRET}", **WHO) for i in range(n)]


def log_dir(pk: Pk) -> Path:
    return pk.settings.checkpoint_dir / f"{pk.database_key}{signed_log.LOG_SUFFIX}"


def checkpoint_of(pk: Pk) -> str:
    return (log_dir(pk) / signed_log.CHECKPOINT_FILE).read_text()


def extends(pk: Pk, before: str) -> None:
    """The newest checkpoint's tree extends ``before``'s (same origin, same key): checked offline."""
    verifier = Verifier.from_vkey(pk.log_key())
    old = open_checkpoint(before, verifier)
    document = pk.consistency(old.size)
    new = open_checkpoint(document["checkpoint"], verifier)
    assert new.origin == old.origin and new.size >= old.size
    proof = [base64.b64decode(h) for h in document["proof"]]
    verify_consistency(old.size, new.size, proof, old.root, new.root)
