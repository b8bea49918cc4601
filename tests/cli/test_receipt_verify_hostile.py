"""Hostile receipts at the command line (issue 35, item 4): ``purgectl receipt verify``, its
``--json`` mode and the vendorable ``tlog/verify.py`` exit 1 with one line (or one JSON
document) and never a traceback, for JSON nested too deep, a signed size of 5,000 digits, a
key given twice and text that is not UTF-8; ``--origin`` pins the log; the success line
names the row's kind. No database: the check is offline."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from purgekeeper.tlog import note, receipt, tree
from purgekeeper.tlog.verify import leaf_hash
from tests.helpers.purgectl import Purgectl, concurrently

ORIGIN = "purgekeeper.example/ledger/hostile-cli"
SIGNER = note.Signer.generate(ORIGIN)
VERIFY = Path(__file__).parents[2] / "tlog" / "verify.py"
DEEP = 100_000


def signed_receipt(leaf: bytes) -> dict[str, Any]:
    """A receipt for ``leaf`` as the only leaf of a tree of one."""
    store = tree.HashStore()
    store.append([leaf_hash(leaf)])
    return receipt.receipt_document(
        purge_id="p-1",
        ledger_seq=1,
        leaf=leaf,
        inclusion_proof=[],
        checkpoint=note.sign_checkpoint(ORIGIN, 1, tree.tree_hash(1, store.read), SIGNER),
    )


HOLD = receipt.leaf_bytes({"seq": 1, "purge_id": "p-1", "kind": "hold"})
ROOT = base64.b64encode(bytes(32)).decode()
HOSTILE: dict[str, str | bytes] = {
    "deep receipt": "[" * DEEP + "]" * DEEP,
    "deep leaf": json.dumps(signed_receipt(b'{"kind":"hold","purge_id":"p-1","s":' + b"[" * DEEP + b"]" * DEEP + b"}")),
    "huge size": json.dumps(
        {**signed_receipt(HOLD), "checkpoint": note.sign_note(f"{ORIGIN}\n{'9' * 5000}\n{ROOT}\n", [SIGNER])}
    ),
    "key twice": json.dumps(signed_receipt(HOLD)).replace('"purge_id": "p-1"', '"purge_id": "p-0", "purge_id": "p-1"'),
    "not utf-8": b'{"format": "\xff"}',
}


@pytest.fixture
def offline() -> Purgectl:
    return Purgectl({**os.environ, "PURGEKEEPER_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"})


def vendored(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-I", str(VERIFY), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def write(path: Path, content: str | bytes) -> str:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_receipts_exit_1_with_one_line_and_no_traceback(name: str, offline: Purgectl, tmp_path: Path) -> None:
    check = (write(tmp_path / "receipt", HOSTILE[name]), "--key", SIGNER.vkey)
    text, document, alone = concurrently(
        lambda: offline.text("receipt", "verify", *check, code=1),
        lambda: offline.json("receipt", "verify", *check, code=1),
        lambda: vendored(*check),
    )
    assert alone.returncode == 1 and alone.stdout == ""
    for stderr in (text.stderr, alone.stderr):
        assert stderr.startswith("receipt invalid: ") and stderr.count("\n") == 1, stderr[:300]
    assert document["error"] == "receipt_invalid" and text.stderr == f"receipt invalid: {document['detail']}\n"


def test_origin_pins_the_log_and_the_line_names_the_kind(offline: Purgectl, tmp_path: Path) -> None:
    check = (write(tmp_path / "receipt", json.dumps(signed_receipt(HOLD))), "--key", SIGNER.vkey)
    ok, document, other, other_json = concurrently(
        lambda: offline.text("receipt", "verify", *check, "--origin", ORIGIN),
        lambda: offline.json("receipt", "verify", *check),
        lambda: offline.text("receipt", "verify", *check, "--origin", "other.example/log", code=1),
        lambda: offline.json("receipt", "verify", *check, "--origin", "other.example/log", code=1),
    )
    assert ok.stdout == f"ok: a legal hold, id p-1, is ledger row 1, included in {ORIGIN} at tree size 1\n"
    assert (document["kind"], document["kind_name"]) == ("hold", "a legal hold")
    pinned = f"the receipt's checkpoint is of the log {ORIGIN!r}, not 'other.example/log'"
    assert (other.stderr, other_json["detail"]) == (f"receipt invalid: {pinned}\n", pinned)
    assert other_json["error"] == "receipt_invalid"
