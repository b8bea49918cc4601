"""What the signed log is made of, below ``purgekeeper.storage.signed_log`` (which names all of it): its
file names and limits, its errors, the leaf of a ledger row, the tree head a checkpoint
signs, and the signing key kept beside the checkpoint directory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from purgekeeper.schema import ledger
from purgekeeper.schema.errors import SigningKeyMissing, SigningKeyUnusable
from purgekeeper.storage.files import PrivateFileUnusable, create_private, read_private
from purgekeeper.tlog import note, receipt
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


class KeyUnusable(ForeignKey):
    """The log's signing key cannot be used (SigningKeyUnusable, which this is raised from):
    nothing was signed. The copy's writer writes the copy all the same, its log unsigned, and
    the next signing once the key is fixed brings the log up to the copy. A key never delays
    or prevents the copy."""


def has_signed(checkpoint_dir: Path, database_id: str) -> bool:
    """A log of this database has signed a checkpoint in ``checkpoint_dir``: its directory, or
    a retired one, is there (one is made only to publish a signed checkpoint). A directory that
    cannot be listed counts as signed: a key is never made on a guess."""
    name = f"{database_id}{LOG_SUFFIX}"
    try:
        entries = os.listdir(checkpoint_dir)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return any(entry == name or entry.startswith(f"{name}.retired-") for entry in entries)


@contextlib.contextmanager
def key_used() -> Iterator[None]:
    """SigningKeyUnusable raised within becomes KeyUnusable (a ForeignKey: the copy is written)."""
    try:
        yield
    except SigningKeyUnusable as exc:
        raise KeyUnusable(str(exc)) from exc


def default_origin(database_id: str) -> str:
    return f"{DEFAULT_ORIGIN_PREFIX}{database_id}"


def leaf_of(entry: ledger.LedgerEntry) -> bytes:
    """The row's leaf bytes (``purgekeeper.tlog.receipt.leaf_bytes``): a row without salts (of
    before 0018), its hashed fields as canonical JSON, as it always was (version 1, so the
    log never forks); a row with them, version 2: its salted commitments of who, why and the
    request's metadata in place of their values."""
    if entry.salts is None:
        return ledger.canonical_json(entry.hashed_fields()).encode()
    return receipt.leaf_bytes({**entry.hashed_fields(), "accepted_at": ledger.utc_text(entry.accepted_at)})


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


KEY_BYTES_MAX = 4096  # a signing key is about 100 bytes: a bigger file is not one


def load_or_create_key(path: Path, *, name: str) -> note.Signer:
    """The signing key in ``path``, made there first when nothing is there (``create_key``;
    two processes starting at once end up with the same key). Its callers decide that a key
    may be made at all (``purgekeeper.commands.receipts.signer_for``)."""
    try:
        return create_key(path, name=name)
    except FileExistsError:
        return read_key(path)


def create_key(path: Path, *, name: str, signer: note.Signer | None = None) -> note.Signer:
    """A new signing key in ``path`` (Go's skey form, 0600, fsynced), never over anything there:
    FileExistsError when ``path`` exists (a dangling symlink too). It is written aside and
    linked into place, so a reader never finds the key's file empty. ``signer``: that key
    (made already, e.g. to sign its mark first), else a new one named ``name``."""
    signer = signer or note.Signer.generate(name)
    create_private(path, (signer.skey + "\n").encode())
    return signer


def read_key(path: Path) -> note.Signer:
    """The signing key in ``path``; never makes one. SigningKeyMissing when nothing is there
    (a dangling symlink included); SigningKeyUnusable when it is not a regular file, is open
    to others (mode & 0o077), cannot be read, or is not a signing key. Each names the file,
    never what it holds."""
    data = _key_bytes(path)
    try:
        return note.Signer.from_skey(data.decode("ascii").strip())
    except (UnicodeDecodeError, note.KeyInvalid):
        raise SigningKeyUnusable(
            f"the ledger's signing key {path} is not a signing key (a Go note signer key, one line)"
        ) from None


def _key_bytes(path: Path) -> bytes:
    """The bytes of the key's file, once it is a regular file readable by its owner alone."""
    named = f"the ledger's signing key {path}"
    try:
        data = read_private(path, KEY_BYTES_MAX + 1)
    except FileNotFoundError:
        dangling = " (a symlink to nothing)" if os.path.islink(path) else ""
        raise SigningKeyMissing(
            f"{named} is missing{dangling}: restore it, or make one with purgectl ledger key init "
            "(a log that has signed needs its own key back, or a new origin)"
        ) from None
    except PrivateFileUnusable as exc:
        raise SigningKeyUnusable(f"{named} {exc.reason}") from None
    if not data.strip():
        raise SigningKeyUnusable(f"{named} is empty")
    if len(data) > KEY_BYTES_MAX:
        raise SigningKeyUnusable(f"{named} is not a signing key (over {KEY_BYTES_MAX} bytes)")
    return data
