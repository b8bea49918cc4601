"""The signing key's memory: a signed high-water mark kept beside the key.

A checkpoint directory can be restored from an old backup, lost, or handed an origin a later
deploy drops; the log's own files then cannot say what the key signed before. The **mark**
can: it lives beside the key (``<key file>.mark``, 0600), is signed by the key, and holds,
for each origin, the largest tree size ever signed and its root, the origins retired (with
their last size and root) and the key rotations. ``SignedLog`` consults it before every
signature and before it retires a directory (``refusal``), and moves it forward after each
checkpoint is signed and before it is published: the mark is never behind a checkpoint
anyone could have read. Back up the key and its mark together, outside database backups.

**Its text** is a C2SP signed note (signed by the key; by the old and the new key during a
rotation), one record a line, the origin last (it may hold spaces)::

    purgekeeper-signing-mark/v1
    counter <n>
    origin <size> <base64 root> <origin>
    retired <size> <base64 root> <origin>
    rotated <size> <base64 root> <new vkey> <origin>

``counter`` grows by one at each write. ``origin``: the newest tree signed for an origin in
use; ``retired``: an origin never to be signed again (a new origin took over, or ``ledger key
init`` gave a new key a new origin); ``rotated``: the key was rotated at that tree to the key
``<new vkey>`` (the statement is in the log's ``rotation/`` directory).

**Its file** holds two slots of ``SLOT_BYTES``: each a 4-byte big-endian length, the note's
UTF-8 bytes and zero padding. A write goes to the slot the other one is not (by the counter's
parity), in place (``pwrite``) and ``fdatasync``-ed: no rename, no directory fsync, one sync
per group commit. A crash while a slot is written leaves it torn and the other slot valid: the
newest slot that verifies wins. The mark is kept in memory with the bytes it was read from,
and verified again only when another process changed them (as the checkpoint's text is).
Replacing the mark (``replace``: ``ledger key init``, ``ledger key mark --adopt``) writes a
new file aside and renames it into place.

**Its lock**: several databases' logs, in several processes, may share one key (one data
directory, or one PURGEKEEPER_SIGNING_KEY_FILE), and a database's copy lock keeps out only its
own writers. So every change is a read, a check and a write under an flock of
``<mark>.lock`` (``MarkFile.locked``; not the mark's file, which ``replace`` renames over):
the mark is read again under the lock, so no process writes back a mark another one moved on
since, and no two write one slot at once.

**A key is never used without its mark**: a missing mark is a refusal, whatever the checkpoint
directory says (a key copied to a new host without it would sign its origin from size 1
again). A new key gets its mark before the key's file is made (``create``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import os
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from purgekeeper.schema.errors import SigningKeyUnusable
from purgekeeper.storage.files import PrivateFileUnusable, create_private, fsync_directory, read_private, reason_of
from purgekeeper.tlog import note
from purgekeeper.tlog.verify import KeyRotation, ReceiptInvalid, Verifier, decimal, open_note, split_note

MARK_FORMAT = "purgekeeper-signing-mark/v1"
MARK_SUFFIX = ".mark"
LOCK_SUFFIX = ".lock"  # <key file>.mark.lock: the flock every change of the mark holds
SLOT_BYTES = 16384  # about 150 origins: each record is a line of about 100 bytes
_LENGTH = 4
_SLOTS = 2
_held = threading.local()  # the marks' lock files this thread holds (``MarkFile.locked``)


@dataclass(frozen=True)
class Tip:
    """An origin's largest signed tree (size 0 and an empty root: known, never signed)."""

    origin: str
    size: int
    root: bytes

    def line(self, kind: str) -> str:
        return f"{kind} {self.size} {base64.b64encode(self.root).decode()} {self.origin}"


def _rotation_line(rotation: KeyRotation) -> str:
    return f"rotated {rotation.size} {base64.b64encode(rotation.root).decode()} {rotation.vkey} {rotation.origin}"


