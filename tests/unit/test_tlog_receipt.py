"""Receipts (``purgekeeper.tlog.receipt`` written, ``purgekeeper.tlog.verify.verify_receipt`` read): a receipt made
from a ledger verifies, alone and against a newer checkpoint, and every change is refused
with a reason. Also: ``tlog/verify.py`` imports only the standard library and cryptography."""

from __future__ import annotations

import ast
import base64
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from purgekeeper.tlog import note, receipt, tree
from purgekeeper.tlog.verify import ReceiptInvalid, leaf_hash, verify_receipt

ORIGIN = "purgekeeper.example/ledger/db-1"


def ledger_row(seq: int) -> dict[str, Any]:
    return {
        "seq": seq,
        "purge_id": f"purge-{seq:04d}",
        "kind": "content",
        "selectors": {"event_ids": [f"ev-{seq}"], "note": "ünïcode"},
        "accepted_at": "2026-11-30T06:18:18.123456Z",
        "prev_hash": "0" * 64,
        "row_hash": "f" * 64,
    }


@dataclass
class Log:
    """A ledger of ``size`` rows as a signed tree: what the wiring step will hold."""

    signer: note.Signer
    store: tree.HashStore

    @classmethod
    def of(cls, size: int) -> Log:
        log = cls(note.Signer.generate(ORIGIN), tree.HashStore())
        log.grow(size)
        return log

    def grow(self, size: int) -> None:
        rows = range(self.store.size + 1, size + 1)
        self.store.append([leaf_hash(receipt.leaf_bytes(ledger_row(seq))) for seq in rows])

    def checkpoint(self, size: int | None = None) -> str:
        size = self.store.size if size is None else size
        return note.sign_checkpoint(ORIGIN, size, tree.tree_hash(size, self.store.read), self.signer)

    def receipt(self, seq: int, size: int | None = None) -> dict[str, Any]:
        size = self.store.size if size is None else size
        return receipt.receipt_document(
            purge_id=f"purge-{seq:04d}",
            ledger_seq=seq,
            leaf=receipt.leaf_bytes(ledger_row(seq)),
            inclusion_proof=tree.prove_inclusion(size, seq - 1, self.store.read),
            checkpoint=self.checkpoint(size),
        )

    def consistency(self, old: int, new: int) -> dict[str, Any]:
        proof = tree.prove_consistency(old, new, self.store.read)
        return receipt.consistency_document(proof=proof, checkpoint=self.checkpoint(new))


@pytest.fixture(scope="module")
def log() -> Log:
    return Log.of(300)


def test_a_receipt_verifies_and_says_what_it_proves(log: Log) -> None:
    result = verify_receipt(json.dumps(log.receipt(77, 100)), log.signer.vkey)
    assert (result.purge_id, result.ledger_seq, result.leaf_index) == ("purge-0077", 77, 76)
    assert (result.checkpoint.origin, result.checkpoint.size) == (ORIGIN, 100)
    assert json.loads(result.leaf)["selectors"]["note"] == "ünïcode"
    assert result.newer is None


def test_a_receipt_verifies_against_a_newer_checkpoint_it_is_a_prefix_of(log: Log) -> None:
    newer = log.consistency(100, 300)
    result = verify_receipt(
        log.receipt(77, 100), log.signer.vkey, newer_checkpoint=newer["checkpoint"], consistency_proof=newer
    )
    assert result.newer is not None and result.newer.size == 300
    same = verify_receipt(
        log.receipt(77, 100), log.signer.vkey, newer_checkpoint=log.checkpoint(100), consistency_proof={"proof": []}
    )
    assert same.newer == same.checkpoint


