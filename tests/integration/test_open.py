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
