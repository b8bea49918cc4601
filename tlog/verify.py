"""The offline verifier of purge receipts: one file a host can vendor.

It needs only the standard library and ``cryptography`` (for Ed25519), and imports nothing
else of purgekeeper, so it can be copied alone into another code base and run as
``python verify.py RECEIPT --key VKEY [--newer CHECKPOINT --proof FILE] [--completion FILE]``
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

A receipt is a JSON object ``{"format": "purgekeeper-receipt", "version": 1, "purge_id",
"ledger_seq", "leaf_index", "leaf", "inclusion_proof", "checkpoint"}``: ``leaf`` is the
base64 of the ledger row's canonical JSON (sorted keys, compact separators, without
``prev_hash`` and ``row_hash``), the leaf numbered ``ledger_seq - 1``; ``inclusion_proof``
the base64 hashes from that leaf up to the root; ``checkpoint`` the signed note of the
tree the proof is for. A consistency proof document is ``{"proof": [base64, ...],
"checkpoint": "<signed note>"}`` and shows that a newer checkpoint's tree extends the
receipt's.

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
    "COMPLETION_FORMAT",
    "EMPTY_ROOT",
    "HASH_SIZE",
    "KIND_NAMES",
    "MAX_DIGITS",
    "MAX_JSON_DEPTH",
    "RECEIPT_FORMAT",
    "RECEIPT_VERSION",
    "Checkpoint",
    "Completion",
    "CompletionStep",
    "NoteSignature",
    "ReceiptInvalid",
    "ReceiptVerified",
    "Verifier",
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
    "parse_json",
    "verify_completion",
    "verify_consistency",
    "verify_files",
    "verify_inclusion",
    "verify_receipt",
]

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
ALG_ED25519 = 0x01
RECEIPT_FORMAT = "purgekeeper-receipt"
RECEIPT_VERSION = 1
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


@dataclass(frozen=True)
class Verifier:
    """An Ed25519 verification key: its name, key id and public key."""

    name: str
    key_id: bytes
    public_key: bytes

    @classmethod
    def from_vkey(cls, vkey: str) -> Verifier:
        """Parse ``<name>+<hex key id>+<base64(0x01 || public key)>``."""
        name, _, rest = vkey.strip().partition("+")
        hex_id, _, key64 = rest.partition("+")
        if not valid_key_name(name) or len(hex_id) != 8:
            raise ReceiptInvalid("the verification key is not <name>+<8 hex digits>+<base64 key>")
        try:
            claimed = bytes.fromhex(hex_id)
        except ValueError as exc:
            raise ReceiptInvalid("the verification key's id is not hexadecimal") from exc
        key = _b64decode(key64, "the verification key")
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


@dataclass(frozen=True)
class ReceiptVerified:
    """A receipt that verified: which row (its purge id and kind), where in the ledger, and
    the trees it is in."""

    purge_id: str
    ledger_seq: int
    leaf_index: int
    leaf: bytes
    checkpoint: Checkpoint
    newer: Checkpoint | None = None
    kind: str = ""

    @property
    def kind_name(self) -> str:
        return kind_name(self.kind)


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


def _check_leaf(leaf: bytes, purge_id: str, ledger_seq: int) -> str:
    """The leaf must be a ledger row in canonical form that names this purge at this seq;
    its kind."""
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
    return kind


def verify_receipt(
    receipt: str | bytes | Mapping[str, Any],
    vkey: str,
    *,
    newer_checkpoint: str | None = None,
    consistency_proof: str | bytes | Mapping[str, Any] | None = None,
    origin: str | None = None,
) -> ReceiptVerified:
    """Check a receipt against a verification key, and optionally that a newer checkpoint
    (with a consistency proof document) extends the receipt's tree; with ``origin``, that
    the checkpoint is of that log."""
    verifier = Verifier.from_vkey(vkey)
    document = _load_json(receipt, "the receipt")
    if document.get("format") != RECEIPT_FORMAT or document.get("version") != RECEIPT_VERSION:
        raise ReceiptInvalid(f"the receipt is not {RECEIPT_FORMAT} version {RECEIPT_VERSION}")
    purge_id = _field(document, "purge_id", str, "the receipt")
    seq = _field(document, "ledger_seq", int, "the receipt")
    index = _field(document, "leaf_index", int, "the receipt")
    if seq < 1 or index != seq - 1:
        raise ReceiptInvalid(f"leaf_index {index} is not ledger_seq {seq} - 1")
    leaf = _b64decode(_field(document, "leaf", str, "the receipt"), "the receipt's leaf")
    proof = _hash_list(document.get("inclusion_proof"), "the inclusion proof")
    checkpoint = open_checkpoint(_field(document, "checkpoint", str, "the receipt"), verifier)
    _check_origin(checkpoint.origin, origin, "the receipt's checkpoint")
    kind = _check_leaf(leaf, purge_id, seq)
    verify_inclusion(leaf_hash(leaf), index, checkpoint.size, proof, checkpoint.root)
    newer = _verify_newer(checkpoint, verifier, newer_checkpoint, consistency_proof)
    return ReceiptVerified(purge_id, seq, index, leaf, checkpoint, newer, kind)


def _check_origin(origin: str, pinned: str | None, what: str) -> None:
    if pinned is not None and origin != pinned:
        raise ReceiptInvalid(f"{what} is of the log {origin!r}, not {pinned!r}")


def _verify_newer(
    checkpoint: Checkpoint,
    verifier: Verifier,
    newer_note: str | None,
    consistency_proof: str | bytes | Mapping[str, Any] | None,
) -> Checkpoint | None:
    if newer_note is None and consistency_proof is None:
        return None
    if newer_note is None or consistency_proof is None:
        raise ReceiptInvalid("a newer checkpoint needs a consistency proof, and a proof a newer checkpoint")
    newer = open_checkpoint(newer_note, verifier)
    document = _load_json(consistency_proof, "the consistency proof")
    if "checkpoint" in document:
        claimed = open_checkpoint(_field(document, "checkpoint", str, "the consistency proof"), verifier)
        if not claimed.same_tree(newer):
            raise ReceiptInvalid("the consistency proof is for another checkpoint than the newer one")
    if newer.origin != checkpoint.origin:
        raise ReceiptInvalid(f"the newer checkpoint is of {newer.origin!r}, not {checkpoint.origin!r}")
    proof = _hash_list(document.get("proof"), "the consistency proof")
    verify_consistency(checkpoint.size, newer.size, proof, checkpoint.root, newer.root)
    return newer


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
) -> tuple[ReceiptVerified, Completion | None]:
    """What the command line checks, from its files (``key`` is the key or a file holding
    it): the receipt, and the completion statement if one is given. OSError when a file
    cannot be read; ReceiptInvalid when what it holds does not verify."""
    vkey = _key_text(key)
    document = _read_text(receipt, "the receipt")
    result = verify_receipt(
        document,
        vkey,
        newer_checkpoint=None if newer is None else _read_text(newer, "the newer checkpoint"),
        consistency_proof=None if proof is None else _read_text(proof, "the consistency proof"),
        origin=origin,
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
    return parser


def describe(result: ReceiptVerified, completion: Completion | None = None) -> str:
    """The one line that says what verified, starting ``ok: <the row's kind in words>``."""
    where = f"{result.checkpoint.origin} at tree size {result.checkpoint.size}"
    line = f"ok: {result.kind_name}, id {result.purge_id}, is ledger row {result.ledger_seq}, included in {where}"
    if result.newer is not None:
        line += f", and tree size {result.newer.size} extends it"
    if completion is not None:
        counts = "; ".join(
            f"{s.kind}: removed {s.removed}, retained shared {s.retained_shared}, held {s.held}"
            for s in completion.steps
        )
        line += f"; its cleanup completed at {completion.completed_at}" + (f" ({counts})" if counts else "")
    return line


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 and print one line when the receipt (and the completion statement, if one is
    given) verifies; exit 1 with the reason when not; exit 2 when a file cannot be read."""
    args = _parser().parse_args(argv)
    if (args.newer is None) != (args.proof is None):
        print("purgekeeper.tlog.verify: --newer and --proof go together", file=sys.stderr)
        return 2
    try:
        result, completion = verify_files(
            args.receipt,
            args.key,
            newer=args.newer,
            proof=args.proof,
            completion=args.completion,
            origin=args.origin,
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
