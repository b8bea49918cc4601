"""Keys, signed notes and checkpoints (``purgekeeper.tlog.note``, read back by ``purgekeeper.tlog.verify``): Go's
sumdb/note test vector, round trips, and the notes that must be refused."""

from __future__ import annotations

import base64

import pytest

from purgekeeper.tlog import note
from purgekeeper.tlog.verify import Checkpoint, ReceiptInvalid, Verifier, open_checkpoint, open_note, parse_checkpoint

# The test vector of golang.org/x/mod/sumdb/note (note_test.go, TestSign).
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
GO_NOTE = (
    GO_TEXT
    + "\n— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)
ENOCH_LINE = (
    "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
)
ROOT = bytes(range(32))


def test_gos_key_and_note_are_reproduced_byte_for_byte() -> None:
    signer = note.Signer.from_skey(GO_SKEY)
    assert signer.vkey == GO_VKEY
    assert signer.skey == GO_SKEY
    assert note.sign_note(GO_TEXT, [signer]) == GO_NOTE
    assert open_note(GO_NOTE, Verifier.from_vkey(GO_VKEY)) == GO_TEXT


def test_a_generated_key_signs_a_checkpoint_its_vkey_opens() -> None:
    signer = note.Signer.generate("purgekeeper.example/ledger")
    assert note.Signer.from_skey(signer.skey) == signer
    assert signer.seed.hex() not in repr(signer)
    signed = note.sign_checkpoint("purgekeeper.example/ledger", 42, ROOT, signer, extensions=["timestamp 1"])
    assert signed.startswith(f"purgekeeper.example/ledger\n42\n{base64.b64encode(ROOT).decode()}\ntimestamp 1\n\n")
    assert open_checkpoint(signed, Verifier.from_vkey(signer.vkey)) == Checkpoint(
        "purgekeeper.example/ledger", 42, ROOT, ("timestamp 1",)
    )


def test_other_signatures_are_ignored_and_the_keys_own_must_verify() -> None:
    verifier = Verifier.from_vkey(GO_VKEY)
    assert open_note(GO_NOTE + ENOCH_LINE, verifier) == GO_TEXT
    assert open_note(GO_TEXT + "\n" + ENOCH_LINE + GO_NOTE[len(GO_TEXT) + 1 :], verifier) == GO_TEXT
    with pytest.raises(ReceiptInvalid, match="no signature by PeterNeumann"):
        open_note(GO_TEXT + "\n" + ENOCH_LINE, verifier)


def test_a_tampered_note_is_refused() -> None:
    verifier = Verifier.from_vkey(GO_VKEY)
    with pytest.raises(ReceiptInvalid, match="does not verify"):
        open_note(GO_NOTE.replace("problem,", "problem;"), verifier)
    signature = GO_NOTE.rsplit(" ", 1)[1].strip()
    raw = bytearray(base64.b64decode(signature))
    raw[-1] ^= 1
    with pytest.raises(ReceiptInvalid, match="does not verify"):
        open_note(GO_NOTE.replace(signature, base64.b64encode(raw).decode()), verifier)


def test_the_wrong_key_is_refused() -> None:
    other = note.Signer.generate("PeterNeumann")
    with pytest.raises(ReceiptInvalid, match="no signature"):
        open_note(GO_NOTE, other.verifier)
    same_id = Verifier(name="PeterNeumann", key_id=bytes.fromhex("c74f20a3"), public_key=other.public_key)
    with pytest.raises(ReceiptInvalid, match="does not verify"):
        open_note(GO_NOTE, same_id)


@pytest.mark.parametrize(
    "text",
    [
        GO_TEXT,
        GO_NOTE.rstrip("\n"),
        GO_NOTE.replace("— ", "- "),
        GO_NOTE.replace("— PeterNeumann ", "— Peter Neumann "),
        GO_NOTE.replace("x08go/", "x08go!"),
        GO_NOTE + "\n",
        GO_NOTE.replace("problem,", "problem,\x07"),
        GO_TEXT + "\n— PeterNeumann AAAA\n",
    ],
)
def test_a_malformed_note_is_refused(text: str) -> None:
    with pytest.raises(ReceiptInvalid):
        open_note(text, Verifier.from_vkey(GO_VKEY))


@pytest.mark.parametrize(
    "vkey",
    [
        "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3+AhpjZHBxQ8SEMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "Peter+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10",
        "PeterNeumann+zzzzzzzz+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    ],
)
def test_a_malformed_verification_key_is_refused(vkey: str) -> None:
    with pytest.raises(ReceiptInvalid):
        Verifier.from_vkey(vkey)


@pytest.mark.parametrize(
    "skey",
    [
        GO_SKEY.replace("c74f20a3", "c74f20a4"),
        GO_SKEY.replace("PRIVATE+KEY+", "PRIVATE+"),
        GO_SKEY.replace("+AYEK", "+AoEK"),
        GO_SKEY[:-4],
        GO_SKEY.replace("PeterNeumann", "Peter Neumann"),
    ],
)
def test_a_malformed_signing_key_is_refused(skey: str) -> None:
    with pytest.raises(note.KeyInvalid):
        note.Signer.from_skey(skey)


@pytest.mark.parametrize(
    "text",
    [
        "origin\n42\n",
        "\n42\n" + base64.b64encode(ROOT).decode() + "\n",
        "origin\n042\n" + base64.b64encode(ROOT).decode() + "\n",
        "origin\n-1\n" + base64.b64encode(ROOT).decode() + "\n",
        "origin\n42\n" + base64.b64encode(ROOT[:31]).decode() + "\n",
        "origin\n42\n" + base64.b64encode(ROOT).decode(),
        "origin\n٤2\n" + base64.b64encode(ROOT).decode() + "\n",
    ],
)
def test_a_malformed_checkpoint_is_refused(text: str) -> None:
    with pytest.raises(ReceiptInvalid):
        parse_checkpoint(text)


def test_a_checkpoint_is_written_only_with_a_one_line_origin_and_a_32_byte_root() -> None:
    signer = note.Signer.generate("log")
    for origin, size, root in (("", 1, ROOT), ("a\nb", 1, ROOT), ("log", -1, ROOT), ("log", 1, ROOT[:8])):
        with pytest.raises(ValueError):
            note.sign_checkpoint(origin, size, root, signer)
    with pytest.raises(ValueError):
        note.sign_note("no newline", [signer])
