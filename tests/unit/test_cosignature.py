"""Witness cosignatures (C2SP tlog-cosignature, Ed25519 cosignature/v1): built here by hand
from the spec's text with ``cryptography`` alone, then checked against
``purgekeeper.tlog.verify`` (which must accept them and refuse each change) and
``purgekeeper.tlog.witness.Cosigner`` (which must produce the same bytes: Ed25519 is
deterministic)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from purgekeeper.tlog import note, receipt, verify
from purgekeeper.tlog.verify import Cosignature, ReceiptInvalid
from purgekeeper.tlog.witness import Cosigner, CosignerKeyInvalid

ORIGIN = "purgekeeper.example/ledger/cosigned"
NAME = "witness.example.com/w1"
SEED = bytes(range(32))
TIME = 1679315147  # the spec's example
LOG = note.Signer(ORIGIN, bytes(range(100, 132)))
ROOT = hashlib.sha256(b"a root").digest()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def by_hand(seed: bytes, name: str, text: str, timestamp: int, *, signed_time: int | None = None) -> tuple[str, str]:
    """The vkey and the cosignature line, from the spec: key id SHA-256(name || 0x0A || 0x04 ||
    key)[:4]; signature over "cosignature/v1\\ntime <t>\\n" and the note text; the line's
    bytes key id || u64 big-endian timestamp || signature."""
    private = Ed25519PrivateKey.from_private_bytes(seed)
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    key_id = hashlib.sha256(name.encode() + b"\n" + b"\x04" + public).digest()[:4]
    message = f"cosignature/v1\ntime {timestamp if signed_time is None else signed_time}\n".encode() + text.encode()
    signature = private.sign(message)
    line = f"\u2014 {name} {b64(key_id + timestamp.to_bytes(8, 'big') + signature)}\n"
    vkey = f"{name}+{key_id.hex()}+{b64(bytes([0x04]) + public)}"
    return vkey, line


def checkpoint(size: int = 7, extensions: tuple[str, ...] = ()) -> str:
    return note.sign_checkpoint(ORIGIN, size, ROOT, LOG, extensions=extensions)


def test_a_cosignature_built_by_hand_verifies_and_the_cosigner_makes_the_same_bytes() -> None:
    signed = checkpoint()
    vkey, line = by_hand(SEED, NAME, note.checkpoint_text(ORIGIN, 7, ROOT), TIME)
    assert verify.verified_cosignatures(signed + line, [vkey]) == [Cosignature(NAME, TIME)]
    cosigner = Cosigner(NAME, SEED)
    assert cosigner.vkey == vkey
    assert cosigner.cosign(signed, TIME) == line, "the whole note and its text sign alike"
    assert cosigner.cosign(note.checkpoint_text(ORIGIN, 7, ROOT), TIME) == line


def test_the_spec_s_example_cosignature_holds_its_time_as_a_big_endian_u64() -> None:
    raw = base64.b64decode(
        "jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA=="
    )
    assert len(raw) == 4 + 8 + 64
    assert int.from_bytes(raw[4:12], "big") == TIME


def test_the_log_s_own_checkpoint_still_opens_with_cosignature_lines_on_it() -> None:
    others = [Cosigner.generate(f"witness.example.com/w{n}") for n in range(3)]
    signed = checkpoint() + "".join(c.cosign(checkpoint(), TIME) for c in others)
    assert verify.open_checkpoint(signed, LOG.verifier).size == 7


@pytest.mark.parametrize(
    ("change", "counted"),
    [
        ("another key id", []),
        ("another name", []),
        ("another cosigner", []),
    ],
)
def test_a_line_by_a_key_not_given_is_ignored(change: str, counted: list[Cosignature]) -> None:
    text = note.checkpoint_text(ORIGIN, 7, ROOT)
    vkey, line = by_hand(SEED, NAME, text, TIME)
    if change == "another key id":
        _, encoded = line.rsplit(" ", 1)
        raw = base64.b64decode(encoded)
        line = line.replace(encoded, b64(bytes([raw[0] ^ 1]) + raw[1:]) + "\n")
    elif change == "another name":
        line = line.replace(NAME, "witness.example.com/w2")
    else:
        _, line = by_hand(bytes(32), NAME, text, TIME)
    assert verify.verified_cosignatures(checkpoint() + line, [vkey]) == counted
    with pytest.raises(ReceiptInvalid, match="0 of 1 witnesses cosigned this checkpoint, quorum 1"):
        verify.check_quorum(checkpoint() + line, [vkey])


def test_a_line_by_a_given_key_that_does_not_verify_counts_as_absent() -> None:
    text = note.checkpoint_text(ORIGIN, 7, ROOT)
    vkey, wrong_time = by_hand(SEED, NAME, text, TIME + 1, signed_time=TIME)
    assert verify.verified_cosignatures(checkpoint() + wrong_time, [vkey]) == []
    with pytest.raises(ReceiptInvalid, match=r"0 of 1 witnesses cosigned .*; 1 line by their keys did not verify"):
        verify.check_quorum(checkpoint() + wrong_time, [vkey])
    _, line = by_hand(SEED, NAME, text, TIME)
    tampered = note.sign_checkpoint(ORIGIN, 8, ROOT, LOG) + line
    assert verify.verified_cosignatures(tampered, [vkey]) == []
    garbage = f"\u2014 {NAME} {b64(verify.parse_cosigner_key(vkey).key_id + bytes(72))}\n"
    assert verify.verified_cosignatures(checkpoint() + line + garbage, [vkey]) == [Cosignature(NAME, TIME)]


def test_a_line_that_does_not_verify_leaves_a_met_quorum_met() -> None:
    """Anyone relaying a receipt can add a line under a witness's name and key id: it must not
    undo the cosignatures that verify (it counts as that witness's absence, no more)."""
    witnesses = [Cosigner.generate(f"witness.example.com/w{n}") for n in range(2)]
    vkeys = [w.vkey for w in witnesses]
    signed = checkpoint() + witnesses[0].cosign(checkpoint(), TIME)
    short = f"\u2014 {witnesses[1].name} {b64(witnesses[1].key_id + bytes(8))}\n"  # no signature at all
    forged = f"\u2014 {witnesses[1].name} {b64(witnesses[1].key_id + bytes(72))}\n"
    for line in (short, forged):
        assert verify.check_quorum(signed + line, vkeys, 1) == [Cosignature(witnesses[0].name, TIME)]
        with pytest.raises(ReceiptInvalid, match=r"1 of 2 witnesses cosigned .*; 1 line by their keys did not"):
            verify.check_quorum(signed + line, vkeys)
    with pytest.raises(ReceiptInvalid, match="; 2 lines by their keys did not verify"):
        verify.check_quorum(signed + short + forged, vkeys)
    document = _receipt_of(witnesses[0].cosign, forged)
    assert verify.verify_receipt(document, LOG.vkey, witnesses=vkeys, quorum=1).cosignatures


def test_extension_lines_are_part_of_the_cosigned_message() -> None:
    extended = checkpoint(extensions=("timestamp 1",))
    vkey, line = by_hand(SEED, NAME, note.checkpoint_text(ORIGIN, 7, ROOT, ["timestamp 1"]), TIME)
    assert verify.verified_cosignatures(extended + line, [vkey]) == [Cosignature(NAME, TIME)]
    assert Cosigner(NAME, SEED).cosign(extended, TIME) == line
    _, without = by_hand(SEED, NAME, note.checkpoint_text(ORIGIN, 7, ROOT), TIME)
    assert verify.verified_cosignatures(extended + without, [vkey]) == []


def test_a_timestamp_above_2_63_minus_1_is_no_cosignature() -> None:
    vkey, line = by_hand(SEED, NAME, note.checkpoint_text(ORIGIN, 7, ROOT), 2**63)
    assert verify.verified_cosignatures(checkpoint() + line, [vkey]) == []
    with pytest.raises(ValueError, match="2\\^63-1"):
        Cosigner(NAME, SEED).cosign(checkpoint(), 2**63)
    assert verify.verified_cosignatures(checkpoint() + Cosigner(NAME, SEED).cosign(checkpoint(), 2**63 - 1), [vkey])


def test_keys_of_the_other_type_are_refused_both_ways() -> None:
    with pytest.raises(ReceiptInvalid, match="not a cosignature/v1 key \\(type 0x04"):
        verify.parse_cosigner_key(LOG.vkey)
    with pytest.raises(ReceiptInvalid, match="not an Ed25519 key"):
        verify.Verifier.from_vkey(Cosigner(NAME, SEED).vkey)
    vkey = Cosigner(NAME, SEED).vkey
    name, key_id, key = vkey.split("+", 2)
    with pytest.raises(ReceiptInvalid, match="id does not match"):
        verify.parse_cosigner_key(f"{name}+{int(key_id, 16) ^ 1:08x}+{key}")
    with pytest.raises(ReceiptInvalid, match="not <name>\\+<8 hex digits>"):
        verify.parse_cosigner_key("witness")


def test_a_cosigner_key_round_trips_and_keeps_its_seed_out_of_repr() -> None:
    cosigner = Cosigner.generate(NAME)
    assert Cosigner.from_skey(cosigner.skey) == cosigner
    assert cosigner.skey.startswith(f"PRIVATE+KEY+{NAME}+{cosigner.key_id.hex()}+")
    assert cosigner.seed.hex() not in repr(cosigner)
    assert verify.parse_cosigner_key(cosigner.vkey) == cosigner.key
    with pytest.raises(CosignerKeyInvalid, match="0x04"):
        Cosigner.from_skey(note.Signer(NAME, SEED).skey)  # a log's key (0x01) is not a cosigner's
    with pytest.raises(CosignerKeyInvalid, match="id does not match"):
        Cosigner.from_skey(cosigner.skey.replace(cosigner.key_id.hex(), "00000000"))


def test_a_quorum_counts_distinct_witnesses_that_cosigned() -> None:
    witnesses = [Cosigner.generate(f"witness.example.com/w{n}") for n in range(3)]
    vkeys = [w.vkey for w in witnesses]
    signed = checkpoint() + witnesses[0].cosign(checkpoint(), TIME) + witnesses[2].cosign(checkpoint(), TIME + 5)
    assert [c.name for c in verify.check_quorum(signed, vkeys, 2)] == [witnesses[0].name, witnesses[2].name]
    with pytest.raises(ReceiptInvalid, match="2 of 3 witnesses cosigned this checkpoint, quorum 3"):
        verify.check_quorum(signed, vkeys)
    with pytest.raises(ReceiptInvalid, match="a quorum is 1 to the 1 witnesses given, not 2"):
        verify.check_quorum(signed, [vkeys[0], vkeys[0]], 2)  # a key given twice counts once
    for quorum in (0, 4):
        with pytest.raises(ReceiptInvalid, match=f"a quorum is 1 to the 3 witnesses given, not {quorum}"):
            verify.check_quorum(signed, vkeys, quorum)
    twice = signed + witnesses[0].cosign(checkpoint(), TIME + 9)
    assert verify.verified_cosignatures(twice, [vkeys[0]]) == [Cosignature(witnesses[0].name, TIME + 9)]


def _receipt(signed: str) -> dict[str, object]:
    leaf = receipt.leaf_bytes({"seq": 1, "purge_id": "purge-1", "kind": "content"})
    return receipt.receipt_document(purge_id="purge-1", ledger_seq=1, leaf=leaf, inclusion_proof=[], checkpoint=signed)


def _receipt_of(cosign: Callable[[str, int], str], *lines: str) -> dict[str, object]:
    """A receipt of one leaf whose checkpoint ``cosign`` cosigned, with ``lines`` after."""
    leaf = receipt.leaf_bytes({"seq": 1, "purge_id": "purge-1", "kind": "content"})
    signed = note.sign_checkpoint(ORIGIN, 1, verify.leaf_hash(leaf), LOG)
    return _receipt(signed + cosign(signed, TIME) + "".join(lines))


def test_a_receipt_verifies_with_its_witnesses_quorum(tmp_path: Path) -> None:
    leaf = receipt.leaf_bytes({"seq": 1, "purge_id": "purge-1", "kind": "content"})
    signed = note.sign_checkpoint(ORIGIN, 1, verify.leaf_hash(leaf), LOG)
    witnesses = [Cosigner.generate(f"witness.example.com/w{n}") for n in range(2)]
    cosigned = signed + witnesses[0].cosign(signed, TIME)
    document = _receipt(cosigned)
    result = verify.verify_receipt(document, LOG.vkey, witnesses=[witnesses[0].vkey, witnesses[1].vkey], quorum=1)
    assert result.cosignatures == (Cosignature(witnesses[0].name, TIME),)
    assert f"cosigned by {witnesses[0].name}" in verify.describe(result)
    assert verify.verify_receipt(document, LOG.vkey).cosignatures == ()
    with pytest.raises(ReceiptInvalid, match="1 of 2 witnesses cosigned"):
        verify.verify_receipt(document, LOG.vkey, witnesses=[w.vkey for w in witnesses])
    with pytest.raises(ReceiptInvalid, match="a quorum needs the witnesses' keys"):
        verify.verify_receipt(document, LOG.vkey, quorum=1)
    path, key_file = tmp_path / "receipt.json", tmp_path / "w1.vkey"
    path.write_text(json.dumps(document))
    key_file.write_text(witnesses[1].vkey + "\n")
    args = [str(path), "--key", LOG.vkey, "--witness", witnesses[0].vkey, "--witness", str(key_file)]
    assert verify.main([*args, "--quorum", "1"]) == 0
    assert verify.main(args) == 1
    assert verify.main([*args, "--quorum", "3"]) == 2
