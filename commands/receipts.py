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

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import func, select

from purgekeeper.commands.settings import Settings
from purgekeeper.commands.signing_key import _KeyOnFirstUse
from purgekeeper.commands.signing_key import log_for as log_for  # where the handle's wiring finds them
from purgekeeper.commands.signing_key import signed_before as signed_before
from purgekeeper.commands.signing_key import signer_for as signer_for
from purgekeeper.commands.witnessing import Witnesses, Witnessing, check_quorum_setting, parse_witnesses
from purgekeeper.schema import ledger, purges
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import (
    CleanupNotComplete,
    InfrastructureError,
    LedgerNotCopied,
    MessagingUnavailable,
    NotFound,
    SigningKeyUnusable,
    ValidationError,
    WitnessRefused,
)
from purgekeeper.schema.states import StepStatus
from purgekeeper.schema.tables import step_attempts
from purgekeeper.storage import key_rotation, signed_log
from purgekeeper.storage.signed_log import LogRefused, SignedLog, TreeHead
from purgekeeper.storage.witnessed import WitnessStatus
from purgekeeper.tlog import receipt, tree
from purgekeeper.tlog.verify import (
    Completion,
    CompletionStep,
    ReceiptInvalid,
    leaf_hash,
    open_checkpoint,
    verify_consistency,
    verify_inclusion,
)

_T = TypeVar("_T")
NOT_SIGNED = "this handle does not sign checkpoints (purgekeeper.open(sign_checkpoints=False)): no receipts"


def witnessing_for(settings: Settings, log: SignedLog | None) -> Witnessing | None:
    """The thread that asks the log's witnesses to cosign (started here), None without any
    (``PURGEKEEPER_WITNESSES`` unset, or a handle that does not sign)."""
    witnesses = parse_witnesses(settings.witnesses)
    if log is None or not witnesses:
        return None
    quorum = check_quorum_setting(settings.witness_quorum, witnesses)
    witnessing = Witnessing(Witnesses(log, witnesses, quorum=quorum))
    witnessing.start()
    return witnessing


@dataclass(frozen=True)
class LogState:
    """What monitoring shows of the signed log: the newest signed checkpoint's tree size and
    its age in seconds (None before the first, or while it cannot be verified), and why the
    signing key cannot be used (None when it can, and for a handle that does not sign)."""

    size: int | None = None
    checkpoint_age: float | None = None
    key_problem: str | None = None
    witnesses: tuple[WitnessStatus, ...] = ()  # each configured witness, as last asked
    witnessed_size: int | None = None  # the newest checkpoint with its quorum of cosignatures

    @property
    def witness_problems(self) -> list[str]:
        """Each witness that refused the log's checkpoint, with why."""
        return [f"the witness {w.name} refused: {w.refused}" for w in self.witnesses if w.refused]


def _disclosed(entry: ledger.LedgerEntry, *, for_subject: bool) -> dict[str, Any] | None:
    """What the receipt discloses of the row's committed fields: all of them for the operator,
    none for the data subject. A row without salts (its leaf is version 1) has nothing to
    disclose, and cannot make a subject's receipt: its leaf holds the fields in clear."""
    if not isinstance(for_subject, bool):
        raise ValidationError("for_subject must be true or false")
    if entry.salts is None and for_subject:
        raise ValidationError(
            f"purge {entry.purge_id} was accepted before receipts could leave out who and why (ledger row "
            f"{entry.seq}, leaf version 1): its leaf holds the actor, the reason and the request's metadata in "
            "clear, so no receipt of it can be handed over without them; give the operator's receipt only "
            "where those may be disclosed"
        )
    if entry.salts is None or for_subject:
        return None
    return receipt.disclosure(entry.hashed_fields())


