"""A damaged copy of the ledger outside the database (issue 23, items 2 to 4). Both backends.

- A lost ``head.json`` while the segments still hold rows is damage, not absence: after a
  restore of a backup from before a purge, reads stay closed until ``repair_ledger_copy``
  (``purgectl ledger repair``) rebuilds the head from the segments, or a merge of the
  directory reads the segments alone.
- A truncated open segment (mid-row, a missing newline, an empty segment) is never padded:
  the next append re-establishes the tail from the database's rows (the database is the
  source of the rows the copy lost), so the copy verifies and a merge of it works.
- A copy's directory that is a regular file, or a ``head.json`` that is a symlink loop,
  gives typed errors (``MessagingUnavailable``, ``LedgerNotCopied``) that name the copy by
  its file name only, on every surface: content calls, HTTP (503, never 500), ``health``,
  ``/status`` and ``/metrics``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

import purgekeeper
from purgekeeper import EventScope
from purgekeeper.commands.http import create_app
from purgekeeper.commands.web import metrics
from purgekeeper.commands.web import status as status_page
from purgekeeper.commands.web.auth import Tokens
from purgekeeper.schema import ledger
from purgekeeper.storage import ledger_copy
from purgekeeper.storage.ledger_copy import CopyInvalid, LedgerCopy
from tests.helpers.backups import Backups

with warnings.catch_warnings():  # starlette warns at import when httpx2 is not installed
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

Pk = purgekeeper.Purgekeeper
WHO = {"actor": "op", "reason": "copy damage test"}
SECRET = "S3CR3T-damaged"
TOKENS = Tokens(api="host-token-23", operator="operator-token-23")
AS_HOST = {"Authorization": "Bearer host-token-23"}
AS_OPERATOR = {"Authorization": "Bearer operator-token-23"}


def seed(pk: Pk) -> None:
    pk.create_conversation("c1")
    pk.ingest_event("c1", author="ada", body=f"{SECRET} body", event_id="e1")
    pk.ingest_event("c1", author="bob", body="kept", event_id="e-kept")


def purge_e1(pk: Pk) -> str:
    scope = EventScope(event_ids=["e1"])
    return pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO).purge_id


def open_segment(pk: Pk) -> Path:
    return pk.copy.directory / ledger_copy.segment_name(1)


def fresh_copy(pk: Pk) -> LedgerCopy:
    return LedgerCopy(pk.settings.checkpoint_dir, pk.database_key)


def purgectl(pk: Pk, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PURGEKEEPER_DATABASE_URL": pk.settings.database_url,
        "PURGEKEEPER_CHECKPOINT_DIR": str(pk.settings.checkpoint_dir),
        "PURGEKEEPER_DATA_DIR": str(pk.settings.checkpoint_dir.parent / "data"),
        "PURGEKEEPER_SIGNING_KEY_FILE": str(pk.settings.signing_key_path),  # the log's own key: none is made for it
    }
    return subprocess.run(
        [sys.executable, "-m", "purgekeeper.commands.cli", *args], env=env, capture_output=True, text=True, timeout=60
    )


def assert_bounded(error: purgekeeper.MessagingUnavailable, pk: Pk, *must_name: str) -> None:
    said = " ".join([str(error), *error.diagnostics])
    assert error.diagnostics and len(error.diagnostics) <= purgekeeper.MessagingUnavailable.MAX_DIAGNOSTICS
    assert str(pk.settings.checkpoint_dir) not in said and SECRET not in said, said
    for needle in must_name:
        assert needle in said, f"{needle!r} not in {said!r}"


# -- item 2: a lost head.json ---------------------------------------------------------------------


def restored_without_head(pk: Pk, open_pk: Callable[[], Pk], backups: Backups) -> tuple[Pk, str]:
    """Back up, purge e1 (its row goes to the copy), lose head.json, restore the backup."""
    backups.handles.append(pk)
    seed(pk)
    backup = backups.take()
    purge_id = purge_e1(pk)
    directory = pk.copy.directory
    pk.close()
    (directory / ledger_copy.HEAD_FILE).unlink()
    assert any(directory.glob("segment-*.jsonl"))
    backups.restore(backup)
    restored = open_pk()
    backups.handles.append(restored)
    return restored, purge_id


def test_a_lost_head_keeps_reads_closed_until_repaired_then_merged(
    pk: Pk, open_pk: Callable[[], Pk], backups: Backups
) -> None:
    restored, purge_id = restored_without_head(pk, open_pk, backups)
    with pytest.raises(purgekeeper.MessagingUnavailable) as closed:
        restored.read_conversation("c1")  # the old code served the purged body here
    assert_bounded(closed.value, restored, "head.json", restored.copy.directory.name)
    with pytest.raises(purgekeeper.MessagingUnavailable):
        restored.purge_conversation("c-other", **WHO)  # nothing is appended over the damage
    assert not restored.messaging_status().open

    repaired = restored.repair_ledger_copy()
    assert repaired.seq == 1 and (restored.copy.directory / ledger_copy.HEAD_FILE).is_file()
    with pytest.raises(purgekeeper.MessagingUnavailable) as behind:  # the copy remembers the purge
        restored.read_conversation("c1")
    assert_bounded(behind.value, restored, "behind")
    assert restored.merge_ledger(restored.settings.checkpoint_dir).appended == (purge_id,)
    assert [e.id for e in restored.read_conversation("c1")] == ["e-kept"]
    assert fresh_copy(restored).verify()[2] == []


def test_a_lost_head_is_recovered_by_merging_the_checkpoint_directory(
    pk: Pk, open_pk: Callable[[], Pk], backups: Backups
) -> None:
    restored, purge_id = restored_without_head(pk, open_pk, backups)
    with pytest.raises(purgekeeper.MessagingUnavailable):
        restored.read_conversation("c1")
    assert restored.merge_ledger(restored.settings.checkpoint_dir).appended == (purge_id,)
    assert [e.id for e in restored.read_conversation("c1")] == ["e-kept"]
    head = fresh_copy(restored).head()
    assert head is not None and head.seq == 1 and fresh_copy(restored).verify()[2] == []


def test_purgectl_ledger_repair_rebuilds_a_lost_head(pk: Pk) -> None:
    seed(pk)
    purge_e1(pk)
    pk.purge_conversation("c-gone", **WHO)
    before = json.loads((pk.copy.directory / ledger_copy.HEAD_FILE).read_text())
    (pk.copy.directory / ledger_copy.HEAD_FILE).unlink()
    with pytest.raises(purgekeeper.MessagingUnavailable):
        pk.read_conversation("c1")
    done = purgectl(pk, "ledger", "repair", "--json")
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert json.loads(done.stdout)["seq"] == 2 and str(pk.settings.checkpoint_dir) not in done.stdout
    after = json.loads((pk.copy.directory / ledger_copy.HEAD_FILE).read_text())
    keys = ("seq", "row_hash", "segment", "segment_bytes", "database_id")
    assert {k: after[k] for k in keys} == {k: before[k] for k in keys}
    # this process's audit may have found the damage meanwhile: its full check lifts it
    assert pk.messaging_status().open
    assert [e.id for e in pk.read_conversation("c1")] == ["e-kept"]
    again = purgectl(pk, "ledger", "repair", "--json")  # a sound copy: nothing to do
    assert again.returncode == 0 and json.loads(again.stdout)["seq"] == 2, (again.stdout, again.stderr)


def test_an_empty_copy_directory_is_no_copy(pk: Pk) -> None:
    """A directory with no segment and no head (the first writer died after its mkdir) is
    still no copy: reads stay open and the next acceptance writes the copy."""
    seed(pk)
    pk.copy.directory.mkdir(parents=True)
    assert [e.id for e in pk.read_conversation("c1")] == ["e1", "e-kept"]
    purge_e1(pk)
    assert fresh_copy(pk).verify()[:1] == (1,)


# -- item 3: a truncated open segment ---------------------------------------------------------------

CUTS: dict[str, Callable[[bytes], bytes]] = {
    "mid-row": lambda data: data[:-40],
    "a missing newline": lambda data: data[:-1],
    "an empty segment": lambda data: b"",
}


@pytest.mark.parametrize("cut", CUTS.values(), ids=CUTS.keys())
def test_a_truncated_open_segment_is_re_established_from_the_database(pk: Pk, cut: Callable[[bytes], bytes]) -> None:
    pk.purge_conversation("c-1", **WHO)
    pk.purge_conversation("c-2", **WHO)
    segment = open_segment(pk)
    whole = segment.read_bytes()
    segment.write_bytes(cut(whole))
    try:
        pk.purge_conversation("c-3", **WHO)
    except purgekeeper.LedgerNotCopied:
        pk.copy_ledger()  # the scheduler's repair
    data = segment.read_bytes()
    assert b"\x00" not in data, "the segment was padded"
    assert data.startswith(whole)
    assert fresh_copy(pk).verify() == (3, pk.verify_ledger().head_hash, [])
    assert pk.merge_ledger(pk.settings.checkpoint_dir).appended == ()  # the documented recovery works
    assert pk.messaging_status().open


@pytest.mark.parametrize("cut", CUTS.values(), ids=CUTS.keys())
def test_the_scheduler_s_sweep_re_establishes_a_truncated_tail(pk: Pk, cut: Callable[[bytes], bytes]) -> None:
    """No acceptance comes: the sweep's catch-up (``copy_ledger``) finds the short segment."""
    pk.purge_conversation("c-1", **WHO)
    pk.purge_conversation("c-2", **WHO)
    segment = open_segment(pk)
    whole = segment.read_bytes()
    segment.write_bytes(cut(whole))
    assert pk.copy_ledger() == 2
    assert segment.read_bytes() == whole
    assert fresh_copy(pk).verify() == (2, pk.verify_ledger().head_hash, [])


