"""The signing key's mark in its file (``purgekeeper.storage.signing_mark``): two slots written
in place alternately, the newest that verifies wins (a torn slot leaves the other), and the
rules a signature must pass (below, beside, not extending, retired)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from purgekeeper.schema.errors import SigningKeyUnusable
from purgekeeper.storage.signing_mark import SLOT_BYTES, Mark, MarkFile, Tip, refusal
from purgekeeper.tlog import note

KEY = note.Signer.generate("purgekeeper/unit")
ROOT = hashlib.sha256(b"five").digest()
OTHER = hashlib.sha256(b"another five").digest()


def marks(tmp_path: Path, *, signed_before: bool = True) -> MarkFile:
    return MarkFile(tmp_path / "ledger-signing.key.mark", signed_before=lambda: signed_before)


def test_writes_alternate_slots_and_the_newest_that_verifies_wins(tmp_path: Path) -> None:
    first = marks(tmp_path)
    mark = Mark()
    for size in range(1, 5):
        mark = mark.advanced("o", size, ROOT)
        first.write(mark, [KEY])
    assert os.stat(first.path).st_size == 2 * SLOT_BYTES and os.stat(first.path).st_mode & 0o777 == 0o600
    assert marks(tmp_path).current(KEY.verifier).tip("o") == Tip("o", 4, ROOT)
    with open(first.path, "r+b") as torn:  # a crash in the middle of the newest slot's write
        torn.seek((mark.counter % 2) * SLOT_BYTES + 40)
        torn.write(b"\xff" * 20)
    assert marks(tmp_path).current(KEY.verifier).tip("o") == Tip("o", 3, ROOT)


def test_a_missing_mark_is_a_fresh_start_only_before_the_log_signed(tmp_path: Path) -> None:
    assert marks(tmp_path, signed_before=False).current(KEY.verifier) == Mark()
    with pytest.raises(SigningKeyUnusable) as refused:
        marks(tmp_path).current(KEY.verifier)
    assert str(tmp_path) in refused.value.detail and "--adopt" in refused.value.detail


def test_another_keys_mark_is_refused_naming_the_file_only(tmp_path: Path) -> None:
    other = note.Signer.generate("purgekeeper/unit")
    marks(tmp_path).write(Mark().advanced("o", 5, ROOT), [other])
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
