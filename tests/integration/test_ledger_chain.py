"""The ledger chain: gapless seq under the head lock, hashes over canonical JSON from a genesis
of zeros, verification that finds tampering, gaps and broken links, and a chain that never
forks under concurrent confirmations. Both backends."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import threading
from typing import Any

import pytest
from sqlalchemy import Connection, text

import purgekeeper
from purgekeeper import EventScope
from purgekeeper.schema import ledger
from purgekeeper.schema.db import Database
from tests.helpers.factories import conversation

Pk = purgekeeper.Purgekeeper


def accept(pk: Pk, event_ids: list[str]) -> purgekeeper.Acceptance:
    scope = EventScope(event_ids=event_ids)
    preview = pk.preview_purge(scope)
    return pk.confirm_purge(scope, scope_digest=preview.scope_digest, actor="op", reason="chain test")


@pytest.fixture
def chain(pk: Pk) -> Pk:
    """Five accepted purges of different kinds."""
    conversation(pk, "c1", events=3, prefix="e")
    pk.create_conversation("ch", kind="channel")
    accept(pk, ["e0"])
    accept(pk, ["e1", "e2"])
    pk.purge_conversation("c1", actor="op", reason="all of it")
    pk.delete_channel("ch", actor="op", reason="closing")
    pk.purge_conversation("never-existed", actor="op", reason="reserve it")
    return pk


def rows(pk: Pk) -> list[dict[str, Any]]:
    with pk.db.read() as conn:
        return [dict(row) for row in conn.execute(text("SELECT * FROM purge_ledger ORDER BY seq")).mappings()]


def as_utc(value: Any) -> dt.datetime:
    """SQLite hands raw SQL a naive UTC text; PostgreSQL an aware datetime."""
    if isinstance(value, str):
        return dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def test_rows_chain_from_genesis_with_the_pinned_hash(chain: Pk) -> None:
    entries = rows(chain)
    assert [row["seq"] for row in entries] == [1, 2, 3, 4, 5]
    assert entries[0]["prev_hash"] == "0" * 64
    for before, row in zip([None, *entries], entries, strict=False):
        if before is not None:
            assert row["prev_hash"] == before["row_hash"]
        fields = {name: row[name] for name in ledger.HASHED_FIELDS}
        fields["selectors"] = json.loads(row["selectors"])
        fields["accepted_at"] = ledger.utc_text(as_utc(row["accepted_at"]))
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert fields["accepted_at"].endswith("Z") and len(fields["accepted_at"]) == 27
        assert hashlib.sha256((row["prev_hash"] + canonical).encode()).hexdigest() == row["row_hash"]
    report = chain.verify_ledger()
    assert (report.ok, report.rows, report.head_hash, report.problems) == (True, 5, entries[-1]["row_hash"], ())
    assert [row["kind"] for row in entries] == ["content", "content", "conversation", "channel", "conversation"]


@pytest.fixture
def tamper(chain: Pk) -> Any:
    """Run SQL with the append-only triggers out of the way, committed: an attacker with the
    database password, not a purgekeeper client. (The test database is thrown away.)"""
    db: Database = chain.db

    def run(sql: str) -> None:
        with db.engine.connect() as conn, conn.begin():
            if db.is_sqlite:
                conn.execute(text("DROP TRIGGER IF EXISTS pk_purge_ledger_no_update"))
                conn.execute(text("DROP TRIGGER IF EXISTS pk_purge_ledger_no_delete"))
                conn.execute(text("DROP TRIGGER IF EXISTS pk_purge_ledger_chain"))
            else:
                conn.execute(text("ALTER TABLE purge_ledger DISABLE TRIGGER USER"))
            conn.execute(text(sql))

    return run


def expect_problem(pk: Pk, fragment: str) -> tuple[str, ...]:
    report = pk.verify_ledger()
    assert not report.ok
    assert any(fragment in problem for problem in report.problems), report.problems
    return report.problems


def test_verify_finds_a_tampered_row(chain: Pk, tamper: Any) -> None:
    tamper("UPDATE purge_ledger SET reason = 'nothing happened' WHERE seq = 2")
    expect_problem(chain, "tampered row at seq 2")


def test_verify_finds_a_gap(chain: Pk, tamper: Any) -> None:
    tamper("DELETE FROM purge_ledger WHERE seq = 3")
    expect_problem(chain, "gap: expected seq 3, found 4")


def test_verify_finds_a_broken_link(chain: Pk, tamper: Any) -> None:
    tamper(f"UPDATE purge_ledger SET prev_hash = '{'f' * 64}' WHERE seq = 4")
    expect_problem(chain, "broken link at seq 4")


def test_verify_finds_a_reordered_chain(chain: Pk, tamper: Any) -> None:
    tamper("UPDATE purge_ledger SET seq = 99 WHERE seq = 2")
    tamper("UPDATE purge_ledger SET seq = 2 WHERE seq = 3")
    tamper("UPDATE purge_ledger SET seq = 3 WHERE seq = 99")
    expect_problem(chain, "broken link at seq 2")


def test_verify_reports_a_bounded_number_of_problems(chain: Pk, tamper: Any) -> None:
    for i in range(40):
        tamper(
            "INSERT INTO purge_ledger (seq, purge_id, kind, selectors, scope_digest, actor, reason, accepted_at, "
            f"prev_hash, row_hash) VALUES ({100 + 2 * i}, 'forged-{i}', 'content', '{{}}', 'x', 'a', 'r', "
            "CURRENT_TIMESTAMP, 'bad', 'bad')"
        )
    problems = expect_problem(chain, "gap")
    assert len(problems) == ledger.MAX_PROBLEMS


def test_concurrent_confirmations_never_fork_or_lose_a_fence(pk: Pk) -> None:
    """8 threads confirm overlapping scopes while 2 threads ingest into the same conversations."""
    for c in range(4):
        pk.create_conversation(f"c{c}")
    ids = [f"e{i:02d}" for i in range(40)]
    for i, event_id in enumerate(ids):
        pk.ingest_event(f"c{i % 4}", author="ada", body=f"secret {event_id}", event_id=event_id)
    accepted: list[purgekeeper.Acceptance] = []
    gave_up: list[list[str]] = []  # windows whose every attempt was stale
    errors: list[BaseException] = []
    stop = threading.Event()
    lock = threading.Lock()

    def confirmer(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(6):
            window = rng.sample(ids, 5)
            for _attempt in range(5):
                try:
                    acceptance = accept(pk, window)
                except purgekeeper.StaleConfirmation:
                    continue
                except BaseException as exc:
                    errors.append(exc)
                    return
                with lock:
                    accepted.append(acceptance)
                break
            else:
                with lock:
                    gave_up.append(window)

    def ingester(n: int) -> None:
        i = 0
        while not stop.is_set():
            pk.ingest_event(f"c{i % 4}", author="bob", body="fresh", event_id=f"new-{n}-{i}")
            i += 1

    ingesters = [threading.Thread(target=ingester, args=(n,)) for n in range(2)]
    confirmers = [threading.Thread(target=confirmer, args=(seed,)) for seed in range(8)]
    for thread in ingesters + confirmers:
        thread.start()
    for thread in confirmers:
        thread.join(120)
    stop.set()
    for thread in ingesters:
        thread.join(30)
    assert not errors, errors
    # not vacuous (issue 11, case 19): most windows went through, many of them as new purges
    assert len(accepted) + len(gave_up) == 8 * 6 and len(accepted) >= 8 * 6 * 3 // 4, (len(accepted), gave_up)
    report = pk.verify_ledger()
    assert report.ok, report.problems
    fresh = [a for a in accepted if a.outcome == "accepted"]
    assert len(fresh) >= 8, len(fresh)
    assert sorted(a.ledger_seq for a in fresh) == list(range(1, report.rows + 1))
    with pk.db.read() as conn:
        fenced = _fenced_by_ledger(conn)
        tombstoned = {row.id: row.purge_id for row in conn.execute(text("SELECT id, purge_id FROM tombstones"))}
    for event_id, purge_id in fenced.items():
        assert tombstoned.get(event_id) == purge_id, f"{event_id} is in the ledger but its fence is missing"
    assert len(fenced) >= len(ids) // 2, len(fenced)
    readable = {e.id for c in range(4) for e in pk.read_conversation(f"c{c}")}
    assert not readable & set(fenced), "a fenced event is readable"
    assert set(ids) - set(fenced) <= readable


def _fenced_by_ledger(conn: Connection) -> dict[str, str]:
    fenced: dict[str, str] = {}
    for row in conn.execute(text("SELECT purge_id, selectors FROM purge_ledger WHERE kind = 'content'")):
        for event_id in json.loads(row.selectors)["event_ids"]:
            assert event_id not in fenced, f"{event_id} was fenced twice"
            fenced[event_id] = row.purge_id
    return fenced