@pytest.mark.parametrize("cut", CUTS.values(), ids=CUTS.keys())
def test_an_append_never_writes_past_damage_it_has_not_checked(tmp_path: Path, cut: Callable[[bytes], bytes]) -> None:
    """Without the database (the bare copy), an append over a short open segment is refused
    and writes nothing; with the rows the copy lost handed back, the tail is re-established."""
    from tests.helpers.ledger import DATABASE, chain

    copy = LedgerCopy(tmp_path / "ledger", DATABASE)
    rows = chain(3)
    copy.append(rows[:2])
    segment = copy.directory / ledger_copy.segment_name(1)
    whole = segment.read_bytes()
    segment.write_bytes(cut(whole))
    cut_bytes = segment.read_bytes()
    with pytest.raises(CopyInvalid) as refused:
        copy.append(rows[2:])
    assert "truncated" in str(refused.value) and str(tmp_path) not in str(refused.value)
    assert segment.read_bytes() == cut_bytes and copy.head().seq == 2  # type: ignore[union-attr]
    copy.restore_tail(rows[:2])
    assert segment.read_bytes() == whole
    copy.append(rows[2:])
    assert copy.verify() == (3, rows[-1].row_hash, [])


def test_a_tail_the_database_does_not_hold_is_refused(tmp_path: Path) -> None:
    from tests.helpers.ledger import DATABASE, chain

    copy = LedgerCopy(tmp_path / "ledger", DATABASE)
    copy.append(chain(2))
    segment = copy.directory / ledger_copy.segment_name(1)
    segment.write_bytes(segment.read_bytes()[:-10])
    with pytest.raises(CopyInvalid):
        copy.restore_tail(chain(2, tag="another history"))


