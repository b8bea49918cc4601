"""Serving the signed log's public part (issue 35 item 4), both backends: a symlink planted in
the tile directory is never followed, a tile of another length than its path says is never
served, the C2SP tlog-tiles caching headers, and the consistency proof under ``/log`` without
a token."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import purgekeeper
from purgekeeper.storage import signed_log
from purgekeeper.tlog.verify import verify_receipt
from tests.helpers.http import AS_HOST, WHO, TestClient, make_client, ok

Pk = purgekeeper.Purgekeeper
NO_TOKEN = {"Authorization": ""}
FULL_TILE = 8192
IMMUTABLE = "public, max-age=31536000, immutable"
BRIEFLY = "public, max-age=5"


@pytest.fixture
def client(pk: Pk) -> Iterator[TestClient]:
    with make_client(pk) as test_client:
        test_client.headers.update(NO_TOKEN)
        yield test_client


def purge(client: TestClient, n: int, prefix: str = "c") -> list[str]:
    ids = []
    for i in range(n):
        response = client.post(f"/v1/conversations/{prefix}-{i}/purge", json=WHO, headers=AS_HOST)
        assert response.status_code == 202, response.text
        ids.append(response.json()["purge_id"])
    return ids


def log_directory(pk: Pk) -> Path:
    return pk.settings.checkpoint_dir / f"{pk.database_key}{signed_log.LOG_SUFFIX}"


def replace_with_symlink(path: Path, target: Path) -> None:
    path.unlink()
    path.symlink_to(target)


def served_fresh(pk: Pk, client: TestClient, path: str) -> bytes | None:
    """The file as a process that holds nothing in memory serves it; None when refused."""
    pk.receipts.log.forget()
    response = client.get(f"/log/{path}")
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.text
    return response.content


def test_a_symlink_in_the_tile_directory_is_never_followed(pk: Pk, client: TestClient) -> None:
    purge(client, 260)
    tiles, key = log_directory(pk) / "tile", pk.settings.signing_key_path
    secret, whole = key.read_bytes(), (tiles / "0" / "000").read_bytes()
    replace_with_symlink(tiles / "0" / "000", key)
    assert served_fresh(pk, client, "tile/0/000") is None
    assert served_fresh(pk, client, "tile/0/001.p/4") is not None  # the rest is served
    (tiles / "0" / "000").unlink()
    (tiles / "0" / "000").write_bytes(whole)
    elsewhere = tiles.parent / "elsewhere"
    (tiles / "1").rename(elsewhere)
    (tiles / "1").symlink_to(elsewhere)  # a directory on the path: the same bytes, still refused
    assert served_fresh(pk, client, "tile/1/000.p/1") is None
    assert key.read_bytes() == secret


def test_a_symlinked_partial_tile_is_refused(pk: Pk, client: TestClient) -> None:
    purge(client, 3)
    partial = log_directory(pk) / "tile" / "0" / "000.p" / "3"
    replace_with_symlink(partial, pk.settings.signing_key_path)
    body = served_fresh(pk, client, "tile/0/000.p/3")
    assert body is None or (len(body) == 3 * 32 and not partial.is_symlink())  # refused, or written again


def test_a_full_tile_cut_short_is_never_served(pk: Pk, client: TestClient) -> None:
    purge(client, 260)
    full = log_directory(pk) / "tile" / "0" / "000"
    whole = full.read_bytes()
    assert len(whole) == FULL_TILE
    os.truncate(full, FULL_TILE - 32)
    assert served_fresh(pk, client, "tile/0/000") is None
    assert served_fresh(pk, client, "tile/0/000.p/7") is None  # nor a partial one read from it
    full.write_bytes(whole + b"\0" * 32)
    assert served_fresh(pk, client, "tile/0/000") is None
    full.write_bytes(whole)
    assert served_fresh(pk, client, "tile/0/000") == whole


def test_a_partial_tile_is_served_at_its_width_only(pk: Pk, client: TestClient) -> None:
    purge(client, 5)
    partial = log_directory(pk) / "tile" / "0" / "000.p" / "5"
    whole = partial.read_bytes()
    partial.write_bytes(whole[:-1])
    body = served_fresh(pk, client, "tile/0/000.p/5")
    assert body is None or body == whole  # refused, or written again by the repair of the edge


def test_the_caching_headers_follow_tlog_tiles(pk: Pk, client: TestClient) -> None:
    purge(client, 257)
    assert client.get("/log/checkpoint").headers["Cache-Control"] == BRIEFLY
    assert client.get("/log/tile/0/000").headers["Cache-Control"] == IMMUTABLE
    assert client.get("/log/tile/0/001.p/1").headers["Cache-Control"] == BRIEFLY
    assert client.get("/log/tile/1/000.p/1").headers["Cache-Control"] == BRIEFLY
    missing = client.get("/log/tile/0/001")
    assert missing.status_code == 404 and "immutable" not in missing.headers.get("Cache-Control", "")


def test_the_consistency_proof_is_public(pk: Pk, client: TestClient) -> None:
    first = purge(client, 2)
    before = ok(client.get(f"/v1/purges/{first[0]}/receipt", headers=AS_HOST))
    purge(client, 5, prefix="more")
    response = client.get("/log/consistency", params={"from": 2})
    assert response.status_code == 200 and response.headers["Cache-Control"] == BRIEFLY
    proof = response.json()
    assert proof == ok(client.get("/v1/ledger/consistency", params={"from": 2}, headers=AS_HOST))
    result = verify_receipt(before, pk.log_key(), newer_checkpoint=proof["checkpoint"], consistency_proof=proof)
    assert result.newer is not None and result.newer.size == 7
    for bad in ("0", "8", "x", ""):
        assert client.get("/log/consistency", params={"from": bad}).status_code == 400, bad
    assert client.get("/log/consistency").status_code == 400


def test_a_rotation_statement_is_served_and_a_symlink_in_its_place_is_not(pk: Pk, client: TestClient) -> None:
    """``GET /log/rotation/<n>``: the old key's signed statement naming the new key, cacheable
    for ever (it is never rewritten); a symlink planted as the next one (at the signing key)
    and names that are not a statement's are 404s."""
    from purgekeeper.commands import key_commands

    purge(client, 2)
    with pk.copy.writers_kept_out():
        rotated = key_commands.rotate_signing_key(pk.settings, pk.database_key)
    response = client.get(f"/log/{rotated.statement}")
    assert response.status_code == 200 and response.headers["cache-control"] == IMMUTABLE
    assert response.text.startswith("purgekeeper-key-rotation/v1\n") and rotated.vkey in response.text
    planted = log_directory(pk) / "rotation" / "2"
    planted.symlink_to(pk.settings.signing_key_path)
    for path in ("rotation/2", "rotation/02", "rotation/x", "rotation/1/.."):
        refused = client.get(f"/log/{path}")
        assert refused.status_code == 404 and b"PRIVATE" not in refused.content, path
    assert pk.receipt(purge(client, 1, prefix="after")[0])["rotations"]  # the planted link is no statement
