"""A witness's side of C2SP tlog-witness and tlog-cosignature (Ed25519, cosignature/v1 only).

A **cosigner** has a name (no whitespace, no ``+``) and an Ed25519 key pair. Its key id is
``SHA-256(name || 0x0A || 0x04 || public key)[:4]``; its verification key is written
``<name>+<hex key id>+<base64(0x04 || public key)>`` (what a log, or ``verify --witness``,
is configured with) and its signing key ``PRIVATE+KEY+<name>+<hex key id>+<base64(0x04 ||
seed)>``, Go's skey form with the cosignature type byte. A **cosignature** is one note
signature line, ``— <name> <base64(key id || u64 big-endian timestamp || signature)>``, the
Ed25519 signature over ``cosignature/v1\\n``, ``time <timestamp>\\n`` and the checkpoint's
whole note text (``purgekeeper.tlog.verify.cosigned_message``). The type byte 0x04 keeps a
cosigner key from ever verifying a log's checkpoint, and a log key from cosigning.

An **add-checkpoint request body** is ``old <size>\\n``, at most 63 base64 hash lines (the
consistency proof from the old size), an empty line, then the signed checkpoint. It is read
strictly: a decimal without leading zeros, each hash 32 bytes, at most ``MAX_BODY`` bytes;
anything else is :class:`RequestInvalid`, naming what did not hold.

Nothing here decides whether to cosign: that is the witness's (``purgekeeper.commands.witness_app``).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass

from purgekeeper.tlog import note
from purgekeeper.tlog.verify import (
    ALG_COSIGNATURE_V1,
    HASH_SIZE,
    MAX_TIMESTAMP,
    SIGNATURE_PREFIX,
    CosignerKey,
    cosigned_message,
    cosigner_key_id,
)

__all__ = [
    "MAX_BODY",
    "MAX_PROOF_LINES",
    "SIZE_CONTENT_TYPE",
    "AddCheckpoint",
    "Cosigner",
    "CosignerKeyInvalid",
    "RequestInvalid",
    "add_checkpoint_body",
    "note_text",
    "parse_add_checkpoint",
]

SIZE_CONTENT_TYPE = "text/x.tlog.size"  # a 409's body: the size the witness cosigned last
MAX_PROOF_LINES = 63  # tlog-witness: a client MUST NOT send more
# 63 proof lines are 2.8 KiB; a checkpoint with a hundred signature lines under 16 KiB.
MAX_BODY = 64 * 1024
MAX_SIZE = 2**63 - 1  # a tree size the witness can record (and Go's int64) holds
_OLD_LINE = re.compile(r"old (0|[1-9][0-9]{0,18})")


class CosignerKeyInvalid(note.KeyInvalid):
    """The cosigner's signing key is not PRIVATE+KEY+<name>+<hex key id>+<base64(0x04 || seed)>."""


class RequestInvalid(ValueError):
    """The add-checkpoint request body is not an old size, a consistency proof, an empty line
    and a checkpoint."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Cosigner(note.Ed25519Key):
    """An Ed25519 cosigning key (cosignature/v1) with its name; the seed stays out of ``repr``."""

    ALGORITHM = ALG_COSIGNATURE_V1
    INVALID = CosignerKeyInvalid
    WHAT = "cosigner key"

    def _key_id_of(self, public_key: bytes) -> bytes:
        return cosigner_key_id(self.name, public_key)

    @property
    def key(self) -> CosignerKey:
        return CosignerKey(name=self.name, key_id=self.key_id, public_key=self.public_key)

    @property
    def vkey(self) -> str:
        return self.key.vkey

    def cosign(self, checkpoint_text: str, timestamp: int) -> str:
        """The cosignature line of the checkpoint (its note text, or the whole signed note:
        its signature lines are not signed) at ``timestamp`` (POSIX seconds)."""
        if not 0 <= timestamp <= MAX_TIMESTAMP:
            raise ValueError(f"a cosignature's timestamp is 0 to 2^63-1, not {timestamp}")
        message = cosigned_message(note_text(checkpoint_text), timestamp)
        signature = self._private().sign(message)
        encoded = base64.b64encode(self.key_id + timestamp.to_bytes(8, "big") + signature).decode()
        return f"{SIGNATURE_PREFIX}{self.name} {encoded}\n"


def note_text(checkpoint: str) -> str:
    """A note's text: everything before its last blank line, with its final newline (the
    text itself when there is no signature block)."""
    text, sep, _ = checkpoint.rpartition("\n\n")
    text = text + "\n" if sep else checkpoint
    if not text.endswith("\n"):
        raise ValueError("a note's text ends with a newline")
    return text


# -- the add-checkpoint request body --


@dataclass(frozen=True)
class AddCheckpoint:
    """An add-checkpoint request: the size the client believes the witness cosigned last, the
    consistency proof from there, and the signed checkpoint (not yet verified)."""

    old_size: int
    proof: tuple[bytes, ...]
    note: str


def add_checkpoint_body(old_size: int, proof: Sequence[bytes], checkpoint_note: str) -> bytes:
    """The request body :func:`parse_add_checkpoint` reads."""
    if not 0 <= old_size <= MAX_SIZE or len(proof) > MAX_PROOF_LINES:
        raise ValueError("an old size is 0 to 2^63-1, and a proof at most 63 hashes")
    if any(len(h) != HASH_SIZE for h in proof):
        raise ValueError(f"a proof's hashes are {HASH_SIZE} bytes")
    lines = [f"old {old_size}", *(base64.b64encode(h).decode() for h in proof)]
    return ("\n".join(lines) + "\n\n" + checkpoint_note).encode()


def parse_add_checkpoint(body: bytes) -> AddCheckpoint:
    """Read a request body strictly; RequestInvalid with the reason otherwise."""
    if len(body) > MAX_BODY:
        raise RequestInvalid(f"the request body is over {MAX_BODY} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestInvalid("the request body is not UTF-8") from exc
    head, sep, checkpoint = text.partition("\n\n")
    if not sep:
        raise RequestInvalid("the request body has no empty line before the checkpoint")
    old_line, *proof_lines = head.split("\n")
    match = _OLD_LINE.fullmatch(old_line)
    if match is None:
        raise RequestInvalid("the first line is not 'old <size>' (a decimal without leading zeros)")
    old_size = int(match.group(1))
    if old_size > MAX_SIZE:
        raise RequestInvalid("the old size is above 2^63-1")
    if len(proof_lines) > MAX_PROOF_LINES:
        raise RequestInvalid(f"the consistency proof has more than {MAX_PROOF_LINES} lines")
    if not checkpoint:
        raise RequestInvalid("the request body has no checkpoint after the empty line")
    return AddCheckpoint(old_size, tuple(_proof_hash(line, n) for n, line in enumerate(proof_lines)), checkpoint)


def _proof_hash(line: str, position: int) -> bytes:
    try:
        value = base64.b64decode(line.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise RequestInvalid(f"consistency proof line {position + 1} is not base64") from exc
    if len(value) != HASH_SIZE:
        raise RequestInvalid(f"consistency proof line {position + 1} is {len(value)} bytes, not {HASH_SIZE}")
    return value
