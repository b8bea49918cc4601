"""Where a step's time goes, statement by statement: ``bench/cleanup.py --statements N``.

A ``StatementProfile`` listens to an engine's cursor executions (SQLAlchemy's
``before_cursor_execute`` and ``after_cursor_execute`` events) and adds each statement's wall
time to the step kind it ran for (``during(kind)``). Its report, per kind: the steps, their mean
wall time, how many statements each sent and how long those took, and the ``N`` statements that
took the longest, in milliseconds per step. What is left of a step's time is the commits, the
Python and, for attachments, the files: a statement's time is the client's view (sending it,
the server running it and its triggers, reading the rows back), not the commit that follows.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

SHOWN_CHARACTERS = 110  # of a statement's text, whitespace folded


@dataclass
class _Kind:
    steps: int = 0
    step_s: float = 0.0
    statements: dict[str, list[float]] = field(default_factory=dict)  # text -> [count, seconds]


class StatementProfile:
    """The statements of ``engine`` run between ``during(kind)`` and its end, by kind."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.kinds: dict[str, _Kind] = {}
        self._current: str | None = None
        self._started = threading.local()
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._before)
        event.remove(self.engine, "after_cursor_execute", self._after)

    @contextlib.contextmanager
    def during(self, kind: str) -> Iterator[None]:
        """Count the statements of one step of ``kind`` (steps run one at a time)."""
        self._current = kind
        began = time.perf_counter()
        try:
            yield
        finally:
            self._current = None
            of_kind = self.kinds.setdefault(kind, _Kind())
            of_kind.steps += 1
            of_kind.step_s += time.perf_counter() - began

    def _before(self, *_: Any) -> None:
        self._started.at = time.perf_counter()

    def _after(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if self._current is None:
            return
        took = time.perf_counter() - self._started.at
        text = re.sub(r"\s+", " ", statement).strip()[:SHOWN_CHARACTERS]
        seen = self.kinds.setdefault(self._current, _Kind()).statements.setdefault(text, [0, 0.0])
        seen[0] += 1
        seen[1] += took

    def report(self, top: int) -> dict[str, Any]:
        """Print each kind's figures and its ``top`` statements; return them for the JSON line."""
        figures: dict[str, Any] = {}
        for kind, of_kind in sorted(self.kinds.items()):
            steps = of_kind.steps
            sent = sum(count for count, _ in of_kind.statements.values())
            statements_s = sum(seconds for _, seconds in of_kind.statements.values())
            ranked = sorted(of_kind.statements.items(), key=lambda item: -item[1][1])[:top]
            print()
            print(
                f"{kind} steps: {steps}, {of_kind.step_s / steps * 1000:.1f} ms each; {sent / steps:.1f} statements "
                f"each, {statements_s / steps * 1000:.1f} ms of it (the rest: commits, Python, files)"
            )
            print(f"  {'ms/step':>8}  {'sent/step':>9}  statement")
            for text, (count, seconds) in ranked:
                print(f"  {seconds / steps * 1000:>8.2f}  {count / steps:>9.1f}  {text}")
            figures[kind] = {
                "steps": steps,
                "ms_per_step": of_kind.step_s / steps * 1000,
                "statements_per_step": sent / steps,
                "statement_ms_per_step": statements_s / steps * 1000,
                "top": [
                    {"statement": text, "ms_per_step": seconds / steps * 1000, "per_step": count / steps}
                    for text, (count, seconds) in ranked
                ],
            }
        return figures
