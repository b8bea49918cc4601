"""The OpenAPI document's operations, pinned: for every path and method, in the document's
order, the operationId, the tags, the parameters (where and name) and the response status
codes, compared with ``openapi_operations.json`` beside this file.

The snapshot was taken from the app before ``commands/http/app.py`` was split into parts
(issue 25), so the split, and any later rearrangement, must leave them exactly as they
were. A deliberate change to the API updates the snapshot: write
``json.dumps(operation_list(document), indent=2) + "\\n"`` to the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import purgekeeper
from purgekeeper.commands.http import create_app
from purgekeeper.commands.web.auth import Tokens

SNAPSHOT = Path(__file__).with_name("openapi_operations.json")


def operation_list(document: dict[str, Any]) -> list[dict[str, Any]]:
    """What the snapshot holds of each operation, in the document's order."""
    return [
        {
            "path": path,
            "method": method.upper(),
            "operationId": operation.get("operationId"),
            "tags": operation.get("tags", []),
            "parameters": [f"{p['in']}:{p['name']}" for p in operation.get("parameters", [])],
            "responses": sorted(operation.get("responses", {})),
        }
        for path, item in document["paths"].items()
        for method, operation in item.items()
    ]


@pytest.fixture(scope="module")
def document(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("operations")
    database = root / "purgekeeper.db"
    database.write_bytes(sqlite_template.read_bytes())
    with purgekeeper.open(
        f"sqlite:///{database}", blob_root=root / "blobs", checkpoint_dir=root / "l", workers="none"
    ) as pk:
        return create_app(pk, tokens=Tokens(api="t")).openapi()


def test_the_operations_are_those_of_the_snapshot(document: dict[str, Any]) -> None:
    expected = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    actual = operation_list(document)
    assert [(o["method"], o["path"]) for o in actual] == [(o["method"], o["path"]) for o in expected]
    for got, want in zip(actual, expected, strict=True):
        assert got == want, f"{want['method']} {want['path']}"


def test_the_snapshot_is_the_whole_api() -> None:
    """Every /v1 command of the route table is in it, once."""
    expected = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    ids = [o["operationId"] for o in expected if o["path"].startswith("/v1/")]
    assert len(ids) == len(set(ids)) == 43
