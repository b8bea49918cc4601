"""The wheel is what a host installs, and what is tested here.

The sdist is built from the repository and the wheel from the sdist (as ``python -m build``
does), both are checked with ``twine check``, and the wheel must hold ``purgekeeper`` alone.
It is then installed into a fresh virtual environment outside the repository, beside a host
application whose directory holds its own ``schema.py``, ``commands.py``, ``workers.py``,
``storage.py`` and ``tlog.py``, and with the package index's ``schema`` installed too (both
collisions a host team met when purgekeeper installed five top-level names). There the README's
Python quickstart, a host module that uses its own modules and purgekeeper side by side, and
``purgectl init``, ``serve``, ``status``, ``receipt show`` and ``receipt verify`` all run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.helpers import served
from tests.test_readme import README, blocks

REPOSITORY = Path(__file__).resolve().parents[2]
LAYERS = ("schema", "commands", "workers", "storage", "tlog")
HOST_APP = """
import commands, schema, storage, tlog, workers  # the host's own modules, from its directory
import purgekeeper

assert [module.WHOSE for module in (commands, schema, storage, tlog, workers)] == ["host"] * 5
with purgekeeper.open(workers="none") as pk:
    pk.create_conversation("host-1")
    pk.ingest_event("host-1", author="ada", body="hello from the host")
    print(len(pk.read_conversation("host-1")), purgekeeper.__version__)
"""
INDEX_SCHEMA = """
import purgekeeper
from schema import Schema  # the package index's schema, beside purgekeeper

with purgekeeper.open(workers="none") as pk:
    print(Schema(int).validate(len(pk.list_conversations())) >= 0)
"""


@dataclass(frozen=True)
class Host:
    directory: Path
    bin: Path
    env: dict[str, str]

    def run(self, *command: str | Path, cwd: Path | None = None) -> str:
        return served.run([str(part) for part in command], self.env, cwd or self.directory, timeout=120)

    def purgectl(self, *args: str) -> str:
        return self.run(self.bin / "purgectl", *args)


def build(*command: str | Path, cwd: Path = REPOSITORY) -> str:
    done = subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    build(sys.executable, "-m", "build", "--outdir", out, REPOSITORY)
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    (found,) = dist.glob("*.whl")
    return found


@pytest.fixture(scope="module")
def host(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Host:
    directory = tmp_path_factory.mktemp("host-app")
    venv = tmp_path_factory.mktemp("host-venv") / "venv"
    build(sys.executable, "-m", "venv", venv)
    build(venv / "bin/python", "-m", "pip", "install", "--quiet", wheel, "schema")
    for layer in LAYERS:
        (directory / f"{layer}.py").write_text(f'"""The host application\'s own {layer} module."""\nWHOSE = "host"\n')
    env = served.clean_environment(PURGEKEEPER_DATA_DIR=str(directory / "data"), HOME=str(directory))
    env.pop("PYTHONPATH", None)
    return Host(directory, venv / "bin", env)


def test_the_sdist_and_the_wheel_pass_twine_check(dist: Path) -> None:
    files = sorted(dist.iterdir())
    assert sorted(path.suffix for path in files) == [".gz", ".whl"]
    assert "PASSED" in build(sys.executable, "-m", "twine", "check", "--strict", *files)


def test_the_sdist_holds_each_module_once(dist: Path) -> None:
    """Under purgekeeper/ only: the top-level directories its symlinks point to stay out."""
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        tops = {member.name.split("/")[1] for member in archive.getmembers() if member.name.count("/") >= 2}
    assert tops == {"purgekeeper", "purgekeeper.egg-info"}


def test_the_wheel_installs_purgekeeper_alone(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (top_level,) = [name for name in names if name.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["purgekeeper"]
    assert {name.split("/")[0] for name in names if ".dist-info/" not in name} == {"purgekeeper"}
    for expected in ("purgekeeper/py.typed", "purgekeeper/commands/web/templates/purge.html",
                     "purgekeeper/schema/migrations/script.py.mako", "purgekeeper/tlog/verify.py"):  # fmt: skip
        assert expected in names


def test_a_host_s_own_modules_and_purgekeeper_work_side_by_side(host: Host) -> None:
    (host.directory / "host_app.py").write_text(HOST_APP)
    count, version = host.run(host.bin / "python", "host_app.py").split()
    installed = host.run(host.bin / "python", "-c", "import purgekeeper; print(purgekeeper.__version__)")
    assert (count, version) == ("1", installed.strip())


def test_the_index_s_schema_package_imports_beside_purgekeeper(host: Host, tmp_path: Path) -> None:
    assert host.run(host.bin / "python", "-c", INDEX_SCHEMA, cwd=tmp_path).strip() == "True"


def test_the_quickstart_and_purgectl_run_from_the_installed_wheel(host: Host) -> None:
    (quickstart,) = [block for block in blocks(README.read_text()) if block.tested and block.language == "python"]
    host.purgectl("init")
    with served.serving(host.env, host.directory, purgectl=host.bin / "purgectl") as server:
        (host.directory / "quickstart.py").write_text(quickstart.code)
        printed = host.run(host.bin / "python", "quickstart.py").splitlines()
        assert printed[:3] == ["b'a scan of the card'", "[]", "complete"], printed
        assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
    purge_id = json.loads(host.purgectl("list", "--json"))["purges"][0]["purge_id"]
    assert "complete" in host.purgectl("status", purge_id)
    (host.directory / "receipt.json").write_text(host.purgectl("receipt", "show", purge_id))
    (host.directory / "log.vkey").write_text(host.purgectl("ledger", "key"))
    verified = host.purgectl("receipt", "verify", "receipt.json", "--key", "log.vkey")
    assert verified.startswith("ok"), verified
