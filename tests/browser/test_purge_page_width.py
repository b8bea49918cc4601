"""A purge's console page at 1,024 px wide (issue 34, item 7: on the demo, the last error and
"where to act" hid behind a horizontal scrollbar, and "where to act" was repeated under every
failed attempt). Headless Chromium against ``purgectl serve``, the SQLite database prepared
before the server starts:

- a purge whose attachments step ended ``incomplete`` after five failed attempts, for real
  (the blob's file replaced by a non-empty directory), in a conversation with a long id;
- a purge whose attachments step is ``retrying`` (one failed attempt, its next an hour away).

On each page the document is no wider than the window (``scrollWidth <= clientWidth``), the
step's last error and "where to act" are displayed and inside the window, "where to act" is
shown once, and the attempts carry no place. The overview at the same width too. Screenshots:
``console-purge-1024.png``, ``console-retrying-1024.png`` and ``console-overview-1024.png`` in
``$PK_TEST_ARTIFACTS`` (default ``<repo>/test-artifacts/``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.commands.settings import Settings
from purgekeeper.workers import runner
from tests import helpers
from tests.helpers import served
from tests.helpers.browser import ARTIFACTS, console, settings_in, wait_for
from tests.helpers.cleanup import postpone

WIDTH = 1024
OPERATOR_TOKEN = "width-operator-token-3e1a"
WHO = {"actor": "ops@example.org", "reason": "the user asked"}
LONG_CONVERSATION = "support-ticket-2026-12-05-" + "x" * 60


@dataclass(frozen=True)
class Prepared:
    incomplete: str
    retrying: str
    blob_id: str  # the incomplete purge's blob


def purge_with_a_broken_file(pk: purgekeeper.Purgekeeper, conversation_id: str) -> tuple[str, str]:
    """A purge of an event with a file attachment whose file is now a non-empty directory."""
    pk.create_conversation(conversation_id)
    attachment = NewAttachment.file(b"salary list", name="salaries.txt")
    event = pk.ingest_event(conversation_id, author="ada", body="the list", attachments=[attachment])
    scope = EventScope(event_ids=[event.id])
    purge_id = pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO).purge_id
    blob_id = event.attachments[0].blob_id
    with pk.db.read() as conn:
        kind, relative = conn.execute(text("SELECT kind, path FROM blobs WHERE id = :id"), {"id": blob_id}).one()
    path = pk.blobs.root(kind) / relative
    path.unlink()
    path.mkdir()
    (path / "in-the-way").write_text("not content")
    return purge_id, blob_id


def prepare(settings: Settings) -> Prepared:
    with purgekeeper.open(
        settings.database_url,
        blob_root=settings.blob_root,
        file_root=settings.file_root,
        memory_roots=settings.memory_roots,
        checkpoint_dir=settings.checkpoint_dir,
        workers="none",
    ) as pk:
        incomplete, blob_id = purge_with_a_broken_file(pk, LONG_CONVERSATION)
        status = helpers.settle(pk, incomplete)  # five attempts, 10 ms apart
        retrying, _ = purge_with_a_broken_file(pk, "c-retrying")
        [step] = [s for s in pk.status(retrying).steps if s.kind == "attachments"]
        assert runner.run_step(pk.step_context(), step.id, policy=helpers.POLICY).status == "retrying"
        postpone(pk, step.id)
    failed = next(step for step in status.steps if step.kind == "attachments")
    assert (status.status, failed.attempts) == ("incomplete", 5)
    return Prepared(incomplete, retrying, blob_id)


@pytest.fixture
def prepared(data_dir: Path) -> Prepared:
    return prepare(settings_in(data_dir))


@pytest.fixture
def server(prepared: Prepared, data_dir: Path, tmp_path: Path) -> Iterator[served.Served]:
    with console(data_dir, tmp_path, sweep_interval="0.5", PURGEKEEPER_OPERATOR_TOKEN=OPERATOR_TOKEN) as running:
        yield running


def at_width(driver: Any, width: int = WIDTH, height: int = 900) -> None:
    """The page laid out as in a window ``width`` px wide (no scrollbar is counted in it)."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )


