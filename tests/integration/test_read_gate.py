"""The read gate, on SQLite and on PostgreSQL: content reads and writes are closed while the
ledger cannot be trusted, and the operator commands keep working.

The restores are real: on SQLite a ``VACUUM INTO`` copy is put back over the database file;
on PostgreSQL the database is re-created from a ``CREATE DATABASE ... TEMPLATE`` copy taken
earlier. The checkpoint directory is outside both, as docs/design.md requires, so it remembers
the purges the restored database forgot. Purged content carries the marker ``SECRET``: no
diagnostic may ever hold it.
"""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.schema import ledger
from purgekeeper.storage import checkpoint, ledger_copy
from tests.helpers import body_of, rows
from tests.helpers.backups import Backups, tracked
from tests.helpers.factories import purge_conversation, purge_events

Pk = purgekeeper.Purgekeeper
Roots = dict[str, Path]

SECRET = "S3CR3T-gated"
WHO = {"actor": "ops@example.org", "reason": "the user asked"}
CRASHED_MERGE = "a restore merge is under way (started 2026-01-01T00:00:00.000000Z); rerun it if it stopped"


# -- backups and restores -------------------------------------------------------------------------


@pytest.fixture
def open_pk(open_pk: Callable[..., Pk], backups: Backups) -> Callable[..., Pk]:
    """conftest's handles, also known to the backups (which close them before a restore)."""
    return tracked(open_pk, backups)


@pytest.fixture
def gated(pk: Pk, backups: Backups) -> Pk:
    backups.handles.append(pk)
    return pk


# -- content and purges -------------------------------------------------------------------------


def seed(pk: Pk) -> dict[str, str]:
    """c-doomed (an event with a body and an attachment, purged later), c-kept, bot b-kept."""
    pk.register_bot("b-kept", name="Kept")
    pk.create_conversation("c-doomed")
    pk.create_conversation("c-kept")
    pk.create_conversation("c-whole")
    doomed = pk.ingest_event(
        "c-doomed",
        author="ada",
        body=f"{SECRET} body",
        event_id="e-doomed",
        provider_event_id="p-doomed",
        attachments=[NewAttachment.cas(f"{SECRET} bytes".encode(), name="a.txt")],
    )
    pk.ingest_event("c-kept", author="bob", body="kept body", event_id="e-kept")
    pk.ingest_event("c-whole", author="cy", body=f"{SECRET} whole", event_id="e-whole")
    digest = pk.preview_purge(EventScope(event_ids=["e-kept"])).scope_digest
    return {"attachment": doomed.attachments[0].id, "digest": digest}


def outside_copy(pk: Pk) -> Path:
    """The ledger's copy in the checkpoint directory: every acceptance wrote its row there."""
    assert (pk.copy.directory / ledger_copy.HEAD_FILE).is_file()
    return pk.copy.directory


def as_before_the_copy(pk: Pk) -> None:
    """The checkpoint directory as the earlier version left it: no copy, version 1 files."""
    shutil.rmtree(pk.copy.directory)


def ledger_rows(pk: Pk) -> int:
    return int(rows(pk, "SELECT COUNT(*) FROM purge_ledger")[0][0])


def restored_behind(pk: Pk, backups: Backups, open_pk: Callable[[], Pk]) -> tuple[Pk, dict[str, Any]]:
    """Purge p-early, back up, purge e-doomed and c-whole (each acceptance adds its row to
    the copy outside), then restore the backup and open a new handle on it."""
    ids = seed(pk)
    ids["early"] = purge_conversation(pk, "c-early")
    backup = backups.take()
    ids["content"] = purge_events(pk, "e-doomed")
    ids["whole"] = purge_conversation(pk, "c-whole")
    ids["checkpoint"] = outside_copy(pk)
    pk.close()
    backups.restore(backup)
    return open_pk(), ids


# -- what a closed gate refuses -----------------------------------------------------------------

