"""Fixtures shared by the integration tests: whole-database backups (for the tests that restore a
database from one), a database with no schema (for the tests that migrate one), and ``go``,
Go's tlog implementation built once a session."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.backups import Backups
from tests.helpers.databases import create_database, drop_database, postgres_url, service_missing
from tests.helpers.interop import PROGRAM, Go, gopath


@pytest.fixture
def backups(database_url: str, tmp_path: Path) -> Iterator[Backups]:
    """Whole-database backups of the test database, dropped after the test."""
    made = Backups(database_url, tmp_path / "backups")
    yield made
    made.drop_copies()


@pytest.fixture
def empty_database_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A database with no schema at all, on either backend."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    name = f"pk_t_{uuid.uuid4().hex[:16]}"
    create_database(name)
    yield postgres_url(name)
    drop_database(name)


@pytest.fixture(scope="session")
def go(tmp_path_factory: pytest.TempPathFactory) -> Go:
    """Run tlogcheck on one request and return its answer."""
    found = gopath()
    if shutil.which("go") is None or found is None:
        service_missing("Go with golang.org/x/mod (golang-go, golang-golang-x-mod-dev)", FileNotFoundError("go"))
    build = tmp_path_factory.mktemp("tlogcheck")
    binary = build / "tlogcheck"
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": str(found), "GOCACHE": str(build / "cache")}
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=PROGRAM, env=env, check=True, timeout=300)

    def run(request: dict[str, Any]) -> dict[str, Any]:
        done = subprocess.run([binary], input=json.dumps(request), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    return run
