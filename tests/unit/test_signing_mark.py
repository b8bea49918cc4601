"""The signing key's mark in its file (``purgekeeper.storage.signing_mark``): two slots written
in place alternately, the newest that verifies wins (a torn slot leaves the other), and the
rules a signature must pass (below, beside, not extending, retired)."""

from __future__ import annotations

import functools
import hashlib
import os
import random
from pathlib import Path

import pytest

from purgekeeper.schema.errors import SigningKeyUnusable
from purgekeeper.storage.signing_mark import SLOT_BYTES, Mark, MarkFile, Tip, refusal
from purgekeeper.tlog import note

KEY = note.Signer.generate("purgekeeper/unit")
ROOT = hashlib.sha256(b"five").digest()
OTHER = hashlib.sha256(b"another five").digest()


def marks(tmp_path: Path) -> MarkFile:
    return MarkFile(tmp_path / "ledger-signing.key.mark")


def advance(marks: MarkFile, origin: str, size: int) -> Mark:
    return marks.update(KEY.verifier, functools.partial(Mark.advanced, origin=origin, size=size, root=ROOT), [KEY])


def test_writes_alternate_slots_and_the_newest_that_verifies_wins(tmp_path: Path) -> None:
    first = marks(tmp_path)
    first.create(Mark(), [KEY])
    for size in range(1, 5):
        mark = advance(first, "o", size)
    assert os.stat(first.path).st_size == 2 * SLOT_BYTES and os.stat(first.path).st_mode & 0o777 == 0o600
    assert marks(tmp_path).current(KEY.verifier).tip("o") == Tip("o", 4, ROOT)
    with open(first.path, "r+b") as torn:  # a crash in the middle of the newest slot's write
        torn.seek((mark.counter % 2) * SLOT_BYTES + 40)
        torn.write(b"\xff" * 20)
    assert marks(tmp_path).current(KEY.verifier).tip("o") == Tip("o", 3, ROOT)


def test_a_missing_mark_is_always_a_refusal_and_a_first_mark_never_replaces_one(tmp_path: Path) -> None:
    for ask in (marks(tmp_path).current, lambda verifier: advance(marks(tmp_path), "o", 1)):
        with pytest.raises(SigningKeyUnusable) as refused:
            ask(KEY.verifier)
        assert str(tmp_path) in refused.value.detail and "--adopt" in refused.value.detail
    assert not marks(tmp_path).exists()
    marks(tmp_path).create(Mark(), [KEY])
    advance(marks(tmp_path), "o", 1)
    with pytest.raises(FileExistsError):
        marks(tmp_path).create(Mark(), [KEY])
    assert marks(tmp_path).current(KEY.verifier).tip("o") == Tip("o", 1, ROOT)


def test_another_keys_mark_is_refused_naming_the_file_only(tmp_path: Path) -> None:
    other = note.Signer.generate("purgekeeper/unit")
    marks(tmp_path).create(Mark().advanced("o", 5, ROOT), [other])
    with pytest.raises(SigningKeyUnusable) as refused:
        marks(tmp_path).current(KEY.verifier)
    assert "another key" in refused.value.detail and ROOT.hex() not in refused.value.detail


def test_the_rules() -> None:
    mark = Mark().advanced("o", 5, ROOT).retiring(Tip("old", 3, OTHER))

    def hash_at(size: int) -> bytes:
        return ROOT if size == 5 else OTHER

    assert refusal(mark, "o", 5, ROOT, hash_at) is None
    assert refusal(mark, "o", 8, ROOT, hash_at) is None
    assert "below" in str(refusal(mark, "o", 4, ROOT, hash_at))
    assert "fork" in str(refusal(mark, "o", 5, OTHER, hash_at))
    assert "does not extend" in str(refusal(mark, "o", 8, ROOT, lambda size: OTHER))
    assert "retired" in str(refusal(mark, "old", 9, ROOT, hash_at))
    assert refusal(mark, "new", 1, OTHER, hash_at) is None
    assert Mark.parse(mark.text()) == mark


def one_slot(tmp_path: Path, text: str) -> MarkFile:
    """A mark file whose one slot holds ``text`` signed by the key (a torn or future slot)."""
    encoded = note.sign_note(text, [KEY]).encode()
    data = bytearray(2 * SLOT_BYTES)
    data[: 4 + len(encoded)] = len(encoded).to_bytes(4, "big") + encoded
    path = tmp_path / "ledger-signing.key.mark"
    path.write_bytes(bytes(data))
    path.chmod(0o600)
    return marks(tmp_path)


ROOT_TEXT = "Zm9vZm9vZm9vZm9vZm9vZm9vZm9vZm9vZm9vZm8="


@pytest.mark.parametrize(
    "line",
    [
        f"future 1 {ROOT_TEXT} o",  # a record kind of a later version
        f"origin +1_0 {ROOT_TEXT} o",  # int() would read 10
        f"origin 01 {ROOT_TEXT} o",
        f"rotated 1 {ROOT_TEXT}",
        "origin",
    ],
)
def test_a_slot_that_is_not_a_mark_of_this_version_is_a_refusal(tmp_path: Path, line: str) -> None:
    with pytest.raises(ValueError):
        Mark.parse(Mark(counter=3).text() + line + "\n")
    with pytest.raises(SigningKeyUnusable) as refused:
        one_slot(tmp_path, Mark(counter=3).text() + line + "\n").current(KEY.verifier)
    assert str(tmp_path) in refused.value.detail


def test_a_counter_is_a_strict_decimal() -> None:
    for counter in ("+3", "0_3", "03", " 3", "3 "):
        with pytest.raises(ValueError):
            Mark.parse(Mark(counter=3).text().replace("counter 3", f"counter {counter}"))


def test_damaged_slots_are_read_as_a_mark_or_refused_never_another_error(tmp_path: Path) -> None:
    first = marks(tmp_path)
    first.create(Mark(), [KEY])
    for size in range(1, 4):
        first.update(KEY.verifier, lambda mark: mark.retiring(Tip(f"r{mark.counter}", 1, OTHER)), [KEY])
        advance(first, f"o{size}", size)
    intact = first.path.read_bytes()
    chance = random.Random(8)
    for _ in range(400):
        damaged = bytearray(intact)
        for _ in range(chance.randint(1, 4)):
            damaged[chance.randrange(2 * SLOT_BYTES if chance.random() < 0.2 else 700)] = chance.randrange(256)
        first.path.write_bytes(bytes(damaged))
        try:
            marks(tmp_path).current(KEY.verifier)
        except SigningKeyUnusable:
            pass
