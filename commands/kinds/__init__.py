"""The purge kinds, one module each, found here: ``KINDS``.

**Adding a kind** touches one module and one migration:

1. ``commands/kinds/<kind>.py`` defines one concrete :class:`~commands.kinds.kind.Kind`
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
      ``workers.cleanup.run_batch``).
2. A migration revision adds the kind's string to the ``purge_ledger.kind`` CHECK, and
   ``schema.states.PurgeKind`` gets the same value (the enum mirrors the CHECK: schema
   cannot import commands).

Nothing else lists kinds: this package finds each module (``discover``), the surfaces show a
row by its kind's ``label`` and visibility, the merge checks a row with its kind's
``check_selectors``, and the workers get the bodies steps from ``bodies_steps()``, which
each worker process hands them at start-up (``StepContext.bodies``): importing ``workers``
registers nothing. ``tests/unit/test_kinds.py`` checks every item above for every kind, walks
a toy kind through them, and fails when another module names a kind's string.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

from sqlalchemy import Connection

from commands.kinds.kind import Kind
from commands.kinds.selector_fields import RowInvalid
from schema import purges
from schema.ledger import LedgerEntry
from schema.states import StepKind
from workers.cleanup import BodiesStep

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


KINDS: Mapping[str, Kind[Any, Any]] = discover(_modules())
CONTENT, CONVERSATION, CHANNEL, BOT = KINDS["content"], KINDS["conversation"], KINDS["channel"], KINDS["bot"]
AUTHOR, HOLD, HOLD_RELEASE = KINDS["author"], KINDS["hold"], KINDS["hold_release"]
RETENTION, RETENTION_END, RETENTION_RUN = KINDS["retention"], KINDS["retention_end"], KINDS["retention_run"]


def bodies_steps(kinds: Mapping[str, Kind[Any, Any]] = KINDS) -> dict[str, BodiesStep]:
    """Each kind's bodies step, by kind: what a worker process hands its StepContext."""
    return {name: kind.bodies for name, kind in kinds.items() if kind.bodies is not None}


# The rows of the operator routes (policies and holds): their actor and reason are an
# operator's words ("litigation Doe v. Corp"), so a host's purge list and status leave them out.
OPERATOR_KINDS = tuple(kind.name.value for kind in KINDS.values() if kind.operator_only)
POLICY_KINDS = frozenset(kind.name.value for kind in KINDS.values() if kind.names_policy)


def label_of(entry: LedgerEntry) -> str:
    """The row in a few words: its kind's label, with the policy or hold it names."""
    try:
        template = kind_of(entry.kind).label
    except RowInvalid:
        template = f"{entry.kind} purge"
    names = {name: str(entry.selectors.get(name, "?")) for name in ("policy_id", "hold_id")}
    return template.format(**names)


def kind_of(name: str) -> Kind[Any, Any]:
    """The kind a ledger row names; RowInvalid for a name no module defines."""
    try:
        return KINDS[name]
    except (KeyError, TypeError):
        raise RowInvalid(f"unknown purge kind {str(name)[:40]!r}") from None


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
    "reapply_fences",
]
