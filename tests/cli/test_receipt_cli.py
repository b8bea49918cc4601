"""Receipts from ``purgectl`` (issue 24 items 3-6), both backends: ``receipt PURGE_ID``,
``completion PURGE_ID``,
``ledger consistency --from N``, ``ledger key``, and the offline ``receipt verify`` with its
exit codes (0 verified, 1 not, 2 unusable input); ``init`` makes the signing key, 0600."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

import purgekeeper
from purgekeeper.tlog.verify import Verifier, verify_completion, verify_receipt
from tests.helpers.purgectl import Purgectl, concurrently
from tests.helpers.restore import clean

Pk = purgekeeper.Purgekeeper
WHO = {"actor": "op", "reason": "receipt cli test"}


@pytest.fixture
def signing(pk: Pk, purgectl: Purgectl) -> Purgectl:
    """purgectl with the handle's key (its own data directory would hold another)."""
    return purgectl.with_env(PURGEKEEPER_SIGNING_KEY_FILE=str(pk.settings.signing_key_path))


def flip_b64(text: str, at: int = 0) -> str:
    data = bytearray(base64.b64decode(text))
    data[at] ^= 0x01
    return base64.b64encode(bytes(data)).decode()


@pytest.mark.sqlite_only  # the key is the data directory's, whatever the database (init on both: test_purgectl)
def test_init_makes_a_private_signing_key(purgectl: Purgectl, tmp_path: Path) -> None:
    purgectl.json("init")
    key = tmp_path / "data" / "ledger-signing.key"
    assert key.stat().st_mode & 0o777 == 0o600
    assert key.read_text().startswith("PRIVATE+KEY+purgekeeper/")
    vkey = purgectl.text("ledger", "key").stdout.strip()
    assert Verifier.from_vkey(vkey).name.startswith("purgekeeper/")


def test_receipt_consistency_and_key(pk: Pk, signing: Purgectl, tmp_path: Path) -> None:
    first = pk.purge_conversation("c-1", **WHO)
    document, shown, key = concurrently(
        lambda: signing.json("receipt", first.purge_id),
        lambda: signing.text("receipt", first.purge_id).stdout,
        lambda: signing.json("ledger", "key"),
    )
    assert json.loads(shown) == document and key == {"vkey": pk.log_key()}
    assert verify_receipt(document, pk.log_key()).purge_id == first.purge_id
    for i in range(4):
        pk.purge_conversation(f"c-more-{i}", **WHO)
    proof = signing.json("ledger", "consistency", "--from", "1")
    result = verify_receipt(document, pk.log_key(), newer_checkpoint=proof["checkpoint"], consistency_proof=proof)
    assert result.newer is not None and result.newer.size == 5
    signing.error(1, "not_found", "receipt", "no-such-purge")
    signing.error(2, "validation_error", "ledger", "consistency", "--from", "6")


@pytest.mark.sqlite_only  # the check needs no database; the receipts of both: test_receipt_consistency_and_key
def test_receipt_verify_offline(pk: Pk, signing: Purgectl, tmp_path: Path) -> None:
    first = pk.purge_conversation("c-1", **WHO)
    pk.purge_conversation("c-2", **WHO)
    document = pk.receipt(first.purge_id)
    for i in range(2):
        pk.purge_conversation(f"c-more-{i}", **WHO)
    proof = pk.consistency(2)
    files = {
        "receipt": json.dumps(document),
        "newer": proof["checkpoint"],
        "proof": json.dumps(proof),
        "key": pk.log_key() + "\n",
        "leaf": json.dumps({**document, "leaf": flip_b64(document["leaf"], 5)}),
        "proof_bad": json.dumps({**document, "inclusion_proof": [flip_b64(document["inclusion_proof"][0])]}),
        "checkpoint_bad": json.dumps({**document, "checkpoint": document["checkpoint"].replace("\n2\n", "\n3\n", 1)}),
    }
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    offline = signing.with_env(PURGEKEEPER_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none")  # no database
    key = str(tmp_path / "key")
    ok = offline.text("receipt", "verify", str(tmp_path / "receipt"), "--key", pk.log_key())
    assert ok.stdout.startswith(f"ok: a conversation purge, id {first.purge_id}, is ledger row 1")
    newer = ("--newer", str(tmp_path / "newer"), "--proof", str(tmp_path / "proof"))
    assert (
        "tree size 4 extends it"
        in offline.text("receipt", "verify", str(tmp_path / "receipt"), "--key", key, *newer).stdout
    )
    for bad in ("leaf", "proof_bad", "checkpoint_bad"):
        refused = offline.text("receipt", "verify", str(tmp_path / bad), "--key", key, code=1)
        assert refused.stderr.startswith("receipt invalid: "), bad
        assert (
            offline.json("receipt", "verify", str(tmp_path / bad), "--key", key, code=1)["error"] == "receipt_invalid"
        )
    offline.text("receipt", "verify", str(tmp_path / "missing"), "--key", key, code=2)
    offline.text(
        "receipt", "verify", str(tmp_path / "receipt"), "--key", key, "--newer", str(tmp_path / "newer"), code=2
    )
    verified = offline.json("receipt", "verify", str(tmp_path / "receipt"), "--key", key, *newer)
    assert verified["ok"] and verified["tree_size"] == 2 and verified["newer_tree_size"] == 4
    assert (verified["kind"], verified["kind_name"]) == ("conversation", "a conversation purge")


def test_completion_and_its_offline_check(pk: Pk, signing: Purgectl, tmp_path: Path) -> None:
    for name in ("c-1", "c-2"):
        pk.create_conversation(name)
        pk.ingest_event(name, author="ada", body="gone", event_id=f"{name}-e")
    first, second = (pk.purge_conversation(name, **WHO).purge_id for name in ("c-1", "c-2"))
    signing.error(3, "cleanup_not_complete", "completion", first)
    signing.error(1, "not_found", "completion", "no-such-purge")
    clean(pk)
    document, shown = concurrently(
        lambda: signing.json("completion", first), lambda: signing.text("completion", first).stdout
    )
    assert json.loads(shown) == document
    assert verify_completion(document["statement"], pk.log_key()).purge_id == first
    files = {
        "receipt": json.dumps(pk.receipt(first)),
        "other": json.dumps(pk.receipt(second)),
        "completion": shown,
        "note": document["statement"],
        "bad": document["statement"].replace(f"\n{first}\n", f"\n{second}\n", 1),
    }
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    offline = signing.with_env(PURGEKEEPER_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none")  # no database
    check = ("receipt", "verify", str(tmp_path / "receipt"), "--key", pk.log_key(), "--completion")
    for good in ("completion", "note"):
        assert "its cleanup completed at " in offline.text(*check, str(tmp_path / good)).stdout
    verified = offline.json(*check, str(tmp_path / "completion"))
    assert verified["completed_at"] == document["completed_at"] and verified["steps"] == document["steps"]
    refused = offline.text(*check, str(tmp_path / "bad"), code=1)
    assert refused.stderr.startswith("receipt invalid: ")
    other = ("receipt", "verify", str(tmp_path / "other"), "--key", pk.log_key(), "--completion")
    assert offline.json(*other, str(tmp_path / "completion"), code=1)["error"] == "receipt_invalid"
    offline.text(*check, str(tmp_path / "missing"), code=2)
