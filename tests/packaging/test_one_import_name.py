"""purgekeeper is one import name: every module loads once, as ``purgekeeper.<layer>...``.

Tried: importing every module of the package in a fresh interpreter whose ``sys.path`` starts
with the repository's root (where the bare ``commands`` is reachable); a process that does
import a bare name (the check must see it); and this test process itself, after whatever the
suite's tests imported before it (``tests/conftest.py`` checks the same at the session's end).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import imports

REPOSITORY = Path(__file__).resolve().parents[2]
EVERY_MODULE = """
import json, pkgutil, importlib
import purgekeeper
ENTRY_POINTS = {{
    "purgekeeper.commands.worker",  # the worker process's module: it needs a broker at import
    "purgekeeper.schema.migrations.env",  # Alembic's env script: it runs the migrations at import
}}
for info in pkgutil.walk_packages(purgekeeper.__path__, "purgekeeper."):
    if info.name in ENTRY_POINTS or info.name.endswith("__main__"):
        continue  # running a __main__ starts the CLI
    importlib.import_module(info.name)
{extra}
from tests.helpers import imports
print(json.dumps([imports.doubly_imported(), imports.bare_layers()]))
"""


def imported_in_fresh_process(extra: str = "") -> list[object]:
    done = subprocess.run(
        [sys.executable, "-c", EVERY_MODULE.format(extra=extra)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_every_module_of_the_package_loads_under_one_name() -> None:
    doubled, bare = imported_in_fresh_process()
    assert (doubled, bare) == ({}, [])


def test_a_bare_layer_imported_beside_the_package_is_found() -> None:
    """The check can fail: ``import schema.errors`` from the repository's root loads the file
    a second time."""
    doubled, bare = imported_in_fresh_process("import schema.errors  # noqa: TID251")
    assert "schema.errors" in bare
    assert any(names == ["purgekeeper.schema.errors", "schema.errors"] for names in doubled.values())  # type: ignore[union-attr]


def test_this_process_holds_each_module_once() -> None:
    assert (imports.doubly_imported(), imports.bare_layers()) == ({}, [])


@pytest.mark.parametrize("layer", imports.LAYERS)
def test_the_package_reaches_each_layer_through_its_own_directory(layer: str) -> None:
    module = __import__(f"purgekeeper.{layer}", fromlist=["_"])
    assert Path(module.__file__).resolve() == REPOSITORY / layer / "__init__.py"
