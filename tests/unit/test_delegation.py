"""``purgekeeper.commands.delegation.delegate``: a method declared in one line that forwards to a service.
On an instance it is the service's bound method; on the class a function with the service
method's docstring, signature and ``__wrapped__``; to mypy, exactly the method's parameters
and return type. No I/O beyond a temporary directory for mypy's run."""

from __future__ import annotations

import inspect
import pydoc
import shutil
from pathlib import Path

from mypy import api

from purgekeeper.commands import delegation
from purgekeeper.commands.delegation import Delegate, delegate


class Service:
    def render(self, count: int, *, suffix: str = "!") -> str:
        """Say ``count`` with ``suffix``."""
        return f"{count}{suffix}"

    def total(self, *values: int, scale: int = 1) -> int:
        """The sum of ``values``, times ``scale``."""
        return sum(values) * scale


class Handle:
    render = delegate("service", Service.render)
    tally = delegate("service", Service.total)

    def __init__(self) -> None:
        self.service = Service()


def test_on_an_instance_it_is_the_bound_method_of_the_service_held_now() -> None:
    handle = Handle()
    assert handle.render(3, suffix="?") == "3?"
    assert handle.tally(1, 2, scale=10) == 30
    assert handle.render.__self__ is handle.service  # type: ignore[attr-defined]
    handle.service = Service()
    assert handle.render.__self__ is handle.service  # type: ignore[attr-defined]
    assert str(inspect.signature(handle.render)) == "(count: 'int', *, suffix: 'str' = '!') -> 'str'"
    assert inspect.getdoc(handle.render) == "Say ``count`` with ``suffix``."


def test_on_the_class_it_is_a_forwarding_function_with_the_methods_doc_and_signature() -> None:
    handle = Handle()
    render = Handle.render
    assert inspect.isfunction(render)
    assert render.__wrapped__ is Service.render  # type: ignore[attr-defined]
    assert render.__doc__ == Service.render.__doc__
    assert str(inspect.signature(render)) == "(self, count: 'int', *, suffix: 'str' = '!') -> 'str'"
    assert (render.__name__, render.__qualname__, render.__module__) == ("render", "Handle.render", __name__)
    assert Handle.tally.__name__ == "tally"
    assert Handle.tally.__wrapped__ is Service.total  # type: ignore[attr-defined]
    assert render(handle, 4) == "4!"
    assert isinstance(vars(Handle)["render"], Delegate)
    assert repr(vars(Handle)["tally"]) == "delegate('service', Service.total)"


def test_help_shows_it_as_a_method_with_the_signature_and_the_docstring() -> None:
    text = pydoc.render_doc(Handle, renderer=pydoc.plaintext)
    assert "render(self, count: 'int', *, suffix: 'str' = '!') -> 'str'\n |      Say ``count`` with ``suffix``." in text
    assert "tally(self, *values: 'int', scale: 'int' = 1) -> 'int'\n |      The sum of ``values``" in text


def test_an_attribute_set_on_an_instance_wins() -> None:
    """A non-data descriptor: a test's stand-in (``monkeypatch.setattr(pk, ...)``) replaces it."""
    handle = Handle()
    handle.render = lambda count, *, suffix="!": "stand-in"  # type: ignore[method-assign]
    assert handle.render(1) == "stand-in"
    del handle.render
    assert handle.render(1) == "1!"


USAGE = """
from delegation import delegate


class Service:
    def render(self, count: int, *, suffix: str = "!") -> str:
        return f"{count}{suffix}"

    def total(self, *values: int, scale: int = 1) -> int:
        return sum(values) * scale


class Handle:
    render = delegate("service", Service.render)
    total = delegate("service", Service.total)

    def __init__(self) -> None:
        self.service = Service()


handle = Handle()
reveal_type(handle.render)
reveal_type(handle.total)
said: str = handle.render(1, suffix="?")
summed: int = handle.total(1, 2, scale=3)
Handle.render(handle, 1)
handle.render("1")
handle.render(1, "?")
handle.render(1, prefix="?")
wrong: int = handle.render(1)
handle.total(1, scale="3")
"""


def test_mypy_sees_exactly_the_service_methods_parameters_and_return_type(tmp_path: Path) -> None:
    """The module imports nothing of the project, so mypy checks it and a use of it alone."""
    shutil.copy(delegation.__file__, tmp_path / "delegation.py")
    (tmp_path / "usage.py").write_text(USAGE, encoding="utf-8")
    out, err, status = api.run(
        [
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(tmp_path / "usage.py"),
            str(tmp_path / "delegation.py"),
        ]
    )
    found = sorted(line.split(":", 1)[1] for line in out.splitlines() if line.startswith(str(tmp_path)))
    assert found == [
        '22: note: Revealed type is "def (count: int, *, suffix: str =) -> str"',
        '23: note: Revealed type is "def (*values: int, scale: int =) -> int"',
        '27: error: Argument 1 has incompatible type "str"; expected "int"  [arg-type]',
        "28: error: Too many positional arguments  [call-arg]",
        '29: error: Unexpected keyword argument "prefix"  [call-arg]',
        '30: error: Incompatible types in assignment (expression has type "str", variable has type "int")'
        "  [assignment]",
        '31: error: Argument "scale" has incompatible type "str"; expected "int"  [arg-type]',
    ], out + err
    assert status == 1
