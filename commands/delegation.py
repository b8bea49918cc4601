"""A public method of the handle that only forwards to a service, declared in one line.

``list_purges = delegate("operations", OperatorCommands.list_purges)`` in the body of
``purgekeeper.commands.handle.Purgekeeper`` makes ``pk.list_purges`` the ``list_purges`` of the service
the handle holds as ``pk.operations``, looked up at each access (as an explicit forwarding
method looked it up at each call). Type checkers see it with exactly that method's
parameters and return type (``ParamSpec``); on the class it is a function that forwards, with
that method's docstring and signature (and the method as ``__wrapped__``), so ``help()`` and
``inspect.signature`` show the reference where the code is. It is a non-data descriptor: an
attribute set on an instance (a test's stand-in) still wins."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

P = ParamSpec("P")
R = TypeVar("R")


class Delegate(Generic[P, R]):
    """A method forwarded to ``method`` of the service at the attribute ``service`` of the
    instance; made by ``delegate``."""

    def __init__(self, service: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self.service = service
        self.method = method
        self.name = method.__name__

        def forward(instance: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return self.bound(instance)(*args, **kwargs)

        functools.update_wrapper(forward, method)
        forward.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
        self.forward: Callable[Concatenate[Any, P], R] = forward

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.forward.__name__ = name
        self.forward.__qualname__ = f"{owner.__qualname__}.{name}"
        self.forward.__module__ = owner.__module__

    @overload
    def __get__(self, instance: None, owner: type[Any] | None = None) -> Callable[Concatenate[Any, P], R]: ...

    @overload
    def __get__(self, instance: object, owner: type[Any] | None = None) -> Callable[P, R]: ...

    def __get__(
        self, instance: object | None, owner: type[Any] | None = None
    ) -> Callable[P, R] | Callable[Concatenate[Any, P], R]:
        return self.forward if instance is None else self.bound(instance)

    def bound(self, instance: object) -> Callable[P, R]:
        """The method of the service ``instance`` holds now (a stand-in set on it included)."""
        method: Callable[P, R] = getattr(getattr(instance, self.service), self.name)
        return method

    def __repr__(self) -> str:
        return f"delegate({self.service!r}, {self.method.__qualname__})"


def delegate(service: str, method: Callable[Concatenate[Any, P], R]) -> Delegate[P, R]:
    """``method`` (a function of the service's class) as a method of the class this is
    assigned in, forwarded to the service that class's instances hold as ``service``."""
    return Delegate(service, method)
