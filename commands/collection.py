"""Python's cyclic garbage collector, paused while a large result is made into objects.

A read of 10,000 events makes 10,000 ``Event`` objects (and SQLAlchemy's rows before them),
all tracked by the cyclic collector. With the collector running, they survive its young
collections while the list is built, are promoted, and count towards a full collection of
every object of the process: measured in ``bench/scale.py``, that made a read of 10,000
events 1.6x slower than with the collector paused, in a process of about 90,000 objects.
They hold no reference cycles, so a caller that drops them frees them by reference count
alone; pausing the collector while they are made means they are never promoted at all.

The pause is counted across threads (the collector is one per process): it ends when the
last reader that paused it is done, and only if the collector was running when the first
began.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_holders = 0
_resume = False


@contextlib.contextmanager
def paused() -> Iterator[None]:
    global _holders, _resume
    with _lock:
        if _holders == 0:
            _resume = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _resume:
                gc.enable()
