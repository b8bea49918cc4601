"""The status page in a real browser: headless Chromium (selenium) against ``purgectl serve``.

The SQLite database is prepared before the server starts, in the data directory ``serve`` then
uses: a purge whose attachments step ended ``incomplete`` for real (the blob's file replaced by
a non-empty directory, one attempt allowed), with an attachment name that is also an HTML
injection, so the error text the page must show is hostile. The browser signs in through the
form, finds that error text, finds no element injected by it, checks the session cookie's
flags, watches the page reload itself, and signs out.

A screenshot goes to ``$PK_TEST_ARTIFACTS`` (default ``<repo>/test-artifacts/``) as
``status-page.png``. Without Chromium or chromedriver the test fails on CI (``CI`` set) and
skips locally.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

import commands
from commands import EventScope, NewAttachment
from commands.settings import Settings
from commands.web.auth import COOKIE_NAME
from tests import helpers
from tests.conftest import ON_CI
from workers import runner

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(os.environ.get("PK_TEST_ARTIFACTS") or REPO / "test-artifacts")
SCREENSHOT = "status-page.png"

HOST_TOKEN = "browser-host-token-5b1e"
OPERATOR_TOKEN = "browser-operator-token-c9d4"
HOSTILE_NAME = "<img src=x onerror=alert(1)>.txt"  # no '/': a valid attachment name
SECRET = "S3CR3T-browser-body"
WHO = {"actor": "ops@example.org", "reason": "the user asked"}
START_S = 30.0
WAIT_S = 15.0


# -- the database, prepared before the server starts ---------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    incomplete: str
    complete: str
    error_text: str


def settle(pk: commands.Purgekeeper, purge_id: str) -> commands.PurgeStatus:
    return helpers.settle(pk, purge_id, policy=runner.Policy(), timeout_s=WAIT_S)


def purge_event(pk: commands.Purgekeeper, conversation_id: str, *, name: str) -> tuple[str, commands.Event]:
    pk.create_conversation(conversation_id)
    attachment = NewAttachment.file(f"{SECRET} bytes".encode(), name=name)
    event = pk.ingest_event(conversation_id, author="ada", body=SECRET, attachments=[attachment])
    scope = EventScope(event_ids=[event.id])
    purge_id = pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO).purge_id
    return purge_id, event


def break_blob_file(pk: commands.Purgekeeper, blob_id: str) -> None:
    """A real fault: the blob's file becomes a non-empty directory, so unlink always fails."""
    with pk.db.read() as conn:
        kind, relative = conn.execute(text("SELECT kind, path FROM blobs WHERE id = :id"), {"id": blob_id}).one()
    path = pk.blobs.root(kind) / relative
    path.unlink()
    path.mkdir()
    (path / "in-the-way").write_text("not content")


def prepare(settings: Settings) -> Prepared:
    with commands.open(
        settings.database_url,
        blob_root=settings.blob_root,
        file_root=settings.file_root,
        memory_roots=settings.memory_roots,
        checkpoint_dir=settings.checkpoint_dir,
        workers="none",
    ) as pk:
        complete, _ = purge_event(pk, "c-fine", name="fine.txt")
        assert settle(pk, complete).status == "complete"
        incomplete, event = purge_event(pk, "c-broken", name=HOSTILE_NAME)
        break_blob_file(pk, event.attachments[0].blob_id)
        with pk.db.write() as conn:
            conn.execute(text("UPDATE cleanup_steps SET max_attempts = 1 WHERE purge_id = :p"), {"p": incomplete})
        status = settle(pk, incomplete)
    failed = next(step for step in status.steps if step.kind == "attachments")
    assert (status.status, failed.status) == ("incomplete", "incomplete")
    # the error names the blob, never the file's path: that holds the purged attachment's name
    assert failed.last_error is not None and HOSTILE_NAME not in failed.last_error
    assert "could not unlink the file of blob" in failed.last_error
    return Prepared(incomplete=incomplete, complete=complete, error_text=failed.last_error)


# -- the server ----------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def wait_until_serving(server: Server) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"purgectl serve exited with {server.process.returncode}:\n{server.output()}")
        try:
            if httpx.get(f"{server.url}/status", timeout=1.0).status_code == 401:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"purgectl serve did not answer within {START_S} s:\n{server.output()}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=WAIT_S)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def prepared(data_dir: Path) -> Prepared:
    return prepare(Settings.from_env({"PURGEKEEPER_DATA_DIR": str(data_dir)}))