def b64_flip(text: str) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[len(raw) // 2] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def with_leaf(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def edit(document: dict[str, Any]) -> None:
        row = json.loads(base64.b64decode(document["leaf"]))
        change(row)
        canonical = json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        document["leaf"] = base64.b64encode(canonical.encode()).decode()

    return edit


TAMPERINGS: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "one byte of the leaf": (lambda d: d.update(leaf=b64_flip(d["leaf"])), "JSON|canonical|purge_id|inclusion"),
    "the leaf's reason": (with_leaf(lambda row: row.update(kind="channel")), "inclusion proof does not lead"),
    "another purge's id": (lambda d: d.update(purge_id="purge-0078"), "purge_id and seq"),
    "another seq": (lambda d: d.update(ledger_seq=78, leaf_index=77), "purge_id and seq|inclusion"),
    "an index not seq - 1": (lambda d: d.update(leaf_index=77), "not ledger_seq"),
    "a proof hash": (lambda d: d["inclusion_proof"].__setitem__(2, b64_flip(d["inclusion_proof"][2])), "inclusion"),
    "a proof hash dropped": (lambda d: d["inclusion_proof"].pop(), "shorter"),
    "a proof hash added": (lambda d: d["inclusion_proof"].append(d["inclusion_proof"][0]), "longer|does not lead"),
    "a short proof hash": (lambda d: d["inclusion_proof"].__setitem__(0, "AAAA"), "bytes"),
    "the checkpoint's size": (lambda d: d.update(checkpoint=d["checkpoint"].replace("\n100\n", "\n101\n")), "verify"),
    "the checkpoint's signature": (
        lambda d: d.update(checkpoint=d["checkpoint"][:-3] + ("A==\n" if d["checkpoint"][-4] != "A" else "B==\n")),
        "verify|base64",
    ),
    "another format": (lambda d: d.update(format="purgekeeper-ledger-checkpoint"), "purgekeeper-receipt"),
    "version 2": (lambda d: d.update(version=2), "version 1"),
    "a boolean seq": (lambda d: d.update(ledger_seq=True), "int 'ledger_seq'"),
    "the leaf with its row_hash": (with_leaf(lambda row: row.update(row_hash="f" * 64)), "prev_hash or row_hash"),
    "a leaf not base64": (lambda d: d.update(leaf="not base64!"), "base64"),
}


@pytest.mark.parametrize("change", TAMPERINGS, ids=list(TAMPERINGS))
def test_a_changed_receipt_is_refused_with_its_reason(log: Log, change: str) -> None:
    document = log.receipt(77, 100)
    edit, reason = TAMPERINGS[change]
    edit(document)
    with pytest.raises(ReceiptInvalid, match=reason):
        verify_receipt(document, log.signer.vkey)


def test_a_leaf_in_another_form_than_canonical_is_refused(log: Log) -> None:
    document = log.receipt(77, 100)
    row = json.loads(base64.b64decode(document["leaf"]))
    document["leaf"] = base64.b64encode(json.dumps(row).encode()).decode()
    with pytest.raises(ReceiptInvalid, match="canonical"):
        verify_receipt(document, log.signer.vkey)


def test_a_receipt_under_another_key_is_refused(log: Log) -> None:
    with pytest.raises(ReceiptInvalid, match="no signature by"):
        verify_receipt(log.receipt(5), note.Signer.generate(ORIGIN).vkey)
    with pytest.raises(ReceiptInvalid, match="verification key"):
        verify_receipt(log.receipt(5), "not a key")


def test_a_newer_checkpoint_that_does_not_extend_the_tree_is_refused(log: Log) -> None:
    older = log.receipt(77, 100)
    forked = Log(log.signer, tree.HashStore())
    forked.grow(150)
    forked.store.append([leaf_hash(b"another row 151")])
    newer = log.consistency(100, 300)
    fork_checkpoint = forked.checkpoint(151)
    cases = [
        (fork_checkpoint, {"proof": log.consistency(100, 151)["proof"]}, "both roots"),
        (newer["checkpoint"], {**newer, "proof": newer["proof"][:-1]}, "shorter|both roots"),
        (newer["checkpoint"], {**newer, "proof": [b64_flip(newer["proof"][0]), *newer["proof"][1:]]}, "both roots"),
        (log.checkpoint(250), newer, "another checkpoint"),
        (log.checkpoint(50), {"proof": []}, "cannot extend"),
        (newer["checkpoint"], None, "needs a consistency proof"),
        (
            note.sign_checkpoint("elsewhere", 300, tree.tree_hash(300, log.store.read), log.signer),
            {"proof": newer["proof"]},
            "of 'elsewhere'",
        ),
    ]
    for newer_checkpoint, proof, reason in cases:
        with pytest.raises(ReceiptInvalid, match=reason):
            verify_receipt(older, log.signer.vkey, newer_checkpoint=newer_checkpoint, consistency_proof=proof)


def test_the_verifier_imports_only_the_standard_library_and_cryptography() -> None:
    source = Path(__file__).parents[2] / "tlog" / "verify.py"
    modules: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            modules.add((node.module or "").split(".")[0])
    assert modules - {"cryptography", "__future__"} <= sys.stdlib_module_names
