"""The deployment files say what the README promises. Docker is not available where the suite
runs, so the image is not built: these checks read the files (the honest best without a
daemon). ``.dockerignore`` is matched the way Docker matches it (patterns anchored at the
build context, ``*`` within one path component, ``**`` across any number, a matched
directory excludes what it holds); the Dockerfile's instructions are read in order; compose.yaml
is parsed with PyYAML. The Makefile is run for real, as ``make -n`` (print, do not run)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from purgekeeper.workers import shutdown

try:
    import yaml  # PyYAML comes with the dev tools (schemathesis needs it)
except ImportError:  # pragma: no cover - then the text of compose.yaml is read as it is laid out
    yaml = None

ROOT = Path(__file__).resolve().parents[1]
NEVER_IN_THE_IMAGE = [
    ".venv/bin/python",
    ".git/HEAD",
    ".purgekeeper/purgekeeper.db",
    ".purgekeeper/api-token",
    "purgekeeper.db",
    "data/purgekeeper.db-wal",
    "somewhere/api-token",
    ".env",
    "test-artifacts/status-page.png",
    "commands/__pycache__/handle.cpython-311.pyc",
]
IN_THE_IMAGE = [
    "pyproject.toml",
    "README.md",
    "LICENSE",  # the package's license-files: the stub install reads it
    "purgekeeper/__init__.py",
    "purgekeeper/commands",  # the symlinks that make the layers purgekeeper's subpackages
    "commands/handle.py",
    "schema/migrations/env.py",
    "workers/runner.py",
]


def docker_pattern(pattern: str) -> re.Pattern[str]:
    parts = []
    for token in re.split(r"(\*\*/|\*\*|\*|\?)", pattern.strip("/")):
        parts.append({"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token, re.escape(token)))
    return re.compile("".join(parts))


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether Docker leaves ``path`` out of the build context (the last matching pattern
    wins; a ``!`` pattern brings a path back)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    verdict = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        matcher = docker_pattern(pattern.lstrip("!"))
        if any(matcher.fullmatch(prefix) for prefix in prefixes):
            verdict = not negated
    return verdict


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("path", NEVER_IN_THE_IMAGE)
def test_dockerignore_keeps_out_what_must_never_be_in_the_image(path: str) -> None:
    assert ignored(path, dockerignore())


@pytest.mark.parametrize("path", IN_THE_IMAGE)
def test_dockerignore_keeps_the_code_and_its_build_files(path: str) -> None:
    assert not ignored(path, dockerignore())


def instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_dockerfile_installs_the_dependencies_before_the_code() -> None:
    steps = instructions()
    copies = [i for i, (op, _) in enumerate(steps) if op == "COPY"]
    code = next(i for i in copies if steps[i][1].split()[0] == ".")
    manifest = next(i for i in copies if "pyproject.toml" in steps[i][1])
    installs = [i for i, (op, args) in enumerate(steps) if op == "RUN" and "pip install" in args]
    assert manifest < installs[0] < code, steps
    assert "--no-deps" in steps[next(i for i in installs if i > code)][1]
    assert not any("[dev]" in args for _, args in steps)


def test_the_dockerfile_runs_serve_as_a_user_with_a_healthcheck() -> None:
    steps = dict(instructions())  # the last of each kind
    assert steps["EXPOSE"] == "8080"
    assert json.loads(steps["CMD"]) == ["purgectl", "serve", "--host", "0.0.0.0", "--port", "8080"]
    command = steps["HEALTHCHECK"].split(" CMD ", 1)[1]
    assert json.loads(command) == ["purgectl", "health", "--quick"]  # O(1): not a walk of the ledger
    assert steps["USER"] not in ("root", "0")


def compose_services() -> dict[str, Any]:
    text = (ROOT / "compose.yaml").read_text()
    if yaml is not None:
        return dict(yaml.safe_load(text)["services"])
    # without PyYAML: each service's own lines, by the two-space indentation compose.yaml keeps
    services: dict[str, Any] = {}
    body = text.split("\nservices:\n", 1)[1].split("\n\n", 1)[0]
    for block in re.split(r"\n(?=  [a-z]+:\n)", body):
        name, _, rest = block.strip("\n").partition(":\n")
        keys = [line.strip().split(":")[0] for line in rest.splitlines() if line[4:5] not in (" ", "#")]
        services[name.strip()] = dict.fromkeys(keys)
    return services


def test_compose_publishes_neither_postgres_nor_redis() -> None:
    services = compose_services()
    assert "ports" not in services["postgres"] and "ports" not in services["redis"]


@pytest.mark.skipif(yaml is None, reason="the merge keys of compose.yaml need PyYAML to read")
def test_compose_restarts_every_process_and_shares_one_data_directory() -> None:
    services = compose_services()
    for name in ("api", "worker", "scheduler", "postgres", "redis"):
        assert services[name]["restart"] in ("always", "unless-stopped"), name
    for name in ("api", "worker", "scheduler", "init"):  # one storage for the roots
        assert "pkdata:/var/lib/purgekeeper" in services[name]["volumes"], name
        assert services[name]["environment"]["PURGEKEEPER_DATA_DIR"] == "/var/lib/purgekeeper", name
    for name in ("api", "worker", "scheduler"):  # checked every few seconds: the O(1) check
        assert services[name]["healthcheck"]["test"] == ["CMD", "purgectl", "health", "--quick"], name
        # docker stop's SIGKILL comes after the grace period: longer than the documented bound
        assert int(services[name]["stop_grace_period"].removesuffix("s")) > shutdown.STOP_BOUND.total_seconds(), name


def make_dry_run(target: str, tmp_path: Path) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    command = ["make", "-n", "-B", target, f"VENV={tmp_path / 'venv'}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=30, check=True)
    return done.stdout


def test_make_run_installs_the_program_only_and_make_test_the_dev_tools(tmp_path: Path) -> None:
    run, test = make_dry_run("run", tmp_path), make_dry_run("test", tmp_path)
    assert "pip install --quiet -e .\n" in run and "[dev]" not in run
    assert "purgectl init" in run and "purgectl serve" in run
    assert "PURGEKEEPER_DATA_DIR" not in run  # purgectl's default: the same database as purgectl's
    assert "pip install --quiet -e '.[dev]'" in test and "pytest" in test


def test_make_procfile_installs_honcho_and_runs_the_procfile_under_it(tmp_path: Path) -> None:
    """Issue 34: the README's Procfile instructions used honcho, which no target installed."""
    procfile = make_dry_run("procfile", tmp_path)
    assert "pip install --quiet -e '.[procfile]'" in procfile and "[dev]" not in procfile
    assert procfile.index("purgectl init") < procfile.index("honcho start")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [requirement.split(">=")[0] for requirement in extras["procfile"]] == ["honcho"]


