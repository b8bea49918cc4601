"""The leaf's salted commitments (leaf version 2) and the receipts that disclose them, without
a database: the commitment as ``purgekeeper.tlog.verify``'s docstring writes it, computed
here with hashlib alone; the leaf of a row with and without salts; every refusal of a
leaf, a ``disclosed`` or a receipt version that does not hold, and the copy's rows read
with and without salts."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
from typing import Any

import pytest

from purgekeeper.schema import ledger
from purgekeeper.tlog import note, receipt, tree
from purgekeeper.tlog.verify import (
    COMMITTED_FIELDS,
    MAX_JSON_DEPTH,
    ReceiptInvalid,
    commitment,
    describe,
    leaf_hash,
    verify_receipt,
)

ORIGIN = "purgekeeper.example/ledger/commitments"
SIGNER = note.Signer.generate(ORIGIN)
SALTS = bytes(range(80))
WHO = {
    "actor": "ops@example.org",
    "reason": "ticket 12 ✓",
    "request_id": "r-1",
    "idempotency_key": None,
    "origin": "api",
}
ROW = {
    "seq": 1, "purge_id": "p-1", "kind": "content", "selectors": {"event_ids": ["e-1"]}, "scope_digest": "a" * 64,
    "accepted_at": "2026-12-05T10:00:00.000000Z", **WHO, "salts": base64.b64encode(SALTS).decode(),
}  # fmt: skip


def by_hand(name: str, salt: bytes, value: Any) -> str:
    """The docstring's construction, written out: SHA-256("purgekeeper-commitment/v1" || 0x00
    || name || 0x00 || salt || the value as JSON, UTF-8 unescaped)."""
    data = (
        b"purgekeeper-commitment/v1"
        + b"\x00"
        + name.encode()
        + b"\x00"
        + salt
        + json.dumps(value, ensure_ascii=False).encode()
    )
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def signed(leaf: bytes, disclosed: dict[str, Any] | None = None) -> dict[str, Any]:
    """A receipt for ``leaf`` as leaf 0 of a tree of two."""
    store = tree.HashStore()
    store.append([leaf_hash(leaf), leaf_hash(b"{}")])
    return receipt.receipt_document(
        purge_id="p-1",
        ledger_seq=1,
        leaf=leaf,
        inclusion_proof=tree.prove_inclusion(2, 0, store.read),
        checkpoint=note.sign_checkpoint(ORIGIN, 2, tree.tree_hash(2, store.read), SIGNER),
        disclosed=disclosed,
    )


def refused(document: dict[str, Any] | str) -> str:
    with pytest.raises(ReceiptInvalid) as caught:
        verify_receipt(document, SIGNER.vkey)
    return caught.value.reason


def leaf_with(**changes: Any) -> bytes:
    row = json.loads(receipt.leaf_bytes(ROW))
    row.update(changes)
    return json.dumps({k: v for k, v in row.items() if v is not None}, sort_keys=True, separators=(",", ":")).encode()


def test_a_salted_row_s_leaf_holds_the_commitments_the_docstring_defines() -> None:
    leaf = json.loads(receipt.leaf_bytes(ROW))
    salts = {name: SALTS[16 * i : 16 * (i + 1)] for i, name in enumerate(COMMITTED_FIELDS)}
    assert leaf["commitments"] == {name: by_hand(name, salts[name], WHO[name]) for name in COMMITTED_FIELDS}
    assert leaf["leaf_version"] == 2 and "salts" not in leaf
    assert not set(leaf) & set(COMMITTED_FIELDS)
    assert (
        base64.b64encode(commitment("reason", salts["reason"], "ticket 12 ✓")).decode() == leaf["commitments"]["reason"]
    )
    with pytest.raises(ValueError):
        commitment("actor", b"short", "x")


def test_a_row_without_salts_keeps_its_leaf_in_clear() -> None:
    row = {k: v for k, v in ROW.items() if k != "salts"}
    assert (
        receipt.leaf_bytes({**row, "prev_hash": "0" * 64})
        == json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    )


def test_both_receipts_verify_and_say_what_they_show() -> None:
    leaf = receipt.leaf_bytes(ROW)
    full = verify_receipt(signed(leaf, receipt.disclosure(ROW)), SIGNER.vkey)
    assert full.disclosed == WHO and full.leaf_version == 2
    assert 'actor "ops@example.org", reason "ticket 12 ✓"' in describe(full)
    subject = verify_receipt(signed(leaf), SIGNER.vkey)
    assert describe(subject).endswith("; actor, reason and request committed, not disclosed")
    part = verify_receipt(signed(leaf, {"actor": receipt.disclosure(ROW)["actor"]}), SIGNER.vkey)
    assert part.undisclosed == COMMITTED_FIELDS[1:]
    assert describe(part).endswith(
        '; disclosed: actor "ops@example.org"; committed, not disclosed: reason, request_id, idempotency_key, origin'
    )


REFUSALS: dict[str, tuple[Any, str]] = {
    "an unknown leaf version": (lambda: signed(leaf_with(leaf_version=3)), "version '3' is not one this verifier"),
    "a leaf version 1 written out": (lambda: signed(leaf_with(leaf_version=1)), "is not one this verifier reads"),
    "a boolean leaf version": (lambda: signed(leaf_with(leaf_version=True)), "is not one this verifier reads"),
    "commitments without a version": (lambda: signed(leaf_with(leaf_version=None)), "commitments but no leaf_version"),
    "a committed field in clear": (lambda: signed(leaf_with(actor="ops")), "holds a committed field in clear"),
    "a commitment missing": (
        lambda: signed(leaf_with(commitments={"actor": base64.b64encode(bytes(32)).decode()})),
        "not one per field",
    ),
    "a short commitment": (
        lambda: signed(leaf_with(commitments=dict.fromkeys(COMMITTED_FIELDS, "AAAA"))),
        "commitments\\[0\\] is 3 bytes",
    ),
    "a version 2 receipt without disclosed": (
        lambda: {**signed(receipt.leaf_bytes(ROW)), "version": 2},
        "discloses nothing \\(without disclosed it is version 1\\)",
    ),
    "a version 1 receipt with disclosed": (
        lambda: {**signed(receipt.leaf_bytes(ROW), receipt.disclosure(ROW)), "version": 1},
        "disclosed needs version 2",
    ),
    "a version 1 leaf's fields disclosed": (
        lambda: signed(json.dumps({"kind": "bot", "purge_id": "p-1", "seq": 1}).replace(" ", "").encode(), {}),
        "version 1 leaf, which holds them in clear",
    ),
    "a disclosed value that is not text": (
        lambda: signed(receipt.leaf_bytes(ROW), {"actor": {"value": 7, "salt": "AA=="}}),
        "the disclosed actor is not text or null",
    ),
    "a disclosed salt of another length": (
        lambda: signed(receipt.leaf_bytes(ROW), {"actor": {"value": "ops@example.org", "salt": "AAAA"}}),
        "the disclosed actor's salt is 3 bytes, not 16",
    ),
    "a disclosed item without its salt": (
        lambda: signed(receipt.leaf_bytes(ROW), {"reason": {"value": "x"}}),
        "the disclosed reason is not an object of its value and salt",
    ),
    "disclosed not an object": (
        lambda: {**signed(receipt.leaf_bytes(ROW), {}), "disclosed": ["actor"]},
        "disclosed is not an object",
    ),
}


@pytest.mark.parametrize("case", REFUSALS, ids=list(REFUSALS))
def test_a_leaf_or_disclosure_that_does_not_hold_is_refused_with_its_reason(case: str) -> None:
    make, reason = REFUSALS[case]
    with pytest.raises(ReceiptInvalid, match=reason):
        verify_receipt(make(), SIGNER.vkey)


def test_hostile_disclosed_values_are_read_strictly() -> None:
    document = signed(receipt.leaf_bytes(ROW), receipt.disclosure(ROW))
    deep = json.dumps(document).replace('"value": "ops@example.org"', '"value": ' + "[" * 40 + "]" * 40)
    assert refused(deep) == f"the receipt is nested more than {MAX_JSON_DEPTH} deep"
    digits = json.dumps(document).replace('"value": "ops@example.org"', '"value": ' + "9" * 30)
    assert refused(digits) == "the receipt holds a number of more than 20 digits"


# -- the ledger's rows, with and without salts --------------------------------------------------


def entry(**changes: Any) -> ledger.LedgerEntry:
    head = ledger.Head(0, ledger.GENESIS_HASH, "db", dt.datetime(2026, 12, 5, tzinfo=dt.UTC))
    return ledger.next_entry(
        head, purge_id="p-1", kind="content", selectors={"event_ids": ["e-1"]}, scope_digest="a" * 64, **WHO, **changes
    )


def line_of(row: ledger.LedgerEntry) -> dict[str, Any]:
    fields = {**row.hashed_fields(), "accepted_at": ledger.utc_text(row.accepted_at)}
    return {**fields, "prev_hash": row.prev_hash, "row_hash": row.row_hash}


def test_a_row_s_hash_covers_its_salts_and_a_row_without_them_hashes_as_before() -> None:
    salted, unsalted = entry(), entry(salted=False)
    assert salted.salts is not None and len(ledger.salt_map(salted.salts)) == len(COMMITTED_FIELDS)
    assert salted.expected_hash() == salted.row_hash and "salts" in salted.hashed_fields()
    assert unsalted.salts is None and "salts" not in unsalted.hashed_fields()
    assert unsalted.row_hash == ledger.row_hash(ledger.GENESIS_HASH, {**unsalted.hashed_fields()})
    assert entry().salts != salted.salts  # random, drawn for each row
    assert salted.content() == unsalted.content()  # what a purge IS does not include its salts


def test_the_copy_s_rows_are_read_with_and_without_salts() -> None:
    for row in (entry(), entry(salted=False)):
        assert ledger.LedgerEntry.from_checkpoint(line_of(row)) == row
    line = line_of(entry())
    for bad in ("AAAA", 7, base64.b64encode(bytes(79)).decode(), "not base64!"):
        with pytest.raises((TypeError, ValueError)):
            ledger.LedgerEntry.from_checkpoint({**line, "salts": bad})
    tampered = {**line, "salts": base64.b64encode(bytes(80)).decode()}
    assert ledger.LedgerEntry.from_checkpoint(tampered).expected_hash() != line["row_hash"]
