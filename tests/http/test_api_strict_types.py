"""The HTTP API takes a value only as the JSON type the OpenAPI document declares for it: a
wrong type is a ``400 validation_error`` and nothing is written, never a coercion (``true``
was taken as the version 1 and purged a conversation; ``"2592000"`` as a number of seconds).
Times are ISO 8601 strings with an offset, never numbers; the form and query flags are
``true`` or ``false``.

The last test walks the OpenAPI document: every property of every JSON request body (nested
ones too) gets values of each JSON type the document does not allow for it, inside a body
that is otherwise valid (checked against the document), and every answer is a 400 with
nothing written."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

import purgekeeper
from purgekeeper.schema.tables import metadata
from tests.helpers.http import AS_OPERATOR, WHO, TestClient, b64, make_client, ok, refused

Pk = purgekeeper.Purgekeeper
DIGEST = "0" * 64


@pytest.fixture
def client(pk: Pk) -> Iterator[TestClient]:
    with make_client(pk) as test_client:
        test_client.headers.update(AS_OPERATOR)  # the operator's token opens every route
        yield test_client


def written(pk: Pk) -> dict[str, int]:
    """The rows of every table: the ledger's head among them."""
    with pk.db.read() as conn:
        return {t.name: conn.scalar(select(func.count()).select_from(t)) or 0 for t in metadata.sorted_tables}


def refused_as_invalid(pk: Pk, client: TestClient, method: str, url: str, **arguments: Any) -> list[str]:
    """The request's failures (empty when it is a 400 validation_error that wrote nothing)."""
    before = written(pk)
    response = client.request(method, url, **arguments)
    failures = []
    if response.status_code != 400 or response.json().get("error") != "validation_error":
        failures.append(f"{method} {url} {arguments}: {response.status_code} {response.text[:300]}")
    if written(pk) != before:
        failures.append(f"{method} {url} {arguments}: something was written")
    return failures


# -- the cases of issue 23 ------------------------------------------------------------------------


def test_a_version_of_another_type_purges_nothing(pk: Pk, client: TestClient) -> None:
    pk.create_conversation("c1")
    assert ok(client.get("/v1/conversations/c1"))["version"] == 1
    failures = []
    for version in (True, "1", 1.5, [1], {"version": 1}):  # 1.0 is 1: an integer, as JSON Schema counts
        body = {**WHO, "expected_version": version}
        failures += refused_as_invalid(pk, client, "POST", "/v1/conversations/c1/purge", json=body)
    assert failures == []
    assert ok(client.get("/v1/conversations/c1"))["version"] == 1 and pk.list_purges().purges == ()


def test_a_max_age_of_another_type_is_a_400(pk: Pk, client: TestClient) -> None:
    failures = []
    for max_age in (True, "2592000", 2592000.5, None, [2592000]):  # 2592000.0 is an integer (JSON Schema)
        definition = {"max_age_seconds": max_age}
        failures += refused_as_invalid(pk, client, "POST", "/v1/retention/preview", json=definition)
        setting = {**definition, "scope_digest": DIGEST, **WHO}
        failures += refused_as_invalid(pk, client, "PUT", "/v1/retention/p1", json=setting)
    assert failures == []
    assert pk.list_retention() == []


def test_a_time_is_an_iso_string_with_an_offset(pk: Pk, client: TestClient) -> None:
    """``"before": 0`` was 1970-01-01T00:00:00Z (pydantic reads numbers, and digit strings, as
    Unix times): an erasure's window, from a client's bug."""
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body="x", event_id="e1")
    failures = []
    for when in (0, 1_700_000_000, "1700000000", "0", 1.5, True, [], "2024-05-01T12:00:00"):
        for method, url, body in [
            ("POST", "/v1/authors/erasure-preview", {"author": "ada", "before": when}),
            ("POST", "/v1/authors/erase", {"author": "ada", "before": when, "scope_digest": DIGEST, **WHO}),
            ("POST", "/v1/purges/preview", {"conversation_id": "c1", "after": when}),
            ("POST", "/v1/conversations/c1/events", {"author": "ada", "body": "y", "occurred_at": when}),
        ]:
            failures += refused_as_invalid(pk, client, method, url, json=body)
        text = when if isinstance(when, str) else json.dumps(when)
        failures += refused_as_invalid(pk, client, "GET", "/v1/purges", params={"since": text})
        upload = {"data": {"author": "ada", "occurred_at": text}, "files": [("file", ("a.txt", b"bytes"))]}
        failures += refused_as_invalid(pk, client, "POST", "/v1/conversations/c1/events/upload", **upload)
    assert failures == []


