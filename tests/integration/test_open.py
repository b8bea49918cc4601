"""commands.open(): what it creates, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

import commands


def test_open_creates_only_the_directories_it_uses(database_url: str, roots: dict[str, Path], tmp_path: Path) -> None:
    with commands.open(
        database_url, blob_root=roots["blob_root"], file_root=roots["file_root"], checkpoint_dir=roots["checkpoint_dir"]
    ):
        pass
    for name in ("blob_root", "file_root", "checkpoint_dir"):
        assert roots[name].is_dir()
    assert not (tmp_path / "xdg" / "purgekeeper").exists(), "the default data directory was created needlessly"


def test_open_on_the_embedded_default_creates_the_database_in_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PURGEKEEPER_DATA_DIR", str(tmp_path / "data"))
    with commands.open() as pk:
        pk.create_conversation("c1")
    assert (tmp_path / "data" / "purgekeeper.db").is_file()
    assert (tmp_path / "data" / "blobs").is_dir() and (tmp_path / "data" / "ledger").is_dir()


@pytest.mark.parametrize("workers", ["many", "", None], ids=["unknown", "empty", "none-value"])
def test_open_refuses_an_unknown_worker_mode(tmp_path: Path, workers: object) -> None:
    with pytest.raises(commands.ValidationError):
        commands.open(f"sqlite:///{tmp_path}/x.db", workers=workers)  # type: ignore[arg-type]
    assert not (tmp_path / "x.db").exists()


def test_open_refuses_an_unsupported_database(tmp_path: Path) -> None:
    with pytest.raises(commands.ValidationError, match="unsupported database"):
        commands.open("mysql://root@127.0.0.1/test", checkpoint_dir=tmp_path / "l")


def test_one_process_holds_an_embedded_handle_and_a_redis_handle(
    database_url: str, roots: dict[str, Path], tmp_path: Path
) -> None:
    """Issue 11, case 15: a process that opened an embedded handle (the StubBroker and its
    in-process worker) then opens one with a Redis broker URL. Both work: the embedded one's
    purge is cleaned in-process, the Redis one's wake-up lands in Redis, and each broker keeps
    its own actor."""
    import redis

    from tests.conftest import REDIS_URL, service_missing
    from workers import broker

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.RedisError as exc:
        service_missing("Redis", exc)
    client.flushdb()
    with commands.open(
        f"sqlite:///{tmp_path / 'embedded.db'}",
        blob_root=tmp_path / "e-blobs",
        file_root=tmp_path / "e-files",
        checkpoint_dir=tmp_path / "e-ledger",
    ) as embedded:
        with commands.open(
            database_url,
            blob_root=roots["blob_root"],
            file_root=roots["file_root"],
            checkpoint_dir=roots["checkpoint_dir"],
            broker_url=REDIS_URL,
        ) as remote:
            remote_purge = remote.purge_conversation("c-remote", actor="op", reason="test")
            assert remote.status(remote_purge.purge_id).status == "complete"  # an absent id: no steps
            remote.create_conversation("c2")
            remote.ingest_event("c2", author="ada", body="x")
            purge_id = remote.purge_conversation("c2", actor="op", reason="test").purge_id
            assert client.llen(f"dramatiq:{broker.QUEUE}") >= 1  # the wake-up went to Redis
            assert remote.status(purge_id).status == "accepted"  # and no worker of this process took it
        embedded.create_conversation("c1")
        embedded.ingest_event("c1", author="ada", body="x")
        local = embedded.purge_conversation("c1", actor="op", reason="test").purge_id
        assert embedded.wait(local, 20).status == "complete"
    assert broker.setup(None) is not broker.setup(REDIS_URL)
    client.flushdb()
    client.close()