def sign_in(driver: Any, url: str) -> None:
    driver.get(f"{url}/status")
    for field, value in (("name", "Ada Oncall"), ("token", OPERATOR_TOKEN)):
        driver.find_element("id", field).send_keys(value)
    driver.find_element("css selector", "#sign-in button[type=submit]").click()
    wait_for(lambda: driver.find_element("id", "summary"), "the overview")


def inside(driver: Any, element: Any) -> bool:
    """Displayed, and its box within the document's visible width."""
    left, right, width = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect();return [r.left, r.right, document.documentElement.clientWidth]",
        element,
    )
    return bool(element.is_displayed()) and left >= 0 and right <= width


def screenshot(driver: Any, name: str) -> Path:
    """The whole page at ``WIDTH`` px, as ``ARTIFACTS/name``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    at_width(driver, WIDTH, max(height, 800))
    path = ARTIFACTS / name
    try:
        assert driver.save_screenshot(str(path)), path
    finally:
        at_width(driver)
    print(f"screenshot: {path}")
    return path


def fits(driver: Any) -> None:
    """No horizontal scrollbar: the document is no wider than what the window shows of it."""
    scroll_width, client_width = driver.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert client_width <= WIDTH and scroll_width <= client_width, (scroll_width, client_width)


def test_a_purge_page_fits_1024_px_with_its_error_and_where_to_act_in_view(
    browser: Any, server: served.Served, prepared: Prepared
) -> None:
    from selenium.webdriver.common.by import By

    at_width(browser)
    sign_in(browser, server.url)
    fits(browser)
    screenshot(browser, "console-overview-1024.png")

    browser.get(f"{server.url}/status/purges/{prepared.incomplete}")
    wait_for(lambda: browser.find_element(By.ID, "purge-title"), "the purge's page")
    fits(browser)
    [where] = browser.find_elements(By.CSS_SELECTOR, ".where")  # once, not under each of 5 attempts
    blob = prepared.blob_id
    assert where.text == f"attachments: the file root (PURGEKEEPER_FILE_ROOT), files/{blob[:2]}/{blob}"
    assert inside(browser, where) and inside(browser, where.find_element(By.CSS_SELECTOR, "code.place"))
    error = browser.find_element(By.CSS_SELECTOR, "tr.step-error.incomplete .error-text")
    assert error.text.startswith("IsADirectoryError: ") and blob in error.text and inside(browser, error)
    attempts = browser.find_elements(By.CSS_SELECTOR, "#attempt-rows tr.attempt[data-step]")
    failed = [row for row in attempts if row.find_elements(By.CSS_SELECTOR, ".error-text")]
    assert len(failed) == 5
    for row in failed:
        assert inside(browser, row.find_element(By.CSS_SELECTOR, ".error-text"))
    assert browser.find_element(By.CSS_SELECTOR, "tr.step.incomplete td.error-name").text == "IsADirectoryError"
    assert inside(browser, browser.find_element(By.ID, "retry-submit"))
    screenshot(browser, "console-purge-1024.png")

    browser.get(f"{server.url}/status/purges/{prepared.retrying}?refresh=off")
    wait_for(lambda: browser.find_element(By.ID, "purge-title"), "the retrying purge's page")
    fits(browser)
    error = browser.find_element(By.CSS_SELECTOR, "tr.step-error.retrying .error-text")
    assert inside(browser, error) and inside(browser, browser.find_element(By.CSS_SELECTOR, "#where-to-act .where"))
    assert browser.find_element(By.CSS_SELECTOR, "tr.step.retrying td.next-attempt").text.startswith("in ")
    screenshot(browser, "console-retrying-1024.png")
