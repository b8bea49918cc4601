"""Writing the documents ``purgekeeper.tlog.verify`` reads: receipts and consistency proofs.

A receipt (format ``purgekeeper-receipt``, version 1) says that one ledger row is a leaf of
a signed tree: the row's leaf bytes (its canonical JSON without ``prev_hash`` and
``row_hash``), its inclusion proof (RFC 9162 §2.1.3) and the signed checkpoint of that tree.
A consistency document holds the proof (RFC 9162 §2.1.4) from an older tree to a newer one
and the newer one's signed checkpoint. Hashes are base64 (standard alphabet, padded).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from purgekeeper.tlog.verify import RECEIPT_FORMAT, RECEIPT_VERSION

__all__ = ["consistency_document", "leaf_bytes", "receipt_document"]


def leaf_bytes(row: Mapping[str, Any]) -> bytes:
    """A ledger row's leaf: its canonical JSON without ``prev_hash`` and ``row_hash``, UTF-8.
    The row's values are already JSON values (times as ``…123456Z`` text)."""
    fields = {k: v for k, v in row.items() if k not in ("prev_hash", "row_hash")}
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def receipt_document(
    *, purge_id: str, ledger_seq: int, leaf: bytes, inclusion_proof: Sequence[bytes], checkpoint: str
) -> dict[str, Any]:
    return {
        "format": RECEIPT_FORMAT,
        "version": RECEIPT_VERSION,
        "purge_id": purge_id,
        "ledger_seq": ledger_seq,
        "leaf_index": ledger_seq - 1,
        "leaf": _b64(leaf),
        "inclusion_proof": [_b64(h) for h in inclusion_proof],
        "checkpoint": checkpoint,
    }


def consistency_document(*, proof: Sequence[bytes], checkpoint: str) -> dict[str, Any]:
    return {"proof": [_b64(h) for h in proof], "checkpoint": checkpoint}
