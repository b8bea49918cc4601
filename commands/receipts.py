"""Verifiable purge receipts: a purge's row proven in the ledger's signed Merkle log.

A **receipt** (``purgekeeper.tlog.receipt.receipt_document``) holds the row's leaf bytes (its canonical
JSON without ``prev_hash`` and ``row_hash``: ids, kind, selectors, digest, actor, reason and
times, never a body, an attachment name or a path), its inclusion proof and the newest signed
checkpoint. A **consistency** document proves that the newest checkpoint's tree extends an
older one. Both are checked offline by ``purgekeeper.tlog.verify`` with the log's verification key.

A **completion statement** (``completion``) says that the purge's cleanup completed, with
each step's counts and the time. It is a signed statement *outside* the log: a C2SP signed
note with the log's key, bound to the acceptance's leaf by the purge id, the ledger seq and
the leaf hash (``purgekeeper.tlog.verify`` documents the text and checks it, with or without the
receipt). It is not a row of the log, because a completion row would need the ledger's kind
CHECK migrated (and the copy's, the merge's and every reader's kinds with it), would add a
second ledger row per purge (doubling the ledger and the tree), and would make cleanup, a
worker, an appender of the ledger, which today only acceptances write, each in its own
transaction with its fences. A statement needs none of that: it is signed on request from
the step rows, which are the source of truth, and never stored. So a restore is handled as
it is: a restore re-arms cleanup, the purge is not complete until the re-armed steps
finish, and the statement signed afterwards carries the later time, and the later
completion is the one that counts (``purgekeeper.tlog.verify.later_completion``).

The log itself (``purgekeeper.storage.signed_log``) is written by the copy's writer in every group
commit, so a receipt exists as soon as an acceptance returns. ``log_file`` serves its
public part: the checkpoint and the tiles, which hold hashes only.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sqlalchemy import func, select

from purgekeeper.commands.settings import Settings
from purgekeeper.schema import ledger, purges
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import (
    CleanupNotComplete,
    InfrastructureError,
    LedgerNotCopied,
    MessagingUnavailable,
    NotFound,
    SigningKeyExists,
    SigningKeyMissing,
    SigningKeyUnusable,
    ValidationError,
)
from purgekeeper.schema.states import StepStatus
from purgekeeper.schema.tables import step_attempts
from purgekeeper.storage import ledger_copy, signed_log
from purgekeeper.storage.files import reason_of
from purgekeeper.storage.signed_log import LogRefused, SignedLog, TreeHead
from purgekeeper.tlog import note, receipt, tree
from purgekeeper.tlog.verify import (
    Completion,
    CompletionStep,
    ReceiptInvalid,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)

_T = TypeVar("_T")
NOT_SIGNED = "this handle does not sign checkpoints (purgekeeper.open(sign_checkpoints=False)): no receipts"


def signer_for(settings: Settings, database_id: str, *, first: bool = False) -> note.Signer:
    """The log's signing key: the file ``PURGEKEEPER_SIGNING_KEY_FILE`` names, else
    ``<data dir>/ledger-signing.key``. Reading it never makes one: SigningKeyMissing or
    SigningKeyUnusable, naming the file (``purgekeeper.storage.signed_log.read_key``).

    ``first`` (``purgectl init``, and the first checkpoint a handle signs): the default file is
    made (0600) when it is missing and no log of this database has ever signed here
    (``signed_before``), so a brand-new installation gets its key without an operator. A log
    that has signed never gets a new key this way: its key comes back from the operator
    (restored, or ``purgectl ledger key init`` with a new origin). A named file is never made."""
    path = settings.signing_key_path
    if first and settings.signing_key_file is None and not os.path.lexists(path):
        if not signed_before(settings, database_id):
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            try:
                return signed_log.load_or_create_key(path, name=signed_log.default_origin(database_id))
            except OSError as exc:
                raise SigningKeyUnusable(f"the ledger's signing key {path} cannot be made ({reason_of(exc)})") from None
    return signed_log.read_key(path)


def signed_before(settings: Settings, database_id: str) -> bool:
    """A log of this database has signed in the checkpoint directory: its log directory (or a
    retired one) is there, or its copy's head records a signed tree. A copy that cannot be read
    counts as signed: a key is never made on a guess."""
    if signed_log.has_signed(settings.checkpoint_dir, database_id):
        return True
    try:
        head = ledger_copy.LedgerCopy(settings.checkpoint_dir, database_id).head()
    except ledger_copy.COPY_FAILED:
        return True
    return head is not None and head.tree_size is not None


def create_signing_key(settings: Settings, database_id: str) -> note.Signer:
    """A new signing key in the key's file (``purgectl ledger key init``): an operator's act.
    SigningKeyExists when anything is there already: a key is never replaced."""
    path = settings.signing_key_path
    name = settings.log_origin or signed_log.default_origin(database_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return signed_log.create_key(path, name=name)
    except FileExistsError:
        raise SigningKeyExists(f"the ledger's signing key {path} exists already: it is never replaced") from None
    except OSError as exc:
        raise SigningKeyUnusable(f"the ledger's signing key {path} cannot be made ({reason_of(exc)})") from None


_SIGNING = frozenset({"key_id", "sign", "skey"})  # what signing asks a key for first (note.sign_note)


class _KeyOnFirstUse:
    """The log's key, read when the log first signs or verifies (made only by a first
    signature, ``signer_for``): a handle that accepts nothing creates no key, nor the data
    directory that holds it. A key that fails is read again at the next use."""

    def __init__(self, settings: Settings, database_id: str) -> None:
        self._load = functools.partial(signer_for, settings, database_id)
        self._signed_before = functools.partial(signed_before, settings, database_id)
        self._signer: note.Signer | None = None
        self._lock = threading.Lock()

    def check(self) -> None:
        """The key's file read afresh (a key lost under a running process shows): SigningKeyUnusable
        when it cannot be used. A missing key where no log has signed yet is none: the first
        signature makes it."""
        try:
            self._load()
        except SigningKeyMissing:
            if self._signed_before():
                raise

    def __getattr__(self, name: str) -> Any:
        with self._lock:
            if self._signer is None:
                self._signer = self._load(first=name in _SIGNING)
        return getattr(self._signer, name)


def log_for(settings: Settings, database_id: str) -> SignedLog:
    origin = settings.log_origin or signed_log.default_origin(database_id)
    signer = cast(note.Signer, _KeyOnFirstUse(settings, database_id))
    return SignedLog.beside(settings.checkpoint_dir, database_id, origin=origin, signer=signer)


@dataclass(frozen=True)
class LogState:
    """What monitoring shows of the signed log: the newest signed checkpoint's tree size and
    its age in seconds (None before the first, or while it cannot be verified), and why the
    signing key cannot be used (None when it can, and for a handle that does not sign)."""

    size: int | None = None
    checkpoint_age: float | None = None
    key_problem: str | None = None


class Receipts:
    """Receipts, consistency proofs and the public files of one handle's signed log."""

    def __init__(self, db: Database, log: SignedLog | None, *, copy_ledger: Callable[[], int]) -> None:
        self.db = db
        self._log = log
        self.copy_ledger = copy_ledger

    @property
    def log(self) -> SignedLog:
        if self._log is None:
            raise InfrastructureError(NOT_SIGNED)
        return self._log

    def head(self) -> TreeHead:
        """The newest signed checkpoint (the copy is caught up first when there is none)."""
        found = self._head()
        if found is None:
            self.copy_ledger()
            found = self._head()
        if found is None:
            raise LedgerNotCopied("the ledger holds no row yet: there is no signed checkpoint")
        return found

    def _head(self) -> TreeHead | None:
        try:
            return self.log.head()
        except LogRefused as exc:
            raise MessagingUnavailable(str(exc)) from None

    def receipt(self, purge_id: str) -> dict[str, Any]:
        """The purge's receipt: its ledger row proven in the newest signed checkpoint
        (format ``purgekeeper-receipt`` version 1; ``purgekeeper.tlog.verify`` checks it offline).
        NotFound for an unknown purge; LedgerNotCopied when its row cannot be copied yet."""
        entry = self._entry(purge_id)
        leaf = signed_log.leaf_of(entry)

        def prove() -> tuple[TreeHead, list[bytes]]:
            current = self._signed_head(entry)
            self._check_leaf(entry, leaf, current)
            proof = self.log.inclusion(entry.seq - 1, current)
            verify_inclusion(leaf_hash(leaf), entry.seq - 1, current.size, proof, current.root)
            return current, proof

        current, proof = self._edge_repaired(prove)
        return receipt.receipt_document(
            purge_id=purge_id, ledger_seq=entry.seq, leaf=leaf, inclusion_proof=proof, checkpoint=current.note
        )

    def _edge_repaired(self, read: Callable[[], _T]) -> _T:
        """``read()``; when the log's tiles fail it (partial tiles a crash lost: they take no
        fsync), once more after a catch-up of the copy, which writes them again
        (``SignedLog.repair_edge``). MessagingUnavailable when they still fail it."""
        try:
            return read()
        except (tree.HashMissing, tree.TileInvalid, ReceiptInvalid):
            self.log.forget()  # nothing read from a wrong edge stays
            self.copy_ledger()
        try:
            return read()
        except (tree.HashMissing, tree.TileInvalid, ReceiptInvalid) as exc:
            raise MessagingUnavailable(
                f"the signed log's tiles do not prove its checkpoint ({exc}): run purgectl ledger repair"
            ) from None

    def _signed_head(self, entry: ledger.LedgerEntry) -> TreeHead:
        """The newest signed checkpoint, once it holds the entry's row."""
        purge_id = entry.purge_id
        current = self._head()
        if current is None or current.size < entry.seq:
            self.copy_ledger()  # LedgerNotCopied when it cannot be done
            current = self.head()
        if current.size < entry.seq:
            raise LedgerNotCopied(
                f"purge {purge_id} (ledger seq {entry.seq}) is not in the signed log yet",
                purge_id=purge_id,
                ledger_seq=entry.seq,
            )
        return current

    def completion(self, purge_id: str) -> dict[str, Any]:
        """The purge's completion statement: ``{"purge_id", "ledger_seq", "completed_at",
        "attempts", "steps", "statement"}``, where ``statement`` is a note signed with the
        log's key, bound to the purge's leaf, with each step's counts and the time its last
        step finished (``purgekeeper.tlog.verify.verify_completion`` checks it offline). Signed on
        request from the step rows: after a restore re-arms cleanup, the purge is complete
        again only once those steps finish, and the statement then carries the later time.
        NotFound for an unknown purge; CleanupNotComplete while its cleanup has not completed
        (a step re-armed by a restore, still running, or incomplete); LedgerNotCopied when its
        row is not in the log yet."""
        entry = self._entry(purge_id)
        with self.db.read() as conn:
            rows = purges.steps_of(conn, [purge_id])
            attempts = conn.scalar(
                select(func.count()).select_from(step_attempts).where(step_attempts.c.purge_id == purge_id)
            )
        waiting = sorted(f"{row.kind} {row.status}" for row in rows if row.status != StepStatus.DONE.value)
        if waiting:
            raise CleanupNotComplete(f"the cleanup of purge {purge_id} has not completed: {', '.join(waiting)}")
        leaf = signed_log.leaf_of(entry)

        def signed() -> TreeHead:
            current = self._signed_head(entry)
            self._check_leaf(entry, leaf, current)
            return current

        self._edge_repaired(signed)
        completed_at = max((row.updated_at for row in rows), default=entry.accepted_at)
        statement = Completion(
            origin=self.log.origin,
            purge_id=purge_id,
            ledger_seq=entry.seq,
            leaf_hash=leaf_hash(leaf),
            completed_at=ledger.utc_text(completed_at),
            attempts=int(attempts or 0),
            steps=tuple(
                CompletionStep(row.kind, int(row.removed), int(row.retained_shared), int(row.held)) for row in rows
            ),
        )
        return {
            "purge_id": purge_id,
            "ledger_seq": entry.seq,
            "completed_at": statement.completed_at,
            "attempts": statement.attempts,
            "steps": [
                {"kind": s.kind, "removed": s.removed, "retained_shared": s.retained_shared, "held": s.held}
                for s in statement.steps
            ],
            "statement": self.sign_note(statement.text()),
        }

    def leaf_hash(self, purge_id: str) -> bytes:
        """The RFC 6962 leaf hash of a purge's row (what a statement about it can name)."""
        return leaf_hash(signed_log.leaf_of(self._entry(purge_id)))

    def consistency(self, from_size: int) -> dict[str, Any]:
        """``{"proof", "checkpoint"}``: the newest signed checkpoint's tree extends the tree of
        ``from_size`` leaves (RFC 9162 §2.1.4). ValidationError outside 1 .. its size."""
        if not isinstance(from_size, int) or isinstance(from_size, bool):
            raise ValidationError("from must be a tree size (an integer)")
        current = self._head()
        if current is None:
            self.copy_ledger()
            current = self._head()
        size = current.size if current else 0
        if current is None or not 1 <= from_size <= size:
            raise ValidationError(f"from must be a tree size from 1 to {size}, not {from_size}")

        def prove() -> list[bytes]:
            proof = self.log.consistency(from_size, current)
            old_root = tree.tree_hash(from_size, self.log.reader(current.size))
            verify_consistency(from_size, current.size, proof, old_root, current.root)  # every node counts
            return proof

        proof = self._edge_repaired(prove)
        return receipt.consistency_document(proof=proof, checkpoint=current.note)

    def check_key(self) -> None:
        """SigningKeyUnusable (naming the key's file) when the log's key cannot be used now:
        its file is read afresh. Nothing for a handle that does not sign."""
        if self._log is not None and isinstance(self._log.signer, _KeyOnFirstUse):
            self._log.signer.check()

    def log_state(self) -> LogState:
        """The log as monitoring shows it (``LogState``): the key's file read, the checkpoint's
        file stat-ed, and the checkpoint verified only when its text changed. Walks nothing."""
        if self._log is None:
            return LogState()
        try:
            self.check_key()
            problem = None
        except SigningKeyUnusable as exc:
            problem = exc.detail
        try:
            current = self._log.head()
        except (LogRefused, SigningKeyUnusable):
            current = None
        written = self._log.checkpoint_time()
        age = max(time.time() - written, 0.0) if written is not None else None
        return LogState(current.size if current else None, age, problem)

    def vkey(self) -> str:
        """The signed log's verification key (``<name>+<key id>+<base64 key>``)."""
        return self.log.signer.vkey

    def sign_note(self, text: str) -> str:
        """``text`` (ending in a newline, no blank line) as a note signed with the log's key."""
        return self.log.sign_note(text)

    def log_file(self, path: str) -> bytes:
        """``checkpoint`` or a tile of the newest checkpoint's tree; NotFound for anything else."""
        if path == signed_log.CHECKPOINT_FILE:
            return self.head().note.encode()
        try:
            wanted = tree.Tile.parse(path)
        except tree.TileInvalid:
            raise NotFound(f"no such file in the log: {path[:80]!r}") from None
        size = self.head().size
        if tree.tile_width(wanted.level, wanted.index, size) < wanted.width:
            raise NotFound(f"{wanted.path} is not part of the tree of size {size}")
        try:
            return self._edge_repaired(lambda: self.log.fetch(wanted))
        except MessagingUnavailable:
            raise NotFound(f"{wanted.path} is missing from the log") from None

    def _entry(self, purge_id: str) -> ledger.LedgerEntry:
        if not isinstance(purge_id, str) or not purge_id:
            raise ValidationError("purge_id must be a purge's id")
        with self.db.single() as conn:  # one statement: one round trip on PostgreSQL
            entry = ledger.entry_by_purge_id(conn, purge_id)
        if entry is None:
            raise NotFound(f"no purge {purge_id}")
        return entry

    def _check_leaf(self, entry: ledger.LedgerEntry, leaf: bytes, current: TreeHead) -> None:
        """The ledger's row is the log's leaf: MessagingUnavailable when not, once the tiles
        read prove the signed root (else ReceiptInvalid: the edge may be a crash's)."""
        stored = self.log.leaf_hash_at(entry.seq - 1, current.size)
        if stored != leaf_hash(leaf):
            proof = self.log.inclusion(entry.seq - 1, current)
            verify_inclusion(stored, entry.seq - 1, current.size, proof, current.root)
            raise MessagingUnavailable(
                f"the ledger's row at seq {entry.seq} is not the signed log's leaf {entry.seq - 1}: "
                "the database was restored? run purgectl ledger merge with the checkpoint directory"
            )
