"""Receipts a data subject can be given (leaf version 2), both backends.

A purge accepted from now on is a leaf that holds salted commitments of its actor, reason
and request metadata, never their text: ``pk.receipt(id, for_subject=True)`` verifies
(inclusion and signature, with ``purgekeeper.tlog.verify`` and with Go's sumdb) and says
those fields are committed, not disclosed; the operator's receipt discloses each value with
its salt, and a changed value or salt does not verify. A row of before migration 0018 keeps
its leaf byte for byte (the log is not forked across the migration), and a subject's receipt
of it is refused: its leaf holds the fields in clear."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import purgekeeper
from purgekeeper.schema import ledger, migrate
from purgekeeper.schema.db import Database
from purgekeeper.storage import signed_log
from purgekeeper.tlog import tree
from purgekeeper.tlog.verify import (
    COMMITTED_FIELDS,
    ReceiptInvalid,
    Verifier,
    describe,
    leaf_hash,
    open_checkpoint,
    verify_consistency,
    verify_receipt,
)
from tests.helpers.databases import open_rooted
from tests.helpers.interop import Go
from tests.helpers.receipts import log_dir
from tests.helpers.subject_receipts import SECRETS, WHO, disclosed_values, old_row, purge_with_who

Pk = purgekeeper.Purgekeeper


def leaf_of(document: dict[str, Any]) -> bytes:
    return base64.b64decode(document["leaf"])


def test_a_new_purge_s_leaf_holds_no_actor_reason_or_request_text(pk: Pk) -> None:
    purge_id = purge_with_who(pk)
    subject = pk.receipt(purge_id, for_subject=True)
    leaf = leaf_of(subject)
    for secret in SECRETS:
        assert secret.encode() not in leaf
        assert secret not in json.dumps(subject, ensure_ascii=False)
    assert b"support.example.org" not in leaf and b"ex-husband" not in leaf
    row = json.loads(leaf)
    assert row["leaf_version"] == 2 and set(row["commitments"]) == set(COMMITTED_FIELDS)
    assert (row["purge_id"], row["seq"], row["kind"]) == (purge_id, 1, "conversation")
    assert not (set(row) & set(COMMITTED_FIELDS))
    with pk.db.read() as conn:
        entry = ledger.entry_by_purge_id(conn, purge_id)
    assert entry is not None and entry.salts is not None
    assert leaf == signed_log.leaf_of(entry)


def test_a_subject_s_receipt_verifies_without_revealing_who_or_why(pk: Pk) -> None:
    purge_id = purge_with_who(pk)
    subject = pk.receipt(purge_id, for_subject=True)
    assert subject["version"] == 1 and "disclosed" not in subject
    result = verify_receipt(subject, pk.log_key())
    assert (result.purge_id, result.leaf_version, result.disclosed) == (purge_id, 2, None)
    assert result.undisclosed == COMMITTED_FIELDS
    line = describe(result)
    assert line.startswith("ok: a conversation purge, id ")
    assert line.endswith("; actor, reason and request committed, not disclosed")
    assert not any(secret in line for secret in SECRETS)


def test_the_operator_s_receipt_discloses_and_verifies_the_values(pk: Pk) -> None:
    purge_id = purge_with_who(pk)
    full = pk.receipt(purge_id)
    assert full["version"] == 2 and disclosed_values(full) == WHO
    assert full["leaf"] == pk.receipt(purge_id, for_subject=True)["leaf"]  # one leaf, two receipts
    result = verify_receipt(full, pk.log_key())
    assert result.disclosed == WHO and result.undisclosed == ()
    line = describe(result)
    assert f'actor "{WHO["actor"]}"' in line and f'reason "{WHO["reason"]}"' in line


@pytest.mark.parametrize("part", ["value", "salt"])
@pytest.mark.parametrize("field", COMMITTED_FIELDS)
def test_a_changed_disclosed_value_or_salt_does_not_verify(pk: Pk, field: str, part: str) -> None:
    full = pk.receipt(purge_with_who(pk))
    item = full["disclosed"][field]
    if part == "value":
        item["value"] = item["value"] + "x"
    else:
        salt = bytearray(base64.b64decode(item["salt"]))
        salt[0] ^= 0x01
        item["salt"] = base64.b64encode(bytes(salt)).decode()
    with pytest.raises(ReceiptInvalid, match=f"the disclosed {field} .*does not match its commitment"):
        verify_receipt(full, pk.log_key())


def test_a_receipt_that_discloses_a_field_the_leaf_does_not_commit_is_refused(pk: Pk) -> None:
    full = pk.receipt(purge_with_who(pk))
    twice = json.dumps(full).replace('"disclosed": {', '"disclosed": {"actor": {"value": "someone", "salt": ""}, ', 1)
    full["disclosed"]["scope_digest"] = full["disclosed"]["actor"]
    with pytest.raises(ReceiptInvalid, match="'scope_digest', which the leaf does not commit"):
        verify_receipt(full, pk.log_key())
    with pytest.raises(ReceiptInvalid, match="holds a key twice"):
        verify_receipt(twice, pk.log_key())


def test_a_copy_row_carries_its_salts_and_the_copy_still_verifies(pk: Pk) -> None:
    purge_id = purge_with_who(pk)
    pk.receipt(purge_id)  # the copy is caught up
    [line] = (pk.copy.directory / "segment-000000000001.jsonl").read_bytes().splitlines()
    row = json.loads(line)
    with pk.db.read() as conn:
        entry = ledger.entry_by_purge_id(conn, purge_id)
    assert entry is not None and row["salts"] == entry.salts
    assert ledger.LedgerEntry.from_checkpoint(row) == entry
    assert pk.verify_ledger().ok


def test_a_subject_s_receipt_of_a_row_of_before_0018_is_refused(pk: Pk) -> None:
    entry = old_row(pk)
    with pytest.raises(purgekeeper.ValidationError, match="leaf holds the actor, the reason and the request's"):
        pk.receipt(entry.purge_id, for_subject=True)
    full = pk.receipt(entry.purge_id)
    assert full["version"] == 1 and "disclosed" not in full
    assert leaf_of(full) == ledger.canonical_json(entry.hashed_fields()).encode()  # in clear, as always
    result = verify_receipt(full, pk.log_key())
    assert (result.leaf_version, result.undisclosed) == (1, ())
    assert "committed" not in describe(result)
    with pytest.raises(purgekeeper.ValidationError, match="for_subject"):
        pk.receipt(entry.purge_id, for_subject="yes")  # type: ignore[arg-type]


def test_a_subject_s_receipt_verifies_with_go_s_sumdb(pk: Pk, go: Go) -> None:
    purge_with_who(pk, "c-first")
    subject = pk.receipt(purge_with_who(pk), for_subject=True)
    purge_with_who(pk, "c-after")
    changed = bytearray(leaf_of(subject))
    changed[len(changed) // 2] ^= 0x01
    checks = [
        {"kind": "record", "vkey": pk.log_key(), "note": subject["checkpoint"], "proof": subject["inclusion_proof"],
         "index": subject["leaf_index"], "leaf": subject["leaf"]},
        {"kind": "record", "vkey": pk.log_key(), "note": subject["checkpoint"], "proof": subject["inclusion_proof"],
         "index": subject["leaf_index"], "leaf": base64.b64encode(bytes(changed)).decode()},
    ]  # fmt: skip
    assert [check["ok"] for check in go({"checks": checks})["checks"]] == [True, False]


def test_a_merged_purge_is_a_new_salted_row_that_commits_its_rewritten_origin(pk: Pk, tmp_path: Path) -> None:
    """A merge re-chains another database's purge with ``origin`` rewritten to name its source:
    the new row draws its own salts, and its leaf commits the new origin."""
    other = purgekeeper.open(
        f"sqlite:///{tmp_path / 'other.db'}", checkpoint_dir=tmp_path / "other-ledger", blob_root=tmp_path / "ob",
        file_root=tmp_path / "of", memory_roots=[tmp_path / "om"], workers="none",
    )  # fmt: skip
    with other:
        purge_id = purge_with_who(other)
        with other.db.read() as conn:
            source = ledger.entry_by_purge_id(conn, purge_id)
        source_dir = other.copy.directory
    assert pk.merge_ledger(source_dir, allow_other_database=True).appended == (purge_id,)
    with pk.db.read() as conn:
        merged = ledger.entry_by_purge_id(conn, purge_id)
    assert source is not None and merged is not None and merged.salts not in (None, source.salts)
    assert json.loads(merged.origin or "")["origin"] == WHO["origin"] and merged.content() == source.content()
    full = pk.receipt(purge_id)
    assert verify_receipt(full, pk.log_key()).disclosed == {**WHO, "origin": merged.origin}
    assert WHO["actor"].encode() not in leaf_of(pk.receipt(purge_id, for_subject=True))


# -- across migration 0018: no fork -----------------------------------------------------------------


def test_a_row_of_before_0018_keeps_its_leaf_and_the_log_its_root(empty_database_url: str, tmp_path: Path) -> None:
    """Rows written at 0017, their leaves and root computed from the rows as the database holds
    them; after the upgrade the signed log proves the same leaves under the same root, and a
    new purge's version 2 leaf extends that tree."""
    leaves = _rows_at_0017(empty_database_url)
    old_root = tree.tree_hash(len(leaves), _reader(leaves))
    pk = open_rooted(empty_database_url, tmp_path)  # opening migrates the database to the newest revision
    try:
        for seq, leaf in enumerate(leaves, start=1):
            document = pk.receipt(f"p-old-{seq}")
            assert leaf_of(document) == leaf and document["version"] == 1
            verify_receipt(document, pk.log_key())
            with pytest.raises(purgekeeper.ValidationError, match="leaf version 1"):
                pk.receipt(f"p-old-{seq}", for_subject=True)
        checkpoint = open_checkpoint(pk.receipt("p-old-1")["checkpoint"], Verifier.from_vkey(pk.log_key()))
        assert (checkpoint.size, checkpoint.root) == (len(leaves), old_root)
        new = pk.receipt(purge_with_who(pk), for_subject=True)
        assert verify_receipt(new, pk.log_key()).leaf_version == 2
        proof = pk.consistency(len(leaves))
        newer = open_checkpoint(proof["checkpoint"], Verifier.from_vkey(pk.log_key()))
        hashes = [base64.b64decode(h) for h in proof["proof"]]
        verify_consistency(len(leaves), newer.size, hashes, old_root, newer.root)
        assert pk.verify_ledger().ok and log_dir(pk).is_dir()
    finally:
        pk.close()