def test_the_stub_install_copies_what_the_package_s_metadata_names() -> None:
    """The dependency layer installs a stub package from the manifest alone: every file the
    metadata names (the readme, the license files) must be copied before it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    manifest = next(args for op, args in instructions() if op == "COPY" and "pyproject.toml" in args)
    assert {project["readme"], *project["license-files"]} <= set(manifest.split()[:-1])


def _procfile_command(process: str, **env: str) -> str:
    """The Procfile line of ``process`` as a shell expands it with ``env`` (honcho and foreman
    run each line through the shell, and set ``PORT`` for each process: 5000 for the first)."""
    lines = dict(line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines() if ": " in line)
    expanded = subprocess.run(
        ["sh", "-c", f"echo {lines[process]}"], env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True
    )
    return expanded.stdout.strip()


def test_the_procfile_serves_the_api_on_8080_even_under_honcho_s_port() -> None:
    """Issue 26, item 9: under honcho the API moved to $PORT (5000), away from the README's
    curl quickstart. The port is pinned, and moved only by PURGEKEEPER_API_PORT."""
    assert "--port 8080" in _procfile_command("api", PORT="5000")
    assert "--port 8080" in _procfile_command("api")
    assert "--port 9000" in _procfile_command("api", PORT="5000", PURGEKEEPER_API_PORT="9000")
