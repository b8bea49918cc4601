"""The operator console in a real browser: headless Chromium (selenium) against ``purgectl serve``.

The SQLite database is prepared before the server starts, in the data directory ``serve`` then
uses:

- a purge whose attachments step ended ``incomplete`` for real (the blob's file replaced by a
  non-empty directory, one attempt allowed), with an attachment name that is also an HTML
  injection, so the error text the page must show is hostile;
- a complete content purge and a complete conversation purge (another kind to filter out);
- a purge whose bodies step a "frozen" worker holds under a long lease (a real claim that
  never finishes), so the workers view has someone to show.

The browser reads the sign-in page (it says where the token is), signs in with a name and the
token, checks the session cookie's flags, finds the purge in the overview's table, filters the
list to incomplete content purges, finds the two purges that name a conversation (a content
purge and a legal hold, whose page shows its subjects), finds the purge again by the first characters of its id in
the search box, reads what it touched and where its failure is (the file root and the path
below it, never the attachment's name), finds its hostile error shown as text, clears the
fault, retries with a reason and sees the audit row with its name and reason, the purge
complete and its attempts numbered by round; then opens the workers view, pauses and resumes
the refresh, and signs out.

Screenshots go to ``$PK_TEST_ARTIFACTS`` (default ``<repo>/test-artifacts/``):
``console-sign-in.png``, ``console-overview.png``, ``console-filtered.png``,
``console-search.png``, ``console-hold.png``, ``console-purge.png``, ``console-retried.png`` and
``console-workers.png``. Without Chromium
or chromedriver the test fails on CI (``CI`` set) and skips locally.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.commands.settings import Settings
from purgekeeper.commands.web.auth import COOKIE_NAME
from purgekeeper.schema import steps
from purgekeeper.workers import runner
from tests import helpers
from tests.helpers import served
from tests.helpers.browser import WAIT_S, console, save_screenshot, settings_in, wait_for

HOST_TOKEN = "browser-host-token-5b1e"
OPERATOR_TOKEN = "browser-operator-token-c9d4"
OPERATOR_NAME = "Ada Oncall"
RETRY_REASON = "moved the directory out of the blob's way (OPS-17)"
HOSTILE_NAME = "<img src=x onerror=alert(1)>.txt"  # no '/': a valid attachment name
SECRET = "S3CR3T-browser-body"
WHO = {"actor": "ops@example.org", "reason": "the user asked"}
FROZEN_WORKER = "frozen-host:4242:c0ffee"


# -- the database, prepared before the server starts ---------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    incomplete: str
    blob_id: str  # the incomplete purge's blob, whose file could not be unlinked
    complete: str
    conversation: str
    held: str
    hold: str  # a legal hold on c-fine and c-kept, placed last: it cleans nothing
    error_text: str
    obstacle: Path  # the directory standing where the incomplete purge's blob file was


def settle(pk: purgekeeper.Purgekeeper, purge_id: str) -> purgekeeper.PurgeStatus:
    return helpers.settle(pk, purge_id, policy=runner.Policy(), timeout_s=WAIT_S)


def purge_event(pk: purgekeeper.Purgekeeper, conversation_id: str, *, name: str) -> tuple[str, purgekeeper.Event]:
    pk.create_conversation(conversation_id)
    attachment = NewAttachment.file(f"{SECRET} bytes".encode(), name=name)
    event = pk.ingest_event(conversation_id, author="ada", body=SECRET, attachments=[attachment])
    scope = EventScope(event_ids=[event.id])
    purge_id = pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO).purge_id
    return purge_id, event


def break_blob_file(pk: purgekeeper.Purgekeeper, blob_id: str) -> Path:
    """A real fault: the blob's file becomes a non-empty directory, so unlink always fails."""
    with pk.db.read() as conn:
        kind, relative = conn.execute(text("SELECT kind, path FROM blobs WHERE id = :id"), {"id": blob_id}).one()
    path = pk.blobs.root(kind) / relative
    path.unlink()
    path.mkdir()
    (path / "in-the-way").write_text("not content")
    return path


def hold_bodies_step(pk: purgekeeper.Purgekeeper, purge_id: str) -> None:
    """A worker claims the purge's bodies step and freezes: its lease runs for an hour."""
    [bodies] = [step.id for step in pk.status(purge_id).steps if step.kind == "bodies"]
    claim = pk.db.transact(lambda conn: steps.claim(conn, bodies, owner=FROZEN_WORKER, lease=dt.timedelta(hours=1)))
    assert claim is not None


