"""What only an operator does to the signed log's key and its mark (``purgectl ledger key``):
make a key (``init``), show or adopt the mark (``mark``, ``mark --adopt``), rotate the key
(``rotate``). Nothing here runs on its own: each is a decision the docs' "Signing key" page
describes, with what to check first.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from purgekeeper.commands.settings import Settings
from purgekeeper.commands.signing_key import mark_for, origin_for, signed_before
from purgekeeper.schema.errors import SigningKeyExists, SigningKeyUnusable, ValidationError
from purgekeeper.storage import key_rotation, signed_log
from purgekeeper.storage.files import fsync_directory, reason_of
from purgekeeper.storage.signed_log import LogRefused, SignedLog, TreeHead
from purgekeeper.storage.signing_mark import Mark, MarkFile, Tip
from purgekeeper.tlog import note
from purgekeeper.tlog.verify import (
    EMPTY_ROOT,
    KeyRotation,
    ReceiptInvalid,
    open_checkpoint,
    parse_checkpoint,
    split_note,
)

NEXT_KEY_SUFFIX = ".next"  # a rotation's new key, until it takes the key's name


# -- init ---------------------------------------------------------------------------------------


def create_signing_key(settings: Settings, database_id: str, *, origin: str | None = None) -> note.Signer:
    """A new signing key in the key's file (``purgectl ledger key init``), and its mark. Never
    over a key (SigningKeyExists). For a database whose log has signed, or where a surviving
    mark knows the origin, only with a new origin (``origin``, else PURGEKEEPER_LOG_ORIGIN)
    that no mark, log or retired log here knows (ValidationError otherwise): the same origin is
    never signed by a fresh key. The new mark retires every origin known here.

    The mark is written before the key, both under the mark's lock: a crash between them
    leaves no key, and a mark that knows the old origins, so ``init`` runs again with the same
    new origin."""
    path = settings.signing_key_path
    path.parent.mkdir(parents=True, exist_ok=True)
    marks = mark_for(settings)
    with marks.locked():
        if os.path.lexists(path):
            raise SigningKeyExists(f"the ledger's signing key {path} exists already: it is never replaced")
        signer, known = _new_origin(settings, database_id, origin)
        marks.replace(Mark(counter=1, retired=tuple(known.values())), [signer])
        try:
            return signed_log.create_key(path, name=signer.name, signer=signer)
        except FileExistsError:
            raise SigningKeyExists(f"the ledger's signing key {path} exists already: it is never replaced") from None
        except OSError as exc:
            raise SigningKeyUnusable(f"the ledger's signing key {path} cannot be made ({reason_of(exc)})") from None


def _new_origin(settings: Settings, database_id: str, origin: str | None) -> tuple[note.Signer, dict[str, Tip]]:
    """A new key for ``origin`` (else the configured one), with every origin known here; a
    ValidationError when the origin is known, or the log has signed and no new one is named."""
    chosen = origin or origin_for(settings, database_id)
    known = _known_origins(settings, database_id)
    if chosen in known or (signed_before(settings, database_id) and origin is None and settings.log_origin is None):
        raise ValidationError(
            f"the log of this database has signed under {', '.join(sorted(known)) or 'its default origin'}: a new "
            f"key signs only a new origin (purgectl ledger key init --origin NEW, then set PURGEKEEPER_LOG_ORIGIN "
            f"to it), never {chosen}; or restore the old key with its mark"
        )
    try:
        return note.Signer.generate(chosen), known
    except note.KeyInvalid:
        raise ValidationError(f"the origin {chosen!r} is not a key name (no spaces, no '+')") from None


def _known_origins(settings: Settings, database_id: str) -> dict[str, Tip]:
    """Every origin known here, with its newest tree known: the surviving mark's (its signature
    cannot be checked without its key), the log's checkpoint and the retired logs'; the default
    origin too once the log has signed."""
    known: dict[str, Tip] = {}
    if signed_before(settings, database_id):
        default = signed_log.default_origin(database_id)
        known[default] = Tip(default, 0, EMPTY_ROOT)
    for tip in _checkpoints_here(settings, database_id):
        known[tip.origin] = tip
    survivor = mark_for(settings).unverified()
    if survivor is not None:
        for tip in (*survivor.origins, *survivor.retired):
            known[tip.origin] = tip
    return known


def _checkpoints_here(settings: Settings, database_id: str, verifier: Any = None) -> list[Tip]:
    """The tree of each checkpoint in the log's and the retired logs' directories (verified
    with ``verifier`` when given: one that does not verify is left out)."""
    name = f"{database_id}{signed_log.LOG_SUFFIX}"
    try:
        entries = sorted(os.listdir(settings.checkpoint_dir))
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        if entry != name and not entry.startswith(f"{name}.retired-"):
            continue
        try:
            text = (settings.checkpoint_dir / entry / signed_log.CHECKPOINT_FILE).read_text(encoding="utf-8")
            tree = open_checkpoint(text, verifier) if verifier else parse_checkpoint(split_note(text)[0])
        except (OSError, UnicodeDecodeError, ReceiptInvalid):
            continue
        found.append(Tip(tree.origin, tree.size, tree.root))
    return found


# -- the mark -----------------------------------------------------------------------------------


def show_mark(settings: Settings, database_id: str) -> dict[str, Any]:
    """The mark, verified with the key (SigningKeyUnusable when it cannot be)."""
    key = signed_log.read_key(settings.signing_key_path)
    marks = mark_for(settings)
    return describe(marks, marks.current(key.verifier))


def describe(marks: MarkFile, mark: Mark) -> dict[str, Any]:
    def tip(t: Tip) -> dict[str, Any]:
        return {"origin": t.origin, "size": t.size, "root": t.root.hex()}

    return {
        "file": str(marks.path),
        "counter": mark.counter,
        "origins": [tip(t) for t in mark.origins],
        "retired": [tip(t) for t in mark.retired],
        "rotations": [{**tip(Tip(r.origin, r.size, r.root)), "vkey": r.vkey} for r in mark.rotations],
    }


def adopt_mark(settings: Settings, database_id: str, *, never_signed: bool = False) -> dict[str, Any]:
    """The mark written from the log's newest checkpoint that verifies with the key (and the
    retired logs' that do): an operator's decision after an upgrade from a version without
    marks, or a lost mark, once the newest checkpoint ever published (at the witnesses, in
    receipts handed out) is known to be this one or older. Refused (ValidationError) while a
    mark that verifies holds anything, or when there is no checkpoint of the log's origin (a
    mark is never adopted from nothing: a key moved without its mark would sign from size 1).
    To run under the copy's lock (``writers_kept_out``), and it holds the mark's lock: nothing
    is signed between the checks and the write. ``never_signed``: the operator says the key
    has never signed a checkpoint anyone could have seen (a key made outside purgekeeper and
    named by PURGEKEEPER_SIGNING_KEY_FILE): with no checkpoint here and no tree recorded by
    the copy, its mark starts empty."""
    key = signed_log.read_key(settings.signing_key_path)
    marks = mark_for(settings)
    with marks.locked():
        try:
            existing = marks.load(key.verifier)
        except SigningKeyUnusable:
            existing = None  # a mark that does not verify is what adopting replaces
        if existing is not None and (existing.origins or existing.retired):
            raise ValidationError(f"the signing key's mark {marks.path} verifies and holds the log's trees: kept")
        origin = origin_for(settings, database_id)
        tips = {tip.origin: tip for tip in _checkpoints_here(settings, database_id, key.verifier)}
        if origin not in tips and never_signed and not tips and not signed_before(settings, database_id):
            mark = Mark(counter=(existing.counter if existing else 0) + 1)
            marks.replace(mark, [key])
            return describe(marks, mark)
        if origin not in tips:
            raise ValidationError(
                f"no checkpoint of {origin} verifies with the key: nothing to adopt (a key that has never signed: "
                "--never-signed)"
            )
        retired = tuple(tip for name, tip in tips.items() if name != origin)
        mark = Mark(counter=(existing.counter if existing else 0) + 1, origins=(tips[origin],), retired=retired)
        marks.replace(mark, [key])
    return describe(marks, mark)


# -- rotation -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rotated:
    """A rotation done: the new key, the statement's path in the log, where the old key is."""

    vkey: str
    old_vkey: str
    statement: str
    size: int
    retired_key: str