def test_form_and_query_flags_are_true_or_false(pk: Pk, client: TestClient, tmp_path: Path) -> None:
    """``from_other_database`` lets another database's ledger in: only ``true`` does."""
    with purgekeeper.open(f"sqlite:///{tmp_path / 'other.db'}", checkpoint_dir=tmp_path / "o", workers="none") as other:
        other.purge_conversation("c-there", **WHO)
        upload = [("files", ("other.json", other.checkpoint_ledger(tmp_path / "o.json").path.read_bytes(), "x"))]
    failures = []
    for flag in ("1", "yes", "on", "t", "y", "True", "0", "no", "off", ""):
        form = {"files": upload, "data": {"from_other_database": flag}}
        failures += refused_as_invalid(pk, client, "POST", "/v1/ledger/merge", **form)
        failures += refused_as_invalid(pk, client, "GET", "/v1/holds", params={"include_released": flag})
    assert failures == []


def test_the_flags_still_take_true_and_false(pk: Pk, client: TestClient) -> None:
    for flag in ("true", "false"):
        assert ok(client.get("/v1/holds", params={"include_released": flag})) == {"holds": []}
    body = refused(client.post("/v1/ledger/merge", data={"from_other_database": "false"}), 400, "validation_error")
    assert "files" in body["detail"]


# -- every property of every JSON body ---------------------------------------------------------------

# An otherwise valid body of each operation with a JSON body (several where the body is a union),
# each of its properties present, nested ones too, so that every one of them is replaced.
BODIES: dict[str, list[dict[str, Any]]] = {
    "create_conversation": [{"conversation_id": "c-new", "kind": "conversation", "bot_id": "b1"}],
    "ingest_event": [
        {
            "author": "ada",
            "body": "hello",
            "provider_event_id": "p-new",
            "event_id": "e-new",
            "occurred_at": "2024-05-01T12:00:00Z",
            "attachments": [{"kind": "cas", "name": "a.txt", "data_base64": b64(b"bytes")}],
        },
        {"author": "ada", "attachments": [{"kind": "file", "name": "a.txt", "data_base64": b64(b"bytes")}]},
        {"author": "ada", "attachments": [{"kind": "reuse", "name": "a.txt", "blob_id": "x1", "binding": "real_file"}]},
    ],
    "ingest_events": [
        {
            "events": [
                {
                    "author": "ada",
                    "body": "hello",
                    "provider_event_id": "p-batch",
                    "event_id": "e-batch",
                    "occurred_at": "2024-05-01T12:00:00Z",
                }
            ]
        }
    ],
    "place_event": [{"event_id": "e1"}],
    "add_derivative": [{"kind": "summary", "payload": {"of": "e1"}, "source_event_ids": ["e1"]}],
    "purge_conversation": [{**WHO, "idempotency_key": "k1", "expected_version": 1}],
    "delete_channel": [{**WHO, "idempotency_key": "k1"}],
    "register_bot": [{"bot_id": "b-new", "name": "Helper", "memory_path": "/nowhere/b-new"}],
    "delete_bot": [
        {
            **WHO,
            "idempotency_key": "k1",
            "erase_memory": True,
            "reviewed_repository": {"path": "/nowhere/b1", "marker_id": "m1"},
        }
    ],
    "preview_author_erasure": [{"author": "ada", "before": "2030-01-01T00:00:00Z"}],
    "erase_author": [
        {
            "author": "ada",
            "before": "2030-01-01T00:00:00Z",
            "scope_digest": DIGEST,
            "close_author": True,
            **WHO,
            "idempotency_key": "k1",
        }
    ],
    "start_run": [{"conversation_id": "c1", "bot_id": "b1", "run_id": "r-new"}],
    "finish_run": [{"status": "succeeded", "output": {"text": "done"}}],
    "admit": [{"event_id": "e1", "payload": {"seen": True}}],
    "preview_purge": [
        {"event_ids": ["e1"]},
        {"conversation_id": "c1", "after": "2020-01-01T00:00:00Z", "before": "2030-01-01T00:00:00Z", "author": "ada"},
    ],
    "confirm_purge": [
        {"scope": {"event_ids": ["e1"]}, "scope_digest": DIGEST, **WHO, "idempotency_key": "k1"},
        {
            "scope": {
                "conversation_id": "c1",
                "after": "2020-01-01T00:00:00Z",
                "before": "2030-01-01T00:00:00Z",
                "author": "ada",
            },
            "scope_digest": DIGEST,
            **WHO,
        },
    ],
    "retry": [WHO],
    "run_retention_policy": [WHO],
    "preview_retention": [{"max_age_seconds": 2_592_000, "conversation_id": "c1"}],
    "set_retention": [
        {"max_age_seconds": 2_592_000, "conversation_id": "c1", "scope_digest": DIGEST, **WHO, "idempotency_key": "k1"}
    ],
    "remove_retention": [{**WHO, "idempotency_key": "k1"}],
    "place_hold": [{"conversation_ids": ["c1"], "authors": ["ada"], **WHO, "idempotency_key": "k1"}],
    "release_hold": [{**WHO, "idempotency_key": "k1"}],
}
PATH_VALUES = {"conversation_id": "c1", "channel_id": "ch1", "bot_id": "b1", "run_id": "r1"}
JSON_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
CANONICAL = {"null": None, "boolean": True, "integer": 1, "number": 1.5, "string": "1", "array": [], "object": {}}
WRONG: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "integer": st.integers(min_value=-(2**70), max_value=2**70),
    "number": st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not x.is_integer()),
    "string": st.one_of(
        st.text(max_size=12), st.integers(min_value=0).map(str), st.sampled_from(["true", "false", "1", "null"])
    ),
    "array": st.lists(st.one_of(st.integers(), st.text(max_size=4), st.booleans()), max_size=3),
    "object": st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
}


