"""Every purge kind is one module that defines every stage, and every kind is registered."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import sys
from enum import StrEnum
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest

from purgekeeper.commands import kinds
from purgekeeper.commands.kinds.kind import OPTIONAL_STAGES, STAGES, Kind
from purgekeeper.schema import states
from purgekeeper.schema.states import PurgeKind
from purgekeeper.workers import cleanup


def stages_missing(kind_class: type) -> list[str]:
    """The stages a kind class does not define in its own body (inherited ones count as
    missing: the base says nothing about any kind)."""
    own = vars(kind_class)
    missing = [stage for stage in STAGES if stage not in own]
    missing += [stage for stage in STAGES if stage in own and own[stage] is None and stage not in OPTIONAL_STAGES]
    return missing


@pytest.mark.parametrize("name", list(kinds.KINDS), ids=str)
def test_each_registered_kind_defines_every_stage(name: PurgeKind) -> None:
    kind = kinds.KINDS[name]
    assert kind.name is name
    assert stages_missing(type(kind)) == []
    assert not inspect.isabstract(type(kind))


def test_every_purge_kind_has_a_registered_module() -> None:
    assert set(kinds.KINDS) == set(PurgeKind)
    for kind in kinds.KINDS.values():
        assert type(kind).__module__ == f"purgekeeper.commands.kinds.{kind.name.value}"


def test_a_kind_lacking_a_stage_is_caught() -> None:
    """What was tried: a kind that forgets ``left_after_restore`` and inherits ``preview``."""

    class Forgetful(Kind):
        name = PurgeKind.CONTENT
        bodies = None

        def check_selectors(self, selectors): ...  # type: ignore[no-untyped-def]

        def lock(self, conn, env, args): ...  # type: ignore[no-untyped-def]

        def decide(self, conn, env, args, locked): ...  # type: ignore[no-untyped-def]

        def fence(self, conn, purge_id, selectors): ...  # type: ignore[no-untyped-def]

    assert stages_missing(Forgetful) == ["preview", "left_after_restore"]
    assert inspect.isabstract(Forgetful)
    with pytest.raises(TypeError):
        Forgetful()  # type: ignore[abstract]


def test_the_workers_get_each_bodies_step_from_the_process_not_from_an_import() -> None:
    given = kinds.bodies_steps()
    assert given == {name: kind.bodies for name, kind in kinds.KINDS.items() if kind.bodies is not None}
    assert set(given) == {"content", "conversation", "author", "retention_run"}
    assert not [name for name in vars(cleanup) if name.upper() == "_BODIES"]  # no registry filled at import
    for name, step in given.items():
        function = step.batch if isinstance(step, cleanup.Batched) else step  # batches a worker may group
        assert function.__module__ == f"purgekeeper.commands.kinds.{name}"  # the kind's own module holds it


def test_an_unknown_kind_is_a_row_the_merge_rejects() -> None:
    with pytest.raises(kinds.RowInvalid, match="unknown purge kind 'expunge'"):
        kinds.kind_of("expunge")


@pytest.mark.parametrize("name", list(kinds.KINDS), ids=str)
def test_each_kind_types_its_request_and_what_it_locks(name: PurgeKind) -> None:
    """``Kind[Request, Locked]`` with real types: the skeleton's stages take no ``Any``."""
    kind_class = type(kinds.KINDS[name])
    (base,) = [b for b in getattr(kind_class, "__orig_bases__", ()) if get_origin(b) is Kind]
    request, locked = get_args(base)
    assert Any not in (request, locked)


@pytest.mark.parametrize("name", list(kinds.KINDS), ids=str)
def test_each_kind_says_in_its_module_how_its_row_is_shown(name: PurgeKind) -> None:
    own = vars(type(kinds.KINDS[name]))
    assert isinstance(own.get("label"), str) and own["label"].strip()
    operator_only = own.get("operator_only", False)
    assert isinstance(operator_only, bool)
    assert (name.value in kinds.OPERATOR_KINDS) is operator_only


def test_a_row_is_labelled_by_its_kind_with_the_policy_or_hold_it_names() -> None:
    from purgekeeper.schema.ledger import LedgerEntry

    def row(kind: str, **selectors: str) -> LedgerEntry:
        return LedgerEntry(
            seq=1, purge_id="p", kind=kind, selectors=selectors, scope_digest="", actor="a", reason="r",
            request_id=None, idempotency_key=None, origin="test", accepted_at=None,  # type: ignore[arg-type]
            prev_hash="", row_hash="",
        )  # fmt: skip

    assert kinds.label_of(row("retention_run", policy_id="thirty-days")) == "retention purge (policy thirty-days)"
    assert kinds.label_of(row("hold", hold_id="doe")) == "legal hold doe placed"
    assert kinds.label_of(row("author", author="someone")) == "author erasure"  # never who was erased
    assert kinds.POLICY_KINDS == {"retention", "retention_end", "retention_run"}