CONTENT_CALLS: dict[str, Callable[[Pk, dict[str, Any]], Any]] = {
    "read_conversation": lambda pk, ids: pk.read_conversation("c-kept"),
    "get_conversation": lambda pk, ids: pk.get_conversation("c-kept"),
    "list_conversations": lambda pk, ids: pk.list_conversations(),
    "open_attachment": lambda pk, ids: pk.open_attachment(ids["attachment"]),
    "create_conversation": lambda pk, ids: pk.create_conversation("c-new"),
    "ingest_event": lambda pk, ids: pk.ingest_event("c-kept", author="ada", body="new"),
    "ingest_duplicate": lambda pk, ids: pk.ingest_event(
        "c-doomed", author="ada", body="x", provider_event_id="p-doomed"
    ),
    "place_event": lambda pk, ids: pk.place_event("e-kept", "c-doomed"),
    "register_bot": lambda pk, ids: pk.register_bot("b-new", name="New"),
    "start_run": lambda pk, ids: pk.start_run("c-kept", bot_id="b-kept"),
    "add_derivative": lambda pk, ids: pk.add_derivative("c-kept", kind="summary", payload="p"),
    "preview_purge": lambda pk, ids: pk.preview_purge(EventScope(event_ids=["e-kept"])),
    "confirm_purge": lambda pk, ids: pk.confirm_purge(
        EventScope(event_ids=["e-kept"]), scope_digest=ids["digest"], **WHO
    ),
    "purge_conversation": lambda pk, ids: pk.purge_conversation("c-kept", **WHO),
    "delete_bot": lambda pk, ids: pk.delete_bot("b-kept", **WHO),
    "preview_bot_deletion": lambda pk, ids: pk.preview_bot_deletion("b-kept"),
}


def assert_closed(pk: Pk, ids: dict[str, Any], *must_name: str) -> list[purgekeeper.MessagingUnavailable]:
    """Every content read and write, preview and acceptance raises MessagingUnavailable with
    bounded diagnostics naming ``must_name`` and never content; nothing is written."""
    before = ledger_rows(pk)
    refusals = []
    for name, call in CONTENT_CALLS.items():
        with pytest.raises(purgekeeper.MessagingUnavailable) as refused:
            call(pk, ids)
        error = refused.value
        said = " ".join([str(error), error.detail, *error.diagnostics])
        assert error.diagnostics, name
        assert len(error.diagnostics) <= purgekeeper.MessagingUnavailable.MAX_DIAGNOSTICS, name
        assert SECRET not in said, f"{name}: a diagnostic holds content: {said}"
        for needle in must_name:
            assert needle in said, f"{name}: {needle!r} is not named in {said!r}"
        refusals.append(error)
    assert ledger_rows(pk) == before, "a closed gate accepted a purge"
    assert rows(pk, "SELECT id FROM conversations WHERE id = 'c-new'") == []
    assert rows(pk, "SELECT id FROM bots WHERE id = 'b-new'") == []
    return refusals


def assert_operator_commands_work(pk: Pk, purge_id: str, tmp_path: Path) -> None:
    assert pk.status(purge_id).purge_id == purge_id
    assert purge_id in [p.purge_id for p in pk.list_purges().purges]
    assert pk.verify_ledger().ok
    written = pk.checkpoint_ledger(tmp_path / "operator" / "ledger.jsonl")
    assert ledger_copy.open_source(written.path, pk.database_key).seq == written.seq


# -- tests ----------------------------------------------------------------------------------------


def test_a_fresh_database_is_open(pk: Pk) -> None:
    state = pk.messaging_status()
    assert (state.open, state.problems, state.checkpoint) == (True, (), None)
    seed(pk)
    assert [e.id for e in pk.read_conversation("c-kept")] == ["e-kept"]


def test_the_copy_of_this_very_ledger_keeps_the_gate_open(gated: Pk, open_pk: Callable[[], Pk]) -> None:
    seed(gated)
    purge_events(gated, "e-doomed")
    made = outside_copy(gated)
    fresh = open_pk()
    state = fresh.messaging_status()
    assert (state.open, state.problems, state.checkpoint) == (True, (), made.name)
    assert [e.id for e in fresh.read_conversation("c-kept")] == ["e-kept"]


def test_a_read_whose_snapshot_predates_an_acceptance_and_its_copy_stays_open(gated: Pk) -> None:
    """A content read takes the head in its snapshot, then stats the copy: an acceptance
    committed and copied in between puts the copy one row ahead of that snapshot. That is
    not a restore (the database holds the row), and the read must not close the gate (CI saw
    8 confirming threads close it this way on SQLite)."""
    seed(gated)
    with gated.db.read() as conn:
        head = ledger.read_head(conn)
    purge_events(gated, "e-doomed")  # committed, and its copy written, after that snapshot
    with gated.db.read() as conn:
        gated.gate.check_values(conn, head.seq, head.head_hash, None)
    assert gated.messaging_status().open


