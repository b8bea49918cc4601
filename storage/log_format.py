"""What the signed log is made of, below ``purgekeeper.storage.signed_log`` (which names all of it): its
file names and limits, its errors, the leaf of a ledger row, the tree head a checkpoint
signs, and the signing key kept beside the checkpoint directory.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from purgekeeper.schema import ledger
from purgekeeper.tlog import note
from purgekeeper.tlog.verify import Checkpoint, leaf_hash

LOG_SUFFIX = ".log"
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
TILES_KEPT = 1024  # tiles held in memory (a full one is 8 KiB)
HASHES_KEPT = 1 << 15  # stored hashes held in memory
CHECKPOINT_FILE = "checkpoint"
KEY_FILE = "ledger-signing.key"
DEFAULT_ORIGIN_PREFIX = "purgekeeper/"
NEW_ORIGIN_HINT = (
    "keep the published log as it is, set PURGEKEEPER_LOG_ORIGIN to a new origin (a new log starts; "
    "the old one stays, renamed) and publish the new origin with the same key"
)


class LogRefused(Exception):
    """The signed log cannot be extended with these rows without forking it (or cannot be
    read): nothing was written, and no checkpoint was signed."""


class ForeignKey(LogRefused):
    """The log's checkpoint does not verify with this process's key (another data directory's
    key, or a lost one): this process writes the copy and leaves the log to the key's owner."""


def default_origin(database_id: str) -> str:
    return f"{DEFAULT_ORIGIN_PREFIX}{database_id}"


def leaf_of(entry: ledger.LedgerEntry) -> bytes:
    """The row's leaf bytes: its hashed fields as canonical JSON (``purgekeeper.tlog.receipt.leaf_bytes``)."""
    return ledger.canonical_json(entry.hashed_fields()).encode()


def leaf_hash_of(entry: ledger.LedgerEntry) -> bytes:
    """The RFC 6962 leaf hash of a purge's row (what a completion statement can name)."""
    return leaf_hash(leaf_of(entry))


@dataclass(frozen=True)
class TreeHead:
    """The newest signed checkpoint: its tree and its signed note."""

    checkpoint: Checkpoint
    note: str

    @property
    def size(self) -> int:
        return self.checkpoint.size

    @property
    def root(self) -> bytes:
        return self.checkpoint.root


RowsBetween = Callable[[int, int], Iterable[ledger.LedgerEntry]]  # (after, upto) -> the copy's rows


def load_or_create_key(path: Path, *, name: str) -> note.Signer:
    """The signing key in ``path`` (Go's skey form), created there first when missing: 0600,
    with O_EXCL, so two processes starting at once end up with the same key."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return read_key(path)
    signer = note.Signer.generate(name)
    try:
        os.write(fd, (signer.skey + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return signer


def read_key(path: Path) -> note.Signer:
    for _attempt in range(50):  # another process created it and is writing it now
        text = path.read_text(encoding="ascii").strip()
        if text:
            return note.Signer.from_skey(text)
        time.sleep(0.01)
    return note.Signer.from_skey(path.read_text(encoding="ascii").strip())