@dataclass(frozen=True)
class Mark:
    """What the key has signed: see the module's docstring."""

    counter: int = 0
    origins: tuple[Tip, ...] = ()
    retired: tuple[Tip, ...] = ()
    rotations: tuple[KeyRotation, ...] = field(default=())

    def tip(self, origin: str) -> Tip | None:
        return next((tip for tip in self.origins if tip.origin == origin), None)

    def retired_tip(self, origin: str) -> Tip | None:
        return next((tip for tip in self.retired if tip.origin == origin), None)

    def knows(self, origin: str) -> bool:
        return self.tip(origin) is not None or self.retired_tip(origin) is not None

    def key_of(self, origin: str) -> str | None:
        """The vkey the newest rotation of ``origin`` named (None: never rotated)."""
        named = [rotation.vkey for rotation in self.rotations if rotation.origin == origin]
        return named[-1] if named else None

    def advanced(self, origin: str, size: int, root: bytes) -> Mark:
        others = tuple(tip for tip in self.origins if tip.origin != origin)
        return replace(self, counter=self.counter + 1, origins=(*others, Tip(origin, size, root)))

    def retiring(self, tip: Tip) -> Mark:
        origins = tuple(known for known in self.origins if known.origin != tip.origin)
        retired = tuple(known for known in self.retired if known.origin != tip.origin)
        return replace(self, counter=self.counter + 1, origins=origins, retired=(*retired, tip))

    def rotated(self, rotation: KeyRotation) -> Mark:
        return replace(self, counter=self.counter + 1, rotations=(*self.rotations, rotation))

    def text(self) -> str:
        lines = [MARK_FORMAT, f"counter {self.counter}"]
        lines += [tip.line("origin") for tip in self.origins]
        lines += [tip.line("retired") for tip in self.retired]
        lines += [_rotation_line(rotation) for rotation in self.rotations]
        return "\n".join(lines) + "\n"

    @classmethod
    def parse(cls, text: str) -> Mark:
        """The mark of ``text``; ValueError (and nothing else) when it is not one of this version:
        a record of another kind (a later version's) or a number not strictly decimal included."""
        lines = text.removesuffix("\n").split("\n")
        if len(lines) < 2 or lines[0] != MARK_FORMAT or not lines[1].startswith("counter "):
            raise ValueError(f"not a {MARK_FORMAT}")
        counter = _decimal(lines[1].removeprefix("counter "))
        tips: dict[str, list[Tip]] = {"origin": [], "retired": []}
        rotations: list[KeyRotation] = []
        for line in lines[2:]:
            kind, _, rest = line.partition(" ")
            if kind == "rotated":
                rotations.append(_rotation(rest))
            elif kind in tips:
                tips[kind].append(_tip(rest))
            else:
                raise ValueError(f"a record of an unknown kind {kind[:40]!r}")
        return cls(counter, tuple(tips["origin"]), tuple(tips["retired"]), tuple(rotations))


def _tip(rest: str) -> Tip:
    size, root, origin = _fields(rest, 3)
    return Tip(origin, _decimal(size), _root(root))


def _rotation(rest: str) -> KeyRotation:
    size, root, vkey, origin = _fields(rest, 4)
    return KeyRotation(origin, _decimal(size), _root(root), vkey)


def _fields(rest: str, count: int) -> list[str]:
    """``count`` fields separated by one space, the last (an origin: it may hold spaces) not empty."""
    fields = rest.split(" ", count - 1)
    if len(fields) != count or not fields[-1]:
        raise ValueError(f"a record of {len(fields)} fields, not {count}")
    return fields


def _decimal(text: str) -> int:
    try:
        return decimal(text, "a number of the mark")
    except ReceiptInvalid as exc:
        raise ValueError(exc.reason) from None