def test_a_read_whose_snapshot_is_still_open_when_the_copy_moves_ahead_stays_open(gated: Pk) -> None:
    """The same race, with the read's snapshot still open when the gate looks at the copy (as
    a content read's is): the row at the copy's head is not in that snapshot, and the fresh
    transaction that found it in the database must settle the verdict. CI saw 8 confirming
    threads and 2 ingesting ones on SQLite close the gate with "the ledger differs from its
    copy at seq 6". What was tried: a snapshot taken, an acceptance committed and copied by
    another connection, then the gate asked in that snapshot."""
    seed(gated)
    with gated.db.read() as conn:
        head = ledger.read_head(conn)  # the snapshot (SQLite: from its first read on)
        purge_events(gated, "e-doomed")  # another connection commits, and copies the row out
        gated.gate.check_values(conn, head.seq, head.head_hash, None)
    assert gated.messaging_status(refresh=False).open
    assert [e.id for e in gated.read_conversation("c-kept")] == ["e-kept"]


def test_a_restored_older_database_is_closed_to_content_until_merged(
    gated: Pk, backups: Backups, open_pk: Callable[[], Pk], tmp_path: Path
) -> None:
    restored, ids = restored_behind(gated, backups, open_pk)
    assert body_of(restored, "e-doomed") == f"{SECRET} body", (
        "the restore brought the purged body back (the premise of this test)"
    )
    checkpoint_name = ids["checkpoint"].name
    assert_closed(restored, ids, checkpoint_name, "behind", "seq 1", "seq 3")

    state = restored.messaging_status()
    assert not state.open and state.problems
    assert state.checkpoint == ids["checkpoint"].name
    assert any("behind" in problem and checkpoint_name in problem for problem in state.problems)
    assert SECRET not in " ".join(state.problems)
    assert_operator_commands_work(restored, ids["early"], tmp_path)

    report = restored.merge_ledger(restored.settings.checkpoint_dir)  # the whole directory
    assert (report.appended, report.verbatim) == ((ids["content"], ids["whole"]), 2)
    assert restored.messaging_status().open
    assert [e.id for e in restored.read_conversation("c-doomed")] == []
    assert restored.read_conversation("c-whole") == []
    assert [e.id for e in restored.read_conversation("c-kept")] == ["e-kept"]


def test_a_durable_gate_reason_closes_every_handle_until_cleared(
    pk: Pk, open_pk: Callable[[], Pk], tmp_path: Path
) -> None:
    ids = seed(pk)
    early = purge_conversation(pk, "c-early")
    other = open_pk()
    pk.db.transact(lambda conn: ledger.set_gate(conn, CRASHED_MERGE))

    for handle in (pk, other):
        refusals = assert_closed(handle, ids)
        assert all(CRASHED_MERGE in r.diagnostics for r in refusals)
        assert_operator_commands_work(handle, early, tmp_path)
    fresh = open_pk()
    state = fresh.messaging_status()
    assert not state.open and CRASHED_MERGE in state.problems
    with pytest.raises(purgekeeper.MessagingUnavailable) as refused:
        fresh.read_conversation("c-kept")
    assert CRASHED_MERGE in refused.value.diagnostics

    other.db.transact(lambda conn: ledger.set_gate(conn, None))
    for handle in (pk, other):
        assert [e.id for e in handle.read_conversation("c-kept")] == ["e-kept"]
    assert pk.messaging_status().open


@pytest.mark.parametrize("verdict_taken", ["at-open", "by-messaging-status"])
def test_a_verdict_taken_while_the_gate_was_closed_does_not_outlive_it(
    pk: Pk, open_pk: Callable[[], Pk], verdict_taken: str
) -> None:
    seed(pk)
    pk.db.transact(lambda conn: ledger.set_gate(conn, CRASHED_MERGE))
    if verdict_taken == "at-open":
        during = open_pk()
    else:
        during = pk
        assert not during.messaging_status().open
    with pytest.raises(purgekeeper.MessagingUnavailable):
        during.read_conversation("c-kept")
    open_pk().db.transact(lambda conn: ledger.set_gate(conn, None))
    assert [e.id for e in during.read_conversation("c-kept")] == ["e-kept"]


