"""Issue 26, item 8: the OpenAPI document explains itself. Every operation has a summary and a
description, and every request body an example (of its media type, or of its schema, or of
each alternative a union allows), which matches the body's schema. No I/O beyond a SQLite
handle for the app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

import purgekeeper
from purgekeeper.commands.http import create_app
from purgekeeper.commands.web.auth import Tokens

Document = dict[str, Any]


@pytest.fixture(scope="module")
def document(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Document:
    root = tmp_path_factory.mktemp("document")
    database = root / "purgekeeper.db"
    database.write_bytes(sqlite_template.read_bytes())
    with purgekeeper.open(
        f"sqlite:///{database}", blob_root=root / "b", checkpoint_dir=root / "l", workers="none"
    ) as pk:
        return create_app(pk, tokens=Tokens(api="t")).openapi()


def operations(document: Document) -> Iterator[tuple[str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield f"{method.upper()} {path}", operation


def resolve(document: Document, schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def examples(document: Document, media: dict[str, Any]) -> list[Any]:
    """The media type's examples, else its schema's, else those of each alternative of a union
    (all of them, or none)."""
    if "example" in media:
        return [media["example"]]
    if "examples" in media:
        return [example["value"] for example in media["examples"].values()]
    schema = resolve(document, media.get("schema", {}))
    if "examples" in schema:
        return list(schema["examples"])
    alternatives = [resolve(document, member) for member in schema.get("anyOf", schema.get("oneOf", []))]
    if alternatives and all("examples" in member for member in alternatives):
        return [example for member in alternatives for example in member["examples"]]
    return []


def test_every_operation_has_a_summary_and_a_description(document: Document) -> None:
    missing = [
        f"{name}: {field}"
        for name, operation in operations(document)
        for field in ("summary", "description")
        if not operation.get(field, "").strip()
    ]
    assert missing == []


def test_every_request_body_has_an_example_that_matches_it(document: Document) -> None:
    missing, wrong = [], []
    for name, operation in operations(document):
        for media_type, media in operation.get("requestBody", {}).get("content", {}).items():
            found = examples(document, media)
            if not found:
                missing.append(f"{name} ({media_type})")
            validator = jsonschema_rs.validator_for({**media["schema"], "components": document["components"]})
            wrong += [f"{name}: {error.message}" for example in found for error in validator.iter_errors(example)]
    assert missing == [] and wrong == []


def test_the_summaries_are_short_and_unique(document: Document) -> None:
    summaries = [operation["summary"] for _, operation in operations(document)]
    assert len(set(summaries)) == len(summaries)
    assert all(len(summary) <= 60 and not summary.endswith(".") for summary in summaries)
