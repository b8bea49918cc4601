"""The offline verifier as a host runs it: ``tlog/verify.py`` copied alone into another
directory and run as a script, and ``python -m purgekeeper.tlog.verify``; exit 0 with one line when the
receipt holds, 1 with one line giving the reason when it does not, 2 on a usage error."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from purgekeeper.tlog import note, receipt, tree
from purgekeeper.tlog.verify import leaf_hash

ORIGIN = "purgekeeper.example/ledger/cli"
VERIFY = Path(__file__).parents[2] / "tlog" / "verify.py"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """A receipt for row 7 in a tree of 10, and a newer checkpoint of 25 with its proof."""
    rows = [receipt.leaf_bytes({"seq": seq, "purge_id": f"p-{seq}", "kind": "bot"}) for seq in range(1, 26)]
    store, signer = tree.HashStore(), note.Signer.generate(ORIGIN)
    store.append([leaf_hash(row) for row in rows])

    def signed(size: int) -> str:
        return note.sign_checkpoint(ORIGIN, size, tree.tree_hash(size, store.read), signer)

    documents = {
        "receipt.json": json.dumps(
            receipt.receipt_document(
                purge_id="p-7",
                ledger_seq=7,
                leaf=rows[6],
                inclusion_proof=tree.prove_inclusion(10, 6, store.read),
                checkpoint=signed(10),
            )
        ),
        "newer.checkpoint": signed(25),
        "proof.json": json.dumps(
            receipt.consistency_document(proof=tree.prove_consistency(10, 25, store.read), checkpoint=signed(25))
        ),
        "key.vkey": signer.vkey + "\n",
    }
    for name, text in documents.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return {name: tmp_path / name for name in documents}


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=60, check=False
    )


def test_a_copy_of_the_verifier_alone_checks_a_receipt(files: dict[str, Path], tmp_path: Path) -> None:
    vendored = tmp_path / "vendored"
    vendored.mkdir()
    shutil.copy(VERIFY, vendored / "receipt_verify.py")
    vkey = files["key.vkey"].read_text().strip()
    done = run("-I", "receipt_verify.py", files["receipt.json"], "--key", vkey, cwd=vendored)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"ok: a bot deletion, id p-7, is ledger row 7, included in {ORIGIN} at tree size 10\n"


def test_origin_pins_the_log(files: dict[str, Path]) -> None:
    verify = ("-m", "purgekeeper.tlog.verify", files["receipt.json"], "--key", files["key.vkey"])
    assert run(*verify, "--origin", ORIGIN).returncode == 0
    other = run(*verify, "--origin", "purgekeeper.example/ledger/other")
    assert (other.returncode, other.stdout) == (1, "")
    assert other.stderr == (
        f"receipt invalid: the receipt's checkpoint is of the log {ORIGIN!r}, not 'purgekeeper.example/ledger/other'\n"
    )


def test_the_module_checks_a_newer_checkpoint_and_takes_the_key_from_a_file(files: dict[str, Path]) -> None:
    done = run(
        "-m", "purgekeeper.tlog.verify", files["receipt.json"], "--key", files["key.vkey"],
        "--newer", files["newer.checkpoint"], "--proof", files["proof.json"],
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.endswith(", and tree size 25 extends it\n")


def test_a_changed_receipt_exits_1_with_one_line(files: dict[str, Path]) -> None:
    document = json.loads(files["receipt.json"].read_text())
    document["purge_id"] = "p-8"
    files["receipt.json"].write_text(json.dumps(document))
    done = run("-m", "purgekeeper.tlog.verify", files["receipt.json"], "--key", files["key.vkey"])
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "receipt invalid: the leaf's purge_id and seq are not the receipt's\n"


def test_a_changed_newer_checkpoint_exits_1(files: dict[str, Path]) -> None:
    text = files["newer.checkpoint"].read_text()
    files["newer.checkpoint"].write_text(text.replace("\n25\n", "\n26\n", 1))
    done = run(
        "-m", "purgekeeper.tlog.verify", files["receipt.json"], "--key", files["key.vkey"],
        "--newer", files["newer.checkpoint"], "--proof", files["proof.json"],
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith("receipt invalid: the note's signature by") and done.stderr.count("\n") == 1


def test_usage_errors_exit_2(files: dict[str, Path], tmp_path: Path) -> None:
    alone = run(
        "-m",
        "purgekeeper.tlog.verify",
        files["receipt.json"],
        "--key",
        files["key.vkey"],
        "--newer",
        files["proof.json"],
    )
    assert (alone.returncode, alone.stderr) == (2, "purgekeeper.tlog.verify: --newer and --proof go together\n")
    missing = run("-m", "purgekeeper.tlog.verify", tmp_path / "nothing.json", "--key", files["key.vkey"])
    assert missing.returncode == 2 and missing.stderr.startswith("cannot read")
