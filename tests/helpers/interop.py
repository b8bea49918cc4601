"""Go's golang.org/x/mod/sumdb/tlog and sumdb/note as a second implementation: where the small Go
program tests/interop/tlogcheck is, where Go finds the module, and how the tests call it (the
session fixture ``go`` in tests/integration/conftest.py builds it once)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROGRAM = Path(__file__).parents[1] / "interop" / "tlogcheck"
GOPATHS = ("/usr/share/gocode",)


Go = Callable[[dict[str, Any]], dict[str, Any]]


def gopath() -> str | None:
    candidates = [os.environ.get("PK_TEST_GOPATH", ""), *GOPATHS]
    return next((p for p in candidates if p and (Path(p) / "src/golang.org/x/mod/sumdb/tlog").is_dir()), None)
