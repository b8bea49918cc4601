"""The README's and the manual's examples run as written, against a real ``purgectl serve``.

Convention: a fenced code block right after a ``<!-- readme-test -->`` line (an HTML comment,
which neither GitHub nor the site shows) is run here; a block after a ``<!-- illustration``
comment (``<!-- illustration: why -->``) is shown and never run (a systemd unit, an output
sample, a long-running process). Every ``python``, ``bash`` and ``sh`` block of the README and
of ``docs/**/*.md`` carries one of the two, so an example a user would run is never left
untested by accident; blocks in other languages (``text``, ``json``, ``yaml``) are
illustrations.

The README's quickstart: its ``python`` block runs in a subprocess of this venv's interpreter,
its ``bash`` block with ``bash -euo pipefail``. Both get a fresh machine's environment:
``HOME`` is the test's own, so ``~/.local/share/purgekeeper`` is the data directory ``make
run`` would serve (its token file included), with no ``XDG_DATA_HOME`` and no
``PURGEKEEPER_*`` variable except ``PURGEKEEPER_API_URL``, which the README tells the user to
set for a server that is not on port 8080 (this one is on a free port). The server is started
as ``make run`` starts it: ``purgectl init``, then ``purgectl serve``, with no token in the
environment. The quickstart's python block must also paste into the interactive interpreter:
it is fed line by line to ``code.InteractiveConsole``, which compiles as the REPL does.

A manual page's tested blocks run in the page's order against a server of their own: every
``python`` block in one interactive session (pasted line by line, as above, so a later block
uses what an earlier one defined), every ``bash`` block in a fresh ``bash -euo pipefail``
with ``API`` and ``TOKEN`` exported as the quickstart sets them and ``purgectl`` on the PATH.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import served

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MARKER = "<!-- readme-test -->"
ILLUSTRATION = "<!-- illustration"
BLOCK = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```$", re.DOTALL | re.MULTILINE)
RUNNERS = {"python": (sys.executable, "-c"), "bash": ("bash", "-euo", "pipefail", "-c")}
RUNNABLE = {"python", "bash", "sh"}
# The pages whose examples need a server started otherwise: the operating guide's use the
# --demo world (an incomplete purge to retry), as `make run SERVE_FLAGS=--demo` serves it.
SERVE_FLAGS = {"guides/operating.md": ("--demo",)}
PAGE_TIMEOUT_S = 110.0

# Runs a page's blocks in order (JSON on stdin): python blocks pasted into one
# code.InteractiveConsole, bash blocks each in a fresh shell. Exit 3: a line the REPL cannot
# compile; 4: an exception; 5: a bash block failed. With "compile_only", nothing runs.
DRIVER = r"""
import code, json, subprocess, sys

request = json.load(sys.stdin)


class Console(code.InteractiveConsole):
    def runcode(self, compiled):
        if not request["compile_only"]:
            super().runcode(compiled)

    def showsyntaxerror(self, *args, **kwargs):
        super().showsyntaxerror(*args, **kwargs)
        sys.exit(3)

    def showtraceback(self, *args, **kwargs):
        super().showtraceback(*args, **kwargs)
        sys.exit(4)


console = Console({"__name__": "__console__"})
for block in request["blocks"]:
    print(f"--- the block at line {block['line']} ({block['language']})", file=sys.stderr, flush=True)
    if block["language"] == "python":
        for line in block["code"].splitlines():
            console.push(line)
        console.push("")  # the Enter after a paste: it ends a block left open
    else:
        sys.stdout.flush()
        if subprocess.run(["bash", "-euo", "pipefail", "-c", block["code"]]).returncode:
            sys.exit(5)