def _root(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError("not a base64 root") from exc


class MarkFile:
    """The mark's file beside the key, and what this process last read or wrote of it. Every
    change holds the mark's lock (``locked``): ``update`` reads, checks and writes under it;
    ``replace`` (an operator's act) and ``create`` (a new key's first mark) take it too, and
    their callers hold it around their own checks."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._known: tuple[bytes, str, Mark] | None = None  # the slots' bytes, the vkey, the mark

    @classmethod
    def beside(cls, key_path: Path) -> MarkFile:
        return cls(key_path.with_name(key_path.name + MARK_SUFFIX))

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + LOCK_SUFFIX)

    def exists(self) -> bool:
        return os.path.lexists(self.path)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The mark's flock, held by this thread while the block runs (inside one already, through
        any MarkFile of the same file: held). Other processes, and this process's other threads,
        wait to change the mark meanwhile."""
        held: set[str] = _held.__dict__.setdefault("paths", set())
        name = os.path.abspath(self.lock_path)
        if name in held:
            yield
            return
        fd = self._open_lock()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held.add(name)
            try:
                yield
            finally:
                held.discard(name)
        finally:
            os.close(fd)  # releases the flock

    def _open_lock(self) -> int:
        try:
            return os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise SigningKeyUnusable(
                f"the signing key's mark {self.path} cannot be locked ({self.lock_path}: {reason_of(exc)})"
            ) from None

    def current(self, verifier: Verifier) -> Mark:
        """The mark, verified with ``verifier``. SigningKeyUnusable (naming the file, never its
        contents) when it is missing (a key is never used without its mark, whatever the log's
        directory says), cannot be read, or no slot verifies and reads as a mark."""
        found = self.load(verifier)
        if found is None:
            raise SigningKeyUnusable(
                f"the signing key's mark {self.path} is missing: a key is never used without its mark (a key "
                "moved without it would sign its log again from the start). Restore it with the key (they are "
                "backed up together), or, after checking the newest checkpoint this key ever signed, write it "
                "from the log's checkpoint with purgectl ledger key mark --adopt"
            )
        return found

    def update(self, verifier: Verifier, change: Callable[[Mark], Mark], signers: Sequence[note.Signer]) -> Mark:
        """``change`` of the mark as it is now, written when it differs, all under the mark's lock:
        the mark is read again under it, so what another process wrote meanwhile is never written
        back over. ``change`` may refuse (SigningKeyUnusable): nothing is written then."""
        with self.locked():
            mark = self.current(verifier)
            changed = change(mark)
            if changed != mark:
                self._write(changed, signers)
            return changed

    def load(self, verifier: Verifier) -> Mark | None:
        """The mark verified with ``verifier``, None when there is no file."""
        data = self._read()
        if data is None:
            return None
        with self._lock:
            if self._known is not None and self._known[:2] == (data, verifier.vkey):
                return self._known[2]
        mark = _newest(data, verifier)
        if mark is None:
            raise SigningKeyUnusable(self._unverified(data, verifier))
        with self._lock:
            self._known = (data, verifier.vkey, mark)
        return mark

    def unverified(self) -> Mark | None:
        """The newest slot's mark read without its signature checked (what a lost key's mark
        still says: ``ledger key init`` retires the origins it names); None when there is none."""
        data = self._read() if os.path.lexists(self.path) else None
        marks = [mark for _note, mark in _slots(data or b"")]
        return max(marks, key=lambda mark: mark.counter) if marks else None

    def _write(self, mark: Mark, signers: Sequence[note.Signer]) -> None:
        """``mark`` signed into the slot its counter names, in place and fdatasynced (``update``'s,
        under the lock)."""
        slot = _slot_bytes(note.sign_note(mark.text(), list(signers)), self.path)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise SigningKeyUnusable(self._unwritable(exc)) from None
        try:
            os.pwrite(fd, slot, (mark.counter % _SLOTS) * SLOT_BYTES)
            os.fdatasync(fd)
            data = os.pread(fd, SLOT_BYTES * _SLOTS, 0)
        except OSError as exc:
            raise SigningKeyUnusable(self._unwritable(exc)) from None
        finally:
            os.close(fd)
        self._remember(data, signers, mark)

    def replace(self, mark: Mark, signers: Sequence[note.Signer]) -> None:
        """A new file holding ``mark`` alone, renamed over whatever is there (an operator's act:
        ``ledger key init``, ``mark --adopt``), under the mark's lock."""
        data = self._file_bytes(mark, signers)
        aside = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        with self.locked():
            try:
                self._write_new(aside, data)
                os.rename(aside, self.path)
                fsync_directory(self.path.parent)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(aside)
                raise SigningKeyUnusable(self._unwritable(exc)) from None
            self._remember(data, signers, mark)

    def create(self, mark: Mark, signers: Sequence[note.Signer]) -> None:
        """A new key's first mark, made before the key's file, never over anything there
        (FileExistsError: a mark is replaced only by an operator), under the mark's lock."""
        data = self._file_bytes(mark, signers)
        with self.locked():
            try:
                create_private(self.path, data)
            except FileExistsError:
                raise
            except OSError as exc:
                raise SigningKeyUnusable(self._unwritable(exc)) from None
            self._remember(data, signers, mark)

    def _unwritable(self, exc: OSError) -> str:
        return f"the signing key's mark {self.path} cannot be written ({reason_of(exc)})"

    def _file_bytes(self, mark: Mark, signers: Sequence[note.Signer]) -> bytes:
        data = bytearray(SLOT_BYTES * _SLOTS)
        slot = _slot_bytes(note.sign_note(mark.text(), list(signers)), self.path)
        offset = (mark.counter % _SLOTS) * SLOT_BYTES
        data[offset : offset + len(slot)] = slot
        return bytes(data)

    @staticmethod
    def _write_new(path: Path, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _remember(self, data: bytes, signers: Sequence[note.Signer], mark: Mark) -> None:
        with self._lock:
            self._known = (data, signers[0].vkey, mark) if len(signers) == 1 else None

    def _read(self) -> bytes | None:
        """Both slots' bytes, once the file is a regular file its owner alone can read (never
        through a symlink); None when there is none."""
        try:
            return read_private(self.path, SLOT_BYTES * _SLOTS, follow=False)
        except FileNotFoundError:
            return None
        except PrivateFileUnusable as exc:
            raise SigningKeyUnusable(f"the signing key's mark {self.path} {exc.reason}") from None

    def _unverified(self, data: bytes, verifier: Verifier) -> str:
        named = f"the signing key's mark {self.path}"
        signers = {f"{s.name}+{s.key_id.hex()}" for text, _mark in _slots(data) for s in split_note(text)[1]}
        if signers and f"{verifier.name}+{verifier.key_id.hex()}" not in signers:
            return (
                f"{named} is signed by another key ({', '.join(sorted(signers))}), not this one "
                f"({verifier.name}+{verifier.key_id.hex()}): a log's origin is signed by a new key only after a "
                "rotation (purgectl ledger key rotate, with the old key); restore the key the mark names, or give "
                "the new key a new origin (purgectl ledger key init --origin)"
            )
        return (
            f"{named} holds no mark that verifies with the signing key (damaged, or written by a newer "
            "version?): restore it with the key"
        )


def _slots(data: bytes) -> list[tuple[str, Mark]]:
    """Each slot's note and mark, signatures unchecked; a torn or empty slot is left out."""
    found = []
    for index in range(_SLOTS):
        slot = data[index * SLOT_BYTES : (index + 1) * SLOT_BYTES]
        length = int.from_bytes(slot[:_LENGTH], "big")
        if not 0 < length <= SLOT_BYTES - _LENGTH:
            continue
        try:
            text = slot[_LENGTH : _LENGTH + length].decode("utf-8")
            found.append((text, Mark.parse(split_note(text)[0])))
        except (ValueError, ReceiptInvalid):  # UnicodeDecodeError is a ValueError; parse raises no other
            continue
    return found


def _newest(data: bytes, verifier: Verifier) -> Mark | None:
    """The slot of the largest counter that verifies with ``verifier``."""
    verified = []
    for text, mark in _slots(data):
        with contextlib.suppress(ReceiptInvalid):
            open_note(text, verifier)
            verified.append(mark)
    return max(verified, key=lambda mark: mark.counter) if verified else None


def _slot_bytes(signed: str, path: Path) -> bytes:
    encoded = signed.encode()
    if len(encoded) > SLOT_BYTES - _LENGTH:
        raise SigningKeyUnusable(f"the signing key's mark {path} is full (over {SLOT_BYTES} bytes a slot)")
    return len(encoded).to_bytes(_LENGTH, "big") + encoded


# -- the rules ----------------------------------------------------------------------------------


def refusal(mark: Mark, origin: str, size: int, root: bytes, hash_at: Callable[[int], bytes]) -> str | None:
    """Why the tree of ``size``/``root`` may not be signed for ``origin`` (None: it may):
    a retired origin, a size below the mark's, the mark's size with another root, or a larger
    tree that does not extend the mark's (``hash_at(n)``: the new tree's hash at size ``n``)."""
    if mark.retired_tip(origin) is not None:
        return f"the origin {origin} is retired"
    tip = mark.tip(origin)
    if tip is None or tip.size == 0:
        return None
    signed = f"the key signed {origin} at size {tip.size}"
    if size < tip.size:
        return f"{signed}: signing size {size} would go below it"
    if size == tip.size and root != tip.root:
        return f"{signed}: signing that size with another root would fork the log"
    if size > tip.size and hash_at(tip.size) != tip.root:
        return f"{signed}: the tree of size {size} does not extend it"
    return None
