"""A package's public names, imported when first used (PEP 562).

``import purgekeeper`` should cost nothing until a name is used: ``purgectl --help`` must not
load SQLAlchemy, the kinds and the workers to print its usage. The package lists its names
once, as imports under ``if TYPE_CHECKING:`` (which type checkers and readers see), and hands
its ``__getattr__`` to :func:`exports`, which reads that block from the package's source and
imports a name's module on first use.

Not ``lazy_loader`` (scientific-python): it reads only relative imports, and ``commands``
re-exports names of ``schema`` (the errors and states) too.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any


def exports(package: str, init_file: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose names are the ``from X import Y``
    statements under ``if TYPE_CHECKING:`` in ``init_file``."""
    homes = _homes(Path(init_file).read_text("utf-8"))
    namespace = importlib.import_module(package).__dict__

    def get(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value  # the next use is a plain lookup
        return value

    def names() -> list[str]:
        return sorted({*namespace, *homes})

    return get, names


def _homes(source: str) -> dict[str, str]:
    """Each name imported under ``if TYPE_CHECKING:``, with the module it comes from."""
    homes: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
                    homes |= {alias.asname or alias.name: statement.module for alias in statement.names}
    return homes