"""


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    tested: bool
    illustration: bool = False
    line: int = 0


def blocks(text: str) -> list[Block]:
    found = []
    for match in BLOCK.finditer(text):
        before = text[: match.start()].rstrip().rsplit("\n", 1)[-1].strip()
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(match.group(1), match.group(2), before == MARKER, before.startswith(ILLUSTRATION), line))
    return found


def pages() -> list[Path]:
    """The manual's Markdown pages (the README is the site's home page)."""
    return sorted(DOCS.rglob("*.md"))


def pages_with_tested_blocks() -> list[str]:
    return [str(page.relative_to(DOCS)) for page in pages() if any(b.tested for b in blocks(page.read_text()))]


def paste(code: list[Block], env: dict[str, str], cwd: Path, *, compile_only: bool) -> subprocess.CompletedProcess[str]:
    request = {"compile_only": compile_only, "blocks": [vars(block) for block in code]}
    return subprocess.run(
        [sys.executable, "-c", DRIVER],
        input=json.dumps(request),
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT_S,
    )


def test_the_readme_starts_with_the_two_set_up_commands() -> None:
    first = blocks(README.read_text())[0]
    commands = [line.split("#")[0].strip() for line in first.code.splitlines()]
    assert (first.language, commands) == ("sh", ["make run", "make test"])


def test_the_quickstart_pastes_into_the_interactive_interpreter(tmp_path: Path) -> None:
    """Issue 34: pasted into ``.venv/bin/python``, a blank line inside the ``with`` block ended
    it, and every later line was an IndentationError."""
    (quickstart,) = [block for block in blocks(README.read_text()) if block.tested and block.language == "python"]
    pasted = paste([quickstart], dict(os.environ), tmp_path, compile_only=True)
    assert pasted.returncode == 0, pasted.stderr


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("with open('x') as f:\n    a = 1\n    b = 2\n", 0),
        ("with open('x') as f:\n    a = 1\n\n    b = 2\n", 3),
        ("if True:\n    a = 1\nb = 2\n", 3),
        ("if True:\n    a = 1\n\nb = 2\n", 0),
    ],
    ids=["whole-block", "blank-line-inside", "no-blank-line-after", "blank-line-after"],
)
def test_the_paste_check_refuses_what_the_repl_refuses(tmp_path: Path, code: str, status: int) -> None:
    pasted = paste([Block("python", code, True)], dict(os.environ), tmp_path, compile_only=True)
    assert pasted.returncode == status, pasted.stderr


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
        (f"{MARKER}\n```python\nprint(1)\n```\n", [Block("python", "print(1)\n", True, line=2)]),
        ("```bash\nls\n```\n", [Block("bash", "ls\n", False, line=1)]),
        (
            f"{MARKER}\n\n```sh\na\n```\ntext\n```python\nb\n```\n",
            [Block("sh", "a\n", True, line=3), Block("python", "b\n", False, line=7)],
        ),
        ("<!-- illustration: a unit file -->\n```sh\na\n```\n", [Block("sh", "a\n", False, True, line=2)]),
    ],
    ids=["marked", "unmarked", "only-the-next-block", "illustration"],
)
def test_the_marker_convention(text: str, expected: list[Block]) -> None:
    assert blocks(text) == expected


@pytest.mark.parametrize("page", [README, *pages()], ids=lambda page: str(page.relative_to(ROOT)))
def test_every_runnable_block_is_tested_or_marked_as_an_illustration(page: Path) -> None:
    unmarked = [
        f"line {block.line}: a {block.language} block"
        for block in blocks(page.read_text(encoding="utf-8"))
        if block.language in RUNNABLE and not (block.tested or block.illustration)
    ]
    assert unmarked == [], f"mark each {MARKER} or {ILLUSTRATION}: why -->"


@pytest.mark.parametrize("page", pages_with_tested_blocks())
def test_the_manual_s_examples_run_as_written_against_purgectl_serve(tmp_path: Path, page: str) -> None:
    tested = [block for block in blocks((DOCS / page).read_text(encoding="utf-8")) if block.tested]
    assert {block.language for block in tested} <= set(RUNNERS), "a tested block runs as python or bash"
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = served.clean_environment(HOME=str(home), PATH=f"{served.BIN}{os.pathsep}{os.environ['PATH']}")
    env.pop("XDG_DATA_HOME", None)
    served.run([str(served.BIN / "purgectl"), "init"], env, tmp_path)
    with served.serving(env, tmp_path, *SERVE_FLAGS.get(page, ())) as server:
        token = (home / ".local/share/purgekeeper/api-token").read_text().strip()
        env |= {"PURGEKEEPER_API_URL": f"{server.url}/v1", "API": f"{server.url}/v1", "TOKEN": token}
        ran = paste(tested, env, work, compile_only=False)
    assert ran.returncode == 0, f"{page}: exit {ran.returncode}\n{ran.stdout}\n{ran.stderr}"


# -- the pages' own shape: tables, code blocks and inline code that a renderer shows whole --


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


@pytest.mark.parametrize("page", [README, *pages()], ids=lambda page: str(page.relative_to(ROOT)))
def test_the_readme_and_the_manual_render_whole(page: Path) -> None:
    """Issue 26: a garbled line (a table row missing its cell, inline code left open) is found
    here, not by a reader."""
    assert shape_problems(page.read_text(encoding="utf-8")) == []


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
