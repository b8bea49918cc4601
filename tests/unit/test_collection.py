"""The collector's pause (``purgekeeper.commands.collection``): counted across threads, and it resumes
only what was running."""

from __future__ import annotations

import gc
import threading

from purgekeeper.commands import collection


def test_the_pause_ends_with_its_last_holder_and_resumes_only_a_running_collector() -> None:
    assert gc.isenabled()
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with collection.paused():
            entered.set()
            release.wait(5)

    other = threading.Thread(target=hold)
    other.start()
    entered.wait(5)
    with collection.paused():
        assert not gc.isenabled()
    assert not gc.isenabled(), "the other thread still holds the pause"
    release.set()
    other.join(5)
    assert gc.isenabled()

    gc.disable()
    try:
        with collection.paused():
            pass
        assert not gc.isenabled(), "a collector that was off stays off"
    finally:
        gc.enable()