def rotate_signing_key(settings: Settings, database_id: str) -> Rotated:
    """A new key for the same origin (``purgectl ledger key rotate``), to run under the copy's
    lock so that no checkpoint is signed meanwhile. The steps, each safe to crash after (a run
    again resumes: the new key waits in ``<key>.next``):

    1. the new key is made in ``<key>.next`` (0600, fsynced): nothing uses it yet;
    2. the statement (signed by the old key, naming the new one, at the current tree) is
       published as ``rotation/<n>``: it hands over nothing until the new key signs;
    3. the mark, signed by both keys, records the rotation: both keys verify it, so whichever
       key the file holds after a crash reads it;
    4. the current tree's checkpoint is signed again by both keys and published: readers
       holding either key verify it;
    5. the old key is linked aside (``<key>.retired-<time>``, for the operator to destroy),
       then ``<key>.next`` renamed over the key (atomic: the key's file is always one of the
       two), and the directory fsynced. Running processes read the new key at their next
       signature (its file changed), and from then on sign with it alone."""
    path = settings.signing_key_path
    old = signed_log.read_key(path)
    marks = mark_for(settings)
    origin = origin_for(settings, database_id)
    log = SignedLog.beside(settings.checkpoint_dir, database_id, origin=origin, signer=old, mark=marks)
    head = _rotatable_head(log, marks.current(old.verifier))
    new = _next_key(path, old.name)
    statement = _statement(log, old, new, head)
    marks.update(old.verifier, functools.partial(_rotated, origin, head, new.vkey), [old, new])
    key_rotation.republish(log, head, [new, old])
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    retired = path.with_name(f"{path.name}.retired-{stamp}")
    os.link(path, retired)
    os.rename(_next_path(path), path)
    fsync_directory(path.parent)
    return Rotated(new.vkey, old.vkey, statement, head.size, str(retired))