class Receipts:
    """Receipts, consistency proofs and the public files of one handle's signed log."""

    def __init__(
        self,
        db: Database,
        log: SignedLog | None,
        *,
        copy_ledger: Callable[[], int],
        witnessing: Witnessing | None = None,
    ) -> None:
        self.db = db
        self._log = log
        self.copy_ledger = copy_ledger
        self.witnessing = witnessing

    def close(self) -> None:
        """Stop asking the witnesses (the handle closes)."""
        if self.witnessing is not None:
            self.witnessing.stop()

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
            self.check_key()  # a key or mark that cannot sign says so, rather than "no row yet"
            raise LedgerNotCopied("the ledger holds no row yet: there is no signed checkpoint")
        return found

    def _head(self) -> TreeHead | None:
        try:
            return self.log.head()
        except LogRefused as exc:
            raise MessagingUnavailable(str(exc)) from None

    def receipt(self, purge_id: str, *, for_subject: bool = False) -> dict[str, Any]:
        """The purge's receipt: its ledger row proven in the newest signed checkpoint (format
        ``purgekeeper-receipt``; ``purgekeeper.tlog.verify`` checks it offline). The operator's
        receipt (the default) discloses the actor, the reason and the request's metadata
        (version 2: each value with its salt, which the verifier checks against the leaf's
        commitments). ``for_subject=True`` leaves them out (version 1): the receipt to hand to
        the person whose data was purged, which proves the acceptance without saying who
        accepted it or why. NotFound for an unknown purge; ValidationError for a subject's
        receipt of a row written before leaf version 2 (its leaf holds those fields in
        clear); LedgerNotCopied when its row cannot be copied yet."""
        entry = self._entry(purge_id)
        disclosed = _disclosed(entry, for_subject=for_subject)
        leaf = signed_log.leaf_of(entry)

        def prove() -> tuple[TreeHead, list[bytes]]:
            current = self._cosigned(self._signed_head(entry), entry.seq)
            self._check_leaf(entry, leaf, current)
            proof = self.log.inclusion(entry.seq - 1, current)
            verify_inclusion(leaf_hash(leaf), entry.seq - 1, current.size, proof, current.root)
            return current, proof

        current, proof = self._edge_repaired(prove)
        return receipt.receipt_document(
            purge_id=purge_id,
            ledger_seq=entry.seq,
            leaf=leaf,
            inclusion_proof=proof,
            checkpoint=current.note,
            disclosed=disclosed,
            rotations=key_rotation.rotations_for(self.log, current),
        )

    def _cosigned(self, current: TreeHead, seq: int) -> TreeHead:
        """The checkpoint a receipt of row ``seq`` carries: with witnesses, the newest one
        that holds their quorum when it holds the row, else ``current`` with the cosignatures
        gathered for it so far (``purgekeeper.commands.witnessing``)."""
        if self.witnessing is None:
            return current
        witnesses = self.witnessing.witnesses
        published = self._own_checkpoint(witnesses.published(), current)
        if published is not None and published.size >= seq:
            return published
        gathered = self._own_checkpoint(witnesses.files.note(), current)
        return gathered if gathered is not None and gathered.size == current.size else current

    def _own_checkpoint(self, note: str | None, current: TreeHead) -> TreeHead | None:
        """``note`` as a checkpoint of this log's tree: signed by its key, of its origin, at a
        size the tree has, with the tree's root at that size (O(log n)); else None."""
        if note is None:
            return None
        try:
            found = open_checkpoint(note, self.log.signer.verifier)
        except ReceiptInvalid:
            return None
        if found.origin != current.checkpoint.origin or found.size > current.size:
            return None
        root = current.root if found.size == current.size else tree.tree_hash(found.size, self.log.reader(current.size))
        return TreeHead(found, note) if root == found.root else None

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
            self.check_key()  # a key or mark that cannot sign says so, rather than "not in the log yet"
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
        rotations = key_rotation.rotations_for(self.log, current)
        return receipt.consistency_document(proof=proof, checkpoint=current.note, rotations=rotations)

    def check_key(self) -> None:
        """SigningKeyUnusable (naming the key's file) when the log's key cannot be used now:
        its file is read afresh. Nothing for a handle that does not sign."""
        if self._log is not None and isinstance(self._log.signer, _KeyOnFirstUse) and self._log.signer.check():
            self._log.check_mark()  # the key's memory refuses what the log holds: the same problem

    def check_witnesses(self) -> None:
        """WitnessRefused naming each witness that refused the log's newest checkpoint (as
        the last round recorded it). Nothing without witnesses."""
        problems = LogState(witnesses=self._witness_state()[0]).witness_problems
        if problems:
            raise WitnessRefused("; ".join(problems))

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
        return LogState(current.size if current else None, age, problem, *self._witness_state())

    def _witness_state(self) -> tuple[tuple[WitnessStatus, ...], int | None]:
        if self.witnessing is None:
            return (), None
        witnesses = self.witnessing.witnesses
        recorded = witnesses.files.statuses()
        statuses = tuple(recorded.get(w.name) or WitnessStatus(w.name, w.url) for w in witnesses.witnesses)
        try:
            current = self._log.head() if self._log is not None else None
        except LogRefused:
            current = None
        published = self._own_checkpoint(witnesses.published(), current) if current is not None else None
        return statuses, published.size if published is not None else None

    def vkey(self) -> str:
        """The signed log's verification key (``<name>+<key id>+<base64 key>``)."""
        return self.log.signer.vkey

    def sign_note(self, text: str) -> str:
        """``text`` (ending in a newline, no blank line) as a note signed with the log's key."""
        return self.log.sign_note(text)

    def log_file(self, path: str) -> bytes:
        """``checkpoint`` or a tile of the newest checkpoint's tree; NotFound for anything else."""
        if path == signed_log.CHECKPOINT_FILE:
            return self.published_checkpoint().encode()
        if path.startswith(f"{key_rotation.ROTATION_DIR}/"):  # a key rotation's statement
            statement = key_rotation.statement_file(self.log.directory, path)
            if statement is None:
                raise NotFound(f"no such file in the log: {path[:80]!r}")
            return statement
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

    def published_checkpoint(self) -> str:
        """The checkpoint the log publishes: the newest signed one, or, with witnesses, the
        newest that holds the quorum of their cosignatures (NotFound before the first)."""
        if self.witnessing is None:
            return self.head().note
        found = self._own_checkpoint(self.witnessing.witnesses.published(), self.head())
        if found is None:
            raise NotFound("no checkpoint of the log holds its witnesses' quorum of cosignatures yet")
        return found.note

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