@pytest.fixture
def server(prepared: Prepared, data_dir: Path, tmp_path: Path) -> Iterator[Server]:
    port = free_port()
    env = {name: value for name, value in os.environ.items() if not name.startswith("PURGEKEEPER_")}
    env |= {
        "PURGEKEEPER_DATA_DIR": str(data_dir),
        "PURGEKEEPER_API_TOKEN": HOST_TOKEN,
        "PURGEKEEPER_OPERATOR_TOKEN": OPERATOR_TOKEN,
        "PURGEKEEPER_SWEEP_INTERVAL": "0.5",
    }
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(BIN / "purgectl"), "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            cwd=tmp_path,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its pid is its process group: teardown stops all of it
        )
    running = Server(url=f"http://127.0.0.1:{port}", process=process, log=log)
    try:
        wait_until_serving(running)
        yield running
    finally:
        stop(process)


# -- the browser ----------------------------------------------------------------------------------------


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


def wait_for(condition: Any, what: str, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = condition()
        except Exception:  # the page is reloading under us: look again
            found = None
        if found:
            return found
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def sign_in(driver: Any, token: str) -> None:
    from selenium.webdriver.common.by import By

    field = driver.find_element(By.NAME, "token")
    field.clear()
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()


def save_screenshot(driver: Any) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / SCREENSHOT
    height = driver.execute_script("return document.documentElement.scrollHeight")
    page = {"width": 1280, "height": max(int(height), 800), "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", page)  # the whole page, not the window
    try:
        assert driver.save_screenshot(str(path)), path
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert path.stat().st_size > 10_000
    return path


def test_an_operator_signs_in_and_sees_the_incomplete_purge_and_its_error(
    browser: Any, server: Server, prepared: Prepared
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/status")
    assert "sign in" in browser.title
    sign_in(browser, HOST_TOKEN)  # the host token does not operate when an operator token is set
    alert = wait_for(lambda: browser.find_element(By.CSS_SELECTOR, ".login-error"), "the sign-in error")
    assert alert.text == "That token is not valid."
    assert browser.get_cookies() == []

    sign_in(browser, OPERATOR_TOKEN)
    wait_for(lambda: browser.find_element(By.ID, "summary"), "the status page")
    assert browser.current_url == f"{server.url}/status"
    [cookie] = browser.get_cookies()
    assert cookie["name"] == COOKIE_NAME and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/status" and OPERATOR_TOKEN not in cookie["value"]
    assert browser.execute_script("return document.cookie") == ""  # HttpOnly: no script can read it

    attention = browser.find_element(By.ID, "attention")
    failed = attention.find_element(By.ID, f"purge-{prepared.incomplete}")
    assert "incomplete" in failed.get_attribute("class").split()
    assert failed.find_element(By.CSS_SELECTOR, ".badge.incomplete").text == "INCOMPLETE"
    error = failed.find_element(By.CSS_SELECTOR, "tr.step.incomplete .error-text")
    assert error.text == prepared.error_text  # the whole text, shown as text
    assert HOSTILE_NAME not in error.text and error.text.startswith("IsADirectoryError: ")
    assert browser.find_elements(By.TAG_NAME, "img") == []  # the name injected nothing
    assert browser.find_elements(By.TAG_NAME, "script") == []
    recent = browser.find_element(By.ID, "recent")
    assert recent.find_element(By.ID, f"purge-{prepared.complete}").get_attribute("data-status") == "complete"
    assert browser.find_element(By.ID, "incomplete-count").text == "1"
    assert browser.find_element(By.ID, "messaging").text == "available"
    body = browser.find_element(By.TAG_NAME, "body").text
    assert SECRET not in body and WHO["actor"] not in body and WHO["reason"] not in body
    print(f"screenshot: {save_screenshot(browser)}")

    # The page reloads itself: the marker set on this document is gone after the refresh.
    browser.execute_script("document.documentElement.dataset.seen = 'before-refresh'")
    wait_for(
        lambda: browser.execute_script("return document.documentElement.dataset.seen") is None,
        "the page to reload itself",
        timeout=12.0,
    )
    wait_for(lambda: browser.find_element(By.ID, f"purge-{prepared.incomplete}"), "the reloaded page")

    browser.find_element(By.CSS_SELECTOR, "header form button[type=submit]").click()
    wait_for(lambda: browser.find_element(By.NAME, "token"), "the sign-in form after signing out")
    assert browser.get_cookies() == []
    assert prepared.incomplete not in browser.page_source


def test_the_server_answers_without_a_browser_too(server: Server, prepared: Prepared) -> None:
    """The same process, over plain HTTP: /status needs the operator, /metrics counts the purge."""
    assert httpx.get(f"{server.url}/status").status_code == 401
    operator = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    page = httpx.get(f"{server.url}/status", headers=operator)
    assert page.status_code == 200 and prepared.incomplete in page.text
    assert httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {HOST_TOKEN}"}).status_code == 401
    metrics = httpx.get(f"{server.url}/metrics", headers=operator)
    assert metrics.status_code == 200
    assert "purgekeeper_incomplete_purges 1.0" in metrics.text.splitlines()
