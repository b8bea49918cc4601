"""Receipts over HTTP (issue 24 items 3-4, 6), both backends: ``GET /v1/purges/{id}/receipt``,
``.../completion`` and ``GET /v1/ledger/consistency`` with the host token; ``/log/checkpoint`` and ``/log/tile/...``
without any token, serving exactly the log's files and refusing every other path."""

from __future__ import annotations

import pytest

import purgekeeper
from purgekeeper.storage import signed_log
from purgekeeper.tlog import tree
from purgekeeper.tlog.verify import ReceiptInvalid, Verifier, open_checkpoint, verify_completion, verify_receipt
from tests.helpers.http import WHO, TestClient, ok
from tests.helpers.restore import clean

Pk = purgekeeper.Purgekeeper
NO_TOKEN = {"Authorization": ""}


def purge(client: TestClient, n: int, prefix: str = "c") -> list[str]:
    ids = []
    for i in range(n):
        response = client.post(f"/v1/conversations/{prefix}-{i}/purge", json=WHO)
        assert response.status_code == 202, response.text
        ids.append(response.json()["purge_id"])
    return ids


def test_a_receipt_over_http_verifies_and_needs_the_token(pk: Pk, client: TestClient) -> None:
    ids = purge(client, 3)
    document = ok(client.get(f"/v1/purges/{ids[1]}/receipt"))
    assert verify_receipt(document, pk.log_key()).ledger_seq == 2
    assert client.get(f"/v1/purges/{ids[1]}/receipt", headers=NO_TOKEN).status_code == 401
    missing = client.get("/v1/purges/no-such-purge/receipt")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"


def test_consistency_over_http(pk: Pk, client: TestClient) -> None:
    first = purge(client, 2)
    before = ok(client.get(f"/v1/purges/{first[0]}/receipt"))
    purge(client, 5, prefix="more")
    proof = ok(client.get("/v1/ledger/consistency", params={"from": 2}))
    result = verify_receipt(before, pk.log_key(), newer_checkpoint=proof["checkpoint"], consistency_proof=proof)
    assert result.newer is not None and result.newer.size == 7
    for bad in ("0", "8", "x"):
        assert client.get("/v1/ledger/consistency", params={"from": bad}).status_code == 400


def test_the_log_routes_need_no_token_and_serve_exactly_the_tiles(pk: Pk, client: TestClient) -> None:
    purge(client, 260)
    directory = pk.settings.checkpoint_dir / f"{pk.database_key}{signed_log.LOG_SUFFIX}"
    note = client.get("/log/checkpoint", headers=NO_TOKEN)
    assert note.status_code == 200 and note.text == (directory / "checkpoint").read_text()
    checkpoint = open_checkpoint(note.text, Verifier.from_vkey(pk.log_key()))
    assert checkpoint.size == 260
    for tile in tree.tiles_for_growth(0, 260):
        served = client.get(f"/log/{tile.path}", headers=NO_TOKEN)
        assert served.status_code == 200 and served.content == (directory / tile.path).read_bytes()
    reader = tree.TileHashReader(260, lambda t: client.get(f"/log/{t.path}", headers=NO_TOKEN).content)
    assert tree.tree_hash(260, reader) == checkpoint.root
    refused = [
        "/log/tile/0/002",  # beyond the tree
        "/log/tile/0/001.p/5",  # wider than the tree's partial
        "/log/tile/0/1",
        "/log/tile/..%2fcheckpoint",
        "/log/tile/0/%2e%2e/%2e%2e/head.json",
        "/log/tile/0/000/../../../x",
        "/log/entries/000",
        "/log/head.json",
    ]
    for path in refused:
        assert client.get(path, headers=NO_TOKEN).status_code == 404, path


def test_an_older_partial_tile_is_served_from_the_wider_one(pk: Pk, client: TestClient) -> None:
    purge(client, 3)
    old = client.get("/log/tile/0/000.p/3", headers=NO_TOKEN).content
    purge(client, 2, prefix="more")
    assert client.get("/log/tile/0/000.p/3", headers=NO_TOKEN).content == old
    assert client.get("/log/tile/0/000.p/5", headers=NO_TOKEN).content[: len(old)] == old
    assert len(old) == 3 * 32


def test_a_completion_over_http_verifies_with_the_receipt_and_needs_the_token(pk: Pk, client: TestClient) -> None:
    for name in ("c-0", "c-1"):
        pk.create_conversation(name)
        pk.ingest_event(name, author="ada", body="gone", event_id=f"{name}-e")
    ids = purge(client, 2)
    early = client.get(f"/v1/purges/{ids[0]}/completion")
    assert early.status_code == 409 and early.json()["error"] == "cleanup_not_complete", early.text
    clean(pk)
    document = ok(client.get(f"/v1/purges/{ids[0]}/completion"))
    receipt = ok(client.get(f"/v1/purges/{ids[0]}/receipt"))
    completion = verify_completion(document["statement"], pk.log_key(), receipt)
    assert completion.purge_id == ids[0] and document["completed_at"] == completion.completed_at
    with pytest.raises(ReceiptInvalid):
        verify_completion(document["statement"], pk.log_key(), ok(client.get(f"/v1/purges/{ids[1]}/receipt")))
    assert client.get(f"/v1/purges/{ids[0]}/completion", headers=NO_TOKEN).status_code == 401
    missing = client.get("/v1/purges/no-such-purge/completion")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