def _rotatable_head(log: SignedLog, mark: Mark) -> TreeHead:
    """The log's checkpoint, verified with the old key, and the mark's tree of its origin."""
    try:
        head = log.head()
    except LogRefused as exc:
        raise SigningKeyUnusable(f"the log cannot be rotated: {exc}") from None
    if head is None or head.checkpoint.origin != log.origin:
        raise ValidationError(f"the log {log.origin} has signed nothing yet: there is nothing to rotate")
    _at_head(mark, log.origin, head)
    return head


def _at_head(mark: Mark, origin: str, head: TreeHead) -> None:
    tip = mark.tip(origin)
    if tip is None or (tip.size, tip.root) != (head.size, head.root):
        raise SigningKeyUnusable(
            f"the log's checkpoint (size {head.size}) is not the mark's newest tree: let the log sign again "
            "(purgectl ledger checkpoint) and see purgectl health before rotating"
        )


def _rotated(origin: str, head: TreeHead, vkey: str, mark: Mark) -> Mark:
    """``mark`` (read again under its lock) recording the rotation of ``origin`` to ``vkey`` at
    ``head``'s tree, once (a rotation run again after a crash finds it there)."""
    _at_head(mark, origin, head)
    if mark.key_of(origin) == vkey:
        return mark
    return mark.rotated(KeyRotation(origin, head.size, head.root, vkey))


def _next_path(path: Path) -> Path:
    return path.with_name(path.name + NEXT_KEY_SUFFIX)


def _next_key(path: Path, name: str) -> note.Signer:
    """The new key: the one an interrupted rotation left in ``<key>.next``, else a new one."""
    try:
        return signed_log.create_key(_next_path(path), name=name)
    except FileExistsError:
        return signed_log.read_key(_next_path(path))


def _statement(log: SignedLog, old: note.Signer, new: note.Signer, head: TreeHead) -> str:
    """The path of the statement handing ``log`` over to ``new``: the one an interrupted run
    published, else a new one at ``head``'s tree."""
    published = key_rotation.statements(log.directory)
    if published and key_rotation.rotation_of(published[-1]).vkey == new.vkey:
        return f"{key_rotation.ROTATION_DIR}/{len(published)}"
    rotation = KeyRotation(log.origin, head.size, head.root, new.vkey)
    return key_rotation.publish_statement(log, note.sign_note(rotation.text(), [old]))
