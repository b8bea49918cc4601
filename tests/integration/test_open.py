"""purgekeeper.open(): what it creates, and what it refuses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import purgekeeper


def test_open_creates_only_the_directories_it_uses(database_url: str, roots: dict[str, Path], tmp_path: Path) -> None:
    with purgekeeper.open(
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
    with purgekeeper.open() as pk:
        pk.create_conversation("c1")
    assert (tmp_path / "data" / "purgekeeper.db").is_file()
    assert (tmp_path / "data" / "blobs").is_dir() and (tmp_path / "data" / "ledger").is_dir()


@pytest.mark.parametrize("workers", ["many", "", None], ids=["unknown", "empty", "none-value"])
def test_open_refuses_an_unknown_worker_mode(tmp_path: Path, workers: object) -> None:
    with pytest.raises(purgekeeper.ValidationError):
        purgekeeper.open(f"sqlite:///{tmp_path}/x.db", workers=workers)  # type: ignore[arg-type]
    assert not (tmp_path / "x.db").exists()


def test_open_refuses_an_unsupported_database(tmp_path: Path) -> None:
    with pytest.raises(purgekeeper.ValidationError, match="unsupported database"):
        purgekeeper.open("mysql://root@127.0.0.1/test", checkpoint_dir=tmp_path / "l")


def test_one_process_holds_an_embedded_handle_and_a_redis_handle(
    database_url: str, roots: dict[str, Path], tmp_path: Path
) -> None:
    """Issue 11, case 15: a process that opened an embedded handle (the StubBroker and its
    in-process worker) then opens one with a Redis broker URL. Both work: the embedded one's
    purge is cleaned in-process, the Redis one's wake-up lands in Redis, and each broker keeps
    its own actor."""
    import redis

    from purgekeeper.workers import broker
    from tests.helpers.databases import REDIS_URL, service_missing

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.RedisError as exc:
        service_missing("Redis", exc)
    client.flushdb()
    with purgekeeper.open(
        f"sqlite:///{tmp_path / 'embedded.db'}",
        blob_root=tmp_path / "e-blobs",
        file_root=tmp_path / "e-files",
        checkpoint_dir=tmp_path / "e-ledger",
    ) as embedded:
        with purgekeeper.open(
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


def test_open_takes_the_settings_a_process_built_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``settings=``: the environment is not read again (a variable set since changes nothing)."""
    settings = purgekeeper.Settings.from_env({"PURGEKEEPER_DATA_DIR": str(tmp_path / "built")})
    monkeypatch.setenv("PURGEKEEPER_DATA_DIR", str(tmp_path / "elsewhere"))
    with purgekeeper.open(settings=settings, workers="none", checkpoint_dir=tmp_path / "given") as pk:
        assert pk.settings.data_dir == tmp_path / "built"
        assert pk.settings.checkpoint_dir == tmp_path / "given"  # an argument still wins
    assert (tmp_path / "built" / "purgekeeper.db").is_file()
    assert not (tmp_path / "elsewhere").exists()
    with pytest.raises(purgekeeper.ValidationError, match="settings"):
        purgekeeper.open(settings={"data_dir": tmp_path}, workers="none")  # type: ignore[arg-type]


def test_open_and_purgectl_find_the_same_database_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One data directory: ``purgectl init`` (what ``make run`` runs first) with nothing
    configured creates the database ``purgekeeper.open()`` then opens, under HOME."""
    import json
    import os
    import subprocess
    import sys

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_DATA_HOME")
    command = [sys.executable, "-m", "purgekeeper.commands.cli", "init", "--json"]
    done = subprocess.run(command, env=dict(os.environ), capture_output=True, text=True, timeout=60, check=True)
    initialised = json.loads(done.stdout)
    data_dir = tmp_path / "home" / ".local" / "share" / "purgekeeper"
    assert initialised["data_dir"] == str(data_dir)
    with purgekeeper.open(workers="none", migrate_schema=False) as pk:  # refuses a database it would create
        assert pk.settings.database_url == initialised["database_url"] == f"sqlite:///{data_dir / 'purgekeeper.db'}"


def test_a_database_not_initialised_is_named_with_its_password_masked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    with pytest.raises(purgekeeper.SchemaMismatch, match=re.escape(f"the database {url} is not initialised")):
        purgekeeper.open(url, workers="none", migrate_schema=False, checkpoint_dir=tmp_path / "l")


def test_a_database_that_does_not_answer_is_named_with_its_password_masked(tmp_path: Path) -> None:
    port = _closed_port()
    url = f"postgresql://purgekeeper:s3cret-pw@127.0.0.1:{port}/nowhere"
    with pytest.raises(purgekeeper.InfrastructureError) as refused:
        purgekeeper.open(url, workers="none", checkpoint_dir=tmp_path / "l")
    assert f"purgekeeper:***@127.0.0.1:{port}/nowhere is unavailable" in refused.value.detail
    assert "s3cret-pw" not in str(refused.value)


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