def test_a_handle_opened_before_a_merge_elsewhere_reopens_after_it(
    gated: Pk, backups: Backups, open_pk: Callable[[], Pk]
) -> None:
    server, ids = restored_behind(gated, backups, open_pk)
    with pytest.raises(purgekeeper.MessagingUnavailable):
        server.read_conversation("c-kept")
    operator = open_pk()
    assert operator.merge_ledger(ids["checkpoint"]).gate.open
    assert [e.id for e in operator.read_conversation("c-kept")] == ["e-kept"]
    assert [e.id for e in server.read_conversation("c-kept")] == ["e-kept"]


def test_a_ledger_head_that_goes_back_underneath_a_running_handle_closes_it(
    gated: Pk, backups: Backups, tmp_path: Path
) -> None:
    """The copy outside says the ledger is behind, and the running handle also notices on its
    own that the head it saw went back."""
    ids = seed(gated)
    early = purge_conversation(gated, "c-early")
    backup = backups.take()
    purge_events(gated, "e-doomed")
    purge_conversation(gated, "c-whole")
    assert [e.id for e in gated.read_conversation("c-kept")] == ["e-kept"]

    backups.restore(backup)
    assert ledger_rows(gated) == 1
    refusals = assert_closed(gated, ids, "went back")
    assert any("seq 3 to 1" in " ".join(r.diagnostics) for r in refusals)
    assert_operator_commands_work(gated, early, tmp_path)
    state = gated.messaging_status(refresh=False)
    assert not state.open and "went back" in state.problems[0]


def test_a_read_whose_snapshot_predates_a_newer_head_this_process_saw_is_no_restore(gated: Pk) -> None:
    """A read and an acceptance at the same moment in one process: the read's statement saw
    the head before the acceptance committed, but the gate had already seen the newer head (an
    acceptance, or a read that began after it). That is no restore: the database still holds
    the newer head. Seen under load by ``bench/interference.py`` as "the ledger head went back
    from seq N to N-1", closing the gate for one call. What was tried: the gate shown the head
    of seq 1 after it saw seq 2, which the database holds."""
    seed(gated)
    purge_conversation(gated, "c-early")
    purge_conversation(gated, "c-later")
    with gated.db.read() as conn:
        now = ledger.read_head(conn)
        before = ledger.entry_at(conn, now.seq - 1)
    assert before is not None
    assert [e.id for e in gated.read_conversation("c-kept")] == ["e-kept"]  # the gate saw the newer head
    with gated.db.read() as conn:
        gated.gate.check_values(conn, before.seq, before.row_hash, None)  # the older snapshot's head
    assert gated.messaging_status(refresh=False).open
    assert [e.id for e in gated.read_conversation("c-kept")] == ["e-kept"]


def test_a_running_handle_that_did_not_see_the_newer_head_closes_after_a_restore_underneath_it(
    gated: Pk, backups: Backups, open_pk: Callable[[], Pk]
) -> None:
    seed(gated)
    backup = backups.take()
    other = open_pk()  # another process accepts the purges; the scheduler writes the checkpoint
    purge_events(other, "e-doomed")
    outside_copy(other)
    backups.restore(backup)
    assert body_of(gated, "e-doomed") == f"{SECRET} body"
    with pytest.raises(purgekeeper.MessagingUnavailable):  # today: [Event(e-doomed, body=SECRET...)]
        gated.read_conversation("c-doomed")


def tamper_first_row(pk: Pk) -> None:
    """Raw SQL that bypasses the append-only triggers: the first row gets another reason."""
    update = "UPDATE purge_ledger SET reason = 'rewritten' WHERE seq = 1"
    with pk.db.write() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("ALTER TABLE purge_ledger DISABLE TRIGGER ALL")
            conn.exec_driver_sql(update)
            conn.exec_driver_sql("ALTER TABLE purge_ledger ENABLE TRIGGER ALL")
        else:
            (sql,) = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'pk_purge_ledger_no_update'"
            ).one()
            conn.exec_driver_sql("DROP TRIGGER pk_purge_ledger_no_update")
            conn.exec_driver_sql(update)
            conn.exec_driver_sql(sql)


