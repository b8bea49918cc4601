"""docs/design.md stays true to the code: every error code of the tree is in its error table,
with the status and exit code ``purgekeeper.commands.surface`` gives it; every ledger kind is in its kinds
section; every section the code cites exists; and nothing cites a design file outside the
repository. No I/O beyond reading this repository's own files."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from purgekeeper.commands import kinds, surface
from purgekeeper.schema import errors
from purgekeeper.schema.states import PurgeKind

REPOSITORY = Path(__file__).resolve().parents[2]
DESIGN = REPOSITORY / "docs" / "design.md"
ERROR_TABLE = "The error table"
KINDS_SECTION = "The kinds"
# Sections the code, the --help texts and the README cite by name (more are found below):
# storage/__init__.py cites "Layers", the surfaces "the error table", schema/content_queries.py and
# migration 0006 what "live" means, schema/purges.py a purge's status, commands/restore_commands.py the
# restore's order, storage/blobstore.py the CAS layout.
CITED_SECTIONS = ("Layers", ERROR_TABLE, "The model", "The worker protocol", KINDS_SECTION)
CITED_SUBSECTIONS = ("Restore", "A purge's status", "Blobs on disk")
CITING_PLACES = ("commands", "schema", "workers", "storage", "tlog", "README.md")
# The input contract outside the repository, by its file name and its directory (spelt in
# pieces, so this file does not cite it either).
FORBIDDEN = ("DESIGN" + ".md", ".." + "/shared")
TABLE_ROW = re.compile(r"^\|\s*`([a-z_]+)`\s*\|\s*`?\w+`?\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|", re.M)


def document() -> str:
    return DESIGN.read_text("utf-8")


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section, up to the next ``## `` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match is not None, f"docs/design.md has no section '## {title}'"
    return match.group(1)


def error_classes() -> list[type[errors.PurgekeeperError]]:
    """The tree drawn in schema/errors.py: the root and every subclass defined there (a
    private subclass elsewhere, such as ``purgekeeper.schema.db._Retryable``, is not part of it)."""
    found: list[type[errors.PurgekeeperError]] = []
    pending: list[type[errors.PurgekeeperError]] = [errors.PurgekeeperError]
    while pending:
        cls = pending.pop(0)
        if cls.__module__ == errors.__name__:
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def code_of(cls: type[errors.PurgekeeperError]) -> str:
    return cls().code


def table_rows(text: str) -> dict[str, tuple[int, int]]:
    """code -> (HTTP status, exit code), as the error table says."""
    return {code: (int(status), int(exit)) for code, status, exit in TABLE_ROW.findall(section(text, ERROR_TABLE))}


def ledger_kinds() -> list[str]:
    """The registry's kinds and the schema's (the ``purge_ledger.kind`` CHECK), together."""
    return sorted({kind.value for kind in kinds.KINDS} | {kind.value for kind in PurgeKind})


def files_under(places: tuple[str, ...]) -> Iterator[Path]:
    for place in places:
        path = REPOSITORY / place
        if path.is_file():
            yield path
            continue
        assert path.is_dir(), f"{place} is not in the repository"
        yield from (p for p in sorted(path.rglob("*")) if p.is_file() and "__pycache__" not in p.parts)


def sections_cited_in_code() -> set[str]:
    """Quoted section names after a citation: ``docs/design.md, "Layers"``."""
    cited: set[str] = set()
    for path in files_under(CITING_PLACES):
        text = path.read_bytes().decode("utf-8", "replace")
        cited.update(re.findall(r"docs/design\.md[,:]?\s*\"([^\"\n]{1,60})\"", text))
    return cited


def literals_cited_in_code() -> set[str]:
    """Literals the code says the document holds: ``ab/cd/<sha256>-<blob id>`` (docs/design.md)."""
    cited: set[str] = set()
    for path in files_under(CITING_PLACES):
        text = path.read_bytes().decode("utf-8", "replace")
        cited.update(re.findall(r"``([^`\n]{1,80})`` \(docs/design\.md\)", text))
    return cited


# -- the error table ------------------------------------------------------------------------


def test_the_walk_finds_the_whole_tree() -> None:
    names = {cls.__name__ for cls in error_classes()}
    assert {"PurgekeeperError", "Conflict", "Fenced", "LegalHold", "AuthorErased", "LockTimeout"} <= names


@pytest.mark.parametrize("cls", error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_code_is_in_the_error_table(cls: type[errors.PurgekeeperError]) -> None:
    assert f"`{code_of(cls)}`" in section(document(), ERROR_TABLE)
    assert code_of(cls) in table_rows(document()), f"no row for `{code_of(cls)}` in the error table"


@pytest.mark.parametrize("cls", error_classes(), ids=lambda cls: cls.__name__)
def test_the_error_table_gives_the_status_and_exit_code_the_surfaces_use(cls: type[errors.PurgekeeperError]) -> None:
    error = cls()
    assert table_rows(document()).get(error.code) == (surface.http_status(error), surface.exit_code(error))


def test_the_error_table_names_no_error_the_tree_lacks() -> None:
    assert set(table_rows(document())) <= {code_of(cls) for cls in error_classes()}


# -- the kinds ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ledger_kinds())
def test_every_ledger_kind_is_in_the_kinds_section(kind: str) -> None:
    assert f"**`{kind}`**" in section(document(), KINDS_SECTION)


# -- citations --------------------------------------------------------------------------------


@pytest.mark.parametrize("title", sorted({*CITED_SECTIONS, *sections_cited_in_code()}))
def test_every_cited_section_exists(title: str) -> None:
    assert re.search(rf"^## {re.escape(title)}$", document(), re.M), f"docs/design.md lacks '## {title}'"


@pytest.mark.parametrize("title", CITED_SUBSECTIONS)
def test_every_cited_subsection_exists(title: str) -> None:
    assert re.search(rf"^### {re.escape(title)}$", document(), re.M), f"docs/design.md lacks '### {title}'"


def test_the_code_cites_the_layers_section_and_the_cas_layout() -> None:
    """So the parametrised tests check citations found in the code, not only ours."""
    assert "Layers" in sections_cited_in_code()
    assert "ab/<sha256>-<blob id>" in literals_cited_in_code()


@pytest.mark.parametrize("literal", sorted(literals_cited_in_code()))
def test_every_literal_the_code_cites_is_in_the_document(literal: str) -> None:
    assert f"`{literal}`" in document()


@pytest.mark.parametrize(
    "path", list(files_under((*CITING_PLACES, "docs"))), ids=lambda p: str(p.relative_to(REPOSITORY))
)
def test_nothing_cites_a_design_file_outside_the_repository(path: Path) -> None:
    text = path.read_bytes().decode("utf-8", "replace")
    assert [needle for needle in FORBIDDEN if needle in text] == []