def _rows_at_0017(url: str) -> list[bytes]:
    """Two purges' rows written at revision 0017, and their leaves as the log made them then:
    each row's canonical JSON without prev_hash and row_hash, from the columns 0017 has."""
    from alembic import command

    db = Database(url)
    config = migrate.alembic_config()
    try:
        with db.write() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "0017")
        for seq in (1, 2):
            with db.write() as conn:
                ledger.append(
                    conn, ledger.lock_head(conn), purge_id=f"p-old-{seq}", kind="conversation",
                    selectors={"conversation_id": f"c-old-{seq}"}, scope_digest="0" * 64, salted=False,
                    **{**WHO, "idempotency_key": f"idem-old-{seq}"},
                )  # fmt: skip
        with db.read() as conn:
            rows = [dict(row._mapping) for row in conn.execute(text("SELECT * FROM purge_ledger ORDER BY seq"))]
    finally:
        db.dispose()
    assert all("salts" not in row for row in rows)
    return [_leaf_at_0017(row) for row in rows]


def _leaf_at_0017(row: dict[str, Any]) -> bytes:
    fields = {name: value for name, value in row.items() if name not in ("prev_hash", "row_hash")}
    fields["selectors"] = json.loads(fields["selectors"])
    accepted_at = fields["accepted_at"]
    if isinstance(accepted_at, str):  # SQLite hands raw SQL a naive UTC text
        accepted_at = dt.datetime.fromisoformat(accepted_at).replace(tzinfo=dt.UTC)
    fields["accepted_at"] = accepted_at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _reader(leaves: list[bytes]) -> Any:
    store = tree.HashStore()
    store.append([leaf_hash(leaf) for leaf in leaves])
    return store.read
