"""What the browser tests share: headless Chromium driven by selenium, and the data directory
of the ``purgectl serve`` each test starts. Without Chromium or chromedriver a test fails on
CI (``CI`` set) and skips locally."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser import CHROMEDRIVER, CHROMIUM, WAIT_S
from tests.helpers.databases import ON_CI


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        message = (
            f"no headless browser: {', '.join(missing)} missing (Debian: apt-get install chromium chromium-driver)"
        )
        if ON_CI:
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_AVOID_STATS", "true")  # Selenium Manager stays offline
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,1100",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(
        service=Service(str(CHROMEDRIVER), log_output=str(tmp_path / "chromedriver.log")), options=options
    )
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()
