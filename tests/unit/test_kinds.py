"""Every purge kind is one module that defines every stage, and every kind is registered."""

from __future__ import annotations

import inspect
from typing import Any, get_args, get_origin

import pytest

from commands import kinds
from commands.kinds.base import OPTIONAL_STAGES, STAGES, Kind
from schema.states import PurgeKind
from workers import cleanup


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
        assert type(kind).__module__ == f"commands.kinds.{kind.name.value}"


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


def test_a_kind_with_a_bodies_step_registers_it_with_the_workers() -> None:
    for kind in kinds.KINDS.values():
        if kind.bodies is not None:
            assert cleanup._BODIES[kind.name.value] is kind.bodies


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
    from schema.ledger import LedgerEntry

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
