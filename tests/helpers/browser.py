"""What the browser tests call: the console they browse (``purgectl serve`` on a prepared data
directory), waiting for a page to show something, and saving a whole page's screenshot to
``$PK_TEST_ARTIFACTS`` (default ``<repo>/test-artifacts/``). The Chromium fixture itself is
``tests/browser/conftest.py``'s."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from purgekeeper.commands.settings import Settings
from tests.helpers import served

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("PK_TEST_ARTIFACTS") or REPO / "test-artifacts")
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT_S = 15.0


def settings_in(data_dir: Path) -> Settings:
    """The settings of the data directory a test prepares and then serves."""
    return Settings.from_env({"PURGEKEEPER_DATA_DIR": str(data_dir)})


@contextmanager
def console(data_dir: Path, cwd: Path, *, sweep_interval: str, **tokens: str) -> Iterator[served.Served]:
    """``purgectl serve`` on ``data_dir`` (its scheduler sweeping every ``sweep_interval``
    seconds), with the ``PURGEKEEPER_*_TOKEN`` variables given, until the block ends."""
    env = served.clean_environment(
        PURGEKEEPER_DATA_DIR=str(data_dir), PURGEKEEPER_SWEEP_INTERVAL=sweep_interval, **tokens
    )
    with served.serving(env, cwd, "--host", "127.0.0.1") as running:
        yield running


def wait_for(condition: Any, what: str, timeout: float = WAIT_S) -> Any:
    """``condition()``'s first true value, asked every 0.1 s; the test fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = condition()
        except Exception:  # the page is loading or reloading under us: look again
            found = None
        if found:
            return found
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def save_screenshot(driver: Any, name: str, *, min_height: int = 800) -> Path:
    """The whole page, 1280 px wide and at least ``min_height`` tall, as ``ARTIFACTS/name``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    height = driver.execute_script("return document.documentElement.scrollHeight")
    page = {"width": 1280, "height": max(int(height), min_height), "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", page)  # the whole page, not the window
    try:
        assert driver.save_screenshot(str(path)), path
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert path.stat().st_size > 10_000
    print(f"screenshot: {path}")
    return path
