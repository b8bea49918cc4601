"""Which of purgekeeper's modules a process holds under more than one name.

The repository's top-level directories (``commands/``, ``schema/``, ...) are purgekeeper's
subpackages, reached through the symlinks in ``purgekeeper/``. Where the repository's root is on
``sys.path`` (pytest puts it there), ``import commands`` would load ``commands/handle.py`` a
second time as ``commands.handle``: two copies of every class, so an ``except`` of one misses
the other's errors. The lint rule bans the bare names in the code; this finds what slips past.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from pathlib import Path

import purgekeeper

PACKAGE = Path(purgekeeper.__file__).resolve().parent
LAYERS = ("commands", "schema", "workers", "storage", "tlog")
HOMES = (*(str((PACKAGE / layer).resolve()) + os.sep for layer in LAYERS), str(PACKAGE) + os.sep)


def doubly_imported() -> dict[str, list[str]]:
    """Each project file that ``sys.modules`` holds under two or more names, with the names."""
    names: dict[str, list[str]] = defaultdict(list)
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and os.path.realpath(file).startswith(HOMES):
            names[os.path.realpath(file)].append(name)
    return {file: sorted(found) for file, found in names.items() if len(found) > 1}


def bare_layers() -> list[str]:
    """The layers imported under their bare names (``commands``, ``schema`` ...)."""
    return sorted(name for name in sys.modules if name.split(".")[0] in LAYERS and _is_ours(name))


def _is_ours(name: str) -> bool:
    file = getattr(sys.modules[name], "__file__", None)
    return bool(file) and os.path.realpath(file).startswith(HOMES)