EXAMPLES = 6  # Hypothesis's values per property, beside one value of each wrong type


def test_the_bodies_are_valid_and_cover_every_property(client: TestClient) -> None:
    """Each body above matches the document (so a 400 below is the replaced value's), every
    operation with a JSON body has one, and every property the document declares is in one."""
    document = client.app.openapi()  # type: ignore[attr-defined]
    operations = dict(json_operations(document))
    assert set(BODIES) == set(operations)
    for operation_id, (_method, _path, schema) in operations.items():
        validator = jsonschema_rs.validator_for({**schema, "components": document["components"]})
        declared: set[str] = set()
        for body in BODIES[operation_id]:
            errors = [error.message for error in validator.iter_errors(body)]
            assert errors == [], (operation_id, body, errors)
            declared |= {shape(path) for path in declared_paths(document, schema, body)}
        covered = {shape(path) for body in BODIES[operation_id] for path, _ in properties(document, schema, body)}
        assert declared <= covered, (operation_id, declared - covered)


@pytest.mark.sqlite_only  # hundreds of requests; a type is checked before a command opens the database
def test_a_wrong_json_type_anywhere_in_a_body_is_a_400_that_writes_nothing(pk: Pk, client: TestClient) -> None:
    seed(pk)
    document = client.app.openapi()  # type: ignore[attr-defined]
    failures: list[str] = []
    for operation_id, (method, path, schema) in json_operations(document):
        url = path.format_map({name: PATH_VALUES.get(name, "x1") for name in parameters(path)})
        for body in BODIES[operation_id]:
            for where, property_schema in properties(document, schema, body):
                allowed = allowed_types(document, property_schema)
                wrong = [t for t in JSON_TYPES if allowed is not None and t not in allowed]
                if not wrong:
                    continue  # any JSON value (a payload, a run's output)
                send = functools.partial(_send, pk, client, method, url, body, where, failures)
                before = written(pk)
                for json_type in wrong:
                    send(CANONICAL[json_type])
                given(value=st.one_of(*(WRONG[t] for t in wrong)))(_quickly(send))()
                if written(pk) != before:
                    failures.append(f"{operation_id} {shape(where)}: something was written")
    assert failures == [], "\n".join(failures[:20])


def _quickly(send: Any) -> Any:
    return settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )(lambda value: send(value))


def _send(
    pk: Pk,
    client: TestClient,
    method: str,
    url: str,
    body: dict[str, Any],
    where: tuple[Any, ...],
    failures: list[str],
    value: Any,
) -> None:
    changed = replaced(body, where, value)
    response = client.request(method, url, json=changed)
    if response.status_code != 400 or response.json().get("error") != "validation_error":
        failures.append(f"{method} {url} {shape(where)}={value!r}: {response.status_code} {response.text[:200]}")


