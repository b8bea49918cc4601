"""The purge kinds, one module each, found here: ``KINDS``.

**Adding a kind** touches one module and one migration:

1. ``commands/kinds/<kind>.py`` defines one concrete :class:`~purgekeeper.commands.kinds.kind.Kind`
   subclass, ``class Toy(Kind[Request, Locked])``, with in its own body:
   a. ``name``, the ledger's kind string, and ``label``, the row in a few words (never who
      was erased; ``{policy_id}`` and ``{hold_id}`` are filled from its selectors);
   b. every stage of ``base.STAGES``: ``preview`` (or ``None``: confirmed by its ids alone),
      ``check_selectors``, ``lock``, ``decide``, ``fence``, ``left_after_restore``, and
      ``bodies`` (or ``None``: no bodies step), typed by its request and what it locks;
   c. ``operator_only`` when its row holds an operator's words, ``names_policy`` when its
      selectors name a retention policy, and the skeleton's switches it needs
      (``head_first``, ``policy_lock``, ``ledger_first``);
   d. its bodies step, if any, in the same module (a plain function on
      ``purgekeeper.workers.cleanup.run_batch``).
2. A migration revision adds the kind's string to the ``purge_ledger.kind`` CHECK, and
   ``purgekeeper.schema.states.PurgeKind`` gets the same value (the enum mirrors the CHECK: schema
   cannot import commands).

Nothing else lists kinds: this package finds each module (``discover``; ``kind_of`` imports
only the module named after the kind it is asked for, so a command that shows one purge loads
one kind, not ten: ``purgectl status`` starts faster), the surfaces show a
row by its kind's ``label`` and visibility, the merge checks a row with its kind's
``check_selectors``, and the workers get the bodies steps from ``bodies_steps()``, which
each worker process hands them at start-up (``StepContext.bodies``): importing ``workers``
registers nothing. ``tests/unit/test_kinds.py`` checks every item above for every kind, walks
a toy kind through them, and fails when another module names a kind's string.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from purgekeeper.commands.kinds.kind import Kind
from purgekeeper.commands.kinds.selector_fields import RowInvalid
from purgekeeper.schema import purges
from purgekeeper.schema.ledger import LedgerEntry
from purgekeeper.schema.states import PurgeKind, StepKind

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from purgekeeper.workers.cleanup import BodiesStep

    # Made on first use (``__getattr__`` below): the registry, each kind, and what the
    # surfaces filter by.
    KINDS: Mapping[str, Kind[Any, Any]]
    CONTENT: Kind[Any, Any]
    CONVERSATION: Kind[Any, Any]
    CHANNEL: Kind[Any, Any]
    BOT: Kind[Any, Any]
    AUTHOR: Kind[Any, Any]
    HOLD: Kind[Any, Any]
    HOLD_RELEASE: Kind[Any, Any]
    RETENTION: Kind[Any, Any]
    RETENTION_END: Kind[Any, Any]
    RETENTION_RUN: Kind[Any, Any]
    OPERATOR_KINDS: tuple[str, ...]
    POLICY_KINDS: frozenset[str]

NOT_KINDS = frozenset({"kind", "selector_fields", "skeleton"})  # this package's own machinery


def kind_in(module: ModuleType) -> Kind[Any, Any]:
    """The one concrete Kind subclass a kind's module defines, made."""
    found = [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, Kind)
        and value.__module__ == module.__name__
        and not inspect.isabstract(value)
    ]
    if len(found) != 1:
        raise TypeError(f"{module.__name__} defines {len(found)} purge kinds, not one")
    return found[0]()


def discover(modules: Iterable[ModuleType]) -> dict[str, Kind[Any, Any]]:
    """The kinds of ``modules``, by name; TypeError for a name two modules claim."""
    found: dict[str, Kind[Any, Any]] = {}
    for module in modules:
        kind = kind_in(module)
        if kind.name in found:
            raise TypeError(f"{module.__name__} and {type(found[kind.name]).__module__} both define {kind.name!r}")
        found[kind.name] = kind
    return found


def _modules() -> list[ModuleType]:
    names = sorted(info.name for info in pkgutil.iter_modules(__path__) if info.name not in NOT_KINDS)
    return [importlib.import_module(f"{__name__}.{name}") for name in names]


