"""Writing the documents ``purgekeeper.tlog.verify`` reads: receipts and consistency proofs.

A receipt (format ``purgekeeper-receipt``) says that one ledger row is a leaf of a signed
tree: the row's leaf bytes (``leaf_bytes``: version 1, the row's canonical JSON without
``prev_hash`` and ``row_hash``, for a row without salts; version 2, salted commitments of
who, why and the request's metadata in place of their values, for a row with them), its
inclusion proof (RFC 9162 §2.1.3) and the signed checkpoint of that tree. Version 2 of the
document also carries ``disclosed`` (``disclosure``: the committed fields' values and salts);
without it the document is version 1, the receipt a data subject can be given. A
consistency document holds the proof (RFC 9162 §2.1.4) from an older tree to a newer one and
the newer one's signed checkpoint. Hashes are base64 (standard alphabet, padded).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from purgekeeper.tlog.verify import (
    COMMITTED_FIELDS,
    LEAF_VERSION,
    RECEIPT_FORMAT,
    RECEIPT_VERSION,
    SALT_SIZE,
    commitment,
)

__all__ = ["consistency_document", "disclosure", "leaf_bytes", "receipt_document"]


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def leaf_bytes(row: Mapping[str, Any]) -> bytes:
    """A ledger row's leaf, UTF-8 canonical JSON (the row's values are already JSON values,
    times as ``…123456Z`` text). A row with ``salts`` (base64, ``SALT_SIZE`` bytes per
    committed field in ``COMMITTED_FIELDS`` order) gets a version 2 leaf; one without, its
    fields without ``prev_hash`` and ``row_hash`` (version 1, as before salts existed)."""
    fields = {k: v for k, v in row.items() if k not in ("prev_hash", "row_hash")}
    if "salts" not in fields:
        return _canonical(fields)
    salts = _salts(fields.pop("salts"))
    committed = {
        name: base64.b64encode(commitment(name, salts[name], fields.pop(name, None))).decode()
        for name in COMMITTED_FIELDS
    }
    return _canonical({**fields, "leaf_version": LEAF_VERSION, "commitments": committed})


def disclosure(row: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A salted row's committed fields as a receipt discloses them: ``{name: {"value",
    "salt"}}``, which ``purgekeeper.tlog.verify`` checks against the leaf's commitments."""
    salts = _salts(row["salts"])
    return {name: {"value": row.get(name), "salt": base64.b64encode(salts[name]).decode()} for name in COMMITTED_FIELDS}


def _salts(text: str) -> dict[str, bytes]:
    raw = base64.b64decode(text, validate=True)
    if len(raw) != SALT_SIZE * len(COMMITTED_FIELDS):
        raise ValueError("the row's salts are not one salt per committed field")
    return {name: raw[i * SALT_SIZE : (i + 1) * SALT_SIZE] for i, name in enumerate(COMMITTED_FIELDS)}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def receipt_document(
    *,
    purge_id: str,
    ledger_seq: int,
    leaf: bytes,
    inclusion_proof: Sequence[bytes],
    checkpoint: str,
    disclosed: Mapping[str, Any] | None = None,
    rotations: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The receipt: version 2 with ``disclosed``, version 1 (its shape before) without;
    ``rotations`` (each ``{"statement", "proof"}``, base64 hashes) when the key was rotated."""
    document = {
        "format": RECEIPT_FORMAT,
        "version": 1 if disclosed is None else RECEIPT_VERSION,
        "purge_id": purge_id,
        "ledger_seq": ledger_seq,
        "leaf_index": ledger_seq - 1,
        "leaf": _b64(leaf),
        "inclusion_proof": [_b64(h) for h in inclusion_proof],
        "checkpoint": checkpoint,
    }
    if disclosed is not None:
        document["disclosed"] = dict(disclosed)
    if rotations:
        document["rotations"] = [dict(rotation) for rotation in rotations]
    return document


def consistency_document(
    *, proof: Sequence[bytes], checkpoint: str, rotations: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """The proof and the newer checkpoint; ``rotations`` (the key's rotation statements, as a
    receipt carries them) when the checkpoint is signed by a key a rotation handed over to."""
    document: dict[str, Any] = {"proof": [_b64(h) for h in proof], "checkpoint": checkpoint}
    if rotations:
        document["rotations"] = list(rotations)
    return document
