"""Hostile receipts (issue 35, item 4): ``purgekeeper.tlog.verify`` refuses, with a reason and
never a traceback, JSON nested too deep, numbers of more than 20 digits (in JSON or in a
signed note), keys given twice and NaN; it names the kind of row a receipt is for, and
``origin`` pins the log."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from purgekeeper.schema.states import PurgeKind
from purgekeeper.tlog import note, receipt, tree
from purgekeeper.tlog.verify import (
    KIND_NAMES,
    MAX_JSON_DEPTH,
    ReceiptInvalid,
    describe,
    leaf_hash,
    parse_json,
    verify_completion,
    verify_receipt,
)

ORIGIN = "purgekeeper.example/ledger/hostile"
SIGNER = note.Signer.generate(ORIGIN)
DEEP = 100_000  # far past Python's recursion limit


def signed_receipt(row: dict[str, Any] | bytes, seq: int = 1, size: int = 3) -> dict[str, Any]:
    """A receipt for ``row`` (a ledger row, or raw leaf bytes) as leaf ``seq - 1`` of ``size``."""
    leaf = row if isinstance(row, bytes) else receipt.leaf_bytes(row)
    leaves = [leaf if n == seq else receipt.leaf_bytes({"seq": n, "kind": "content"}) for n in range(1, size + 1)]
    store = tree.HashStore()
    store.append([leaf_hash(item) for item in leaves])
    return receipt.receipt_document(
        purge_id="p-1",
        ledger_seq=seq,
        leaf=leaf,
        inclusion_proof=tree.prove_inclusion(size, seq - 1, store.read),
        checkpoint=note.sign_checkpoint(ORIGIN, size, tree.tree_hash(size, store.read), SIGNER),
    )


def row(kind: str = "content", **extra: Any) -> dict[str, Any]:
    return {"seq": 1, "purge_id": "p-1", "kind": kind, **extra}


def refused(document: str | bytes | dict[str, Any], **options: Any) -> str:
    with pytest.raises(ReceiptInvalid) as caught:
        verify_receipt(document, SIGNER.vkey, **options)
    return caught.value.reason


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_a_receipt_nested_past_the_recursion_limit_is_refused() -> None:
    assert refused('{"a": ' * DEEP + "1" + "}" * DEEP) == f"the receipt is nested more than {MAX_JSON_DEPTH} deep"
    assert refused(nested(DEEP)) == f"the receipt is nested more than {MAX_JSON_DEPTH} deep"


def test_a_leaf_nested_past_the_recursion_limit_is_refused() -> None:
    leaf = b'{"kind":"content","purge_id":"p-1","selectors":' + nested(DEEP).encode() + b',"seq":1}'
    assert refused(signed_receipt(leaf)) == f"the leaf is nested more than {MAX_JSON_DEPTH} deep"


def test_nesting_up_to_the_limit_and_brackets_in_strings_are_fine() -> None:
    assert parse_json(nested(MAX_JSON_DEPTH), "x") is not None
    assert parse_json('["' + "[" * DEEP + '\\"{"]', "x") == ["[" * DEEP + '"{']
    with pytest.raises(ReceiptInvalid, match="nested more than"):
        parse_json(nested(MAX_JSON_DEPTH + 1), "x")
    deep_but_legal = row(selectors={"request": json.loads(nested(MAX_JSON_DEPTH - 3))})
    assert verify_receipt(signed_receipt(deep_but_legal), SIGNER.vkey).kind == "content"


def test_numbers_of_more_than_20_digits_are_refused() -> None:
    document = signed_receipt(row())
    huge = json.dumps(document).replace('"ledger_seq": 1', '"ledger_seq": ' + "9" * 5000)
    assert refused(huge) == "the receipt holds a number of more than 20 digits"
    assert refused(json.dumps({**document, "ledger_seq": 10**20})).endswith("more than 20 digits")
    leaf = b'{"kind":"content","n":' + b"1" * 5000 + b',"purge_id":"p-1","seq":1}'
    assert refused(signed_receipt(leaf)) == "the leaf holds a number of more than 20 digits"
    with pytest.raises(ReceiptInvalid, match="more than 20 digits"):
        parse_json("1." + "5" * 30, "x")


def test_a_signed_size_of_5000_digits_is_refused() -> None:
    root = base64.b64encode(bytes(32)).decode()
    checkpoint = note.sign_note(f"{ORIGIN}\n{'9' * 5000}\n{root}\n", [SIGNER])
    document = {**signed_receipt(row()), "checkpoint": checkpoint}
    assert refused(document) == "the checkpoint's size has more than 20 digits"


@pytest.mark.parametrize("field", ["seq", "attempts", "removed"])
def test_a_completion_statement_with_5000_digits_is_refused(field: str) -> None:
    values = {"seq": "1", "attempts": "1", "removed": "0", field: "7" * 5000}
    digest = base64.b64encode(bytes(32)).decode()
    lines = ["purgekeeper-completion/v1", ORIGIN, "p-1", values["seq"], digest, "2026-12-05T08:00:00.000000Z"]
    lines += [values["attempts"], f"step bodies removed={values['removed']} retained_shared=0 held=0"]
    statement = note.sign_note("\n".join(lines) + "\n", [SIGNER])
    with pytest.raises(ReceiptInvalid, match="has more than 20 digits"):
        verify_completion(statement, SIGNER.vkey)


def test_a_key_given_twice_is_refused() -> None:
    text = json.dumps(signed_receipt(row()))
    twice = text.replace('"purge_id": "p-1"', '"purge_id": "p-0", "purge_id": "p-1"')
    assert refused(twice) == "the receipt holds a key twice"
    leaf = b'{"kind":"hold","kind":"content","purge_id":"p-1","seq":1}'
    assert refused(signed_receipt(leaf)) == "the leaf holds a key twice"


def test_nan_and_bad_utf8_are_refused() -> None:
    text = json.dumps(signed_receipt(row()))
    assert refused(text.replace('"version": 1', '"version": NaN')) == "the receipt holds NaN, which is not JSON"
    assert refused(b'{"format": "\xff"}') == "the receipt is not UTF-8 text"
    assert refused(signed_receipt(b'{"kind":"\xff"}')) == "the leaf is not UTF-8 text"


def test_every_kind_has_a_name() -> None:
    assert set(KIND_NAMES) == {kind.value for kind in PurgeKind}
    assert len(set(KIND_NAMES.values())) == len(KIND_NAMES)


@pytest.mark.parametrize(
    ("kind", "name"), [("hold", "a legal hold"), ("retention_run", "a retention run"), ("bot", "a bot deletion")]
)
def test_the_verifier_says_what_kind_of_row_it_verified(kind: str, name: str) -> None:
    result = verify_receipt(signed_receipt(row(kind)), SIGNER.vkey)
    assert (result.kind, result.kind_name) == (kind, name)
    assert describe(result) == f"ok: {name}, id p-1, is ledger row 1, included in {ORIGIN} at tree size 3"


def test_a_kind_newer_than_the_verifier_is_named_as_is_and_a_leaf_without_one_is_refused() -> None:
    assert verify_receipt(signed_receipt(row("archive")), SIGNER.vkey).kind_name == "a row of kind archive"
    assert refused(signed_receipt({"seq": 1, "purge_id": "p-1"})).startswith("the leaf has no kind")
    assert refused(signed_receipt(row("Hold\u202e"))).startswith("the leaf has no kind")


def test_origin_pins_the_log() -> None:
    document = signed_receipt(row())
    assert verify_receipt(document, SIGNER.vkey, origin=ORIGIN).checkpoint.origin == ORIGIN
    assert refused(document, origin="other.example/log") == (
        f"the receipt's checkpoint is of the log {ORIGIN!r}, not 'other.example/log'"
    )
