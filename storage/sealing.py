"""Sealing: content encrypted at rest under a per-item key, with AES-256-GCM (issue 36).

A sealed value is bytes::

    version (1 byte, 0x01) | nonce (12 random bytes) | ciphertext | GCM tag (16 bytes)

The associated data is the version byte followed by ``bound_to`` in UTF-8, the identity of
the row and column the value belongs to (``event:<id>:body``, ``attachment:<id>:name``), so
a value copied to another row, or read as another version, does not open. Anything that does
not open (another key, another row, a changed or missing byte, an unknown version) is
:class:`SealedInvalid`, one error whatever the cause: GCM cannot tell them apart, and the
caller must not either.

A random 96-bit nonce is safe here because each key seals very few values (one event's
body, name and payloads): the birthday bound of 2**32 messages per key is never near.

TEXT columns hold :func:`seal_text`'s form, ``pk1:`` and the sealed bytes in standard base64;
the prefix names the version. Whether a value is sealed is its row's ``key_id``, never the
prefix (a plain value may begin with ``pk1:`` too): :func:`is_sealed_text` only says the form.

Files (attachment bytes) are sealed by :mod:`purgekeeper.storage.sealed_files`, in chunks of
64 KiB, each its own GCM message under the blob's key with a fresh nonce, and the associated
data ``bound_to``, the chunk's index and whether it is the last one: a reader streams and
checks each chunk as it goes, and a chunk moved, repeated, dropped or a file cut short does
not open.
"""

from __future__ import annotations

import base64
import binascii
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from purgekeeper.schema.errors import PurgekeeperError

__all__ = [
    "KEY_BYTES",
    "TEXT_PREFIX",
    "SealedInvalid",
    "cipher",
    "is_sealed_text",
    "new_key",
    "open_text",
    "seal",
    "seal_text",
    "unseal",
    "unseal_text",
]

VERSION = 1
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12
TAG_BYTES = 16
OVERHEAD = 1 + NONCE_BYTES + TAG_BYTES
_HEADER = bytes([VERSION])
_BODY = 1 + NONCE_BYTES  # where the ciphertext begins
TEXT_PREFIX = "pk1:"


class SealedInvalid(PurgekeeperError):
    """The sealed value does not open: it is damaged, bound to another row, of an unknown
    version, or sealed under another key."""


def new_key() -> bytes:
    """A new random 256-bit key."""
    return os.urandom(KEY_BYTES)


def seal(key: bytes, plaintext: bytes, *, bound_to: str) -> bytes:
    """``plaintext`` encrypted and authenticated under ``key``, bound to ``bound_to``."""
    nonce = os.urandom(NONCE_BYTES)
    header = bytes([VERSION])
    return header + nonce + _cipher(key).encrypt(nonce, plaintext, header + bound_to.encode())


def unseal(key: bytes, sealed: bytes, *, bound_to: str) -> bytes:
    """The plaintext :func:`seal` sealed under ``key`` for ``bound_to``; SealedInvalid when it
    does not open."""
    if len(sealed) < OVERHEAD or sealed[0] != VERSION or len(key) != KEY_BYTES:
        raise SealedInvalid()
    header, nonce, body = sealed[:1], sealed[1 : 1 + NONCE_BYTES], sealed[1 + NONCE_BYTES :]
    try:
        return _cipher(key).decrypt(nonce, body, header + bound_to.encode())
    except InvalidTag:
        raise SealedInvalid() from None


def seal_text(key: bytes, text: str, *, bound_to: str) -> str:
    """``text`` sealed, as ``pk1:<base64>`` for a TEXT column."""
    return TEXT_PREFIX + base64.b64encode(seal(key, text.encode(), bound_to=bound_to)).decode("ascii")


def unseal_text(key: bytes, value: str, *, bound_to: str) -> str:
    """The text :func:`seal_text` sealed; SealedInvalid for a plain value too."""
    return open_text(cipher(key), value, bound_to=bound_to)


def cipher(key: bytes) -> AESGCM:
    """The AEAD of ``key``, for :func:`open_text` (building one costs as much as opening a
    short value with it: a read of many values under one key builds it once)."""
    return _cipher(key)


def open_text(aead: AESGCM, value: str, *, bound_to: str) -> str:
    """:func:`unseal_text` with the key's AEAD already built (:func:`cipher`). Written for a
    read's hot path: every fault (no ``pk1:``, bad base64, another version, too short, a tag
    that fails, bytes that are not text) is one SealedInvalid."""
    try:
        sealed = binascii.a2b_base64(value[4:], strict_mode=True) if value.startswith(TEXT_PREFIX) else b""
        if sealed[:1] != _HEADER:
            raise SealedInvalid()
        return aead.decrypt(sealed[1:_BODY], sealed[_BODY:], _HEADER + bound_to.encode()).decode()
    except (InvalidTag, ValueError):  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise SealedInvalid() from None


def is_sealed_text(value: str) -> bool:
    """Whether a TEXT column's value is sealed (a plain value written before sealing is not)."""
    return value.startswith(TEXT_PREFIX)


def _cipher(key: bytes) -> AESGCM:
    if len(key) != KEY_BYTES:
        raise ValueError(f"a sealing key is {KEY_BYTES} bytes, not {len(key)}")
    return AESGCM(key)