# -- item 4: a damaged checkpoint directory -------------------------------------------------------------


def directory_is_a_file(directory: Path) -> None:
    shutil.rmtree(directory)
    directory.write_bytes(b"not a directory")


def head_is_a_symlink_loop(directory: Path) -> None:
    head = directory / ledger_copy.HEAD_FILE
    head.unlink()
    head.symlink_to(ledger_copy.HEAD_FILE)


# each damage, and whether ``repair_ledger_copy`` can mend it (a head.json is rebuilt from the
# segments; a regular file where the directory should be is the operator's to move away)
DAMAGE: dict[str, tuple[Callable[[Path], None], bool]] = {
    "the directory is a regular file": (directory_is_a_file, False),
    "head.json is a symlink loop": (head_is_a_symlink_loop, True),
}


def surfaces(pk: Pk) -> tuple[str, str, Any]:
    app = FastAPI()
    app.include_router(status_page.router(pk, TOKENS))
    app.include_router(metrics.router(pk, TOKENS))
    with TestClient(app) as client:
        page = client.get("/status", headers=AS_OPERATOR).text
        scraped = client.get("/metrics", headers=AS_OPERATOR).text
    with TestClient(create_app(pk, tokens=TOKENS), raise_server_exceptions=False) as client:
        read = client.get("/v1/conversations/c1", headers=AS_HOST)
    return page, scraped, read


