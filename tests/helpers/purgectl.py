"""``purgectl`` under test: the CLI run as a process of its own with the test's database and roots in
its environment, independent runs at once, and what the test seeds and counts through the
Python API."""

from __future__ import annotations

import datetime as dt
import functools
import json
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, text

import purgekeeper
from purgekeeper import EventScope
from purgekeeper.schema import steps
from purgekeeper.schema.tables import UtcDateTime
from purgekeeper.workers import runner

Pk = purgekeeper.Purgekeeper
REPOSITORY = Path(__file__).resolve().parents[2]
WHO = ("--actor", "ops@example.org", "--reason", "the user asked")
POLICY = runner.Policy(lease=dt.timedelta(seconds=2), backoff_base=dt.timedelta(milliseconds=10))
LONG_AGO = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
T0 = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Purgectl:
    """Runs ``python -m purgekeeper.commands.cli`` with the test's database and roots in its environment."""

    env: dict[str, str]

    def with_env(self, **extra: str) -> Purgectl:
        return Purgectl({**self.env, **extra})

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "purgekeeper.commands.cli", *args]
        return subprocess.run(command, env=self.env, cwd=REPOSITORY, capture_output=True, text=True, timeout=60)

    def json(self, *args: str, code: int = 0) -> Any:
        done = self.run(*args, "--json")
        assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
        document = json.loads(done.stdout)  # refuses a second document ("Extra data")
        assert done.stdout.count("\n") == 1, done.stdout
        return document

    def error(self, code: int, error: str, *args: str) -> dict[str, Any]:
        document = self.json(*args, code=code)
        assert document["error"] == error, document
        assert isinstance(document["detail"], str) and document["detail"]
        return dict(document)

    def errors(self, code: int, error: str, *runs: tuple[str, ...]) -> list[dict[str, Any]]:
        """Several independent refusals, run at once."""
        return concurrently(*(functools.partial(self.error, code, error, *args) for args in runs))

    def text(self, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = self.run(*args)
        assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
        return done


def concurrently(*calls: Callable[[], Any]) -> list[Any]:
    """Independent runs at once: each start of the interpreter is the slow part."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


def count(pk: Pk, table: str) -> int:
    with pk.db.read() as conn:
        return int(conn.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one())


def written(pk: Pk) -> tuple[int, int, int]:
    """What an acceptance writes: ledger rows, tombstones and cleanup steps."""
    return count(pk, "purge_ledger"), count(pk, "tombstones"), count(pk, "cleanup_steps")


def seed(pk: Pk) -> None:
    """c1: ada at 12:00 and 13:00, bob at 14:00."""
    pk.create_conversation("c1")
    for hour, (event_id, author) in enumerate([("e1", "ada"), ("e2", "ada"), ("e3", "bob")]):
        pk.ingest_event(
            "c1",
            author=author,
            body=f"body of {event_id}",
            event_id=event_id,
            occurred_at=T0 + dt.timedelta(hours=hour),
        )


def purge_events(pk: Pk, *event_ids: str) -> str:
    scope = EventScope(event_ids=event_ids)
    digest = pk.preview_purge(scope).scope_digest
    return pk.confirm_purge(scope, scope_digest=digest, actor="ops@example.org", reason="seeded").purge_id


def make_incomplete(pk: Pk, purge_id: str) -> None:
    """Each step's only attempt dies (its lease runs out unfinished): the steps end incomplete."""
    for step in pk.status(purge_id).steps:
        with pk.db.write() as conn:
            conn.execute(text("UPDATE cleanup_steps SET max_attempts = 1 WHERE id = :id"), {"id": step.id})
        claim = functools.partial(steps.claim, step_id=step.id, owner="dies", lease=POLICY.lease)
        assert pk.db.transact(claim)
        expire = text("UPDATE cleanup_steps SET lease_expires_at = :past WHERE id = :id").bindparams(
            bindparam("past", type_=UtcDateTime())
        )
        with pk.db.write() as conn:
            conn.execute(expire, {"past": LONG_AGO, "id": step.id})
        runner.run_step(pk.step_context(), step.id, policy=POLICY)
    assert pk.status(purge_id).status == "incomplete"