def test_a_corrupt_ledger_closes_content(pk: Pk, open_pk: Callable[[], Pk], tmp_path: Path) -> None:
    """Tampering with an old row is found by the audit (a fresh handle's start only makes the
    O(1) check) and by the full check; then the gate is closed and a merge refuses."""
    ids = seed(pk)
    first = purge_conversation(pk, "c-early")
    purge_events(pk, "e-doomed")
    taken_before = pk.checkpoint_ledger(tmp_path / "before.jsonl").path
    tamper_first_row(pk)
    assert rows(pk, "SELECT reason FROM purge_ledger WHERE seq = 1")[0][0] == "rewritten"

    fresh = open_pk()
    fresh.gate.audit_step()  # what the background audit does, a step at a time
    refusals = assert_closed(fresh, ids, "tampered row at seq 1")
    assert any(first in " ".join(r.diagnostics) for r in refusals)
    state = pk.messaging_status()  # the running handle, once it takes the full verdict
    assert not state.open and any("does not verify" in p for p in state.problems)
    assert_closed(pk, ids, "tampered row at seq 1")
    assert pk.status(first).purge_id == first
    assert not pk.verify_ledger().ok
    for full in (False, True):
        with pytest.raises(purgekeeper.MessagingUnavailable):  # a merge does not build on a corrupt ledger
            pk.merge_ledger(taken_before, full=full)
    assert rows(pk, "SELECT gate_reason FROM ledger_head")[0][0] is None


def forged_newer(valid: Path, database_id: str) -> Path:
    """A newer-looking checkpoint of this database that does not verify: a copy of ``valid``
    with one more row, whose hash was not recomputed."""
    data = json.loads(valid.read_text("utf-8"))
    extra = {**data["rows"][-1], "seq": data["head"]["seq"] + 1, "purge_id": "f" * 32}
    extra["prev_hash"] = data["rows"][-1]["row_hash"]
    data["rows"].append(extra)
    data["head"] = {"seq": extra["seq"], "hash": extra["row_hash"]}
    path = valid.parent / f"{database_id}-{extra['seq'] + 7:012d}.json"
    path.write_text(json.dumps(data), "utf-8")
    return path


def version_1_checkpoint(pk: Pk, database_id: str | None = None) -> Path:
    """A checkpoint file as the earlier version wrote them into the checkpoint directory."""
    with pk.db.read() as conn:
        seq = ledger.read_head(conn).seq
    path = pk.settings.checkpoint_dir / f"{database_id or pk.database_key}-{seq:012d}.json"
    return checkpoint.write(pk.db, path).path


def test_before_the_first_copy_a_newer_version_1_checkpoint_that_does_not_verify_is_skipped(
    gated: Pk, backups: Backups, open_pk: Callable[[], Pk], caplog: pytest.LogCaptureFixture
) -> None:
    ids = seed(gated)
    backup = backups.take()
    content = purge_events(gated, "e-doomed")
    as_before_the_copy(gated)
    valid = version_1_checkpoint(gated)
    forged = forged_newer(valid, gated.database_key)
    (valid.parent / f"{gated.database_key}-{999:012d}.json").write_bytes(b'{"format": "purgekeeper-led')

    with caplog.at_level(logging.WARNING, logger="purgekeeper.commands.gate"):
        state = open_pk().messaging_status()
    assert (state.open, state.problems, state.checkpoint) == (True, (), valid.name)
    assert len(state.warnings) == 2 and any(forged.name in w for w in state.warnings)
    assert "skipped a checkpoint that does not verify" in caplog.text

    gated.close()
    backups.restore(backup)
    restored = open_pk()
    state = restored.messaging_status()
    assert not state.open and state.checkpoint == valid.name
    assert any(content in problem and valid.name in problem for problem in state.problems)
    assert all("f" * 32 not in problem for problem in state.problems)
    assert_closed(restored, ids, valid.name, content)
    assert not restored.copy.exists(), "no copy is made that would forget the file's purges"
    with pytest.raises(purgekeeper.InfrastructureError, match="merge it"):
        restored.copy_ledger()
    assert restored.merge_ledger(restored.settings.checkpoint_dir).appended == (content,)
    assert restored.copy_ledger() == 1 and restored.messaging_status().open


