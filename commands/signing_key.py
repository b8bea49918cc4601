"""The signed log's key and its mark, as a handle uses them: where they are, when a key may be
made without an operator, and the key read when the log first signs (and again whenever its
file changes: a rotation is picked up by running processes at their next signature).

The mark (``purgekeeper.storage.signing_mark``) lives beside the key, ``<key file>.mark``;
a brand-new installation gets it before its key, and a key is never used without it. What
only an operator does (a key made for a log that has signed, a mark adopted, a key rotated)
is in ``purgekeeper.commands.key_commands``.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any, cast

from purgekeeper.commands.settings import Settings
from purgekeeper.schema.errors import SigningKeyMissing, SigningKeyUnusable
from purgekeeper.storage import ledger_copy, signed_log
from purgekeeper.storage.files import reason_of
from purgekeeper.storage.signed_log import SignedLog
from purgekeeper.storage.signing_mark import MARK_SUFFIX, Mark, MarkFile
from purgekeeper.tlog import note


def signer_for(settings: Settings, database_id: str, *, first: bool = False) -> note.Signer:
    """The log's signing key: the file ``PURGEKEEPER_SIGNING_KEY_FILE`` names, else
    ``<data dir>/ledger-signing.key``. Reading it never makes one: SigningKeyMissing or
    SigningKeyUnusable, naming the file (``purgekeeper.storage.signed_log.read_key``).

    ``first`` (``purgectl init``, and the first checkpoint a handle signs): the default file is
    made (0600), its mark first, when it is missing and no log of this database has ever signed
    here (``signed_before``), so a brand-new installation gets its key without an operator. A
    log that has signed never gets a new key this way, nor a key whose mark is there: its key
    comes back from the operator (restored, or ``purgectl ledger key init`` with a new origin).
    A named file is never made."""
    path = settings.signing_key_path
    if first and settings.signing_key_file is None and not os.path.lexists(path):
        if not signed_before(settings, database_id):
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            return _first_key(settings, database_id)
    return signed_log.read_key(path)


def _first_key(settings: Settings, database_id: str) -> note.Signer:
    """A brand-new installation's key: its (empty) mark made first, then the key, under the
    mark's lock; the key another process made meanwhile when there is one. A mark already there
    is never replaced (it may hold what another database's log signed with a key since lost):
    SigningKeyMissing naming it."""
    path = settings.signing_key_path
    marks = mark_for(settings)
    with marks.locked():
        if os.path.lexists(path):
            return signed_log.read_key(path)
        signer = note.Signer.generate(signed_log.default_origin(database_id))
        try:
            marks.create(Mark(), [signer])
        except FileExistsError:
            raise _keyless_mark(settings) from None
        try:
            return signed_log.create_key(path, name=signer.name, signer=signer)
        except OSError as exc:  # FileExistsError: made outside the lock, by hand
            raise SigningKeyUnusable(f"the ledger's signing key {path} cannot be made ({reason_of(exc)})") from None


def _keyless_mark(settings: Settings) -> SigningKeyMissing:
    key = settings.signing_key_path
    return SigningKeyMissing(
        f"the ledger's signing key {key} is missing and its mark {key}{MARK_SUFFIX} is there: the key has "
        "signed, and a new key is never made over its mark. Restore the key (with its mark), or make a new "
        "one with purgectl ledger key init (it retires the origins the mark knows)"
    )


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


def mark_for(settings: Settings) -> MarkFile:
    """The mark beside the log's key, shared by every database's log that shares the key (a
    missing one is a refusal: ``MarkFile.current``)."""
    return MarkFile.beside(settings.signing_key_path)


def origin_for(settings: Settings, database_id: str) -> str:
    return settings.log_origin or signed_log.default_origin(database_id)


_SIGNING = frozenset({"key_id", "sign", "skey"})  # what signing asks a key for first (note.sign_note)


class _KeyOnFirstUse:
    """The log's key, read when the log first signs or verifies (made only by a first
    signature, ``signer_for``): a handle that accepts nothing creates no key, nor the data
    directory that holds it. A key that fails is read again at the next use, and so is a key
    whose file changed (a ``stat`` a use: a rotation is picked up at the next signature)."""

    def __init__(self, settings: Settings, database_id: str) -> None:
        self._settings = settings
        self._path = settings.signing_key_path
        self._load = functools.partial(signer_for, settings, database_id)
        self._signed_before = functools.partial(signed_before, settings, database_id)
        self._signer: note.Signer | None = None
        self._read_from: tuple[int, int, int] | None = None
        self._lock = threading.Lock()

    def check(self) -> bool:
        """The key's file read afresh (a key lost under a running process shows): SigningKeyUnusable
        when it cannot be used. A missing key where no log has signed yet is none: the first
        signature makes it, unless its mark is there (the key signed: it is never made again).
        True when there is a key (its mark can be checked)."""
        try:
            self._load()
        except SigningKeyMissing:
            if self._signed_before():
                raise
            if os.path.lexists(self._path.with_name(self._path.name + MARK_SUFFIX)):
                raise _keyless_mark(self._settings) from None
            return False
        return True

    def _file(self) -> tuple[int, int, int] | None:
        try:
            info = os.stat(self._path)
        except OSError:
            return None
        return (info.st_dev, info.st_ino, info.st_mtime_ns)

    def __getattr__(self, name: str) -> Any:
        with self._lock:
            found = self._file()
            if self._signer is None or found != self._read_from:
                self._signer = None
                self._signer = self._load(first=name in _SIGNING)
                self._read_from = self._file()
        return getattr(self._signer, name)


def log_for(settings: Settings, database_id: str) -> SignedLog:
    signer = cast(note.Signer, _KeyOnFirstUse(settings, database_id))
    return SignedLog.beside(
        settings.checkpoint_dir,
        database_id,
        origin=origin_for(settings, database_id),
        signer=signer,
        mark=mark_for(settings),
    )
