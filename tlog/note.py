"""Signing checkpoints: Ed25519 keys and C2SP signed notes.

A key has a name (no whitespace, no ``+``) and an Ed25519 key pair. Its key id is
``SHA-256(name || 0x0A || 0x01 || public key)[:4]``; its verification key is written
``<name>+<hex key id>+<base64(0x01 || public key)>`` (C2SP signed-note, the form
``purgekeeper.tlog.verify`` and Go's ``golang.org/x/mod/sumdb/note`` read), and its signing key
``PRIVATE+KEY+<name>+<hex key id>+<base64(0x01 || seed)>`` (the form of Go's
``note.GenerateKey`` and ``note.NewSigner``). A signed note is the text, a blank line and
one line ``— <name> <base64(key id || signature)>`` per signer, the signature over the
text's UTF-8 bytes. A checkpoint (C2SP tlog-checkpoint) is the note whose text is
``<origin>\\n<tree size>\\n<base64 root>\\n`` with optional extension lines after it.
"""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Self

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from purgekeeper.tlog.verify import ALG_ED25519, HASH_SIZE, SIGNATURE_PREFIX, Verifier, key_id, valid_key_name

__all__ = ["KeyInvalid", "Signer", "checkpoint_text", "sign_checkpoint", "sign_note", "skey_text", "split_skey"]

SKEY_PREFIX = "PRIVATE+KEY+"


class KeyInvalid(ValueError):
    """The signing key is not PRIVATE+KEY+<name>+<hex key id>+<base64(0x01 || seed)>."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


@dataclass(frozen=True)
class Ed25519Key:
    """An Ed25519 key pair with its name, whose algorithm byte says what it signs (0x01 a
    note, a log's checkpoint; 0x04 a cosignature: ``purgekeeper.tlog.witness.Cosigner``); the
    seed stays out of ``repr``. Its skey form is Go's, with that byte."""

    ALGORITHM: ClassVar[int] = ALG_ED25519
    INVALID: ClassVar[type[KeyInvalid]] = KeyInvalid
    WHAT: ClassVar[str] = "signing key"

    name: str
    seed: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not valid_key_name(self.name):
            raise self.INVALID(f"{self.name!r} is not a key name (no spaces, no '+')")
        if len(self.seed) != 32:
            raise self.INVALID("an Ed25519 seed is 32 bytes")

    @classmethod
    def generate(cls, name: str) -> Self:
        return cls(name=name, seed=Ed25519PrivateKey.generate().private_bytes_raw())

    @classmethod
    def from_skey(cls, skey: str) -> Self:
        name, hex_id, seed = split_skey(skey, cls.ALGORITHM, cls.INVALID)
        found = cls(name=name, seed=seed)
        if found.key_id.hex() != hex_id.lower() or len(hex_id) != 8:
            raise cls.INVALID(f"the {cls.WHAT}'s id does not match its name and key")
        return found

    @property
    def public_key(self) -> bytes:
        return _public_key(self.seed)

    @property
    def key_id(self) -> bytes:
        return self._key_id_of(self.public_key)

    def _key_id_of(self, public_key: bytes) -> bytes:
        return key_id(self.name, public_key)

    @property
    def skey(self) -> str:
        return skey_text(self.name, self.key_id, self.ALGORITHM, self.seed)

    def _private(self) -> Ed25519PrivateKey:
        return _private_key(self.seed)


@dataclass(frozen=True)
class Signer(Ed25519Key):
    """An Ed25519 signing key (a note's, a log's checkpoint's) with its name."""

    @property
    def verifier(self) -> Verifier:
        return Verifier(name=self.name, key_id=self.key_id, public_key=self.public_key)

    @property
    def vkey(self) -> str:
        return self.verifier.vkey

    def sign(self, message: bytes) -> bytes:
        return self._private().sign(message)


def split_skey(skey: str, algorithm: int, invalid: type[KeyInvalid] = KeyInvalid) -> tuple[str, str, bytes]:
    """``(name, hex key id, seed)`` of ``PRIVATE+KEY+<name>+<hex key id>+<base64(alg || seed)>``
    whose algorithm byte is ``algorithm`` (Go's skey form; 0x01 a log's key, 0x04 a
    cosigner's); ``invalid`` (a KeyInvalid) otherwise. The id is the caller's to check."""
    text = skey.strip()
    if not text.startswith(SKEY_PREFIX):
        raise invalid()
    name, _, rest = text[len(SKEY_PREFIX) :].partition("+")
    hex_id, _, encoded = rest.partition("+")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise invalid() from exc
    if len(raw) != 33 or raw[0] != algorithm:
        raise invalid()
    return name, hex_id, raw[1:]


def skey_text(name: str, key_id: bytes, algorithm: int, seed: bytes) -> str:
    """The skey form of a key (``split_skey``'s inverse)."""
    encoded = base64.b64encode(bytes([algorithm]) + seed).decode()
    return f"{SKEY_PREFIX}{name}+{key_id.hex()}+{encoded}"


# A key is derived from its seed once per process, not at every signature (a checkpoint is
# signed in every group commit): the seed is held by its key anyway.
@functools.lru_cache(maxsize=8)
def _private_key(seed: bytes) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(seed)


@functools.lru_cache(maxsize=8)
def _public_key(seed: bytes) -> bytes:
    return _private_key(seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def sign_note(text: str, signers: Sequence[Signer]) -> str:
    """The signed note of ``text`` (which ends in a newline), one signature per signer."""
    if not text.endswith("\n") or "\n\n" in text:
        raise ValueError("a note's text ends with a newline and holds no blank line")
    lines = []
    for signer in signers:
        signature = base64.b64encode(signer.key_id + signer.sign(text.encode())).decode()
        lines.append(f"{SIGNATURE_PREFIX}{signer.name} {signature}\n")
    return text + "\n" + "".join(lines)


def checkpoint_text(origin: str, size: int, root: bytes, extensions: Sequence[str] = ()) -> str:
    """The text of a C2SP checkpoint."""
    if not origin or "\n" in origin or size < 0 or len(root) != HASH_SIZE:
        raise ValueError("a checkpoint has a one-line origin, a size >= 0 and a 32-byte root")
    if any(not line or "\n" in line for line in extensions):
        raise ValueError("a checkpoint's extension lines are non-empty single lines")
    body = [origin, str(size), base64.b64encode(root).decode(), *extensions]
    return "\n".join(body) + "\n"


def sign_checkpoint(origin: str, size: int, root: bytes, signer: Signer, *, extensions: Sequence[str] = ()) -> str:
    """The signed note of the checkpoint of the tree of ``size`` with ``root``."""
    return sign_note(checkpoint_text(origin, size, root, extensions), [signer])
