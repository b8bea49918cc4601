"""purgectl in the first hour: every refusal about the database names the database it looked
at (its password masked), ``purgectl init`` creates exactly that one, and each invocation
reads its settings from the environment once. Real subprocesses, real SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import make_url

from purgekeeper.commands import cli
from purgekeeper.commands.settings import Settings


def purgectl(env: dict[str, str], *args: str, code: int = 0) -> dict[str, Any]:
    command = [sys.executable, "-m", "purgekeeper.commands.cli", *args, "--json"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    return dict(json.loads(done.stdout))


@pytest.fixture
def empty_postgres(request: pytest.FixtureRequest) -> Iterator[str]:
    """A PostgreSQL database that exists and holds nothing, its URL with a password in it."""
    from tests.helpers.databases import create_database, drop_database, postgres_url

    request.getfixturevalue("postgres_template")  # skips (or fails on CI) without PostgreSQL
    name = f"pk_empty_{uuid.uuid4().hex[:12]}"
    create_database(name)
    yield make_url(postgres_url(name)).set(password="s3cret-pw").render_as_string(hide_password=False)
    drop_database(name)


def test_an_empty_data_directory_is_named_and_init_creates_that_database(tmp_path: Path) -> None:
    env = {**os.environ, "PURGEKEEPER_DATA_DIR": str(tmp_path / "fresh")}
    database = f"sqlite:///{tmp_path / 'fresh' / 'purgekeeper.db'}"
    for command in ("list", "health"):
        refused = purgectl(env, command, code=4)
        assert refused["error"] == "schema_mismatch" and database in refused["detail"], refused
        assert "purgectl init" in refused["detail"]
    assert purgectl(env, "init")["database_url"] == database
    assert purgectl(env, "health")["ok"] is True


def test_an_uninitialised_postgresql_database_is_named_with_its_password_masked(empty_postgres: str) -> None:
    env = {**os.environ, "PURGEKEEPER_DATABASE_URL": empty_postgres}
    refused = purgectl(env, "health", code=4)
    masked = make_url(empty_postgres).render_as_string(hide_password=True)
    assert f"no purgekeeper database at {masked}" in refused["detail"], refused
    assert "s3cret-pw" not in json.dumps(refused)
    assert purgectl(env, "init")["migrated"] is True
    assert purgectl(env, "health")["ok"] is True


def test_a_postgresql_database_that_does_not_exist_is_named(empty_postgres: str) -> None:
    missing = make_url(empty_postgres).set(database=f"pk_missing_{uuid.uuid4().hex[:12]}")
    env = {**os.environ, "PURGEKEEPER_DATABASE_URL": missing.render_as_string(hide_password=False)}
    for command in ("list", "health", "init"):
        refused = purgectl(env, command, code=4)
        assert refused["error"] == "infrastructure_error", refused
        assert f"{missing.database} is unavailable" in refused["detail"] and "***" in refused["detail"], refused
        assert "s3cret-pw" not in json.dumps(refused)


def test_each_invocation_reads_the_environment_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PURGEKEEPER_DATA_DIR", str(tmp_path / "data"))
    reads: list[None] = []
    real = Settings.from_env.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Settings], environ: Any = None) -> Settings:
        reads.append(None)
        return real(cls, environ)  # type: ignore[no-any-return]

    monkeypatch.setattr(Settings, "from_env", classmethod(counted))
    for command in ("init", "health", "list"):
        reads.clear()
        result = CliRunner().invoke(cli.main, [command, "--json"])
        assert result.exit_code == 0, result.output
        assert len(reads) == 1, command
