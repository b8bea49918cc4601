"""The README's first hour runs as written, against a real ``purgectl serve``.

Convention: a fenced code block right after a ``<!-- readme-test -->`` line (an HTML comment,
which GitHub does not show) is run here, in the README's order; any other block is an
illustration. ``python`` blocks run each in a subprocess of this venv's interpreter, ``bash``
blocks with ``bash -euo pipefail``. Both get a fresh machine's environment: ``HOME`` is the
test's own, so ``~/.local/share/purgekeeper`` is the data directory ``make run`` would serve
(its token file included), with no ``XDG_DATA_HOME`` and no ``PURGEKEEPER_*`` variable except
``PURGEKEEPER_API_URL``, which the README tells the user to set for a server that is not on
port 8080 (this one is on a free port). The server is started as ``make run`` starts it:
``purgectl init``, then ``purgectl serve``, with no token in the environment.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import served

README = Path(__file__).resolve().parents[1] / "README.md"
MARKER = "<!-- readme-test -->"
BLOCK = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```$", re.DOTALL | re.MULTILINE)
RUNNERS = {"python": (sys.executable, "-c"), "bash": ("bash", "-euo", "pipefail", "-c")}


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    tested: bool


def blocks(text: str) -> list[Block]:
    found = []
    for match in BLOCK.finditer(text):
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1].strip()
        found.append(Block(match.group(1), match.group(2), before == MARKER))
    return found


def test_the_readme_starts_with_the_two_set_up_commands() -> None:
    first = blocks(README.read_text())[0]
    commands = [line.split("#")[0].strip() for line in first.code.splitlines()]
    assert (first.language, commands) == ("sh", ["make run", "make test"])


def test_the_quickstart_runs_as_written_against_purgectl_serve(tmp_path: Path) -> None:
    tested = [block for block in blocks(README.read_text()) if block.tested]
    assert [block.language for block in tested] == ["python", "bash"], "the quickstart's blocks moved"
    home = tmp_path / "home"
    home.mkdir()
    env = served.clean_environment(HOME=str(home))
    env.pop("XDG_DATA_HOME", None)
    served.run([str(served.BIN / "purgectl"), "init"], env, tmp_path)
    with served.serving(env, tmp_path) as server:
        assert (home / ".local/share/purgekeeper/api-token").is_file(), server.output()
        env["PURGEKEEPER_API_URL"] = f"{server.url}/v1"
        outputs = [served.run([*RUNNERS[block.language], block.code], env, tmp_path) for block in tested]
    python, curl = outputs
    assert python.splitlines()[:3] == ["b'a scan of the card'", "[]", "complete"], python
    assert "slack:T1/C1/1700000000.000100" in python.splitlines()[3], python
    assert "1 Example Lane" in curl, curl
    assert re.search(r"^purge \w+: complete$", curl, re.MULTILINE), curl
    last, status = curl.rstrip().splitlines()[-2:]
    assert (status, '"error":"content_purged"' in last.replace(" ", "")) == ("HTTP 410", True), curl


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"{MARKER}\n```python\nprint(1)\n```\n", [Block("python", "print(1)\n", True)]),
        ("```bash\nls\n```\n", [Block("bash", "ls\n", False)]),
        (
            f"{MARKER}\n\n```sh\na\n```\ntext\n```python\nb\n```\n",
            [Block("sh", "a\n", True), Block("python", "b\n", False)],
        ),
    ],
    ids=["marked", "unmarked", "only-the-next-block"],
)
def test_the_marker_convention(text: str, expected: list[Block]) -> None:
    assert blocks(text) == expected
