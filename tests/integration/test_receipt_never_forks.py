"""The signed log never forks (issue 24 item 7), both backends: a checkpoint kept from before
a restore and its merge, a second process appending, a crash between the commit and the
copy, or a merge of another database's ledger is extended by every later checkpoint (checked
with ``purgekeeper.tlog.verify`` and, once, with Go's sumdb through ``tests/interop/tlogcheck``); a copy
written again from a different history is refused rather than signed, until a new origin."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import purgekeeper
from purgekeeper.storage import failpoints
from purgekeeper.tlog.verify import Verifier, open_checkpoint, verify_receipt
from tests.helpers.backups import Backups, tracked
from tests.helpers.interop import Go
from tests.helpers.receipts import accept, checkpoint_of, extends, log_dir

Pk = purgekeeper.Purgekeeper
WHO = {"actor": "op", "reason": "never fork test"}


@pytest.fixture
def open_pk(open_pk: Callable[..., Pk], backups: Backups) -> Callable[..., Pk]:
    """conftest's handles, also known to the backups (which close them before a restore)."""
    return tracked(open_pk, backups)


@pytest.fixture
def armed() -> Iterator[Callable[[str], None]]:
    yield failpoints.arm
    failpoints.disarm()


def test_a_restore_and_its_merge_extend_the_log(open_pk: Callable[..., Pk], backups: Backups, go: Go) -> None:
    pk = open_pk()
    accept(pk, 2)
    backup = backups.take()
    lost = accept(pk, 3, prefix="lost")
    before = checkpoint_of(pk)
    kept = pk.receipt(lost[0].purge_id)
    backups.restore(backup)
    restored = open_pk()
    with pytest.raises(purgekeeper.MessagingUnavailable):  # behind its copy: no acceptance, no signature
        restored.purge_conversation("c-while-behind", **WHO)
    assert checkpoint_of(restored) == before
    restored.merge_ledger(restored.settings.checkpoint_dir)
    accept(restored, 2, prefix="after")
    extends(restored, before)
    proof = restored.consistency(5)
    verify_receipt(kept, restored.log_key(), newer_checkpoint=proof["checkpoint"], consistency_proof=proof)
    answer = go(
        {
            "checks": [
                {"kind": "tree", "vkey": restored.log_key(), "old_note": before, "note": proof["checkpoint"],
                 "proof": proof["proof"]},
                {"kind": "record", "vkey": restored.log_key(), "note": kept["checkpoint"],
                 "proof": kept["inclusion_proof"], "index": kept["leaf_index"], "leaf": kept["leaf"]},
                {"kind": "tree", "vkey": restored.log_key(), "old_note": before, "note": proof["checkpoint"],
                 "proof": proof["proof"][:-1]},
            ]
        }
    )  # fmt: skip
    assert [check["ok"] for check in answer["checks"]] == [True, True, False]


def test_a_second_process_appending_extends_the_log(open_pk: Callable[..., Pk]) -> None:
    one, two = open_pk(), open_pk()
    accept(one, 1)
    before = checkpoint_of(one)
    for i in range(3):
        accept(one, 1, prefix=f"one-{i}")
        accept(two, 1, prefix=f"two-{i}")
        extends(two, before)
        before = checkpoint_of(two)
    assert open_checkpoint(before, Verifier.from_vkey(one.log_key())).size == 7


def test_a_crash_between_the_commit_and_the_copy_extends_the_log(
    open_pk: Callable[..., Pk], armed: Callable[[str], None]
) -> None:
    pk = open_pk()
    accept(pk, 2)
    before = checkpoint_of(pk)
    armed("ledger.copy=EIO")
    with pytest.raises(purgekeeper.LedgerNotCopied):
        pk.purge_conversation("c-uncopied", **WHO)
    failpoints.disarm()
    assert checkpoint_of(pk) == before  # nothing signed for a row the copy lacks
    accept(pk, 1, prefix="next")
    extends(pk, before)
    assert open_checkpoint(checkpoint_of(pk), Verifier.from_vkey(pk.log_key())).size == 4


def test_a_merge_of_another_database_extends_the_log(
    open_pk: Callable[..., Pk], tmp_path: Path, roots: dict[str, Path]
) -> None:
    pk = open_pk()
    accept(pk, 2)
    before = checkpoint_of(pk)
    other = purgekeeper.open(
        f"sqlite:///{tmp_path / 'other.db'}", checkpoint_dir=tmp_path / "other-ledger", blob_root=tmp_path / "ob",
        file_root=tmp_path / "of", memory_roots=[tmp_path / "om"], workers="none",
    )  # fmt: skip
    with other:
        accept(other, 2, prefix="other")
        source = other.copy.directory
    report = pk.merge_ledger(source, allow_other_database=True)
    assert len(report.appended) == 2
    extends(pk, before)
    assert open_checkpoint(checkpoint_of(pk), Verifier.from_vkey(pk.log_key())).size == 4


def test_a_copy_written_again_from_another_history_is_not_signed_until_a_new_origin(
    open_pk: Callable[..., Pk], backups: Backups, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database_url: str
) -> None:
    pk = open_pk()
    accept(pk, 1)
    backup = backups.take()
    accept(pk, 1, prefix="signed")
    before = checkpoint_of(pk)
    backups.restore(backup)
    elsewhere = purgekeeper.open(  # another row at seq 2, written beside another checkpoint directory
        database_url, checkpoint_dir=tmp_path / "elsewhere", blob_root=tmp_path / "eb", file_root=tmp_path / "ef",
        memory_roots=[tmp_path / "em"], workers="none",
    )  # fmt: skip
    with elsewhere:
        accept(elsewhere, 1, prefix="diverging")
    restored = open_pk()
    with pytest.raises(purgekeeper.MessagingUnavailable) as refused:
        restored.merge_ledger(restored.settings.checkpoint_dir)
    assert "PURGEKEEPER_LOG_ORIGIN" in str(refused.value) and "fork" in str(refused.value)
    assert checkpoint_of(restored) == before  # nothing signed under the old origin
    with pytest.raises(purgekeeper.MessagingUnavailable):
        restored.read_conversation("c-anything")  # content stays closed
    monkeypatch.setenv("PURGEKEEPER_LOG_ORIGIN", "purgekeeper.example/after-divergence")
    renamed = open_pk()
    renamed.merge_ledger(renamed.settings.checkpoint_dir)
    retired = [p.name for p in log_dir(renamed).parent.iterdir() if ".log.retired-" in p.name]
    assert len(retired) == 1
    assert (log_dir(renamed).parent / retired[0] / "checkpoint").read_text() == before
    fresh = open_checkpoint(checkpoint_of(renamed), Verifier.from_vkey(renamed.log_key()))
    assert (fresh.origin, fresh.size) == ("purgekeeper.example/after-divergence", 3)
    assert base64.b64decode(renamed.receipt(accept(renamed, 1, prefix="new")[0].purge_id)["leaf"])
