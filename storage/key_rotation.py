"""A signed log's key rotations, as published in its directory.

A rotation is a statement in the log, signed by the old key and naming the new one (text:
``purgekeeper.tlog.verify.KeyRotation``, format ``purgekeeper-key-rotation/v1``), published
as ``D.log/rotation/<n>`` (n = 1, 2, …, never rewritten) beside the checkpoint and served
as it is. A verifier holding the old key follows the statements to the key that signs the
checkpoint (``purgekeeper.tlog.verify.follow_rotations``). The steps of a rotation, and why
they come in their order, are ``purgekeeper.commands.signing_key.rotate_signing_key``'s.
"""

from __future__ import annotations

import base64
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from purgekeeper.storage.directories import open_regular_file
from purgekeeper.storage.files import atomic_write_at, reason_of
from purgekeeper.storage.log_format import CHECKPOINT_FILE, TreeHead
from purgekeeper.storage.signed_log import SignedLog
from purgekeeper.tlog import note
from purgekeeper.tlog.verify import KeyRotation, parse_rotation, split_note

log = logging.getLogger(__name__)

ROTATION_DIR = "rotation"
ROTATIONS_MAX = 1000


STATEMENT_BYTES_MAX = 1 << 14  # a statement is a few hundred bytes
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def statements(log_directory: Path) -> list[str]:
    """The published statements, in order (``rotation/1``, ``rotation/2``, … up to the first
    missing one)."""
    found = []
    for n in range(1, ROTATIONS_MAX + 1):
        data = _statement_bytes(log_directory, n)
        if data is None:
            break
        found.append(data.decode("utf-8", "replace"))
    return found


def _statement_bytes(log_directory: Path, n: int) -> bytes | None:
    """``rotation/<n>``'s bytes, read relative to the log's directory without following a
    symlink (as the tiles are: a link planted there never serves another file); None when it
    is missing, or is not a regular file (logged)."""
    try:
        base = os.open(log_directory, _DIRECTORY)
    except OSError:
        return None
    try:
        rotations = os.open(ROTATION_DIR, _DIRECTORY | os.O_NOFOLLOW, dir_fd=base)
    except OSError:
        return None
    finally:
        os.close(base)
    try:
        fd = open_regular_file(rotations, str(n))
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("%s/%s/%d is not served: %s", log_directory.name, ROTATION_DIR, n, reason_of(exc))
        return None
    finally:
        os.close(rotations)
    try:
        return os.read(fd, STATEMENT_BYTES_MAX)
    finally:
        os.close(fd)


def rotation_of(statement: str) -> KeyRotation:
    """What a published statement says (its signature is the verifier's to check)."""
    return parse_rotation(split_note(statement)[0])


def publish_statement(log: SignedLog, statement: str) -> str:
    """``statement`` written as the next ``rotation/<n>`` (fsynced, its directory too);
    returns its path in the log."""
    n = len(statements(log.directory)) + 1
    base = log._open_directory()
    try:
        directory = log._open_subdirectory(base, ROTATION_DIR)
        try:
            atomic_write_at(directory, str(n), statement.encode())
        finally:
            os.close(directory)
    finally:
        os.close(base)
    return f"{ROTATION_DIR}/{n}"


def republish(log: SignedLog, head: TreeHead, signers: Sequence[note.Signer]) -> str:
    """The checkpoint of ``head``'s tree signed again by ``signers`` and published (fsynced)."""
    signed = note.sign_checkpoint(head.checkpoint.origin, head.size, head.root, signers[0])
    text, _ = split_note(signed)
    signed = note.sign_note(text, list(signers))
    base = log._open_directory()
    try:
        atomic_write_at(base, CHECKPOINT_FILE, signed.encode())
    finally:
        os.close(base)
    log.forget()
    return signed


def rotations_for(log: SignedLog, head: TreeHead) -> list[dict[str, Any]]:
    """Each published statement of ``head``'s origin, with the consistency proof from its tree
    to ``head``'s (base64): what a receipt signed after a rotation carries."""
    found = []
    for statement in statements(log.directory):
        rotation = rotation_of(statement)
        if rotation.origin != head.checkpoint.origin or rotation.size > head.size:
            continue
        proof = log.consistency(rotation.size, head) if rotation.size < head.size else []
        found.append({"statement": statement, "proof": [base64.b64encode(h).decode() for h in proof]})
    return found


def statement_file(log_directory: Path, path: str) -> bytes | None:
    """The bytes of ``rotation/<n>`` as published; None for any other path, or a missing one."""
    parent, _, name = path.partition("/")
    if parent != ROTATION_DIR or not name.isdigit() or name.startswith("0") or len(name) > 6:
        return None
    return _statement_bytes(log_directory, int(name))
