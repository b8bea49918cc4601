"""The offline verifier after a key rotation (``purgekeeper.tlog.verify``), both backends: a
receipt signed after a rotation verifies with the key the log publishes now (directly) and
with any older key (following the statements from the first that key signed); a key that is
neither is refused; ``--newer`` does the same for the newer checkpoint, following the
consistency document's statements when it carries them (an old receipt) or else the
receipt's."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import purgekeeper
from purgekeeper.commands import key_commands
from purgekeeper.storage import key_rotation
from purgekeeper.storage.key_rotation import rotation_of
from purgekeeper.tlog import note
from purgekeeper.tlog.verify import ReceiptInvalid, Verifier, verify_receipt
from tests.helpers.receipts import accept

Pk = purgekeeper.Purgekeeper


def rotate(pk: Pk) -> key_commands.Rotated:
    with pk.copy.writers_kept_out():
        return key_commands.rotate_signing_key(pk.settings, pk.database_key)


def stranger(pk: Pk) -> str:
    """A key of the log's name that the log never used: neither old nor new."""
    return note.Signer.generate(Verifier.from_vkey(pk.log_key()).name).vkey


def newer_with_rotations(pk: Pk, from_size: int) -> dict[str, Any]:
    """The consistency document from ``from_size`` to the newest checkpoint: after a rotation
    it carries the log's rotation statements with their proofs to that checkpoint (as a receipt
    carries them), the same as the statements' own."""
    document = pk.consistency(from_size)
    head = pk.receipts.log.head()
    assert head is not None and head.note == document["checkpoint"]
    assert document["rotations"] == key_rotation.rotations_for(pk.receipts.log, head)
    return document


def test_a_receipt_after_a_rotation_verifies_with_the_old_key_and_the_new(
    open_pk: Callable[..., Pk], tmp_path: Path
) -> None:
    pk = open_pk()
    accept(pk, 2)
    rotated = rotate(pk)
    accepted = accept(pk, 2, prefix="after")
    document = pk.receipt(accepted[1].purge_id)
    assert document["rotations"] and pk.log_key() == rotated.vkey
    assert verify_receipt(document, rotated.old_vkey).checkpoint.size == 4  # followed
    assert verify_receipt(document, rotated.vkey).checkpoint.size == 4  # directly: what operators publish
    with pytest.raises(ReceiptInvalid, match=r"no signature by .*, nor does any rotation statement"):
        verify_receipt(document, stranger(pk))
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(document))
    for key, code in ((rotated.vkey, 0), (rotated.old_vkey, 0), (stranger(pk), 1)):
        run = [sys.executable, "-m", "purgekeeper.tlog.verify", str(path), "--key", key]
        assert subprocess.run(run, capture_output=True, timeout=60).returncode == code


def test_following_starts_at_the_first_statement_the_given_key_signed(open_pk: Callable[..., Pk]) -> None:
    pk = open_pk()
    accept(pk, 1)
    first = rotate(pk)
    accept(pk, 1, prefix="between")
    second = rotate(pk)
    accepted = accept(pk, 1, prefix="after")
    document = pk.receipt(accepted[0].purge_id)
    assert len(document["rotations"]) == 2 and first.vkey == second.old_vkey
    for key in (first.old_vkey, first.vkey, second.vkey):
        assert verify_receipt(document, key).checkpoint.size == 3
    forger = note.Signer.generate(Verifier.from_vkey(first.old_vkey).name)
    forged = note.sign_note(rotation_of(document["rotations"][0]["statement"]).text(), [forger])
    replaced = [{**document["rotations"][0], "statement": forged}, document["rotations"][1]]
    assert verify_receipt({**document, "rotations": replaced}, first.vkey).checkpoint.size == 3  # not its to follow
    with pytest.raises(ReceiptInvalid, match="nor does any rotation statement"):
        verify_receipt({**document, "rotations": replaced}, first.old_vkey)
    with pytest.raises(ReceiptInvalid, match="nor does any rotation statement"):
        verify_receipt({**document, "rotations": document["rotations"][:1]}, first.vkey)


def test_newer_across_a_rotation_with_either_key(open_pk: Callable[..., Pk]) -> None:
    pk = open_pk()
    accept(pk, 2)
    rotated = rotate(pk)
    accepted = accept(pk, 1, prefix="after")
    document = pk.receipt(accepted[0].purge_id)
    accept(pk, 2, prefix="later")
    newer = pk.consistency(3)
    for key in (rotated.old_vkey, rotated.vkey):
        result = verify_receipt(document, key, newer_checkpoint=newer["checkpoint"], consistency_proof=newer)
        assert (result.checkpoint.size, result.newer and result.newer.size) == (3, 5)
    with pytest.raises(ReceiptInvalid, match="no signature by"):
        verify_receipt(document, stranger(pk), newer_checkpoint=newer["checkpoint"], consistency_proof=newer)


def test_an_old_receipt_follows_the_consistency_document_s_rotations(open_pk: Callable[..., Pk]) -> None:
    """A receipt handed out before the rotation carries none: the document from its tree to a
    checkpoint the new key alone signed does."""
    pk = open_pk()
    accepted = accept(pk, 2)
    old = pk.receipt(accepted[1].purge_id)
    assert "rotations" not in old
    rotated = rotate(pk)
    accept(pk, 2, prefix="after")
    newer = newer_with_rotations(pk, 2)
    result = verify_receipt(old, rotated.old_vkey, newer_checkpoint=newer["checkpoint"], consistency_proof=newer)
    assert result.newer is not None and result.newer.size == 4
    bare = {key: value for key, value in newer.items() if key != "rotations"}
    with pytest.raises(ReceiptInvalid, match="nor does any rotation statement"):
        verify_receipt(old, rotated.old_vkey, newer_checkpoint=bare["checkpoint"], consistency_proof=bare)
    wrong = {**newer, "rotations": [{**newer["rotations"][0], "proof": []}]}
    with pytest.raises(ReceiptInvalid, match="consistency proof"):
        verify_receipt(old, rotated.old_vkey, newer_checkpoint=newer["checkpoint"], consistency_proof=wrong)
