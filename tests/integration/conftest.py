"""Fixtures shared by the integration tests that restore a database from a backup."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.backups import Backups


@pytest.fixture
def backups(database_url: str, tmp_path: Path) -> Iterator[Backups]:
    """Whole-database backups of the test database, dropped after the test."""
    made = Backups(database_url, tmp_path / "backups")
    yield made
    made.drop_copies()
