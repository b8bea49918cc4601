"""Issue 26, item 7: a CLI that answers at once. ``purgectl --help`` imported the whole system
(SQLAlchemy, the kinds, the workers) before printing a line. The ``commands`` package now
imports what a name needs when the name is first used, and purgectl's modules import the
database and the HTTP stack only inside the commands that use them.

What was tried: importing the CLI in a fresh interpreter and listing the heavy packages it
loaded; every public name of ``commands`` resolving to the object its home module defines;
an unknown name raising AttributeError as a module's would."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import purgekeeper

HEAVY = (
    *("sqlalchemy", "fastapi", "dramatiq", "redis", "psycopg", "alembic", "jinja2", "uvicorn", "pydantic"),
    *("cryptography", "pythonjsonlogger", "tlog"),  # the receipts' verifier, the JSON log format
)


def _modules_after(statement: str, env: dict[str, str] | None = None) -> list[str]:
    probe = f"import sys\n{statement}\nprint(__import__('json').dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60, env=env
    )
    return list(json.loads(done.stdout.splitlines()[-1]))


def _loaded_after(statement: str, env: dict[str, str] | None = None) -> list[str]:
    return sorted({m.split(".")[0] for m in _modules_after(statement, env) if m.split(".")[0] in HEAVY})


def test_the_cli_s_help_loads_no_database_or_http_stack() -> None:
    assert _loaded_after("import purgekeeper.commands.cli") == []
    assert _loaded_after("import purgekeeper") == []


def test_a_command_s_help_loads_none_either() -> None:
    assert (
        _loaded_after(
            "from click.testing import CliRunner\nfrom purgekeeper.commands import cli\n"
            "assert CliRunner().invoke(cli.main, ['status', '--help']).exit_code == 0"
        )
        == []
    )


@pytest.mark.parametrize("command", [["status", "no-such-purge"], ["list"]])
def test_status_and_list_load_no_migration_or_http_stack(tmp_path: Path, command: list[str]) -> None:
    """``status`` and ``list`` read the schema's revision with one query (``purgekeeper.schema.migrate``):
    alembic's runtime (with mako and pygments) was a quarter of their start-up, and neither
    serves HTTP or talks to a broker. On SQLite they load no PostgreSQL driver or dialect."""
    env = {**os.environ, "PURGEKEEPER_DATA_DIR": str(tmp_path)}
    env.pop("PURGEKEEPER_DATABASE_URL", None)
    env.pop("PURGEKEEPER_BROKER_URL", None)
    subprocess.run(
        [sys.executable, "-m", "purgekeeper.commands.cli", "init"],
        env=env,
        capture_output=True,
        check=True,
        timeout=120,
    )
    modules = _modules_after(
        "from click.testing import CliRunner\nfrom purgekeeper.commands import cli\n"
        f"print(CliRunner().invoke(cli.main, {command!r}).output)",
        env=env,
    )
    loaded = sorted({m.split(".")[0] for m in modules if m.split(".")[0] in HEAVY})
    assert loaded == ["sqlalchemy"]
    # nor, on SQLite, the PostgreSQL dialect: the partial indexes' dialect options and the
    # upserts' dialect INSERTs loaded it at import, a tenth of the call (tables.with_dialect_indexes)
    assert [m for m in modules if m.startswith("sqlalchemy.dialects.postgresql")] == []


@pytest.mark.parametrize("name", purgekeeper.__all__)
def test_every_public_name_resolves_to_its_home_module_s_object(name: str) -> None:
    value = getattr(purgekeeper, name)
    home = getattr(value, "__module__", None)
    if home is not None and home.startswith(("purgekeeper.commands.", "purgekeeper.schema.")):
        assert getattr(importlib.import_module(home), getattr(value, "__name__", name)) is value
    assert name in dir(purgekeeper)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        purgekeeper.no_such_name  # noqa: B018
