"""The manual builds as CI builds it: ``mkdocs build --strict`` (``make docs``), so a broken
link, a missing anchor or a reference that names no object fails ``make test``. The pages
written at build time say what the code has today: the HTTP reference every route of the
app's OpenAPI document, the performance page every figure of ``bench/results/``, with its
command and date."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MKDOCS = Path(sys.executable).parent / "mkdocs"
BUILD_TIMEOUT_S = 110.0


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(directory)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert built.returncode == 0, built.stderr
    return directory


def page_text(site: Path, page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", (site / page / "index.html").read_text(encoding="utf-8")))


def test_the_manual_builds_strict(site: Path) -> None:
    assert (site / "index.html").is_file()


def test_the_home_page_is_the_readme(site: Path) -> None:
    first_line = (ROOT / "README.md").read_text(encoding="utf-8").split("\n\n")[1].splitlines()[0]
    assert first_line.replace("**", "") in page_text(site, ".").replace("\n", " ")


def test_the_http_reference_has_every_operation_of_the_app(site: Path) -> None:
    page = (site / "reference/http/index.html").read_text(encoding="utf-8")
    anchors = set(re.findall(r'id="([A-Za-z_]+)"', page))
    document = json.loads(subprocess.check_output([sys.executable, "-c", OPENAPI], cwd=ROOT, timeout=60))
    operations = {op["operationId"] for item in document["paths"].values() for op in item.values()}
    assert operations and operations <= anchors


def test_the_python_reference_documents_the_handle_s_delegated_commands(site: Path) -> None:
    """The handle declares its commands as one-line delegates; the reference shows each with
    the service method's signature and docstring (docs/delegates.py)."""
    text = page_text(site, "reference/python")
    assert "confirm_purge(scope: EventScope, *, scope_digest: str" in re.sub(r"\s+", " ", text).replace("( ", "(")
    assert "Accept a previewed content purge" in text


def test_the_performance_page_shows_every_recorded_figure_with_its_command_and_date(site: Path) -> None:
    text = page_text(site, "performance")
    for path in sorted((ROOT / "bench/results").glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        assert path.name in text
        assert str(record["started"])[:10] in text
        assert " ".join([f"bench/{record['script']}.py", *record.get("args", [])]) in text
        for line in record.get("headline", []):
            assert line["purgekeeper"] in text, (path.name, line)


OPENAPI = """
import json, tempfile
import purgekeeper
from purgekeeper.commands.http import create_app
from purgekeeper.commands.settings import Settings
from purgekeeper.commands.web.auth import Tokens
with tempfile.TemporaryDirectory() as data_dir:
    with purgekeeper.open(settings=Settings.from_env({"PURGEKEEPER_DATA_DIR": data_dir}), workers="none") as pk:
        print(json.dumps(create_app(pk, tokens=Tokens(api="t")).openapi()))
"""
