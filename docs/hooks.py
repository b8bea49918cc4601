"""MkDocs hooks (``mkdocs.yml``): the pages written at build time from what they describe, so
that neither goes stale. Each replaces a stub of the same path in ``docs/``, which says where
its content comes from.

- ``index.md``: the README, the front door, with its links into ``docs/`` made relative;
- ``reference/http.md``: the OpenAPI document of the HTTP app, as ``create_app`` builds it for
  a handle on a scratch SQLite database (the routes the server has, with their models);
- ``performance.md``: the benchmark records in ``bench/results/`` (``bench/performance.py``).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

REPOSITORY = Path(__file__).resolve().parents[1]
BENCH = REPOSITORY / "bench"
HTTP_PAGE = "reference/http.md"
PERFORMANCE_PAGE = "performance.md"
HOME_PAGE = "index.md"
Schema = dict[str, Any]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    generate(files, config, HOME_PAGE, home_page())
    generate(files, config, HTTP_PAGE, http_reference(openapi_document()))
    generate(files, config, PERFORMANCE_PAGE, performance_page())
    return files


def generate(files: Files, config: MkDocsConfig, src_uri: str, content: str) -> None:
    """The page at ``src_uri``, in place of the stub kept there for readers of the
    repository (who follow the README's links without building the site)."""
    stub = files.get_file_from_path(src_uri)
    if stub is not None:
        files.remove(stub)
    files.append(File.generated(config, src_uri, content=content))


def home_page() -> str:
    """The README links into the manual as ``docs/...``, which the site serves from its root."""
    return (REPOSITORY / "README.md").read_text(encoding="utf-8").replace("](docs/", "](")


# -- performance.md ---------------------------------------------------------------------------


def performance_page() -> str:
    """``bench/performance.py``'s page (the bench scripts import their siblings by name)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_performance", BENCH / "performance.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        page: str = module.render()
        return page
    finally:
        sys.path.remove(str(BENCH))


# -- reference/http.md ------------------------------------------------------------------------


def openapi_document() -> Schema:
    """What ``GET /openapi.json`` answers, from the app itself."""
    import purgekeeper
    from purgekeeper.commands.http import create_app
    from purgekeeper.commands.settings import Settings
    from purgekeeper.commands.web.auth import Tokens

    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings.from_env({"PURGEKEEPER_DATA_DIR": data_dir})
        with purgekeeper.open(settings=settings, workers="none") as pk:
            document: Schema = create_app(pk, tokens=Tokens(api="docs")).openapi()
    return document


HTTP_INTRO = """\
# HTTP API

Every route below is generated, when the manual is built, from the OpenAPI document of the
app `purgectl serve` runs (`purgekeeper.commands.http.create_app`). A running server answers
the same document at `/openapi.json`, and shows it at `/docs` (Swagger UI) and `/redoc`.
Every `/v1` route takes `Authorization: Bearer <token>`: the host token, or for the routes
tagged *operator* the operator token when one is set (see
[Operating](../guides/operating.md#tokens)). Errors are `{"error": CODE, "detail": ...}`
with the statuses of the [error table](errors.md).
"""


def http_reference(document: Schema) -> str:
    operations = list(each_operation(document))
    tags = list(dict.fromkeys(tag for _, _, operation in operations for tag in operation.get("tags", ["other"])))
    lines = [HTTP_INTRO, *error_statuses(operations)]
    for tag in tags:
        lines += [f"## {tag.capitalize()} routes", ""]
        for method, path, operation in operations:
            if tag in operation.get("tags", ["other"]):
                lines += operation_section(method, path, operation)
    lines += ["## Models", ""]
    for name, schema in document.get("components", {}).get("schemas", {}).items():
        lines += model_section(name, schema)
    return "\n".join(lines)


def each_operation(document: Schema) -> Iterator[tuple[str, str, Schema]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method.upper(), path, operation


def operation_section(method: str, path: str, operation: Schema) -> list[str]:
    lines = [f"### `{method} {path}` {{#{operation['operationId']}}}", ""]
    lines += [f"**{operation.get('summary', '')}** (`{operation['operationId']}`)", ""]
    if operation.get("description"):
        lines += [operation["description"], ""]
    if operation.get("parameters"):
        lines += table(("parameter", "in", "type", "required", "what"), parameter_rows(operation["parameters"]))
    if "requestBody" in operation:
        lines += [*request_body(operation["requestBody"]), ""]
    lines += table(("status", "what", "body"), response_rows(operation["responses"]))
    errors = sorted(status for status in operation["responses"] if is_error(status))
    return [*lines, f"Errors: {', '.join(errors)} ([ErrorOut](#ErrorOut)).", ""] if errors else lines


def is_error(status: str) -> bool:
    return status[0] in "45"


def error_statuses(operations: list[tuple[str, str, Schema]]) -> list[str]:
    """The error answers the routes share, said once: each route lists its statuses."""
    described: dict[str, list[str]] = {}
    for _, _, operation in operations:
        for status, response in operation["responses"].items():
            if is_error(status) and response.get("description", "") not in described.setdefault(status, []):
                described[status].append(response.get("description", ""))
    rows = [(status, "; ".join(texts)) for status, texts in sorted(described.items())]
    return [
        "Every error's body is an [ErrorOut](#ErrorOut). What each status means:",
        "",
        *table(("status", "what"), rows),
    ]


def parameter_rows(parameters: list[Schema]) -> list[tuple[str, ...]]:
    return [
        (
            f"`{parameter['name']}`",
            parameter["in"],
            type_of(parameter.get("schema", {})),
            "yes" if parameter.get("required") else "no",
            parameter.get("description", ""),
        )
        for parameter in parameters
    ]


def request_body(body: Schema) -> list[str]:
    lines = []
    for media_type, content in body.get("content", {}).items():
        lines.append(f"Body (`{media_type}`): {type_of(content.get('schema', {}))}.")
        example = content.get("example") or content.get("schema", {}).get("example")
        if example is not None:
            lines += ["", "```json", json_text(example), "```"]
    return lines


def response_rows(responses: Schema) -> list[tuple[str, ...]]:
    rows = []
    for status, response in sorted(responses.items()):
        if is_error(status):
            continue
        bodies = [type_of(content.get("schema", {})) for content in response.get("content", {}).values()]
        rows.append((status, response.get("description", ""), ", ".join(bodies) or "-"))
    return rows


def model_section(name: str, schema: Schema) -> list[str]:
    lines = [f"### {name} {{#{name}}}", ""]
    if schema.get("description"):
        lines += [schema["description"], ""]
    if "enum" in schema:
        return [*lines, "One of " + ", ".join(f"`{value}`" for value in schema["enum"]) + ".", ""]
    required = set(schema.get("required", []))
    rows = [
        (f"`{field}`", type_of(spec), "yes" if field in required else "no", spec.get("description", ""))
        for field, spec in schema.get("properties", {}).items()
    ]
    return lines + (table(("field", "type", "required", "what"), rows) if rows else [f"{type_of(schema)}.", ""])


def type_of(schema: Schema) -> str:
    """A schema as a reader says it: ``string``, ``list of [EventOut](#EventOut)``, ..."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name})"
    if "anyOf" in schema or "oneOf" in schema:
        return " or ".join(type_of(choice) for choice in schema.get("anyOf", schema.get("oneOf", [])))
    if "enum" in schema:
        return " or ".join(f"`{value}`" for value in schema["enum"])
    if schema.get("type") == "array":
        return f"list of {type_of(schema.get('items', {}))}"
    kind = str(schema.get("type", "any JSON value"))
    return f"{kind} ({schema['format']})" if "format" in schema else kind


def json_text(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    return [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
        *("| " + " | ".join(cell(value) for value in row) + " |" for row in rows),
        "",
    ]
