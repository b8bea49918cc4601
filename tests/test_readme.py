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


@pytest.mark.parametrize("data_dir", ["default", "PURGEKEEPER_DATA_DIR"])
def test_the_quickstart_runs_as_written_against_purgectl_serve(tmp_path: Path, data_dir: str) -> None:
    """Tried: the default data directory, and one named by ``PURGEKEEPER_DATA_DIR`` (the curl
    block reads its token file there, as ``make run`` serves it)."""
    tested = [block for block in blocks(README.read_text()) if block.tested]
    assert [block.language for block in tested] == ["python", "bash"], "the quickstart's blocks moved"
    home = tmp_path / "home"
    home.mkdir()
    env = served.clean_environment(HOME=str(home))
    env.pop("XDG_DATA_HOME", None)
    token_file = home / ".local/share/purgekeeper/api-token"
    if data_dir == "PURGEKEEPER_DATA_DIR":
        env["PURGEKEEPER_DATA_DIR"] = str(tmp_path / "elsewhere")
        token_file = tmp_path / "elsewhere" / "api-token"
    served.run([str(served.BIN / "purgectl"), "init"], env, tmp_path)
    with served.serving(env, tmp_path) as server:
        assert token_file.is_file(), server.output()
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


# -- the README's own shape: tables, code blocks and inline code that a renderer shows whole --


def table_cells(line: str) -> list[str]:
    """A table row's cells: split on ``|`` outside inline code and not escaped."""
    cells, current, in_code = [], "", False
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    for index, char in enumerate(body):
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code and (index == 0 or body[index - 1] != "\\"):
            cells.append(current.strip())
            current = ""
        else:
            current += char
    return [*cells, current.strip()]


def shape_problems(text: str) -> list[str]:
    """What would render broken: a code fence left open, a table row with another number of
    cells than its header or with an empty first cell, a paragraph or table row with an odd
    number of backticks (inline code that swallows what follows)."""
    problems: list[str] = []
    lines = text.splitlines()
    fence: int | None = None
    header: int | None = None
    paragraph: list[tuple[int, str]] = []

    def close_paragraph() -> None:
        ticks = sum(line.count("`") for _, line in paragraph)
        if ticks % 2:
            problems.append(f"line {paragraph[0][0]}: a paragraph with an odd number of backticks")
        paragraph.clear()

    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            close_paragraph()
            fence = None if fence is not None else number
            continue
        if fence is not None:
            continue
        if line.startswith("|"):
            close_paragraph()
            cells = table_cells(line)
            if line.count("`") % 2:
                problems.append(f"line {number}: a table row with an odd number of backticks")
            if header is None:
                header = len(cells)
            elif set(line.replace("|", "").strip()) <= {"-", ":", " "}:
                pass  # the separator row
            elif len(cells) != header:
                problems.append(f"line {number}: {len(cells)} cells in a table of {header}")
            elif not cells[0]:
                problems.append(f"line {number}: a table row with an empty first cell")
            continue
        header = None
        if line.strip():
            paragraph.append((number, line))
        else:
            close_paragraph()
    close_paragraph()
    if fence is not None:
        problems.append(f"line {fence}: a code block that is never closed")
    return problems


def test_the_readme_renders_whole() -> None:
    """Issue 26: a garbled line (a table row missing its cell, inline code left open) is found
    here, not by a reader."""
    assert shape_problems(README.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("| a | b |\n| --- | --- |\n| 1 | 2 |\n", []),
        ("| a | b |\n| --- | --- |\n| 1 |\n", ["line 3: 1 cells in a table of 2"]),
        ("| a | b |\n| --- | --- |\n| `x|y` | 2 |\n", []),
        ("| a | b |\n| --- | --- |\n|  | 2 |\n", ["line 3: a table row with an empty first cell"]),
        (
            'Errors come back as `{"error": CODE\nwith the statuses.\n',
            ["line 1: a paragraph with an odd number of backticks"],
        ),
        ("```python\nprint(1)\n", ["line 1: a code block that is never closed"]),
        ("```\n`odd\n```\n", []),
    ],
    ids=["sound", "short-row", "pipe-in-code", "empty-first-cell", "open-inline-code", "open-fence", "code-in-fence"],
)
def test_the_shape_check_finds_what_a_renderer_would_break(text: str, found: list[str]) -> None:
    assert shape_problems(text) == found
