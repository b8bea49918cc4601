"""What the purgectl tests share: ``purgectl``, the CLI run as a process of its own with the
test's database and roots in its environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.purgectl import Purgectl


@pytest.fixture
def purgectl(database_url: str, roots: dict[str, Path], tmp_path: Path) -> Purgectl:
    env = dict(os.environ)  # clean_environment has already removed every PURGEKEEPER_* variable
    env.update(
        PURGEKEEPER_DATABASE_URL=database_url,
        PURGEKEEPER_DATA_DIR=str(tmp_path / "data"),
        PURGEKEEPER_BLOB_ROOT=str(roots["blob_root"]),
        PURGEKEEPER_FILE_ROOT=str(roots["file_root"]),
        PURGEKEEPER_MEMORY_ROOTS=str(roots["memory_root"]),
        PURGEKEEPER_CHECKPOINT_DIR=str(roots["checkpoint_dir"]),
    )
    return Purgectl(env)
