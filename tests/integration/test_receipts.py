"""Verifiable purge receipts through the Python API (issue 24 items 1-4), both backends.

Every acceptance signs a checkpoint of the ledger's Merkle log before it returns; a receipt
verifies offline with ``purgekeeper.tlog.verify`` and the log's key, a byte changed anywhere in it does
not; a consistency proof shows that a later checkpoint extends an earlier one; the log's
directory holds the checkpoint and hash tiles only, never a row."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest

import purgekeeper
from purgekeeper import EventScope
from purgekeeper.schema import ledger
from purgekeeper.storage import signed_log
from purgekeeper.storage.ledger_copy import LedgerCopy
from purgekeeper.tlog import receipt
from purgekeeper.tlog.verify import ReceiptInvalid, open_checkpoint, verify_receipt
from tests.helpers.receipts import SECRET, WHO, accept, log_dir

Pk = purgekeeper.Purgekeeper


def flip_b64(text: str, at: int = 0) -> str:
    data = bytearray(base64.b64decode(text))
    data[at] ^= 0x01
    return base64.b64encode(bytes(data)).decode()


def first_purge(pk: Pk) -> str:
    with pk.db.read() as conn:
        entry = ledger.entry_at(conn, 1)
    assert entry is not None
    return entry.purge_id


def test_a_receipt_exists_once_an_acceptance_returns_and_verifies(pk: Pk) -> None:
    accepted = accept(pk, 3)
    document = pk.receipt(accepted[1].purge_id)
    assert set(document) == {
        "format", "version", "purge_id", "ledger_seq", "leaf_index", "leaf", "inclusion_proof", "checkpoint",
        "disclosed",  # the operator's receipt (version 2) shows who and why, checked against the leaf
    }  # fmt: skip
    assert (document["ledger_seq"], document["leaf_index"]) == (accepted[1].ledger_seq, accepted[1].ledger_seq - 1)
    result = verify_receipt(document, pk.log_key())
    assert result.purge_id == accepted[1].purge_id
    assert result.checkpoint.size == 3
    assert result.checkpoint.origin == f"purgekeeper/{pk.database_key}"
    row = json.loads(base64.b64decode(document["leaf"]))
    copy_row = next(LedgerCopy(pk.settings.checkpoint_dir, pk.database_key).rows(after=1, upto=2))
    assert base64.b64decode(document["leaf"]) == receipt.leaf_bytes({**row, "prev_hash": copy_row.prev_hash})
    assert base64.b64decode(document["leaf"]) == signed_log.leaf_of(copy_row)


@pytest.mark.parametrize("field", ["leaf", "inclusion_proof", "checkpoint"])
def test_one_byte_changed_fails_the_receipt(pk: Pk, field: str) -> None:
    accepted = accept(pk, 5)
    document = pk.receipt(accepted[2].purge_id)
    if field == "leaf":
        document["leaf"] = flip_b64(document["leaf"], 10)
    elif field == "inclusion_proof":
        document["inclusion_proof"][1] = flip_b64(document["inclusion_proof"][1])
    else:
        text = document["checkpoint"]
        document["checkpoint"] = text.replace("\n5\n", "\n4\n", 1) if "\n5\n" in text else text[:-3] + "A" + text[-2:]
    with pytest.raises(ReceiptInvalid):
        verify_receipt(document, pk.log_key())


def test_a_receipt_of_an_unknown_purge_is_not_found(pk: Pk) -> None:
    accept(pk, 1)
    with pytest.raises(purgekeeper.NotFound):
        pk.receipt("no-such-purge")


def test_consistency_after_more_acceptances(pk: Pk) -> None:
    first = accept(pk, 2)
    before = pk.receipt(first[0].purge_id)
    accept(pk, 7, prefix="more")
    proof = pk.consistency(2)
    newer = proof["checkpoint"]
    assert open_checkpoint(newer, pk.receipts.log.signer.verifier).size == 9
    result = verify_receipt(before, pk.log_key(), newer_checkpoint=newer, consistency_proof=proof)
    assert result.newer is not None and result.newer.size == 9
    for bad in (0, 10, -1):
        with pytest.raises(purgekeeper.ValidationError):
            pk.consistency(bad)


def test_the_log_directory_holds_hashes_and_the_checkpoint_only(pk: Pk) -> None:
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body=f"{SECRET} body", event_id="e1")
    scope = EventScope(event_ids=["e1"])
    pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO)
    accept(pk, 300)  # a full tile of level 0 and a partial one
    files = sorted(str(p.relative_to(log_dir(pk))) for p in log_dir(pk).rglob("*") if p.is_file())
    assert files == ["checkpoint", "tile/0/000", "tile/0/001.p/45", "tile/1/000.p/1"]
    for path in log_dir(pk).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert SECRET.encode() not in data and b"receipt test" not in data  # no row, no reason
    assert (log_dir(pk) / "tile/0/000").stat().st_size == 256 * 32


def test_the_signing_key_is_made_once_private_and_shared(open_pk: Callable[..., Pk]) -> None:
    one = open_pk()
    two = open_pk()
    key = one.settings.signing_key_path
    assert not key.exists()  # made at its first signature: a handle that signs nothing makes none
    accept(one, 1)
    accept(two, 1, prefix="two")
    assert one.log_key() == two.log_key()
    assert key.is_file() and key.stat().st_mode & 0o777 == 0o600
    assert key.read_text().startswith("PRIVATE+KEY+purgekeeper/")
    verify_receipt(one.receipt(first_purge(one)), two.log_key())


def test_signing_off_writes_no_log_and_gives_no_receipt(open_pk: Callable[..., Pk]) -> None:
    pk = open_pk(sign_checkpoints=False)
    accepted = accept(pk, 2)
    assert not log_dir(pk).exists()
    with pytest.raises(purgekeeper.InfrastructureError):
        pk.receipt(accepted[0].purge_id)
    signing = open_pk()  # the log catches up from the copy once signing is on again
    document = signing.receipt(accepted[1].purge_id)
    assert verify_receipt(document, signing.log_key()).checkpoint.size == 2


def test_the_origin_comes_from_the_settings(open_pk: Callable[..., Pk], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PURGEKEEPER_LOG_ORIGIN", "example.org/purges")
    pk = open_pk()
    accepted = accept(pk, 1)
    assert verify_receipt(pk.receipt(accepted[0].purge_id), pk.log_key()).checkpoint.origin == "example.org/purges"


def test_a_named_key_file_is_used(open_pk: Callable[..., Pk], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from purgekeeper.commands import key_commands
    from purgekeeper.tlog.note import Signer

    signer = Signer.generate("example.org/purges")
    path = tmp_path / "named.key"
    path.write_text(signer.skey + "\n")
    path.chmod(0o600)  # a key open to others is refused (test_signing_key)
    monkeypatch.setenv("PURGEKEEPER_SIGNING_KEY_FILE", str(path))
    pk = open_pk()
    assert pk.log_key() == signer.vkey
    unsigned = accept(pk, 1, prefix="unsigned")[0].purge_id  # accepted and copied, not signed:
    with pytest.raises(purgekeeper.SigningKeyUnusable, match="mark"):  # a key is never used without its mark
        pk.receipt(unsigned)
    with pk.copy.writers_kept_out():  # what purgectl ledger key mark --adopt --never-signed does
        key_commands.adopt_mark(pk.settings, pk.database_key, never_signed=True)
    accepted = accept(pk, 1, prefix="marked")
    verify_receipt(pk.receipt(accepted[0].purge_id), signer.vkey)


@pytest.mark.parametrize("how", ["gone", "zeros"])
def test_partial_tiles_lost_in_a_crash_do_not_stop_receipts(open_pk: Callable[..., Pk], how: str) -> None:
    """Partial tiles are written without an fsync: a crash may leave them missing or wrong
    under a durable checkpoint. A receipt asked from a fresh process (nothing in memory)
    still verifies, and the public tiles are served again."""
    accepted = accept(open_pk(), 5)
    partials = [p for p in log_dir(open_pk()).rglob("*") if p.is_file() and p.parent.name.endswith(".p")]
    assert partials
    for path in partials:
        if how == "gone":
            path.unlink()
        else:
            path.write_bytes(bytes(path.stat().st_size))
    fresh = open_pk()
    document = fresh.receipt(accepted[2].purge_id)
    assert verify_receipt(document, fresh.log_key()).checkpoint.size == 5
    assert fresh.receipts.log_file("tile/0/000.p/5") == b"".join(
        signed_log.leaf_hash_of(row) for row in LedgerCopy(fresh.settings.checkpoint_dir, fresh.database_key).rows()
    )