def prepare(settings: Settings) -> Prepared:
    with purgekeeper.open(
        settings.database_url,
        blob_root=settings.blob_root,
        file_root=settings.file_root,
        memory_roots=settings.memory_roots,
        checkpoint_dir=settings.checkpoint_dir,
        workers="none",
    ) as pk:
        complete, _ = purge_event(pk, "c-fine", name="fine.txt")
        assert settle(pk, complete).status == "complete"
        pk.create_conversation("c-whole")
        conversation = pk.purge_conversation("c-whole", **WHO).purge_id
        assert settle(pk, conversation).status == "complete"
        held, _ = purge_event(pk, "c-held", name="held.txt")
        hold_bodies_step(pk, held)
        incomplete, event = purge_event(pk, "c-broken", name=HOSTILE_NAME)
        obstacle = break_blob_file(pk, event.attachments[0].blob_id)
        with pk.db.write() as conn:
            conn.execute(text("UPDATE cleanup_steps SET max_attempts = 1 WHERE purge_id = :p"), {"p": incomplete})
        status = settle(pk, incomplete)
        hold = pk.place_hold("h-case", conversation_ids=["c-fine", "c-kept"], authors=["grace"], **WHO).purge_id
    failed = next(step for step in status.steps if step.kind == "attachments")
    assert (status.status, failed.status) == ("incomplete", "incomplete")
    # the error names the blob, never the file's path: that holds the purged attachment's name
    assert failed.last_error is not None and HOSTILE_NAME not in failed.last_error
    assert "could not unlink the file of blob" in failed.last_error
    blob_id = event.attachments[0].blob_id
    return Prepared(incomplete, blob_id, complete, conversation, held, hold, failed.last_error, obstacle)


# -- the server ----------------------------------------------------------------------------------------


@pytest.fixture
def prepared(data_dir: Path) -> Prepared:
    return prepare(settings_in(data_dir))


@pytest.fixture
def server(prepared: Prepared, data_dir: Path, tmp_path: Path) -> Iterator[served.Served]:
    with console(
        data_dir,
        tmp_path,
        sweep_interval="0.5",
        PURGEKEEPER_API_TOKEN=HOST_TOKEN,
        PURGEKEEPER_OPERATOR_TOKEN=OPERATOR_TOKEN,
    ) as running:
        yield running


def by_id(driver: Any, element_id: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, element_id)


def sign_in(driver: Any, token: str, name: str = OPERATOR_NAME) -> None:
    for field, value in (("name", name), ("token", token)):
        box = by_id(driver, field)
        box.clear()
        box.send_keys(value)
    driver.find_element("css selector", "#sign-in button[type=submit]").click()


def has_refresh(driver: Any) -> bool:
    return bool(driver.execute_script("return document.querySelector('meta[http-equiv=refresh]') !== null"))


def reloads_by_itself(driver: Any, ready: str) -> None:
    """The marker set on this document is gone once the page has reloaded itself."""
    driver.execute_script("document.documentElement.dataset.seen = 'before-refresh'")
    wait_for(
        lambda: driver.execute_script("return document.documentElement.dataset.seen") is None,
        "the page to reload itself",
        timeout=12.0,
    )
    wait_for(lambda: by_id(driver, ready), "the reloaded page")