# -- a new kind is one module (and a migration): walked through on a toy -----------------------

TOY_MODULE = """
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from purgekeeper.commands.kinds.kind import Already, Decision, Env, Kind
from purgekeeper.schema.ledger import LedgerEntry
from purgekeeper.schema.states import StepKind


@dataclass(frozen=True)
class Request:
    thing_id: str


def forget_things(ctx, held, entry):
    raise NotImplementedError("a toy")


class Toy(Kind[Request, int]):
    name = "toy"
    label = "toy purge of {hold_id}"
    operator_only = True
    preview = None
    bodies = staticmethod(forget_things)

    def check_selectors(self, selectors: Mapping[str, Any]) -> None: ...

    def lock(self, conn: Connection, env: Env, args: Request) -> int:
        return 0

    def decide(self, conn: Connection, env: Env, args: Request, locked: int) -> Decision | Already:
        return Decision({"thing_id": args.thing_id}, steps=(StepKind.BODIES,))

    def fence(self, conn: Connection, purge_id: str, selectors: Mapping[str, Any]) -> None: ...

    def left_after_restore(self, conn: Connection, entry: LedgerEntry) -> list[tuple[StepKind, bool]]:
        return []
"""


def test_a_toy_kind_is_found_checked_shown_and_run_from_its_module_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What was tried: a toy kind written as one module and nothing else. It is found, it
    passes every check above, its row is labelled and hidden from hosts, and the workers
    are given its bodies step; the one thing left is the migration (the ledger's CHECK and
    ``PurgeKind``), which ``test_every_purge_kind_has_a_registered_module`` asks for."""
    spec = importlib.util.spec_from_file_location("purgekeeper.commands.kinds.toy", tmp_path / "toy.py")
    (tmp_path / "toy.py").write_text(TOY_MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "purgekeeper.commands.kinds.toy", module)
    spec.loader.exec_module(module)
    found = kinds.discover([module, *(importlib.import_module(type(k).__module__) for k in kinds.KINDS.values())])
    toy = found["toy"]
    assert stages_missing(type(toy)) == [] and not inspect.isabstract(type(toy))
    (base,) = [b for b in type(toy).__orig_bases__ if get_origin(b) is Kind]  # type: ignore[attr-defined]
    assert Any not in get_args(base)
    assert kinds.bodies_steps(found)["toy"] is module.forget_things
    assert {name for name, kind in found.items() if kind.operator_only} == {"toy", *kinds.OPERATOR_KINDS}
    assert toy.label.format(hold_id="h1") == "toy purge of h1"
    with pytest.raises(TypeError, match="both define 'toy'"):
        kinds.discover([module, module])


def other_words() -> set[str]:
    """Strings that are a kind's name and also another state's (a conversation's kind, a
    tombstone's, a hold's subject): a list of those is about that state, not about kinds."""
    others = [e for e in vars(states).values() if isinstance(e, type) and issubclass(e, StrEnum) and e is not PurgeKind]
    return {member.value for enum in others for member in enum}


def kind_lists(source: str) -> list[tuple[int, list[str]]]:
    """Collection literals (tuple, list, set, dict keys, Literal[...]) naming two kinds or
    more, one of them a kind's name only."""
    names, ambiguous = set(kinds.KINDS), other_words()
    found = []
    for node in ast.walk(ast.parse(source)):
        items: list[ast.expr | None] = []
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = list(node.keys)
        named = [i.value for i in items if isinstance(i, ast.Constant) and i.value in names]
        if len(named) >= 2 and set(named) - ambiguous:
            found.append((node.lineno, named))
    return found


def test_kind_lists_are_found() -> None:
    assert kind_lists('LABELS = {"content": "a", "hold": "b"}\nX = ("bot",)') == [(1, ["content", "hold"])]


def test_no_other_module_lists_the_kinds() -> None:
    """Outside ``commands/kinds/``, ``purgekeeper.schema.states.PurgeKind`` and the migrations, no shipped
    module holds a list of kinds (a label table, a visibility set, a Literal of kinds): a new
    kind touches none."""
    root = Path(__file__).resolve().parents[2]
    offenders = []
    for path in sorted([*root.glob("commands/**/*.py"), *root.glob("schema/*.py"), *root.glob("workers/*.py"),
                        *root.glob("storage/*.py")]):  # fmt: skip
        if path == root / "schema" / "states.py" or "kinds" in path.parts or "migrations" in path.parts:
            continue
        offenders += [f"{path.relative_to(root)}:{line} {named}" for line, named in kind_lists(path.read_text())]
    assert offenders == []