@pytest.mark.parametrize(("damage", "repairable"), DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_checkpoint_directory_gives_typed_errors_without_paths(
    pk: Pk, damage: Callable[[Path], None], repairable: bool
) -> None:
    seed(pk)
    purge_e1(pk)
    name = pk.copy.directory.name
    damage(pk.copy.directory)
    calls: dict[str, Callable[[], Any]] = {
        "read_conversation": lambda: pk.read_conversation("c1"),
        "list_conversations": lambda: pk.list_conversations(),
        "ingest_event": lambda: pk.ingest_event("c1", author="ada", body="new"),
        "purge_conversation": lambda: pk.purge_conversation("c-x", **WHO),
    }
    for call in calls.values():
        with pytest.raises(purgekeeper.MessagingUnavailable) as refused:
            call()
        assert_bounded(refused.value, pk, name)
    state = pk.messaging_status()
    assert not state.open and all(str(pk.settings.checkpoint_dir) not in p for p in state.problems)
    with pytest.raises((purgekeeper.LedgerNotCopied, purgekeeper.MessagingUnavailable)) as not_copied:
        pk.copy_ledger()  # the scheduler's catch-up
    assert str(pk.settings.checkpoint_dir) not in str(not_copied.value)

    page, scraped, read = surfaces(pk)
    assert read.status_code == 503 and read.json()["error"] == "messaging_unavailable", read.text
    assert str(pk.settings.checkpoint_dir) not in read.text and name in read.text
    assert name in page and str(pk.settings.checkpoint_dir) not in page
    assert "purgekeeper_messaging_available 0.0" in scraped
    checked = purgectl(pk, "health", "--json")
    assert checked.returncode == 4, (checked.stdout, checked.stderr)
    assert name in checked.stdout and str(pk.settings.checkpoint_dir) not in checked.stdout + checked.stderr
    assert "Traceback" not in checked.stderr

    if repairable:
        assert pk.repair_ledger_copy().head_rebuilt
        assert [e.id for e in pk.read_conversation("c1")] == ["e-kept"]
        assert fresh_copy(pk).verify()[2] == []
        return
    with pytest.raises(purgekeeper.MessagingUnavailable) as no_repair:
        pk.repair_ledger_copy()
    assert str(pk.settings.checkpoint_dir) not in str(no_repair.value) and name in str(no_repair.value)
    with pytest.raises(purgekeeper.ValidationError) as no_merge:
        pk.merge_ledger(pk.settings.checkpoint_dir)
    assert str(pk.settings.checkpoint_dir) not in str(no_merge.value)


def test_a_sound_copy_is_left_as_it_is_by_repair(pk: Pk) -> None:
    seed(pk)
    purge_e1(pk)
    before = {p.name: p.read_bytes() for p in pk.copy.directory.iterdir() if p.name != ledger_copy.HEAD_FILE}
    head = pk.repair_ledger_copy()
    assert (head.seq, head.row_hash) == (1, pk.verify_ledger().head_hash)
    assert {p.name: p.read_bytes() for p in pk.copy.directory.iterdir() if p.name != ledger_copy.HEAD_FILE} == before
    assert ledger.GENESIS_HASH != head.row_hash


@pytest.mark.parametrize(
    "forge", [lambda head: {"seq": head["seq"] + 1}, lambda head: {"row_hash": "0" * 64}], ids=["seq", "row_hash"]
)
def test_a_head_that_claims_rows_its_segments_do_not_hold_is_rebuilt_by_repair(
    pk: Pk, forge: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    """Tried (a review's finding): head.json's seq raised by one. The gate took the database
    for a restored one ("behind its copy"), the merge was refused, and repair reported success
    while leaving the head as it was: reads stayed closed for good."""
    seed(pk)
    purge_e1(pk)
    pk.purge_conversation("c-gone", **WHO)
    path = pk.copy.directory / ledger_copy.HEAD_FILE
    before = json.loads(path.read_text())
    path.write_text(json.dumps({**before, **forge(before)}))
    with pytest.raises(purgekeeper.MessagingUnavailable):
        pk.read_conversation("c1")
    repaired = pk.repair_ledger_copy()
    assert repaired.head_rebuilt and repaired.seq == 2
    keys = ("seq", "row_hash", "segment", "segment_bytes", "database_id")
    after = json.loads(path.read_text())
    assert {k: after[k] for k in keys} == {k: before[k] for k in keys}
    assert pk.messaging_status().open
    assert [e.id for e in pk.read_conversation("c1")] == ["e-kept"]