def listed(driver: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    rows = by_id(driver, "recent").find_elements(By.CSS_SELECTOR, "tr.purge")
    return [row.get_attribute("id").removeprefix("purge-") for row in rows]


# -- the walk-through -----------------------------------------------------------------------------------


def test_an_operator_signs_in_filters_opens_retries_and_sees_the_audit_row(
    browser: Any, server: served.Served, prepared: Prepared
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(f"{server.url}/status")
    assert "sign in" in browser.title
    assert by_id(browser, "token-hint").text == (
        "The console takes the operator token: it is PURGEKEEPER_OPERATOR_TOKEN in the server's environment."
    )
    save_screenshot(browser, "console-sign-in.png")
    sign_in(browser, HOST_TOKEN)  # the host token does not operate when an operator token is set
    alert = wait_for(lambda: browser.find_element(By.CSS_SELECTOR, ".login-error"), "the sign-in error")
    assert alert.text == "That token is not valid."
    assert browser.get_cookies() == []

    sign_in(browser, OPERATOR_TOKEN)
    wait_for(lambda: by_id(browser, "summary"), "the overview")
    assert browser.current_url == f"{server.url}/status"
    assert by_id(browser, "operator").text == f"Signed in as {OPERATOR_NAME}"
    [cookie] = browser.get_cookies()
    assert cookie["name"] == COOKIE_NAME and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/status" and OPERATOR_TOKEN not in cookie["value"]
    assert browser.execute_script("return document.cookie") == ""  # HttpOnly: no script can read it

    failed = by_id(browser, "attention").find_element(By.ID, f"purge-{prepared.incomplete}")
    assert failed.tag_name == "tr" and "incomplete" in failed.get_attribute("class").split()
    assert failed.find_element(By.CSS_SELECTOR, ".badge.incomplete").text == "INCOMPLETE"
    assert failed.find_element(By.CSS_SELECTOR, "td.steps-done").text == "1/2"
    error = failed.find_element(By.CSS_SELECTOR, "td.last-error .error-text")
    assert error.get_attribute("textContent") == error.get_attribute("title") == prepared.error_text  # as text
    assert HOSTILE_NAME not in error.get_attribute("textContent") and error.text.startswith("IsADirectoryError: ")
    row_height = failed.size["height"]
    assert row_height < 60, row_height  # one line: a long error is cut with an ellipsis, whole in its title
    assert browser.find_elements(By.TAG_NAME, "img") == []  # the name injected nothing
    assert browser.find_elements(By.TAG_NAME, "script") == []
    accepted = failed.find_element(By.CSS_SELECTOR, "td.age time")
    assert accepted.text == "now" or accepted.text.endswith(" ago")
    assert accepted.get_attribute("title").endswith("Z")
    assert by_id(browser, "incomplete-count").text == "1"
    assert by_id(browser, "messaging").text == "available"
    body = browser.find_element(By.TAG_NAME, "body").text
    assert SECRET not in body and WHO["actor"] not in body and WHO["reason"] not in body
    save_screenshot(browser, "console-overview.png")

    # Filter: incomplete content purges only.
    Select(by_id(browser, "filter-status")).select_by_value("incomplete")
    Select(by_id(browser, "filter-kind")).select_by_value("content")
    by_id(browser, "apply-filters").click()
    wait_for(lambda: "status=incomplete" in browser.current_url, "the filtered overview")
    assert "kind=content" in browser.current_url
    assert listed(browser) == [prepared.incomplete]
    assert browser.find_elements(By.ID, "attention") == []
    save_screenshot(browser, "console-filtered.png")

    # Find by a conversation: two purges name c-fine; open the hold's page from the list.
    by_id(browser, "search-query").send_keys("c-fine")
    by_id(browser, "search-submit").click()
    wait_for(lambda: by_id(browser, "results"), "the search results")
    found = browser.find_elements(By.CSS_SELECTOR, "#found-purges tr.purge")
    assert [row.get_attribute("id") for row in found] == [f"purge-{prepared.hold}", f"purge-{prepared.complete}"]
    assert found[0].find_element(By.CSS_SELECTOR, "td.steps-done").text == "no cleanup"
    save_screenshot(browser, "console-search.png")
    found[0].find_element(By.CSS_SELECTOR, "a.purge-link").click()
    wait_for(lambda: by_id(browser, "purge-title"), "the hold's page")
    assert by_id(browser, "touched-conversations").text == "c-fine, c-kept"
    assert (by_id(browser, "touched-authors").text, by_id(browser, "touched-hold").text) == ("grace", "h-case")
    said = by_id(browser, "no-steps").text
    assert said == "Nothing to clean up: this row (legal hold h-case placed) removes nothing itself."
    save_screenshot(browser, "console-hold.png")

    # Find the purge by the start of its id: the one match opens its page.
    search = by_id(browser, "search-query")
    search.send_keys(prepared.incomplete[:8])
    by_id(browser, "search-submit").click()
    # the hold's page has a purge-title too: wait for the new page's address, then its title
    expected = f"{server.url}/status/purges/{prepared.incomplete}"
    wait_for(lambda: browser.current_url == expected, "the purge's page")
    wait_for(lambda: by_id(browser, "purge-title"), "the purge's title")
    touched = {
        term.text: term.find_element(By.XPATH, "following-sibling::dd[1]").text
        for term in by_id(browser, "touched").find_elements(By.TAG_NAME, "dt")
    }
    assert touched == {"Conversations": "c-broken", "Events": "1 fenced so far", "Attachments": "1 on those events"}
    [where] = browser.find_elements(By.CSS_SELECTOR, ".where")  # once, above the steps (issue 34)
    blob = prepared.blob_id
    assert where.text == f"attachments: the file root (PURGEKEEPER_FILE_ROOT), files/{blob[:2]}/{blob}"
    assert browser.find_element(By.ID, "where-to-act").find_element(By.TAG_NAME, "h3").text == "Where to act"
    assert "onerror" not in browser.page_source  # the attachment's name is nowhere on the page
    assert by_id(browser, "purge-status").text == "incomplete"
    attempt = browser.find_element(By.CSS_SELECTOR, "#attempt-rows tr.attempt.incomplete")
    assert attempt.find_element(By.CSS_SELECTOR, ".error-text").text == prepared.error_text
    assert by_id(browser, "audit").text.endswith("No operator has acted on this purge.")
    assert not has_refresh(browser)  # the retry form is never wiped by a reload
    assert browser.find_elements(By.TAG_NAME, "img") == []
    save_screenshot(browser, "console-purge.png")

    # Clear the fault, then retry with a reason.
    shutil.rmtree(prepared.obstacle)
    by_id(browser, "reason").send_keys(RETRY_REASON)
    by_id(browser, "retry-submit").click()
    wait_for(lambda: by_id(browser, "notice"), "the retry's notice")
    assert browser.current_url == f"{server.url}/status/purges/{prepared.incomplete}?retried=1"
    [row] = browser.find_elements(By.CSS_SELECTOR, "#audit-rows tr.audit")
    assert row.find_element(By.CSS_SELECTOR, ".audit-operator").text == OPERATOR_NAME
    assert row.find_element(By.CSS_SELECTOR, ".audit-reason").text == RETRY_REASON
    assert row.find_element(By.TAG_NAME, "td").text == "retry"
    wait_for(
        lambda: browser.refresh() or by_id(browser, "purge-status").text == "complete",
        "the retried purge to complete",
    )
    assert browser.find_elements(By.CSS_SELECTOR, "#attempt-rows tr.attempt.done")
    rounds = {
        (row.get_attribute("data-round"), row.get_attribute("data-attempt"), row.get_attribute("class"))
        for row in browser.find_elements(By.CSS_SELECTOR, "#attempt-rows tr.attempt[data-step]")
        if row.find_element(By.TAG_NAME, "td").text == "attachments"
    }
    assert rounds == {("1", "1", "attempt incomplete"), ("2", "1", "attempt done")}  # never "attempt 1" twice
    save_screenshot(browser, "console-retried.png")

    # The workers view: the frozen worker and the step it holds.
    by_id(browser, "nav-workers").click()
    wait_for(lambda: by_id(browser, "workers"), "the workers view")
    worker = browser.find_element(By.CSS_SELECTOR, "article.worker")
    assert worker.get_attribute("data-owner") == FROZEN_WORKER
    held = worker.find_element(By.CSS_SELECTOR, "tr.held-step")
    assert held.get_attribute("data-kind") == "bodies"
    expires = held.find_element(By.TAG_NAME, "time")
    assert expires.text.startswith("in ") and expires.get_attribute("title").endswith("Z")
    save_screenshot(browser, "console-workers.png")

    # Pause the refresh, then resume it.
    assert has_refresh(browser)
    by_id(browser, "refresh-toggle").click()
    wait_for(lambda: "refresh=off" in browser.current_url, "the paused view")
    assert not has_refresh(browser) and by_id(browser, "refresh-state").text == "Refresh paused."
    by_id(browser, "refresh-toggle").click()
    wait_for(lambda: "refresh=off" not in browser.current_url, "the resumed view")
    reloads_by_itself(browser, "workers")

    browser.find_element(By.CSS_SELECTOR, "tr.held-step a").click()  # the held step's purge
    wait_for(lambda: by_id(browser, "purge-title"), "the held purge's page")
    owner = browser.find_element(By.CSS_SELECTOR, "tr.step[data-kind=bodies] .lease-owner")
    assert owner.text == FROZEN_WORKER

    by_id(browser, "sign-out").click()
    wait_for(lambda: by_id(browser, "token"), "the sign-in form after signing out")
    assert browser.get_cookies() == []
    assert prepared.incomplete not in browser.page_source


def test_the_server_answers_without_a_browser_too(server: served.Served, prepared: Prepared) -> None:
    """The same process, over plain HTTP: /status needs the operator, /metrics counts the purge."""
    assert httpx.get(f"{server.url}/status").status_code == 401
    operator = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    page = httpx.get(f"{server.url}/status", headers=operator)
    assert page.status_code == 200 and prepared.incomplete in page.text
    workers = httpx.get(f"{server.url}/status/workers", headers=operator)
    assert workers.status_code == 200 and FROZEN_WORKER in workers.text
    assert httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {HOST_TOKEN}"}).status_code == 401
    metrics = httpx.get(f"{server.url}/metrics", headers=operator)
    assert metrics.status_code == 200
    assert "purgekeeper_incomplete_purges 1.0" in metrics.text.splitlines()
