"""Every proof, tile and signed note of ``tlog`` checked by an implementation this project
did not write: Go's golang.org/x/mod/sumdb/tlog and sumdb/note (Debian's
golang-golang-x-mod-dev), through ``tests/interop/tlogcheck``, built once per session.

Go builds its own stored hashes from the same leaves and must arrive at the same hashes,
roots, proofs and tiles; it must accept our proofs and notes and refuse each one-byte
change that our verifier refuses; and our verifier must accept a note Go signed. Without
``go`` (or the Go package) the tests skip locally and fail on CI."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from purgekeeper.tlog import note, receipt, tree
from purgekeeper.tlog.verify import (
    Completion,
    CompletionStep,
    ReceiptInvalid,
    leaf_hash,
    open_note,
    verify_completion,
    verify_receipt,
)
from tests.helpers.interop import Go

ORIGIN = "purgekeeper.example/ledger/interop"
SIZE = 600


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def flip(data: bytes, at: int = 0) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def row_leaf(seq: int) -> bytes:
    row = {"seq": seq, "purge_id": f"purge-{seq}", "kind": "content", "reason": "spam ✓", "prev_hash": "0" * 64}
    return receipt.leaf_bytes(row)


LEAVES = [row_leaf(seq) for seq in range(1, SIZE + 1)]
STORE = tree.HashStore()
STORE.append([leaf_hash(leaf) for leaf in LEAVES])
SIGNER = note.Signer.generate(ORIGIN)
OTHER = note.Signer.generate(ORIGIN)


def checkpoint(size: int, signer: note.Signer = SIGNER) -> str:
    return note.sign_checkpoint(ORIGIN, size, tree.tree_hash(size, STORE.read), signer)


def test_go_stores_the_same_hashes_and_proves_the_same_roots_proofs_and_tiles(go: Go) -> None:
    sizes = [1, 2, 3, 7, 255, 256, 257, 511, 512, 600]
    inclusions = [(600, 0), (600, 599), (600, 300), (257, 256), (7, 3)]
    consistencies = [(1, 600), (256, 600), (300, 600), (599, 600), (3, 7)]
    growths = [(0, 600), (100, 600), (256, 513), (300, 301)]
    answer = go(
        {
            "leaves": [b64(leaf) for leaf in LEAVES],
            "roots": sizes,
            "record_proofs": [{"size": s, "index": i} for s, i in inclusions],
            "tree_proofs": [{"old": o, "new": n} for o, n in consistencies],
            "tiles": [{"old": o, "new": n} for o, n in growths],
        }
    )
    ours = sorted(STORE.hashes, key=lambda p: tree.stored_hash_index(*p))
    assert answer["stored"] == [b64(STORE.hashes[p]) for p in ours]
    assert answer["roots"] == [b64(tree.tree_hash(n, STORE.read)) for n in sizes]
    assert answer["record_proofs"] == [[b64(h) for h in tree.prove_inclusion(s, i, STORE.read)] for s, i in inclusions]
    assert answer["tree_proofs"] == [
        [b64(h) for h in tree.prove_consistency(o, n, STORE.read)] for o, n in consistencies
    ]
    for (old, new), go_tiles in zip(growths, answer["tiles"], strict=True):
        widest = _widest_tiles(go_tiles)
        mine = {t: tree.tile_data(t, STORE.read) for t in tree.tiles_for_growth(old, new)}
        assert {t: b64(data) for t, data in mine.items()} == {t: widest[t] for t in mine}
        unchanged = set(widest) - set(mine)
        assert all(t.width == tree.tile_width(t.level, t.index, old) for t in unchanged), "Go republishes these"


def _widest_tiles(go_tiles: list[dict[str, str]]) -> dict[tree.Tile, str]:
    """Go's tiles (paths ``tile/8/L/N[.p/W]``, every width it passed) as C2SP tiles, the
    widest of each."""
    widest: dict[tuple[int, int], tuple[tree.Tile, str]] = {}
    for entry in go_tiles:
        assert entry["path"].startswith("tile/8/")
        tile = tree.Tile.parse("tile/" + entry["path"].removeprefix("tile/8/"))
        if (tile.level, tile.index) not in widest or widest[(tile.level, tile.index)][0].width < tile.width:
            widest[(tile.level, tile.index)] = (tile, entry["data"])
    return dict(widest.values())


def _inclusion_case(index: int, size: int, changes: dict[str, Any] | None = None) -> dict[str, Any]:
    case = {
        "kind": "record",
        "vkey": SIGNER.vkey,
        "note": checkpoint(size),
        "index": index,
        "leaf": b64(LEAVES[index]),
        "proof": [b64(h) for h in tree.prove_inclusion(size, index, STORE.read)],
    }
    return {**case, **(changes or {})}


def _changed_proof(proof: list[str], which: int) -> list[str]:
    return [b64(flip(base64.b64decode(h), 5)) if i == which else h for i, h in enumerate(proof)]


def _changed_signature(signed: str) -> str:
    text, _, line = signed.rstrip("\n").rpartition(" ")
    return f"{text} {b64(flip(base64.b64decode(line), 40))}\n"


INCLUSIONS = [(0, 600), (255, 600), (256, 600), (599, 600), (123, 300), (299, 300), (0, 1)]


def _inclusion_negatives(index: int, size: int) -> dict[str, dict[str, Any]]:
    good = _inclusion_case(index, size)
    negatives: dict[str, dict[str, Any]] = {
        "one byte of the leaf": {"leaf": b64(flip(LEAVES[index], 3))},
        "the next index": {"index": (index + 1) % size} if size > 1 else {"index": 1},
        "one byte of the checkpoint text": {"note": good["note"].replace(ORIGIN, ORIGIN[:-1] + "X", 1)},
        "one byte of the signature": {"note": _changed_signature(good["note"])},
        "another key's checkpoint": {"note": checkpoint(size, OTHER)},
        "a checkpoint of another size": {"note": checkpoint(size - 1 if size == SIZE else size + 1)},
    }
    if good["proof"]:
        negatives["one byte of a proof hash"] = {"proof": _changed_proof(good["proof"], len(good["proof"]) // 2)}
        negatives["a proof hash dropped"] = {"proof": good["proof"][:-1]}
    return {name: _inclusion_case(index, size, change) for name, change in negatives.items()}


def _ours_accepts(case: dict[str, Any]) -> bool:
    document = receipt.receipt_document(
        purge_id="", ledger_seq=case["index"] + 1, leaf=b"", inclusion_proof=[], checkpoint=case["note"]
    )
    document.update(leaf=case["leaf"], inclusion_proof=case["proof"])
    try:
        verify_receipt({**document, "purge_id": f"purge-{case['index'] + 1}"}, case["vkey"])
    except ReceiptInvalid:
        return False
    return True


def test_go_accepts_our_inclusion_proofs_and_checkpoints_and_refuses_each_change(go: Go) -> None:
    cases = [_inclusion_case(index, size) for index, size in INCLUSIONS]
    negatives = {(i, s, name): case for i, s in INCLUSIONS for name, case in _inclusion_negatives(i, s).items()}
    answer = go({"checks": cases + list(negatives.values())})
    results = answer["checks"]
    assert results[: len(cases)] == [{"ok": True}] * len(cases)
    assert all(_ours_accepts(case) for case in cases)
    accepted = [key for key, result in zip(negatives, results[len(cases) :], strict=True) if result["ok"]]
    assert accepted == [], "Go accepted changed receipts"
    assert [key for key, case in negatives.items() if _ours_accepts(case)] == []


CONSISTENCIES = [(1, 600), (255, 600), (256, 600), (300, 600), (599, 600), (3, 7), (300, 301)]


def _consistency_case(old: int, new: int, changes: dict[str, Any] | None = None) -> dict[str, Any]:
    case = {
        "kind": "tree",
        "vkey": SIGNER.vkey,
        "old_note": checkpoint(old),
        "note": checkpoint(new),
        "proof": [b64(h) for h in tree.prove_consistency(old, new, STORE.read)],
    }
    return {**case, **(changes or {})}


def _consistency_negatives(old: int, new: int) -> dict[str, dict[str, Any]]:
    proof = _consistency_case(old, new)["proof"]
    negatives: dict[str, dict[str, Any]] = {
        "one byte of a proof hash": {"proof": _changed_proof(proof, len(proof) - 1)},
        "a proof hash dropped": {"proof": proof[:-1]},
        "the old checkpoint one leaf larger": {"old_note": checkpoint(old + 1)},
        "the new checkpoint one leaf smaller": {"note": checkpoint(new - 1)} if new - 1 > old else {"proof": []},
        "one byte of the new checkpoint's signature": {"note": _changed_signature(checkpoint(new))},
    }
    return {name: _consistency_case(old, new, change) for name, change in negatives.items()}


def _ours_accepts_consistency(case: dict[str, Any]) -> bool:
    old_size = int(case["old_note"].split("\n")[1])
    document = receipt.receipt_document(
        purge_id="purge-1",
        ledger_seq=1,
        leaf=LEAVES[0],
        inclusion_proof=tree.prove_inclusion(old_size, 0, STORE.read),
        checkpoint=case["old_note"],
    )
    try:
        verify_receipt(
            document, case["vkey"], newer_checkpoint=case["note"], consistency_proof={"proof": case["proof"]}
        )
    except ReceiptInvalid:
        return False
    return True


def test_go_accepts_our_consistency_proofs_and_refuses_each_change(go: Go) -> None:
    cases = [_consistency_case(old, new) for old, new in CONSISTENCIES]
    negatives = {(o, n, name): case for o, n in CONSISTENCIES for name, case in _consistency_negatives(o, n).items()}
    results = go({"checks": cases + list(negatives.values())})["checks"]
    assert results[: len(cases)] == [{"ok": True}] * len(cases)
    assert all(_ours_accepts_consistency(case) for case in cases)
    accepted = [key for key, result in zip(negatives, results[len(cases) :], strict=True) if result["ok"]]
    assert accepted == [], "Go accepted changed consistency proofs"
    assert [key for key, case in negatives.items() if _ours_accepts_consistency(case)] == []


def test_our_verifier_accepts_what_go_signs_and_go_signs_as_we_do(go: Go) -> None:
    size = 300
    text = note.checkpoint_text(ORIGIN, size, tree.tree_hash(size, STORE.read), ["go-signed"])
    answer = go({"sign": {"name": ORIGIN, "text": text}, "sign_with": {"skey": SIGNER.skey, "text": text}})
    go_vkey, go_note = answer["signed"]["vkey"], answer["signed"]["note"]
    assert note.Signer.from_skey(answer["signed"]["skey"]).vkey == go_vkey
    document = receipt.receipt_document(
        purge_id="purge-42",
        ledger_seq=42,
        leaf=LEAVES[41],
        inclusion_proof=tree.prove_inclusion(size, 41, STORE.read),
        checkpoint=go_note,
    )
    result = verify_receipt(document, go_vkey)
    assert (result.checkpoint.size, result.checkpoint.extensions) == (size, ("go-signed",))
    with pytest.raises(ReceiptInvalid, match="does not verify"):
        verify_receipt({**document, "checkpoint": _changed_signature(go_note)}, go_vkey)
    with pytest.raises(ReceiptInvalid, match="no signature"):
        verify_receipt(document, SIGNER.vkey)
    assert answer["signed_with"]["note"] == note.sign_note(text, [SIGNER]), "Ed25519 is deterministic"
    assert open_note(answer["signed_with"]["note"], SIGNER.verifier) == text


def test_go_opens_a_completion_statement_and_refuses_each_change(go: Go) -> None:
    statement = Completion(
        origin=ORIGIN,
        purge_id="purge-42",
        ledger_seq=42,
        leaf_hash=leaf_hash(LEAVES[41]),
        completed_at="2026-12-03T08:18:22.127653Z",
        attempts=3,
        steps=(CompletionStep("attachments", 1, 1, 0), CompletionStep("bodies", 4, 0, 2)),
    )
    signed = note.sign_note(statement.text(), [SIGNER])
    changed = [
        signed.replace("purge-42", "purge-43", 1),
        signed.replace("removed=4", "removed=5", 1),
        signed.replace("Z\n3\n", "Z\n4\n", 1),
        _changed_signature(signed),
    ]
    assert all(case != signed for case in changed)
    checks = [{"kind": "signed_note", "vkey": SIGNER.vkey, "note": case} for case in [signed, *changed]]
    checks.append({"kind": "signed_note", "vkey": OTHER.vkey, "note": signed})
    answers = go({"checks": checks})["checks"]
    assert answers[0] == {"ok": True, "text": statement.text()}
    assert [a["ok"] for a in answers[1:]] == [False] * (len(changed) + 1)
    assert verify_completion(signed, SIGNER.vkey) == statement
    for case in changed:
        with pytest.raises(ReceiptInvalid):
            verify_completion(case, SIGNER.vkey)
    go_signed = go({"sign_with": {"skey": SIGNER.skey, "text": statement.text()}})["signed_with"]["note"]
    assert go_signed == signed and verify_completion(go_signed, SIGNER.vkey) == statement