@functools.cache
def _kind_named(name: PurgeKind) -> Kind[Any, Any]:
    """The kind of the module named after ``name`` (made once: ``KINDS`` holds the same one)."""
    kind = kind_in(importlib.import_module(f"{__name__}.{name.value}"))
    if kind.name is not name:
        raise TypeError(f"{__name__}.{name.value} defines the kind {kind.name.value!r}, not {name.value!r}")
    return kind


@functools.cache
def _registry() -> Mapping[str, Kind[Any, Any]]:
    """Every kind, by name: each module of this package (``discover`` refuses a name two of
    them claim), and a module for every ``PurgeKind``."""
    found = discover(_modules())
    if set(found) != set(PurgeKind):
        raise TypeError(f"the kinds' modules define {sorted(found)}, not every PurgeKind")
    return {name: _kind_named(PurgeKind(name)) for name in found}


_CONSTANTS = {kind.name: kind for kind in PurgeKind}  # CONTENT -> PurgeKind.CONTENT, ...


def __getattr__(name: str) -> Any:
    """``KINDS`` and each kind (``CONTENT``, ...) are made on first use, and so are the kinds
    the surfaces filter by: the rows of the operator routes (policies and holds), whose actor
    and reason are an operator's words ("litigation Doe v. Corp"), so a host's purge list and
    status leave them out (``OPERATOR_KINDS``); and the rows that name a policy
    (``POLICY_KINDS``)."""
    if name == "KINDS":
        return _registry()
    if name in _CONSTANTS:
        return _kind_named(_CONSTANTS[name])
    if name == "OPERATOR_KINDS":
        return _operator_kinds()
    if name == "POLICY_KINDS":
        return _policy_kinds()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _operator_kinds() -> tuple[str, ...]:
    return tuple(kind.name.value for kind in _registry().values() if kind.operator_only)


@functools.cache
def _policy_kinds() -> frozenset[str]:
    return frozenset(kind.name.value for kind in _registry().values() if kind.names_policy)


def bodies_steps(kinds: Mapping[str, Kind[Any, Any]] | None = None) -> dict[str, BodiesStep]:
    """Each kind's bodies step, by kind (of every kind, or of ``kinds``): what a worker process
    hands its StepContext."""
    given = _registry() if kinds is None else kinds
    return {name: kind.bodies for name, kind in given.items() if kind.bodies is not None}


def label_of(entry: LedgerEntry) -> str:
    """The row in a few words: its kind's label, with the policy or hold it names."""
    try:
        template = kind_of(entry.kind).label
    except RowInvalid:
        template = f"{entry.kind} purge"
    names = {name: str(entry.selectors.get(name, "?")) for name in ("policy_id", "hold_id")}
    return template.format(**names)


def names_policy(kind_name: str) -> bool:
    """Whether a row of this kind names a retention policy (False for an unknown kind)."""
    try:
        return kind_of(kind_name).names_policy
    except RowInvalid:
        return False


def kind_of(name: str) -> Kind[Any, Any]:
    """The kind a ledger row names, importing only its module; RowInvalid for a name no
    module defines."""
    try:
        known = PurgeKind(name)
    except (ValueError, TypeError):
        raise RowInvalid(f"unknown purge kind {str(name)[:40]!r}") from None
    return _kind_named(known)


def reapply_fences(conn: Connection, entries: Iterable[LedgerEntry]) -> None:
    """A merge: every fence and tombstone these rows imply (an existing one is kept), and the
    conversations each names (``purge_conversations`` is not in the ledger); one row at a
    time, so a full merge holds one row in memory, not the ledger."""
    for entry in entries:
        kind = kind_of(entry.kind)
        kind.fence(conn, entry.purge_id, entry.selectors)
        purges.record_conversations(conn, entry.purge_id, kind.conversations(conn, entry.selectors))


def cleanup_left(conn: Connection, entry: LedgerEntry) -> list[tuple[StepKind, bool]]:
    """After a restore: the steps (kind, parked) this purge needs again."""
    return kind_of(entry.kind).left_after_restore(conn, entry)


__all__ = [
    "KINDS",
    "OPERATOR_KINDS",
    "POLICY_KINDS",
    "Kind",
    "RowInvalid",
    "bodies_steps",
    "cleanup_left",
    "discover",
    "kind_of",
    "label_of",
    "names_policy",
    "reapply_fences",
]
