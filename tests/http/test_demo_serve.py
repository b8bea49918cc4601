"""``purgectl serve --demo``, a real process on SQLite, shows an operator's day: one purge
complete, one retrying (its next attempt far off) and one incomplete, both failing for real on
an attachment's file that a directory took the place of. Started again on the same data
directory, it changes nothing. The statuses are read through ``GET /v1/purges``."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import httpx
import pytest

import purgekeeper
from purgekeeper.commands.http.server import open_for_serving, seed_demo
from purgekeeper.commands.settings import Settings
from tests.helpers import served

TOKEN = "demo-host-token-4d1f"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def purges(server: served.Served) -> dict[str, Any]:
    answer = httpx.get(f"{server.url}/v1/purges", headers=AUTH, timeout=10)
    assert answer.status_code == 200, answer.text
    return {purge["purge_id"]: purge for purge in answer.json()["purges"]}


def attachments_step(purge: dict[str, Any]) -> dict[str, Any]:
    return next(step for step in purge["steps"] if step["kind"] == "attachments")


def by_status(listed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    statuses = {purge["status"]: purge for purge in listed.values()}
    assert sorted(statuses) == ["cleaning", "complete", "incomplete"], listed
    return statuses


def test_serve_demo_seeds_a_complete_a_retrying_and_an_incomplete_purge(tmp_path: Path) -> None:
    env = served.clean_environment(PURGEKEEPER_DATA_DIR=str(tmp_path / "data"), PURGEKEEPER_API_TOKEN=TOKEN)
    with served.serving(env, tmp_path, "--demo") as server:
        first = purges(server)
        answered_at = dt.datetime.now(dt.UTC)
        assert "demo data ready" in server.output()
    statuses = by_status(first)
    assert all(step["status"] == "done" for step in statuses["complete"]["steps"])

    retrying = attachments_step(statuses["cleaning"])
    assert (retrying["status"], retrying["attempts"]) == ("retrying", 1), retrying
    next_attempt = dt.datetime.fromisoformat(retrying["next_attempt_at"])
    assert next_attempt - answered_at > dt.timedelta(minutes=20), retrying  # the backoff is 30 to 60 minutes
    incomplete = attachments_step(statuses["incomplete"])
    assert incomplete["status"] == "incomplete" and incomplete["attempts"] == incomplete["max_attempts"] > 1
    for step in (retrying, incomplete):
        assert "could not unlink the file of blob" in step["last_error"], step

    with served.serving(env, tmp_path, "--demo") as server:  # again: nothing new, nothing undone
        again = purges(server)
        verified = httpx.get(f"{server.url}/v1/ledger/verify", headers=AUTH, timeout=10).json()
    assert {p: purge["status"] for p, purge in again.items()} == {p: purge["status"] for p, purge in first.items()}
    assert attachments_step(again[statuses["cleaning"]["purge_id"]])["attempts"] == 1
    assert verified["ok"] and verified["rows"] == 3, verified


def test_serving_opens_with_the_settings_it_was_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve`` reads the environment once, at the edge: the handle it opens, and the seeding
    handle of ``--demo``, take the settings it was given."""
    settings = Settings.from_env({"PURGEKEEPER_DATA_DIR": str(tmp_path / "data")})

    def refuse(*_: object) -> Settings:
        raise AssertionError("the environment was read again")

    monkeypatch.setattr(Settings, "from_env", classmethod(refuse))
    with purgekeeper.open(settings=settings, workers="none") as seeding:
        summary = seed_demo(seeding, settings)
    pk = open_for_serving(settings)
    try:
        assert pk.settings == settings
        assert {p.purge_id for p in pk.list_purges().purges} == set(summary["purges"].values())
    finally:
        pk.close()
