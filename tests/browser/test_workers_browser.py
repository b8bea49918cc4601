"""The console's Workers view in a real browser: headless Chromium (selenium) against
``purgectl serve``, whose embedded worker and scheduler beat as one ``embedded`` process.

Before the server starts, the SQLite database gets the heartbeats of processes a deployment
would show (beaten from this test process, with a 30 s interval, so they stay alive through
the test): a worker running a purge's bodies step, an idle worker, a worker that stopped
beating ten minutes ago (dead) and a scheduler that stopped cleanly.

The browser signs in, opens the Workers view and finds every process with its host, pid, role,
queues, threads, times and held step, the dead one flagged, and the lease linked to the worker
process that holds it. The screenshot goes to ``$PK_TEST_ARTIFACTS`` (default
``<repo>/test-artifacts/``) as ``workers.png``. Without Chromium or chromedriver the test fails
on CI (``CI`` set) and skips locally.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import purgekeeper
from purgekeeper.commands.settings import Settings
from purgekeeper.schema.states import WorkerRole
from tests.helpers import served
from tests.helpers.browser import console, save_screenshot, settings_in, wait_for
from tests.helpers.console import claim, purge_new_event
from tests.helpers.heartbeats import heartbeat, seen_ago

OPERATOR_TOKEN = "workers-operator-token-3e8a"
OWNER = "worker-host:4242:c0ffee"  # the lease owner of the busy worker's attempt


@dataclass(frozen=True)
class Prepared:
    purge_id: str
    busy: str
    idle: str
    dead: str
    stopped: str


def prepare(settings: Settings) -> Prepared:
    with purgekeeper.open(
        settings.database_url,
        blob_root=settings.blob_root,
        file_root=settings.file_root,
        memory_roots=settings.memory_roots,
        checkpoint_dir=settings.checkpoint_dir,
        workers="none",
    ) as pk:
        purge_id = purge_new_event(pk, "c-busy")
        [bodies] = [step.id for step in pk.status(purge_id).steps]
        claim(pk, bodies, OWNER)
        busy, idle = heartbeat(pk, holding=[OWNER]), heartbeat(pk, threads=8)
        dead, stopped = heartbeat(pk, threads=2), heartbeat(pk, WorkerRole.SCHEDULER)
        for beats in (busy, idle, dead, stopped):
            assert beats.beat()
        seen_ago(pk, dead.process.id, dt.timedelta(minutes=10))
        stopped.stop()
    return Prepared(purge_id, busy.process.id, idle.process.id, dead.process.id, stopped.process.id)


@pytest.fixture
def prepared(data_dir: Path) -> Prepared:
    return prepare(settings_in(data_dir))


@pytest.fixture
def server(prepared: Prepared, data_dir: Path, tmp_path: Path) -> Iterator[served.Served]:
    with console(data_dir, tmp_path, sweep_interval="1", PURGEKEEPER_OPERATOR_TOKEN=OPERATOR_TOKEN) as running:
        yield running


def cells(row: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]


def test_the_workers_view_lists_every_process_and_flags_the_dead_one(
    browser: Any, server: served.Served, prepared: Prepared
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{server.url}/status/workers?refresh=off")
    for field, value in (("name", "Ada Oncall"), ("token", OPERATOR_TOKEN)):
        browser.find_element(By.ID, field).send_keys(value)
    browser.find_element(By.CSS_SELECTOR, "#sign-in button[type=submit]").click()
    wait_for(lambda: browser.find_element(By.ID, "nav-workers"), "the overview")
    browser.find_element(By.ID, "nav-workers").click()
    rows = wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#processes tr.process"), "the processes")

    shown = {row.get_attribute("data-process"): row for row in rows}
    [embedded] = [row for row in rows if row.get_attribute("data-role") == "embedded"]
    here, pid = socket.gethostname(), str(os.getpid())
    assert cells(embedded)[:6] == ["alive", "embedded", here, str(server.process.pid), "purgekeeper-cleanup", "2"]
    busy = cells(shown[prepared.busy])
    assert busy[:6] == ["alive", "worker", here, pid, "purgekeeper-cleanup", "4"]
    assert busy[8].split() == [prepared.purge_id, "bodies,", "attempt", "1"]  # the purge id, then the step
    idle = cells(shown[prepared.idle])
    assert (idle[0], idle[5], idle[8]) == ("alive", "8", "idle")
    dead = shown[prepared.dead]
    assert dead.get_attribute("data-state") == "dead"
    assert dead.find_element(By.CSS_SELECTOR, "td.state .bad").text == "DEAD"
    assert cells(dead)[7].startswith("10 min ago, dead since ")
    assert cells(shown[prepared.stopped])[:2] == ["stopped", "scheduler"]
    counts = browser.find_element(By.ID, "alive-counts").text
    assert counts == "Alive now: 2 workers, 0 schedulers, 1 embedded."
    assert browser.find_elements(By.ID, "nobody-to-work") == []
    lease = browser.find_element(By.CSS_SELECTOR, f"article.worker[data-owner='{OWNER}'] .lease-process")
    assert lease.text == f"Run by the worker process {here} pid {pid}."
    save_screenshot(browser, "workers.png", min_height=600)

    shown[prepared.busy].find_element(By.CSS_SELECTOR, ".holds a").click()
    wait_for(lambda: browser.find_element(By.ID, "purge-title"), "the held purge's page")
    assert browser.current_url == f"{server.url}/status/purges/{prepared.purge_id}"
