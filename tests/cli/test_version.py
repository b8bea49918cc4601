"""``purgectl --version``, and ``python -m purgekeeper`` as purgectl: real subprocesses, the way
an operator types them (the console script, ``python -m purgekeeper``, and the CLI package's
own ``-m`` entry the other tests use)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import purgekeeper
from tests.helpers.factories import conversation, purge_events
from tests.helpers.purgectl import REPOSITORY, Purgectl

Pk = purgekeeper.Purgekeeper
SCRIPT = Path(sys.executable).parent / "purgectl"  # the venv's console script
ENTRIES = {
    "purgectl": [str(SCRIPT)],
    "python -m purgekeeper": [sys.executable, "-m", "purgekeeper"],
    "python -m purgekeeper.commands.cli": [sys.executable, "-m", "purgekeeper.commands.cli"],
}
HEAVY = ("sqlalchemy", "fastapi", "dramatiq", "redis", "psycopg", "alembic", "uvicorn", "pydantic", "cryptography")


def run(command: list[str], *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command, *args], env=env, cwd=REPOSITORY, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("entry", ENTRIES, ids=list(ENTRIES))
def test_version_prints_the_package_s_version_and_exits_0(entry: str) -> None:
    if entry == "purgectl" and not SCRIPT.exists():
        pytest.skip("purgectl is not installed beside this interpreter")
    done = run(ENTRIES[entry], "--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"purgectl {purgekeeper.__version__}\n", "")


def test_version_loads_no_database_or_http_stack() -> None:
    """As cheap as ``--help`` (tests/unit/test_lazy_imports.py): the version is a constant."""
    probe = (
        "import sys\nfrom click.testing import CliRunner\nfrom purgekeeper.commands import cli\n"
        "assert CliRunner().invoke(cli.main, ['--version']).exit_code == 0\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}))"
    )
    done = run([sys.executable, "-c", probe])
    assert done.returncode == 0, done.stderr
    assert [name for name in HEAVY if f"'{name}'" in done.stdout.splitlines()[-1]] == []


def test_python_m_purgekeeper_runs_purgectl_s_commands(pk: Pk, purgectl: Purgectl) -> None:
    """The same commands, documents and exit codes as purgectl."""
    conversation(pk, "c1", events=1)
    purge_id = purge_events(pk, "c1-e0")
    listed = run(ENTRIES["python -m purgekeeper"], "list", "--json", env=purgectl.env)
    assert listed.returncode == 0, listed.stderr
    assert [p["purge_id"] for p in json.loads(listed.stdout)["purges"]] == [purge_id]
    missing = run(ENTRIES["python -m purgekeeper"], "status", "no-such-purge", "--json", env=purgectl.env)
    assert (missing.returncode, json.loads(missing.stdout)["error"]) == (1, "not_found")
    assert run(ENTRIES["python -m purgekeeper"], "no-such-command").returncode == 2
