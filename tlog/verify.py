"""The offline verifier of purge receipts: one file a host can vendor.

It needs only the standard library and ``cryptography`` (for Ed25519), and imports nothing
else of purgekeeper, so it can be copied alone into another code base and run as
``python verify.py RECEIPT --key VKEY [--newer CHECKPOINT --proof FILE] [--completion FILE]
[--witness VKEY ... [--quorum K]]``
(or, installed, ``python -m purgekeeper.tlog.verify ...``). It follows these specifications:

- **RFC 6962 / RFC 9162 Merkle trees.** A leaf's hash is ``SHA-256(0x00 || bytes)``, an
  interior node's ``SHA-256(0x01 || left || right)``, the empty tree's ``SHA-256()``.
  Inclusion proofs are checked as RFC 9162 §2.1.3.2 says, consistency proofs as §2.1.4.2.
- **C2SP signed-note.** A note is its text (ending in a newline), a blank line, then one
  line per signature, ``— <name> <base64(key id || signature)>`` (an em dash, U+2014).
  The key id is ``SHA-256(name || 0x0A || 0x01 || public key)[:4]`` and a verification key
  is written ``<name>+<hex key id>+<base64(0x01 || Ed25519 public key)>``. Signatures by
  other keys (witness cosignatures) are ignored; a signature by the given key that does
  not verify refuses the note.
- **C2SP tlog-checkpoint.** The signed text is ``<origin>\\n<tree size>\\n<base64 root>\\n``
  followed by optional extension lines, which are kept and not interpreted.
- **C2SP tlog-cosignature (Ed25519, cosignature/v1).** A witness's cosignature is one more
  signature line on the checkpoint, ``base64(key id || u64 big-endian timestamp || Ed25519
  signature)``, over ``cosignature/v1\\ntime <timestamp>\\n`` and the checkpoint's text; its key
  id is ``SHA-256(name || 0x0A || 0x04 || public key)[:4]`` and its key is written
  ``<name>+<hex key id>+<base64(0x04 || public key)>``. With ``--witness`` keys (and
  ``--quorum``, default all of them), the receipt's checkpoint must carry that many
  cosignatures that verify; lines by other keys are ignored, and a line by a given key that
  does not verify counts as no cosignature.

A receipt is a JSON object ``{"format": "purgekeeper-receipt", "version": 1, "purge_id",
"ledger_seq", "leaf_index", "leaf", "inclusion_proof", "checkpoint"}``: ``leaf`` is the
base64 of the leaf bytes (below), the leaf numbered ``ledger_seq - 1``; ``inclusion_proof``
the base64 hashes from that leaf up to the root; ``checkpoint`` the signed note of the
tree the proof is for. **Version 2** is the same object with ``"version": 2`` and
``"disclosed"``, and only with it (a receipt without ``disclosed`` is version 1). A
consistency proof document is ``{"proof": [base64, ...], "checkpoint": "<signed note>"}``
and shows that a newer checkpoint's tree extends the receipt's (with ``rotations``: see key rotations).

The **leaf** is canonical JSON (sorted keys, compact separators, UTF-8 unescaped, as
``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` writes it):

- **version 1** (no ``leaf_version`` key: absent means 1; ledger rows written before
  purgekeeper's migration 0018): the ledger row's fields without ``prev_hash`` and
  ``row_hash``, ``actor``, ``reason``, ``request_id``, ``idempotency_key`` and ``origin``
  in clear;
- **version 2**: ``"leaf_version": 2``, the row's other fields (``seq``, ``purge_id``,
  ``kind``, ``selectors``, ``scope_digest``, ``accepted_at``) and ``"commitments"``: for
  each of ``COMMITTED_FIELDS`` (actor, reason, request_id, idempotency_key, origin),
  ``base64(SHA-256("purgekeeper-commitment/v1" || 0x00 || name || 0x00 || salt || value))``
  where ``name`` is the field's name (ASCII), ``salt`` its row's random 16-byte salt and
  ``value`` the canonical JSON of its value (a JSON string, or ``null``), UTF-8
  (:func:`commitment`). The salts are in the ledger row, never in the log.

A version 2 receipt's ``disclosed`` is ``{name: {"value": <string or null>, "salt":
<base64 of 16 bytes>}}`` for some or all committed fields; each must match its commitment,
and a field that the leaf does not commit is refused. The operator's receipt discloses all
of them; the one for the data subject (version 1, no ``disclosed``) proves the acceptance
without revealing who accepted it, why, or the request's metadata.

A **completion statement** says that a purge's cleanup completed. It is a C2SP signed note
with the log's key whose text is, one field a line::

    purgekeeper-completion/v1
    <origin>                      the log's origin, as in its checkpoints
    <purge_id>
    <ledger_seq>                  the purge's row; its leaf is leaf ledger_seq - 1
    <base64 leaf hash>            SHA-256(0x00 || the receipt's leaf bytes)
    <completed_at>                YYYY-MM-DDTHH:MM:SS.ffffffZ, the database's clock
    <attempts>                    the cleanup attempts the database recorded for the purge
    step <kind> removed=<n> retained_shared=<n> held=<n>    one line per step, kinds sorted

(decimals without leading zeros; no step lines for a purge without cleanup). Its first line
keeps it from ever reading as a checkpoint, and a checkpoint from reading as a statement.
It is bound to the acceptance by the purge id, the seq and the leaf hash: with a receipt,
:func:`verify_completion` checks all three and the origin against it. **The later
completion counts**: a restore re-arms cleanup, and a purge then completes again; of two
statements about one purge, the one with the later ``completed_at`` is the one that counts,
and of two with the same time, the one with more attempts (:func:`later_completion`).

Every JSON document (a receipt, its leaf, a consistency proof, a completion document) is read
strictly: nested at most ``MAX_JSON_DEPTH`` deep, numbers of at most ``MAX_DIGITS`` digits,
no key twice, no ``NaN`` or ``Infinity``; so are the decimals of a note (a tree size, a seq).
A receipt's leaf names its row's ``kind``, and the verifier says it in words
(:func:`kind_name`): a legal hold's receipt does not read as a purge's.

Every refusal raises :class:`ReceiptInvalid`, whose ``reason`` says what did not hold.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = [
    "COMMITTED_FIELDS",
    "COMPLETION_FORMAT",
    "COSIGNATURE_HEADER",
    "EMPTY_ROOT",
    "HASH_SIZE",
    "KIND_NAMES",
    "MAX_DIGITS",
    "MAX_JSON_DEPTH",
    "MAX_TIMESTAMP",
    "RECEIPT_FORMAT",
    "RECEIPT_VERSION",
    "SALT_SIZE",
    "Checkpoint",
    "Completion",
    "CompletionStep",
    "Cosignature",
    "CosignerKey",
    "NoteSignature",
    "ReceiptInvalid",
    "ReceiptVerified",
    "Verifier",
    "check_quorum",
    "commitment",
    "cosigned_message",
    "cosigner_key_id",
    "decimal",
    "describe",
    "key_id",
    "kind_name",
    "later_completion",
    "leaf_hash",
    "main",
    "node_hash",
    "open_checkpoint",
    "open_note",
    "parse_checkpoint",
    "parse_completion",
    "parse_cosigner_key",
    "parse_json",
    "verified_cosignatures",
    "verify_completion",
    "verify_consistency",
    "verify_files",
    "verify_inclusion",
    "verify_receipt",
]

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
ALG_ED25519 = 0x01
ALG_COSIGNATURE_V1 = 0x04  # C2SP signed-note's type of a witness's timestamped Ed25519 cosignature
COSIGNATURE_HEADER = "cosignature/v1"
MAX_TIMESTAMP = 2**63 - 1
RECEIPT_FORMAT = "purgekeeper-receipt"
RECEIPT_VERSION = 2  # the newest: 2 carries ``disclosed``, 1 (still written, without it) does not
COMPLETION_FORMAT = "purgekeeper-completion/v1"
SIGNATURE_PREFIX = "\u2014 "
MAX_SIGNATURES = 100
MAX_JSON_DEPTH = 32  # a ledger row is nested a few levels; json's parser recurses, so refuse before it
MAX_DIGITS = 20  # a uint64 (a tree size, a seq) has at most 20; Python's int() gives up at 4300


class ReceiptInvalid(Exception):
    """The receipt, one of its proofs or a checkpoint does not verify."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# -- Merkle tree hashing and proofs (RFC 6962 §2.1, RFC 9162 §2.1.3.2 and §2.1.4.2) --


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _check_hashes(what: str, hashes: Sequence[bytes]) -> None:
    for position, value in enumerate(hashes):
        if len(value) != HASH_SIZE:
            raise ReceiptInvalid(f"{what}[{position}] is {len(value)} bytes, not {HASH_SIZE}")


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> None:
    """Check that ``leaf`` (a leaf hash) is leaf ``index`` of the tree of ``size`` with ``root``."""
    _check_hashes("the inclusion proof", [leaf, root, *proof])
    if not 0 <= index < size:
        raise ReceiptInvalid(f"leaf index {index} is not in a tree of size {size}")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ReceiptInvalid("the inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ReceiptInvalid("the inclusion proof is shorter than the tree is deep")
    if r != root:
        raise ReceiptInvalid("the inclusion proof does not lead to the checkpoint's root")


def verify_consistency(old_size: int, new_size: int, proof: Sequence[bytes], old_root: bytes, new_root: bytes) -> None:
    """Check that the tree of ``new_size`` with ``new_root`` extends the one of ``old_size``."""
    _check_hashes("the consistency proof", [old_root, new_root, *proof])
    if not 0 <= old_size <= new_size:
        raise ReceiptInvalid(f"a tree of size {new_size} cannot extend one of size {old_size}")
    if old_size in (0, new_size):
        _check_trivial_consistency(old_size, new_size, proof, old_root, new_root)
        return
    if not proof:
        raise ReceiptInvalid("the consistency proof is empty")
    path = [old_root, *proof] if old_size & (old_size - 1) == 0 else list(proof)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ReceiptInvalid("the consistency proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ReceiptInvalid("the consistency proof is shorter than the tree is deep")
    if fr != old_root or sr != new_root:
        raise ReceiptInvalid("the consistency proof does not lead to both roots")


def _check_trivial_consistency(
    old_size: int, new_size: int, proof: Sequence[bytes], old_root: bytes, new_root: bytes
) -> None:
    if proof:
        raise ReceiptInvalid(f"a consistency proof from size {old_size} to {new_size} must be empty")
    if old_size == 0 and old_root != EMPTY_ROOT:
        raise ReceiptInvalid("the empty tree's root is not SHA-256 of nothing")
    if old_size == new_size and old_root != new_root:
        raise ReceiptInvalid(f"two checkpoints of size {new_size} have different roots")


# -- C2SP signed notes --


def key_id(name: str, public_key: bytes) -> bytes:
    """The 4-byte key id of an Ed25519 key: SHA-256(name || 0x0A || 0x01 || key)[:4]."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([ALG_ED25519]) + public_key).digest()[:4]


def valid_key_name(name: str) -> bool:
    return bool(name) and "+" not in name and not any(ch.isspace() for ch in name)


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise ReceiptInvalid(f"{what} is not base64") from exc


def _vkey_parts(vkey: str, what: str) -> tuple[str, bytes, bytes]:
    """The name, the claimed key id and the decoded key of ``<name>+<hex id>+<base64>``."""
    name, _, rest = vkey.strip().partition("+")
    hex_id, _, key64 = rest.partition("+")
    if not valid_key_name(name) or len(hex_id) != 8:
        raise ReceiptInvalid(f"{what} is not <name>+<8 hex digits>+<base64 key>")
    try:
        claimed = bytes.fromhex(hex_id)
    except ValueError as exc:
        raise ReceiptInvalid(f"{what}'s id is not hexadecimal") from exc
    return name, claimed, _b64decode(key64, what)


@dataclass(frozen=True)
class Verifier:
    """An Ed25519 verification key: its name, key id and public key."""

    name: str
    key_id: bytes
    public_key: bytes

    @classmethod
    def from_vkey(cls, vkey: str) -> Verifier:
        """Parse ``<name>+<hex key id>+<base64(0x01 || public key)>``."""
        name, claimed, key = _vkey_parts(vkey, "the verification key")
        if len(key) != 33 or key[0] != ALG_ED25519:
            raise ReceiptInvalid("the verification key is not an Ed25519 key (0x01 and 32 bytes)")
        if key_id(name, key[1:]) != claimed:
            raise ReceiptInvalid("the verification key's id does not match its name and key")
        return cls(name=name, key_id=claimed, public_key=key[1:])

    @property
    def vkey(self) -> str:
        encoded = base64.b64encode(bytes([ALG_ED25519]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{encoded}"

    def verifies(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class NoteSignature:
    """One signature line of a note: the signer's name, its key id and the signature."""

    name: str
    key_id: bytes
    signature: bytes


def split_note(note: str) -> tuple[str, list[NoteSignature]]:
    """The text (with its final newline) and the signature lines of a signed note."""
    if any((ord(ch) < 0x20 and ch != "\n") or 0xD800 <= ord(ch) <= 0xDFFF for ch in note):
        raise ReceiptInvalid("the note holds a control character")
    text, sep, block = note.rpartition("\n\n")
    if not sep or not block.endswith("\n"):
        raise ReceiptInvalid("the note has no signature block after a blank line")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise ReceiptInvalid(f"the note has more than {MAX_SIGNATURES} signatures")
    return text + "\n", [_signature_line(line) for line in lines]


def _signature_line(line: str) -> NoteSignature:
    if not line.startswith(SIGNATURE_PREFIX):
        raise ReceiptInvalid("a note signature line does not start with an em dash and a space")
    name, _, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
    if not valid_key_name(name) or not encoded:
        raise ReceiptInvalid("a note signature line has no valid name and signature")
    raw = _b64decode(encoded, "a note signature")
    if len(raw) < 5:
        raise ReceiptInvalid("a note signature is too short to hold a key id")
    return NoteSignature(name=name, key_id=raw[:4], signature=raw[4:])


def open_note(note: str, verifier: Verifier) -> str:
    """The text of ``note`` once ``verifier``'s signature on it is checked."""
    text, signatures = split_note(note)
    mine = [s for s in signatures if s.name == verifier.name and s.key_id == verifier.key_id]
    if not mine:
        raise ReceiptInvalid(f"the note has no signature by {verifier.name}+{verifier.key_id.hex()}")
    if not all(verifier.verifies(text.encode(), s.signature) for s in mine):
        raise ReceiptInvalid(f"the note's signature by {verifier.name} does not verify")
    return text


# -- strict parsing: decimals and JSON --

_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')  # a whole string, or a bracket


def decimal(text: str, what: str) -> int:
    """A decimal without leading zeros, of at most ``MAX_DIGITS`` digits."""
    if not _DECIMAL.fullmatch(text):
        raise ReceiptInvalid(f"{what} is not a decimal number without leading zeros")
    if len(text) > MAX_DIGITS:
        raise ReceiptInvalid(f"{what} has more than {MAX_DIGITS} digits")
    return int(text)


def parse_json(document: str | bytes, what: str) -> Any:
    """Parse ``document`` strictly (see the module's docstring); ReceiptInvalid otherwise."""
    if isinstance(document, bytes):
        try:
            document = document.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ReceiptInvalid(f"{what} is not UTF-8 text") from exc
    _check_depth(document, what)
    try:
        return json.loads(
            document,
            object_pairs_hook=_json_object,
            parse_int=_json_int,
            parse_float=_json_float,
            parse_constant=_json_constant,
        )
    except ReceiptInvalid as exc:
        raise ReceiptInvalid(f"{what} {exc.reason}") from exc
    except ValueError as exc:
        raise ReceiptInvalid(f"{what} is not JSON") from exc


def _check_depth(text: str, what: str) -> None:
    """Count brackets outside strings, in a loop: json.loads itself would recurse."""
    depth = 0
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise ReceiptInvalid(f"{what} is nested more than {MAX_JSON_DEPTH} deep")
        elif token in ("]", "}"):
            depth -= 1


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ReceiptInvalid("holds a key twice")
    return value


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise ReceiptInvalid(f"holds a number of more than {MAX_DIGITS} digits")
    return int(text)


def _json_float(text: str) -> float:
    if sum(ch.isdigit() for ch in text) > MAX_DIGITS:
        raise ReceiptInvalid(f"holds a number of more than {MAX_DIGITS} digits")
    return float(text)


def _json_constant(text: str) -> float:
    raise ReceiptInvalid(f"holds {text}, which is not JSON")


# -- C2SP tlog-checkpoint --


@dataclass(frozen=True)
class Checkpoint:
    """A tree head: the log's origin, its size and root hash, and any extension lines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def same_tree(self, other: Checkpoint) -> bool:
        return (self.origin, self.size, self.root) == (other.origin, other.size, other.root)


def parse_checkpoint(text: str) -> Checkpoint:
    """Parse a checkpoint's signed text: origin, decimal size, base64 root, extension lines."""
    if not text.endswith("\n"):
        raise ReceiptInvalid("the checkpoint text does not end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3 or not lines[0]:
        raise ReceiptInvalid("the checkpoint has no origin, size and root lines")
    origin, size_text, root_text, *extensions = lines
    size = decimal(size_text, "the checkpoint's size")
    root = _b64decode(root_text, "the checkpoint's root")
    if len(root) != HASH_SIZE:
        raise ReceiptInvalid(f"the checkpoint's root is {len(root)} bytes, not {HASH_SIZE}")
    if any(not line for line in extensions):
        raise ReceiptInvalid("the checkpoint has an empty extension line")
    return Checkpoint(origin=origin, size=size, root=root, extensions=tuple(extensions))


def open_checkpoint(note: str, verifier: Verifier) -> Checkpoint:
    return parse_checkpoint(open_note(note, verifier))


# -- C2SP tlog-cosignature: witnesses' cosignatures (Ed25519, cosignature/v1) --


@dataclass(frozen=True)
class CosignerKey:
    """A witness's Ed25519 cosigning key: its name, key id and public key."""

    name: str
    key_id: bytes
    public_key: bytes

    @property
    def vkey(self) -> str:
        encoded = base64.b64encode(bytes([ALG_COSIGNATURE_V1]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{encoded}"


@dataclass(frozen=True)
class Cosignature:
    """A cosignature that verified: the witness's name, and when it cosigned (POSIX seconds)."""

    name: str
    timestamp: int


def cosigner_key_id(name: str, public_key: bytes) -> bytes:
    """SHA-256(name || 0x0A || 0x04 || key)[:4]: a cosigner's key id, never a log key's."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([ALG_COSIGNATURE_V1]) + public_key).digest()[:4]


def parse_cosigner_key(vkey: str) -> CosignerKey:
    """Parse ``<name>+<hex key id>+<base64(0x04 || public key)>``."""
    name, claimed, key = _vkey_parts(vkey, "the witness key")
    if len(key) != 33 or key[0] != ALG_COSIGNATURE_V1:
        raise ReceiptInvalid(f"the witness key {name} is not a cosignature/v1 key (type 0x04 and 32 bytes)")
    if cosigner_key_id(name, key[1:]) != claimed:
        raise ReceiptInvalid(f"the witness key {name}'s id does not match its name and key")
    return CosignerKey(name=name, key_id=claimed, public_key=key[1:])


def cosigned_message(text: str, timestamp: int) -> bytes:
    """What a cosignature signs: the header line, the time line, then the note's whole text."""
    return f"{COSIGNATURE_HEADER}\ntime {timestamp}\n{text}".encode()


def verified_cosignatures(note: str, cosigners: Sequence[str | CosignerKey]) -> list[Cosignature]:
    """The cosignatures of ``note`` by ``cosigners`` that verify, one per key (its latest).
    A line whose name and key id match no given key is ignored; one that matches and does
    not verify counts as absent: anyone relaying the note can add such a line, and it must
    not undo the cosignatures that verify."""
    return _cosignature_lines(note, _cosigner_keys(cosigners))[0]


def _cosignature_lines(note: str, keys: Sequence[CosignerKey]) -> tuple[list[Cosignature], int]:
    """The cosignatures by ``keys`` that verify (one per key, its latest), and how many lines
    by those keys did not verify."""
    text, signatures = split_note(note)
    found, failed = [], 0
    for key in keys:
        lines = [s for s in signatures if (s.name, s.key_id) == (key.name, key.key_id)]
        times = [_cosignature_time(key, text, s.signature) for s in lines]
        failed += times.count(None)
        valid = [t for t in times if t is not None]
        if valid:
            found.append(Cosignature(key.name, max(valid)))
    return found, failed


def _cosigner_keys(cosigners: Sequence[str | CosignerKey]) -> list[CosignerKey]:
    """The keys, each once: a key given twice does not count twice toward a quorum."""
    keys = [key if isinstance(key, CosignerKey) else parse_cosigner_key(key) for key in cosigners]
    return list(dict.fromkeys(keys))


def _cosignature_time(key: CosignerKey, text: str, signature: bytes) -> int | None:
    """The timestamp of a cosignature that verifies; None for a line that does not (its size,
    a timestamp above 2^63-1 or its signature)."""
    if len(signature) != 8 + 64:
        return None
    timestamp = int.from_bytes(signature[:8], "big")
    if timestamp > MAX_TIMESTAMP:
        return None
    try:
        Ed25519PublicKey.from_public_bytes(key.public_key).verify(signature[8:], cosigned_message(text, timestamp))
    except InvalidSignature:
        return None
    return timestamp


def check_quorum(note: str, cosigners: Sequence[str | CosignerKey], quorum: int | None = None) -> list[Cosignature]:
    """The cosignatures of ``note`` by ``cosigners`` once at least ``quorum`` of them (None:
    all) verify; ReceiptInvalid, saying how many did and how many lines by their keys did
    not verify, when fewer do."""
    keys = _cosigner_keys(cosigners)
    wanted = len(keys) if quorum is None else quorum
    if not 1 <= wanted <= len(keys):
        raise ReceiptInvalid(f"a quorum is 1 to the {len(keys)} witnesses given, not {wanted}")
    cosigned, failed = _cosignature_lines(note, keys)
    if len(cosigned) < wanted:
        raise ReceiptInvalid(
            f"{len(cosigned)} of {len(keys)} witnesses cosigned this checkpoint, quorum {wanted}"
            f" (cosigned: {', '.join(c.name for c in cosigned) or 'none'}"
            f"; {failed} {'line' if failed == 1 else 'lines'} by their keys did not verify)"
        )
    return cosigned


# -- receipts --


KIND_NAMES = {
    "content": "a content purge",
    "conversation": "a conversation purge",
    "channel": "a channel purge",
    "bot": "a bot deletion",
    "author": "an author erasure",
    "retention": "a retention policy set or changed",
    "retention_end": "a retention policy's removal",
    "retention_run": "a retention run",
    "hold": "a legal hold",
    "hold_release": "a legal hold's release",
}
_KIND = re.compile(r"[a-z][a-z_]{0,39}")


def kind_name(kind: str) -> str:
    """What a ledger row of ``kind`` is, in words; a kind newer than this file is named as is."""
    return KIND_NAMES.get(kind, f"a row of kind {kind}")


# -- the leaf's versions and its salted commitments (the module's docstring: "The leaf") --

COMMITTED_FIELDS = ("actor", "reason", "request_id", "idempotency_key", "origin")
SALT_SIZE = 16
COMMITMENT_DOMAIN = b"purgekeeper-commitment/v1\x00"
LEAF_VERSION = 2  # the newest; a leaf without ``leaf_version`` is version 1


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def commitment(name: str, salt: bytes, value: str | None) -> bytes:
    """What a version 2 leaf holds of a committed field: SHA-256 of the domain, the field's
    name, a NUL, its 16-byte salt and its value's canonical JSON. The salt has one length and
    the name no NUL, so no two (name, salt, value) share their bytes."""
    if len(salt) != SALT_SIZE or name not in COMMITTED_FIELDS:
        raise ValueError(f"a commitment takes a committed field and a {SALT_SIZE}-byte salt")
    return hashlib.sha256(COMMITMENT_DOMAIN + name.encode() + b"\x00" + salt + _canonical(value)).digest()


@dataclass(frozen=True)
class _Leaf:
    """What the receipt's checks need of its leaf: the row's kind, the leaf's version and
    (version 2) the commitments by field."""

    kind: str
    version: int
    commitments: Mapping[str, bytes]


def _leaf_version(row: Mapping[str, Any]) -> int:
    if "leaf_version" not in row:
        if "commitments" in row:
            raise ReceiptInvalid("the leaf has commitments but no leaf_version")
        return 1
    version = row["leaf_version"]
    if version != LEAF_VERSION or isinstance(version, bool):
        raise ReceiptInvalid(f"the leaf's version {str(version)[:20]!r} is not one this verifier reads (1 or 2)")
    return version


def _commitments(row: Mapping[str, Any]) -> dict[str, bytes]:
    """A version 2 leaf's commitments: one 32-byte hash per committed field, and none of
    those fields in clear."""
    if any(name in row for name in COMMITTED_FIELDS):
        raise ReceiptInvalid("the version 2 leaf holds a committed field in clear")
    found = row.get("commitments")
    if not isinstance(found, dict) or set(found) != set(COMMITTED_FIELDS):
        raise ReceiptInvalid(f"the leaf's commitments are not one per field of {', '.join(COMMITTED_FIELDS)}")
    if not all(isinstance(value, str) for value in found.values()):
        raise ReceiptInvalid("a commitment of the leaf is not base64 text")
    hashes = {name: _b64decode(value, f"the leaf's {name} commitment") for name, value in found.items()}
    _check_hashes("the leaf's commitments", list(hashes.values()))
    return hashes


def _check_disclosed(document: Mapping[str, Any], leaf: _Leaf) -> dict[str, str | None] | None:
    """The receipt's ``disclosed`` values, each checked against its commitment in the leaf;
    None when it discloses nothing. Version 2 and ``disclosed`` go together."""
    version = document["version"]
    if "disclosed" not in document:
        if version != 1:
            raise ReceiptInvalid("the receipt is version 2 but discloses nothing (without disclosed it is version 1)")
        return None
    if version != 2:
        raise ReceiptInvalid("a version 1 receipt discloses nothing: disclosed needs version 2")
    disclosed = document["disclosed"]
    if not isinstance(disclosed, dict):
        raise ReceiptInvalid("the receipt's disclosed is not an object")
    if leaf.version == 1:
        raise ReceiptInvalid("the receipt discloses fields of a version 1 leaf, which holds them in clear")
    return {name: _disclosed_value(name, item, leaf) for name, item in disclosed.items()}


def _disclosed_value(name: str, item: Any, leaf: _Leaf) -> str | None:
    if name not in leaf.commitments:
        raise ReceiptInvalid(f"the receipt discloses {str(name)[:40]!r}, which the leaf does not commit")
    if not isinstance(item, dict) or set(item) != {"value", "salt"}:
        raise ReceiptInvalid(f"the disclosed {name} is not an object of its value and salt")
    value, salt_text = item["value"], item["salt"]
    if value is not None and not isinstance(value, str):
        raise ReceiptInvalid(f"the disclosed {name} is not text or null")
    if not isinstance(salt_text, str):
        raise ReceiptInvalid(f"the disclosed {name}'s salt is not base64 text")
    salt = _b64decode(salt_text, f"the disclosed {name}'s salt")
    if len(salt) != SALT_SIZE:
        raise ReceiptInvalid(f"the disclosed {name}'s salt is {len(salt)} bytes, not {SALT_SIZE}")
    if commitment(name, salt, value) != leaf.commitments[name]:
        raise ReceiptInvalid(f"the disclosed {name} (its value or its salt) does not match its commitment in the leaf")
    return value


@dataclass(frozen=True)
class ReceiptVerified:
    """A receipt that verified: which row (its purge id and kind), where in the ledger, the
    trees it is in, and the witnesses' cosignatures of its checkpoint that counted."""

    purge_id: str
    ledger_seq: int
    leaf_index: int
    leaf: bytes
    checkpoint: Checkpoint
    newer: Checkpoint | None = None
    kind: str = ""
    cosignatures: tuple[Cosignature, ...] = ()
    leaf_version: int = 1
    disclosed: Mapping[str, str | None] | None = None  # the committed fields shown, checked

    @property
    def kind_name(self) -> str:
        return kind_name(self.kind)

    @property
    def undisclosed(self) -> tuple[str, ...]:
        """The fields the leaf commits that the receipt does not disclose (none in a version 1
        leaf, which holds them in clear)."""
        if self.leaf_version == 1:
            return ()
        return tuple(name for name in COMMITTED_FIELDS if name not in (self.disclosed or {}))


def _load_json(document: str | bytes | Mapping[str, Any], what: str) -> Mapping[str, Any]:
    if isinstance(document, Mapping):
        return document
    value = parse_json(document, what)
    if not isinstance(value, dict):
        raise ReceiptInvalid(f"{what} is not a JSON object")
    return value


def _field(document: Mapping[str, Any], name: str, kind: type, what: str) -> Any:
    value = document.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ReceiptInvalid(f"{what} has no {kind.__name__} {name!r}")
    return value


def _hash_list(value: Any, what: str) -> list[bytes]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ReceiptInvalid(f"{what} is not a list of base64 hashes")
    hashes = [_b64decode(item, what) for item in value]
    _check_hashes(what, hashes)
    return hashes


def _check_leaf(leaf: bytes, purge_id: str, ledger_seq: int) -> _Leaf:
    """The leaf must be a ledger row in canonical form that names this purge at this seq, of
    version 1 or 2 (with its commitments); its kind, version and commitments."""
    row = parse_json(leaf, "the leaf")
    if not isinstance(row, dict):
        raise ReceiptInvalid("the leaf is not a JSON object")
    canonical = json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    if canonical != leaf:
        raise ReceiptInvalid("the leaf is not in canonical form (sorted keys, compact, no duplicates)")
    if "prev_hash" in row or "row_hash" in row:
        raise ReceiptInvalid("the leaf holds prev_hash or row_hash")
    if row.get("purge_id") != purge_id or row.get("seq") != ledger_seq:
        raise ReceiptInvalid("the leaf's purge_id and seq are not the receipt's")
    kind = row.get("kind")
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise ReceiptInvalid("the leaf has no kind (lowercase letters and underscores)")
    version = _leaf_version(row)
    return _Leaf(kind, version, _commitments(row) if version == LEAF_VERSION else {})


def verify_receipt(
    receipt: str | bytes | Mapping[str, Any],
    vkey: str,
    *,
    newer_checkpoint: str | None = None,
    consistency_proof: str | bytes | Mapping[str, Any] | None = None,
    origin: str | None = None,
    witnesses: Sequence[str | CosignerKey] = (),
    quorum: int | None = None,
) -> ReceiptVerified:
    """Check a receipt against a verification key, and optionally that a newer checkpoint
    (with a consistency proof document) extends the receipt's tree; with ``origin``, that
    the checkpoint is of that log; with ``witnesses``, that at least ``quorum`` of them (None:
    all) cosigned the receipt's checkpoint."""
    verifier = Verifier.from_vkey(vkey)
    document = _load_json(receipt, "the receipt")
    version = document.get("version")
    if document.get("format") != RECEIPT_FORMAT or type(version) is not int or version not in (1, RECEIPT_VERSION):
        raise ReceiptInvalid(f"the receipt is not {RECEIPT_FORMAT} version 1 or {RECEIPT_VERSION}")
    purge_id = _field(document, "purge_id", str, "the receipt")
    seq = _field(document, "ledger_seq", int, "the receipt")
    index = _field(document, "leaf_index", int, "the receipt")
    if seq < 1 or index != seq - 1:
        raise ReceiptInvalid(f"leaf_index {index} is not ledger_seq {seq} - 1")
    leaf = _b64decode(_field(document, "leaf", str, "the receipt"), "the receipt's leaf")
    proof = _hash_list(document.get("inclusion_proof"), "the inclusion proof")
    note = _field(document, "checkpoint", str, "the receipt")
    rotations = document.get("rotations")
    key, followed = opening_key(note, rotations, verifier)
    checkpoint = open_checkpoint(note, key)
    _check_origin(checkpoint.origin, origin, "the receipt's checkpoint")
    check_rotations(followed, checkpoint)
    cosigned = _witnessed(note, witnesses, quorum)
    found = _check_leaf(leaf, purge_id, seq)
    disclosed = _check_disclosed(document, found)
    verify_inclusion(leaf_hash(leaf), index, checkpoint.size, proof, checkpoint.root)
    newer = _verify_newer(checkpoint, verifier, rotations, newer_checkpoint, consistency_proof)
    return ReceiptVerified(
        purge_id, seq, index, leaf, checkpoint, newer, found.kind, cosigned, found.version, disclosed
    )


def _witnessed(note: str, witnesses: Sequence[str | CosignerKey], quorum: int | None) -> tuple[Cosignature, ...]:
    """The cosignatures that count, checked after the log's own signature."""
    if not witnesses:
        if quorum is not None:
            raise ReceiptInvalid("a quorum needs the witnesses' keys")
        return ()
    return tuple(check_quorum(note, witnesses, quorum))


def _check_origin(origin: str, pinned: str | None, what: str) -> None:
    if pinned is not None and origin != pinned:
        raise ReceiptInvalid(f"{what} is of the log {origin!r}, not {pinned!r}")


def _verify_newer(
    checkpoint: Checkpoint,
    verifier: Verifier,
    rotations: Any,
    newer_note: str | None,
    consistency_proof: str | bytes | Mapping[str, Any] | None,
) -> Checkpoint | None:
    """The newer checkpoint, opened with the given key or the key the rotations hand over to
    from it (:func:`opening_key`): the consistency document's, else the receipt's."""
    if newer_note is None and consistency_proof is None:
        return None
    if newer_note is None or consistency_proof is None:
        raise ReceiptInvalid("a newer checkpoint needs a consistency proof, and a proof a newer checkpoint")
    document = _load_json(consistency_proof, "the consistency proof")
    own = "rotations" in document
    key, followed = opening_key(newer_note, document["rotations"] if own else rotations, verifier)
    newer = open_checkpoint(newer_note, key)
    if "checkpoint" in document:
        claimed = open_checkpoint(_field(document, "checkpoint", str, "the consistency proof"), key)
        if not claimed.same_tree(newer):
            raise ReceiptInvalid("the consistency proof is for another checkpoint than the newer one")
    if newer.origin != checkpoint.origin:
        raise ReceiptInvalid(f"the newer checkpoint is of {newer.origin!r}, not {checkpoint.origin!r}")
    check_rotations(followed, newer if own else checkpoint)  # each statement's proof is to its document's tree
    proof = _hash_list(document.get("proof"), "the consistency proof")
    verify_consistency(checkpoint.size, newer.size, proof, checkpoint.root, newer.root)
    return newer


# -- key rotations: a statement signed by the old key naming the new one --
#
# A receipt signed after a rotation carries ``rotations``: each a statement (a note signed by
# the key trusted so far) with the text ``purgekeeper-key-rotation/v1``, the origin, the tree
# size and base64 root at the rotation and the new key's vkey, one a line, and a consistency
# proof from that tree to the receipt's checkpoint. A verifier holding the key that signed the
# checkpoint needs none; one holding an older key follows them from the first statement that
# key signed to the checkpoint's key. A consistency proof document may carry its own, with
# proofs to its checkpoint: an old receipt's verifier follows those to the newer checkpoint.

ROTATION_FORMAT = "purgekeeper-key-rotation/v1"


@dataclass(frozen=True)
class KeyRotation:
    """The key of ``origin`` handed over at the tree of ``size``/``root`` to ``vkey``."""

    origin: str
    size: int
    root: bytes
    vkey: str

    def text(self) -> str:
        return f"{ROTATION_FORMAT}\n{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n{self.vkey}\n"


_Followed = list[tuple[KeyRotation, list[bytes]]]  # each statement followed, with its consistency proof


def parse_rotation(text: str) -> KeyRotation:
    lines = text.split("\n")
    if len(lines) != 6 or lines[0] != ROTATION_FORMAT or lines[5] != "" or not lines[1]:
        raise ReceiptInvalid(f"a key rotation statement is not {ROTATION_FORMAT}")
    root = _b64decode(lines[3], "the rotation's root")
    if len(root) != HASH_SIZE:
        raise ReceiptInvalid("the rotation's root is not a SHA-256 hash")
    Verifier.from_vkey(lines[4])
    return KeyRotation(lines[1], decimal(lines[2], "the rotation's tree size"), root, lines[4])


def follow_rotations(rotations: Any, verifier: Verifier) -> tuple[Verifier, _Followed]:
    """The key the statements hand over to from ``verifier``, each opened with the key trusted
    before it, and each statement followed with its consistency proof (checked by
    ``check_rotations``). Following starts at the first statement ``verifier`` signed: the
    ones before it handed over to a key its holder needs no statement for. ``verifier`` and
    none when it signed none."""
    items = _rotation_items(rotations)
    start = next((n for n, (statement, _) in enumerate(items) if signed_by(statement, verifier)), len(items))
    followed: _Followed = []
    for statement, proof in items[start:]:
        rotation = parse_rotation(open_note(statement, verifier))
        followed.append((rotation, proof))
        verifier = Verifier.from_vkey(rotation.vkey)
    return verifier, followed


def _rotation_items(rotations: Any) -> list[tuple[str, list[bytes]]]:
    """Each rotation's statement (a signed note, not opened yet) and its consistency proof."""
    if rotations is None:
        return []
    if not isinstance(rotations, list) or len(rotations) > MAX_SIGNATURES:
        raise ReceiptInvalid("the rotations are not a list of statements")
    items = []
    for item in rotations:
        if not isinstance(item, Mapping):
            raise ReceiptInvalid("a rotation is not an object with a statement and a proof")
        statement = _field(item, "statement", str, "a rotation")
        items.append((statement, _hash_list(item.get("proof"), "a rotation's consistency proof")))
    return items


def signed_by(note: str, verifier: Verifier) -> bool:
    """``note`` has a line by ``verifier``'s name and key id (:func:`open_note` checks it)."""
    _, signatures = split_note(note)
    return any((s.name, s.key_id) == (verifier.name, verifier.key_id) for s in signatures)


def opening_key(note: str, rotations: Any, verifier: Verifier) -> tuple[Verifier, _Followed]:
    """The key to open ``note`` with, and the rotations followed to reach it: ``verifier``
    itself when it signed the note (a verifier holding the key the log publishes now needs no
    statement), else the key the rotations hand over to from the first one it signed."""
    if signed_by(note, verifier):
        return verifier, []
    found, followed = follow_rotations(rotations, verifier)
    if not followed:
        raise ReceiptInvalid(
            f"the note has no signature by {verifier.name}+{verifier.key_id.hex()}, nor does any rotation statement"
        )
    return found, followed


def check_rotations(followed: _Followed, checkpoint: Checkpoint) -> None:
    """Each statement names the checkpoint's origin, at a size the checkpoint's tree extends."""
    for rotation, proof in followed:
        if rotation.origin != checkpoint.origin:
            raise ReceiptInvalid(f"a rotation names the log {rotation.origin!r}, not {checkpoint.origin!r}")
        if rotation.size > checkpoint.size:
            raise ReceiptInvalid(f"a rotation at size {rotation.size} is beyond the checkpoint's {checkpoint.size}")
        verify_consistency(rotation.size, checkpoint.size, proof, rotation.root, checkpoint.root)


# -- completion statements --

_STEP_LINE = re.compile(r"step ([a-z][a-z_]*) removed=([0-9]+) retained_shared=([0-9]+) held=([0-9]+)")
_UTC_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
_COMPLETION_HEADER = 7  # the format line and six fields before the step lines


@dataclass(frozen=True)
class CompletionStep:
    """One cleanup step's counts: what it removed, what it kept because something else still
    shares it, and what a legal hold kept."""

    kind: str
    removed: int
    retained_shared: int
    held: int


@dataclass(frozen=True)
class Completion:
    """The signed text of a completion statement (see the module's docstring)."""

    origin: str
    purge_id: str
    ledger_seq: int
    leaf_hash: bytes
    completed_at: str
    attempts: int
    steps: tuple[CompletionStep, ...] = ()

    def text(self) -> str:
        """The statement's text, as :func:`parse_completion` reads it."""
        lines = [
            COMPLETION_FORMAT,
            self.origin,
            self.purge_id,
            str(self.ledger_seq),
            base64.b64encode(self.leaf_hash).decode(),
            self.completed_at,
            str(self.attempts),
        ]
        for step in sorted(self.steps, key=lambda s: s.kind):
            lines.append(
                f"step {step.kind} removed={step.removed} retained_shared={step.retained_shared} held={step.held}"
            )
        text = "\n".join(lines) + "\n"
        if parse_completion(text) != self._sorted():
            raise ValueError("the completion's fields do not make a statement")
        return text

    def _sorted(self) -> Completion:
        steps = tuple(sorted(self.steps, key=lambda s: s.kind))
        return Completion(
            self.origin, self.purge_id, self.ledger_seq, self.leaf_hash, self.completed_at, self.attempts, steps
        )

    @property
    def order(self) -> tuple[str, int]:
        """What :func:`later_completion` compares: the time, then the attempts."""
        return (self.completed_at, self.attempts)


def parse_completion(text: str) -> Completion:
    """Parse a completion statement's signed text; ReceiptInvalid for anything else."""
    if not text.endswith("\n"):
        raise ReceiptInvalid("the statement's text does not end with a newline")
    lines = text[:-1].split("\n")
    if lines[0] != COMPLETION_FORMAT:
        raise ReceiptInvalid(f"the note is not a {COMPLETION_FORMAT} statement")
    if len(lines) < _COMPLETION_HEADER:
        raise ReceiptInvalid("the statement lacks a field")
    _, origin, purge_id, seq_text, hash_text, completed_at, attempts_text, *step_lines = lines
    if not origin or not purge_id or any(ch.isspace() for ch in purge_id):
        raise ReceiptInvalid("the statement has no origin or no purge id")
    seq = decimal(seq_text, "the statement's ledger seq")
    if seq < 1:
        raise ReceiptInvalid("the statement's ledger seq is not positive")
    leaf = _b64decode(hash_text, "the statement's leaf hash")
    if len(leaf) != HASH_SIZE:
        raise ReceiptInvalid(f"the statement's leaf hash is {len(leaf)} bytes, not {HASH_SIZE}")
    if not _UTC_TIME.fullmatch(completed_at):
        raise ReceiptInvalid("the statement's time is not YYYY-MM-DDTHH:MM:SS.ffffffZ")
    attempts = decimal(attempts_text, "the statement's attempt count")
    steps = []
    for line in step_lines:
        match = _STEP_LINE.fullmatch(line)
        if match is None:
            raise ReceiptInvalid("a step line of the statement is not 'step <kind> removed=N retained_shared=N held=N'")
        kind, *counts = match.groups()
        removed, retained, held = (decimal(count, f"the statement's {kind} count") for count in counts)
        steps.append(CompletionStep(kind, removed, retained, held))
    kinds = [step.kind for step in steps]
    if kinds != sorted(set(kinds)):
        raise ReceiptInvalid("the statement's steps are not one line per kind, sorted")
    return Completion(origin, purge_id, seq, leaf, completed_at, attempts, tuple(steps))


def _statement_note(statement: str | bytes | Mapping[str, Any]) -> str:
    """A statement is its signed note, or a JSON object holding it as ``statement``."""
    if isinstance(statement, bytes):
        try:
            statement = statement.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ReceiptInvalid("the statement is not UTF-8 text") from exc
    if isinstance(statement, str) and statement.lstrip().startswith("{"):
        statement = _load_json(statement, "the statement")
    if isinstance(statement, Mapping):
        return str(_field(statement, "statement", str, "the completion document"))
    return statement


def verify_completion(
    statement: str | bytes | Mapping[str, Any],
    vkey: str,
    receipt: str | bytes | Mapping[str, Any] | None = None,
    *,
    origin: str | None = None,
) -> Completion:
    """Check a completion statement's signature with the log's verification key and return
    what it says; with ``receipt``, verify the receipt too and check that the statement is
    bound to its leaf: the same origin, purge id, ledger seq and leaf hash; with ``origin``,
    that the statement is of that log."""
    verifier = Verifier.from_vkey(vkey)
    completion = parse_completion(open_note(_statement_note(statement), verifier))
    _check_origin(completion.origin, origin, "the statement")
    if receipt is not None:
        verified = verify_receipt(receipt, vkey)
        if (completion.purge_id, completion.ledger_seq) != (verified.purge_id, verified.ledger_seq):
            raise ReceiptInvalid("the statement is about another purge than the receipt")
        if completion.leaf_hash != leaf_hash(verified.leaf):
            raise ReceiptInvalid("the statement is not bound to the receipt's leaf")
        if completion.origin != verified.checkpoint.origin:
            raise ReceiptInvalid(f"the statement is of {completion.origin!r}, the receipt of another log")
    return completion


def later_completion(first: Completion, second: Completion) -> Completion:
    """Of two verified statements about one purge, the one that counts: the later
    ``completed_at`` (a restore re-arms cleanup, and its completion comes after), and of two
    at the same time, the one with more attempts."""
    if (first.origin, first.purge_id, first.ledger_seq, first.leaf_hash) != (
        second.origin,
        second.purge_id,
        second.ledger_seq,
        second.leaf_hash,
    ):
        raise ReceiptInvalid("the two statements are not about the same purge's row")
    return second if second.order > first.order else first


# -- the command line --


def _read_text(path: str, what: str) -> str:
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReceiptInvalid(f"{what} is not UTF-8 text") from exc


def _key_text(value: str) -> str:
    """``--key`` takes the key itself or a file holding it."""
    if "+" in value:
        return value
    return _read_text(value, "the key file").strip()


def verify_files(
    receipt: str,
    key: str,
    *,
    newer: str | None = None,
    proof: str | None = None,
    completion: str | None = None,
    origin: str | None = None,
    witnesses: Sequence[str | CosignerKey] = (),
    quorum: int | None = None,
) -> tuple[ReceiptVerified, Completion | None]:
    """What the command line checks, from its files (``key`` and each of ``witnesses`` is the
    key or a file holding it): the receipt, its checkpoint's cosignatures if witnesses are
    given, and the completion statement if one is given. OSError when a file cannot be read;
    ReceiptInvalid when what it holds does not verify."""
    vkey = _key_text(key)
    document = _read_text(receipt, "the receipt")
    result = verify_receipt(
        document,
        vkey,
        newer_checkpoint=None if newer is None else _read_text(newer, "the newer checkpoint"),
        consistency_proof=None if proof is None else _read_text(proof, "the consistency proof"),
        origin=origin,
        witnesses=[w if isinstance(w, CosignerKey) else _key_text(w) for w in witnesses],
        quorum=quorum,
    )
    if completion is None:
        return result, None
    return result, verify_completion(_read_text(completion, "the statement"), vkey, document, origin=origin)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="purgekeeper.tlog.verify",
        description="Verify a purgekeeper purge receipt offline. Exit 0: verified; 1: it does not verify; "
        "2: a file cannot be read, or a usage error.",
    )
    parser.add_argument("receipt", help="the receipt file (JSON)")
    parser.add_argument("--key", required=True, help="the log's verification key (name+id+key), or a file holding it")
    parser.add_argument("--origin", help="the log's origin: a checkpoint of another log does not verify")
    parser.add_argument("--newer", help="a newer signed checkpoint the receipt's tree must be a prefix of")
    parser.add_argument("--proof", help="the consistency proof file from the receipt's checkpoint to --newer")
    parser.add_argument("--completion", help="a completion statement of the receipt's purge, bound to its leaf")
    parser.add_argument(
        "--witness",
        action="append",
        default=[],
        help="a witness's cosigner key (name+id+key, type 0x04), or a file holding it; repeat for each witness",
    )
    parser.add_argument(
        "--quorum", type=int, help="how many of the --witness keys must have cosigned the checkpoint (default: all)"
    )
    return parser


def _disclosure(result: ReceiptVerified) -> str:
    """What a version 2 leaf's receipt shows of the committed fields: each disclosed value
    (as JSON: one line, whatever the text), and which stay committed, not disclosed."""
    if result.leaf_version == 1:
        return ""
    if not result.disclosed:
        return "; actor, reason and request committed, not disclosed"
    shown = ", ".join(
        f"{name} {_canonical(result.disclosed[name]).decode()}" for name in COMMITTED_FIELDS if name in result.disclosed
    )
    hidden = result.undisclosed
    return f"; disclosed: {shown}" + (f"; committed, not disclosed: {', '.join(hidden)}" if hidden else "")


def describe(result: ReceiptVerified, completion: Completion | None = None) -> str:
    """The one line that says what verified, starting ``ok: <the row's kind in words>``."""
    where = f"{result.checkpoint.origin} at tree size {result.checkpoint.size}"
    line = f"ok: {result.kind_name}, id {result.purge_id}, is ledger row {result.ledger_seq}, included in {where}"
    if result.newer is not None:
        line += f", and tree size {result.newer.size} extends it"
    if result.cosignatures:
        line += f", cosigned by {', '.join(c.name for c in result.cosignatures)}"
    line += _disclosure(result)
    if completion is not None:
        counts = "; ".join(
            f"{s.kind}: removed {s.removed}, retained shared {s.retained_shared}, held {s.held}"
            for s in completion.steps
        )
        line += f"; its cleanup completed at {completion.completed_at}" + (f" ({counts})" if counts else "")
    return line


def _usage_error(args: argparse.Namespace) -> str | None:
    if (args.newer is None) != (args.proof is None):
        return "--newer and --proof go together"
    if args.quorum is not None and not 1 <= args.quorum <= len(args.witness):
        return f"--quorum is 1 to the number of --witness keys ({len(args.witness)}), not {args.quorum}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 and print one line when the receipt (and the completion statement, if one is
    given) verifies; exit 1 with the reason when not; exit 2 when a file cannot be read."""
    args = _parser().parse_args(argv)
    usage = _usage_error(args)
    if usage is not None:
        print(f"purgekeeper.tlog.verify: {usage}", file=sys.stderr)
        return 2
    try:
        result, completion = verify_files(
            args.receipt,
            args.key,
            newer=args.newer,
            proof=args.proof,
            completion=args.completion,
            origin=args.origin,
            witnesses=args.witness,
            quorum=args.quorum,
        )
    except OSError as exc:
        print(f"cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    except ReceiptInvalid as exc:
        print(f"receipt invalid: {exc.reason}", file=sys.stderr)
        return 1
    print(describe(result, completion))
    return 0


if __name__ == "__main__":
    sys.exit(main())
