"""What the unit tests of the kinds' ``decide`` hand it in place of a database.

- :data:`NO_DATABASE` is the connection: any use of it fails the test, so a ``decide`` that
  reaches the database through a query the test did not fake says so, by name.
- :class:`Queries` fakes one query at a time (``purgekeeper.schema.purges.tombstone_of``...) with a canned
  answer, in the module the kind calls it through. Each call must fit the real query's
  signature (a fake never drifts from what it stands for) and is recorded.
- :func:`row_of` stands in for a row of a real table: a named tuple of the table's columns,
  so a stand-in has no attribute the table lacks.

Fakes serve these unit tests only.
"""

from __future__ import annotations

import inspect
from collections import namedtuple
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy import Table


class NoDatabase:
    """The connection ``decide`` is given: touching it fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"decide used the database ({name!r}) through a query this test does not fake")


NO_DATABASE: Any = NoDatabase()


class Queries:
    """The queries faked in one test, and the calls each got (by the query's name)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self.calls: dict[str, list[inspect.BoundArguments]] = {}
        self._real: dict[tuple[str, str], inspect.Signature] = {}  # a query faked twice keeps its own

    def returns(self, module: ModuleType, name: str, value: Any) -> None:
        """``module.name(conn, ...)`` answers ``value``."""
        self.computes(module, name, lambda **_: value)

    def computes(self, module: ModuleType, name: str, answer: Callable[..., Any]) -> None:
        """``module.name(conn, ...)`` answers ``answer(**arguments)``, the call's arguments by
        the real query's parameter names, without the connection (it may raise)."""
        key = (module.__name__, name)
        if key not in self._real:
            self._real[key] = inspect.signature(getattr(module, name))  # a query that is gone fails here
        real = self._real[key]

        def fake(*args: Any, **kwargs: Any) -> Any:
            bound = real.bind(*args, **kwargs)  # a call the real query would refuse fails here
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            connection = arguments.pop(next(iter(real.parameters)))
            assert connection is NO_DATABASE, f"{name} was given another connection"
            self.calls.setdefault(name, []).append(bound)
            return answer(**arguments)

        self._monkeypatch.setattr(module, name, fake)

    def arguments(self, name: str) -> list[dict[str, Any]]:
        """What each call of the faked query ``name`` was given (the connection left out)."""
        return [{k: v for k, v in call.arguments.items() if v is not NO_DATABASE} for call in self.calls.get(name, [])]


def row_of(table: Table, **values: Any) -> Any:
    """A row of ``table`` as a select of the whole table gives it: every column (None unless
    given); a name the table lacks is a TypeError."""
    fields = table.c.keys()
    unknown = set(values) - set(fields)
    if unknown:
        raise TypeError(f"{table.name} has no column {sorted(unknown)}")
    return namedtuple(table.name, fields)(**{name: values.get(name) for name in fields})