def test_ledgers_of_another_database_in_the_same_directory_are_not_compared(
    gated: Pk, backups: Backups, open_pk: Callable[[], Pk]
) -> None:
    """A copy and a version 1 file named after another database id hold a purge this
    database lacks: ignored."""
    seed(gated)
    backup = backups.take()
    purge_events(gated, "e-doomed")
    other = uuid.uuid4().hex
    theirs = version_1_checkpoint(gated, other)
    head = json.loads((outside_copy(gated) / ledger_copy.HEAD_FILE).read_text())
    (outside_copy(gated) / ledger_copy.HEAD_FILE).write_text(json.dumps({**head, "database_id": other}))
    outside_copy(gated).rename(gated.settings.checkpoint_dir / f"{other}{ledger_copy.SUFFIX}")
    gated.close()
    backups.restore(backup)
    restored = open_pk()
    assert checkpoint.read(theirs).seq == 1 and ledger_rows(restored) == 0
    state = restored.messaging_status()
    assert (state.open, state.problems, state.checkpoint) == (True, (), None)
    assert [e.id for e in restored.read_conversation("c-kept")] == ["e-kept"]


# -- found in review ------------------------------------------------------------------------------


def test_a_merge_refuses_while_another_holds_the_merge_lock(pk: Pk, tmp_path: Path) -> None:
    """Two merges at once could reopen reads between one's append and its fences."""
    seed(pk)
    purge_events(pk, "e-doomed")
    own = pk.checkpoint_ledger(tmp_path / "own.json").path
    with pk.db.exclusive("merge") as held:
        assert held
        with pytest.raises(purgekeeper.MessagingUnavailable, match="another merge is under way"):
            pk.merge_ledger(own)
        assert rows(pk, "SELECT gate_reason FROM ledger_head")[0][0] is None  # refused before closing anything
    assert pk.merge_ledger(own).appended == ()  # once the other is done


def test_a_stray_checkpoint_file_named_far_ahead_never_closes_the_gate(pk: Pk) -> None:
    seed(pk)
    purge_events(pk, "e-doomed")
    outside_copy(pk)
    stray = pk.settings.checkpoint_dir / f"{pk.database_key}-{10**11:012d}.json"
    stray.write_text('{"format": "purgekeeper-ledger-checkpoint", "version": 1, "rows": [')  # truncated
    assert [e.id for e in pk.read_conversation("c-kept")] == ["e-kept"]
    assert [e.id for e in pk.read_conversation("c-kept")] == ["e-kept"]  # and again, from the cache


@pytest.mark.sqlite_only
def test_sqlite_batches_search_the_index_for_an_id_list(pk: Pk) -> None:
    """``among`` must not compile to ``... = 1`` on SQLite: that hides the IN from the planner."""
    from purgekeeper.schema import cleanup_queries

    with pk.db.read() as conn:
        compiled = cleanup_queries._NULL_BODIES.compile(dialect=conn.dialect)
        params = {**compiled.params, "ids": json.dumps(["e-1", "e-2"]), "body": None}
        plan = conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN " + str(compiled), tuple(params[name] for name in compiled.positiontup or ())
        ).all()
    details = " ".join(str(row[-1]) for row in plan)
    assert "SEARCH events USING" in details and "SCAN events" not in details, details


def test_an_audit_step_that_a_full_check_overtakes_does_not_leave_its_stale_verdict(
    gated: Pk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What CI saw once under load: the background audit read the ledger's rows, then the copy
    as it was before a merge wrote it again; the merge's full check ran in between and found
    everything sound, and the audit then stored "differs from its copy at seq 2", which closed
    the gate for good. Here the full check runs inside the audit's read of the copy, and the
    copy the audit reads is wrong: its verdict belongs to a state the full check replaced."""
    seed(gated)
    purge_events(gated, "e-doomed")
    gated.purge_conversation("c-whole", actor="ops@example.org", reason="the user asked")
    read_copy = gated.gate.copy.row_hashes

    def overtaken(**bounds: Any) -> dict[int, str]:
        assert gated.gate.evaluate().open  # the merge's full check, done while the audit reads
        return {seq: "0" * 64 for seq in read_copy(**bounds)}  # the copy as it was before

    monkeypatch.setattr(gated.gate.copy, "row_hashes", overtaken)
    gated.gate.audit_step()
    monkeypatch.undo()
    assert gated.gate.evaluate(lift_sticky=False).open  # nothing stale stuck
    assert [event.id for event in gated.read_conversation("c-kept")] == ["e-kept"]
