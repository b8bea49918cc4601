"""A ledger row's salts (rows written since migration 0018): one random 16-byte salt per
committed field (``COMMITTED_FIELDS``, in that order), kept in the row as one base64 text
(``salts``) and covered by its ``row_hash``. The signed log's leaf of such a row holds a
salted commitment of each of those fields in place of its value (leaf version 2,
``purgekeeper.tlog.verify`` documents it), so a receipt without the values proves the row
to the data subject and discloses neither who accepted it nor why. The salts make the
commitments of short or guessable values (an e-mail, a ticket number) impossible to try
values against.
"""

from __future__ import annotations

import base64
import secrets

# The fields a version 2 leaf holds as salted commitments only: who, why, and the request's
# metadata (the same names and order as ``purgekeeper.tlog.verify.COMMITTED_FIELDS``).
COMMITTED_FIELDS = ("actor", "reason", "request_id", "idempotency_key", "origin")
SALT_BYTES = 16


def new_salts() -> str:
    """Fresh salts for a row: ``SALT_BYTES`` random bytes per committed field, in base64."""
    return base64.b64encode(secrets.token_bytes(SALT_BYTES * len(COMMITTED_FIELDS))).decode()


def salt_map(salts: str) -> dict[str, bytes]:
    """``{field: salt}`` of a row's ``salts``; ValueError (or TypeError) when they are not
    ``SALT_BYTES`` per committed field in strict, padded base64."""
    if not isinstance(salts, str):
        raise TypeError("salts is not a string")
    raw = base64.b64decode(salts.encode("ascii"), validate=True)
    if len(raw) != SALT_BYTES * len(COMMITTED_FIELDS) or base64.b64encode(raw).decode() != salts:
        raise ValueError("salts is not one salt per committed field")
    return {name: raw[i * SALT_BYTES : (i + 1) * SALT_BYTES] for i, name in enumerate(COMMITTED_FIELDS)}
