"""No class name means a record, a kind and an HTTP model at once (issue 25): the records of
the Python API (``purgekeeper.commands.records`` and the modules it re-exports) keep the plain names, the
kinds are in ``commands/kinds``, and the HTTP API's models say which way they go: a response
model ends in ``Out`` (``models``), a request body in ``In`` (``bodies``). Only the names
changed: the union of scopes keeps the labels a 400's detail gives its cases."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from purgekeeper.commands.http import bodies, models

ROOT = Path(__file__).resolve().parents[2]
HTTP_MODULES = {"purgekeeper.commands.http.models": "Out", "purgekeeper.commands.http.bodies": "In"}  # module -> suffix
RECORD_MODULES = (
    "purgekeeper.commands.records",
    "purgekeeper.commands.purge_records",
    "purgekeeper.commands.retention_records",
)
KINDS = ROOT / "commands" / "kinds"
# Bases of the bodies, never a body (nor a schema) on their own: they need no suffix.
SHARED_BASES = {"purgekeeper.commands.http.bodies": {"Accepting"}}


def classes_defined_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}


def source_of(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def taken_names() -> dict[str, str]:
    """Each name a record or a kind has, and where: every public class a record module
    answers ``from ... import`` with (re-exports included), every record a response model
    mirrors (``scope``'s, ``gate``'s, ``restore_commands``' too) and every class of a kind
    module."""
    taken: dict[str, str] = {}
    for name in RECORD_MODULES:
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            if isinstance(value, type) and not attribute.startswith("_"):
                taken.setdefault(attribute, name)
    for record in models.MIRRORS.values():
        taken.setdefault(record.__name__, record.__module__)
    for path in sorted(KINDS.glob("*.py")):
        for attribute in classes_defined_in(path):
            taken.setdefault(attribute, f"purgekeeper.commands.kinds.{path.stem}")
    return taken


def test_the_names_are_read() -> None:
    taken = taken_names()
    assert {"Conversation", "Acceptance", "Hold", "RetentionPolicy", "LedgerReport"} <= taken.keys()
    assert {"EventScope", "PurgePreview", "GateState", "MergeReport"} <= taken.keys()
    assert {"ContentKind", "Kind", "ScopeConfirmation", "Placing"} <= taken.keys()


@pytest.mark.parametrize("module", sorted(HTTP_MODULES))
def test_no_http_model_shares_a_name_with_a_record_or_a_kind(module: str) -> None:
    taken = taken_names()
    clashes = {name: taken[name] for name in sorted(classes_defined_in(source_of(module))) if name in taken}
    assert not clashes, f"{module} reuses the names of records or kinds: {clashes}"


@pytest.mark.parametrize("module", sorted(HTTP_MODULES))
def test_http_models_say_which_way_they_go(module: str) -> None:
    suffix, bases = HTTP_MODULES[module], SHARED_BASES.get(module, set())
    unsuffixed = sorted(
        name
        for name in classes_defined_in(source_of(module))
        if not name.startswith("_") and name not in bases and not name.endswith(suffix)
    )
    assert not unsuffixed, f"{module}: these classes should end in {suffix!r}: {unsuffixed}"


def test_a_bad_scope_s_detail_names_the_cases_as_before() -> None:
    """``scope.ScopeByEvents.event_ids: Field required`` (the 400's detail), not ``...In``."""
    with pytest.raises(ValidationError) as raised:
        TypeAdapter(bodies.ScopeIn).validate_python({})
    assert [error["loc"] for error in raised.value.errors()] == [
        ("ScopeByEvents", "event_ids"),
        ("ScopeByConversation", "conversation_id"),
    ]