def seed(pk: Pk) -> None:
    """What the bodies name: the bot b1, the conversation c1 with ada's event e1, the channel
    ch1 and a running run r1."""
    pk.register_bot("b1", name="Helper")
    pk.create_conversation("c1", bot_id="b1")
    pk.create_conversation("ch1", kind="channel")
    pk.ingest_event("c1", author="ada", body="hello", event_id="e1")
    pk.start_run("c1", bot_id="b1", run_id="r1")


# -- reading the document ----------------------------------------------------------------------------


def json_operations(document: dict[str, Any]) -> Iterator[tuple[str, tuple[str, str, dict[str, Any]]]]:
    """(operationId, (method, path, the JSON body's schema)) of each operation that has one."""
    for path, item in document["paths"].items():
        for method, operation in item.items():
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" in content:
                yield operation["operationId"], (method.upper(), path, content["application/json"]["schema"])


def parameters(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def variants(document: dict[str, Any], schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The alternatives a schema allows (its anyOf or oneOf, flattened), each resolved."""
    schema = resolve(document, schema)
    for union in ("anyOf", "oneOf"):
        if union in schema and "properties" not in schema:  # beside properties, it constrains them
            return [variant for member in schema[union] for variant in variants(document, member)]
    if len(schema.get("allOf", ())) == 1:
        return variants(document, schema["allOf"][0])
    return [schema]


def json_type(value: Any) -> str:
    kinds = ((type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"))
    return next(
        (name for kind, name in kinds if isinstance(value, kind)), "array" if isinstance(value, list) else "object"
    )


def allowed_types(document: dict[str, Any], schema: dict[str, Any]) -> set[str] | None:
    """The JSON types a schema allows; None when it allows any JSON value."""
    types: set[str] = set()
    for variant in variants(document, schema):
        if "type" in variant:
            declared = variant["type"]
            types |= {declared} if isinstance(declared, str) else set(declared)
        elif "const" in variant or "enum" in variant:
            types |= {json_type(v) for v in ([variant["const"]] if "const" in variant else variant["enum"])}
        else:
            return None
    return types | {"integer"} if "number" in types else types


def variant_of(document: dict[str, Any], schema: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    """The object variant that describes ``value``: it declares each of its keys, and its
    constants (a union's discriminator) are the value's."""

    def fits(variant: dict[str, Any]) -> bool:
        declared = variant.get("properties", {})
        constants = {k: resolve(document, p) for k, p in declared.items() if "const" in resolve(document, p)}
        return set(value) <= set(declared) and all(value.get(k) == p["const"] for k, p in constants.items())

    [variant] = [variant for variant in variants(document, schema) if fits(variant)]
    return variant


def objects(
    document: dict[str, Any], schema: dict[str, Any], value: dict[str, Any], prefix: tuple[Any, ...] = ()
) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Each object in ``value`` (itself, and those inside it: of a list, its first item), as
    (its path, the variant of the schema that describes it)."""
    variant = variant_of(document, schema, value)
    yield prefix, variant
    for key, item in value.items():
        yield from _objects_inside(document, variant["properties"][key], item, (*prefix, key))


def _objects_inside(
    document: dict[str, Any], schema: dict[str, Any], item: Any, path: tuple[Any, ...]
) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    if allowed_types(document, schema) is None:
        return  # any JSON value: nothing inside it is declared
    if isinstance(item, dict):
        yield from objects(document, schema, item, path)
    elif isinstance(item, list) and item:
        yield from _objects_inside(document, items_of(document, schema), item[0], (*path, 0))


def items_of(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    [items] = [variant["items"] for variant in variants(document, schema) if "items" in variant]
    return items


def properties(
    document: dict[str, Any], schema: dict[str, Any], value: dict[str, Any]
) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Each property in ``value`` and inside it, and the first item of each list, as (path,
    its schema)."""
    for path, variant in objects(document, schema, value):
        for key, item in _at(value, path).items():
            declared = variant["properties"][key]
            yield (*path, key), declared
            if isinstance(item, list) and item and allowed_types(document, declared) is not None:
                yield (*path, key, 0), items_of(document, declared)


def declared_paths(
    document: dict[str, Any], schema: dict[str, Any], value: dict[str, Any]
) -> Iterator[tuple[Any, ...]]:
    """The path of every property the document declares for the objects in ``value``."""
    for path, variant in objects(document, schema, value):
        yield from ((*path, key) for key in variant["properties"])


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def replaced(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(body)
    _at(changed, path[:-1])[path[-1]] = value
    return changed


def shape(path: tuple[Any, ...]) -> str:
    return ".".join("[]" if isinstance(step, int) else str(step) for step in path)
