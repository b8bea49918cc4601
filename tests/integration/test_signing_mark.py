"""The signing key's mark (``purgekeeper.storage.signing_mark``), both backends: a log restored
from an old backup, lost, or handed an origin a later deploy drops never signs a second
history under one key and origin; a mark that is missing, damaged or another key's is a
refusal like an unusable key (the copy is still written, ``check_key`` and monitoring show it);
``ledger key init`` never gives the same origin a fresh key; ``mark --adopt`` is the
operator's way back after an upgrade."""

from __future__ import annotations

import base64
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import purgekeeper
from purgekeeper.commands import key_commands
from purgekeeper.schema.ledger import GENESIS_HASH, Head
from purgekeeper.storage import signed_log
from purgekeeper.storage.key_rotation import rotation_of
from purgekeeper.storage.ledger_copy import LedgerCopy
from purgekeeper.storage.signing_mark import MARK_SUFFIX, Mark, MarkFile
from purgekeeper.tlog import note
from purgekeeper.tlog.verify import (
    Checkpoint,
    KeyRotation,
    ReceiptInvalid,
    Verifier,
    open_checkpoint,
    verify_consistency,
    verify_receipt,
)
from tests.helpers.backups import Backups, tracked
from tests.helpers.interop import Go
from tests.helpers.ledger import NOW, chain
from tests.helpers.receipts import accept, checkpoint_of, extends, log_dir

Pk = purgekeeper.Purgekeeper
NEW_ORIGIN = "purgekeeper.example/after-restore"


@pytest.fixture
def open_pk(open_pk: Callable[..., Pk], backups: Backups) -> Callable[..., Pk]:
    """conftest's handles, also known to the backups (which close them before a restore)."""
    return tracked(open_pk, backups)


def mark_path(pk: Pk) -> Path:
    key = pk.settings.signing_key_path
    return key.with_name(key.name + MARK_SUFFIX)


def opened(pk: Pk, text: str) -> Checkpoint:
    return open_checkpoint(text, Verifier.from_vkey(pk.log_key()))


def copied_seq(pk: Pk) -> int:
    head = LedgerCopy(pk.settings.checkpoint_dir, pk.database_key).head()
    assert head is not None
    return head.seq


def assert_refused(pk: Pk, *words: str) -> str:
    """The refusal shows as an unusable key does: check_key, and monitoring's key_problem."""
    with pytest.raises(purgekeeper.SigningKeyUnusable) as refused:
        pk.receipts.check_key()
    problem = pk.receipts.log_state().key_problem
    assert problem is not None and str(mark_path(pk)) in problem
    for word in words:
        assert word in refused.value.detail, refused.value.detail
    return refused.value.detail


def restore_an_old_backup(
    open_pk: Callable[..., Pk], backups: Backups, tmp_path: Path
) -> tuple[Pk, str, str, list[str]]:
    """The database and the checkpoint directory restored from a backup of size 2 after the
    checkpoint of size 5 was handed out, then 5 purges accepted: the restored handle, the
    checkpoints of size 2 and 5, and the consistency proof between them taken before."""
    pk = open_pk()
    accept(pk, 2)
    backup = backups.take()
    old_dir = tmp_path / "old-checkpoints"
    shutil.copytree(pk.settings.checkpoint_dir, old_dir)
    old = checkpoint_of(pk)
    accept(pk, 3, prefix="handed-out")
    handed_out = checkpoint_of(pk)  # size 5: someone holds it
    proof = pk.consistency(2)["proof"]
    backups.restore(backup)
    shutil.rmtree(pk.settings.checkpoint_dir)
    shutil.copytree(old_dir, pk.settings.checkpoint_dir)
    restored = open_pk()
    accept(restored, 5, prefix="forked")  # each returns: the copy is written
    assert copied_seq(restored) == 7
    return restored, old, handed_out, proof


def test_a_restore_of_the_database_and_the_log_from_an_old_backup_signs_no_second_history(
    open_pk: Callable[..., Pk], backups: Backups, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    restored, old, handed_out, proof = restore_an_old_backup(open_pk, backups, tmp_path)
    assert checkpoint_of(restored) == old  # sizes 3 to 7 were never signed with other roots
    assert_refused(restored, "size 5", "ledger merge", "PURGEKEEPER_LOG_ORIGIN")
    older, newer = opened(restored, old), opened(restored, handed_out)  # every checkpoint this key signed
    verify_consistency(2, 5, [base64.b64decode(h) for h in proof], older.root, newer.root)
    monkeypatch.setenv("PURGEKEEPER_LOG_ORIGIN", NEW_ORIGIN)  # the way out: a new log
    renamed = open_pk()
    accept(renamed, 1, prefix="new-origin")
    fresh = opened(renamed, checkpoint_of(renamed))
    assert (fresh.origin, fresh.size) == (NEW_ORIGIN, 8)
    shown = key_commands.show_mark(renamed.settings, renamed.database_key)
    assert [(t["origin"], t["size"]) for t in shown["retired"]] == [(f"purgekeeper/{renamed.database_key}", 5)]


def test_what_a_restored_key_signed_is_one_history_for_go(
    open_pk: Callable[..., Pk], backups: Backups, tmp_path: Path, go: Go
) -> None:
    restored, old, handed_out, proof = restore_an_old_backup(open_pk, backups, tmp_path)
    vkey = restored.log_key()
    answer = go(
        {"checks": [
            {"kind": "tree", "vkey": vkey, "old_note": old, "note": handed_out, "proof": proof},
            {"kind": "tree", "vkey": vkey, "old_note": old, "note": checkpoint_of(restored), "proof": []},
        ]}
    )  # fmt: skip
    assert [check["ok"] for check in answer["checks"]] == [True, True]


def test_a_restore_merged_back_signs_again_once_its_tree_extends_the_mark(
    open_pk: Callable[..., Pk], backups: Backups, tmp_path: Path
) -> None:
    pk = open_pk()
    accept(pk, 2)
    backup = backups.take()
    old_dir = tmp_path / "old-checkpoints"
    shutil.copytree(pk.settings.checkpoint_dir, old_dir)
    accept(pk, 3, prefix="handed-out")
    handed_out = checkpoint_of(pk)
    pk.checkpoint_ledger(tmp_path / "export.ledger")  # the rows, kept outside the backups
    backups.restore(backup)
    shutil.rmtree(pk.settings.checkpoint_dir)
    shutil.copytree(old_dir, pk.settings.checkpoint_dir)
    restored = open_pk()
    restored.merge_ledger(tmp_path / "export.ledger")
    accept(restored, 2, prefix="after")
    extends(restored, handed_out)
    assert opened(restored, checkpoint_of(restored)).size == 7
    restored.receipts.check_key()


def test_a_restored_database_with_its_log_lost_is_not_signed_again(
    open_pk: Callable[..., Pk], backups: Backups
) -> None:
    pk = open_pk()
    accept(pk, 1)
    backup = backups.take()
    accept(pk, 2, prefix="signed")
    backups.restore(backup)
    shutil.rmtree(pk.settings.checkpoint_dir)  # the key and its mark are still there
    restored = open_pk()
    accept(restored, 3, prefix="again")
    assert copied_seq(restored) == 4
    assert not (log_dir(restored) / "checkpoint").exists()  # sizes 2 to 4 never signed with other roots
    assert_refused(restored, "size 3")


def test_an_origin_dropped_by_a_later_deploy_is_refused_and_its_log_kept(
    open_pk: Callable[..., Pk], monkeypatch: pytest.MonkeyPatch
) -> None:
    pk = open_pk()
    accept(pk, 1)
    monkeypatch.setenv("PURGEKEEPER_LOG_ORIGIN", NEW_ORIGIN)
    renamed = open_pk()
    accept(renamed, 1, prefix="renamed")
    newer = checkpoint_of(renamed)
    assert opened(renamed, newer).origin == NEW_ORIGIN
    monkeypatch.delenv("PURGEKEEPER_LOG_ORIGIN")  # a later deploy drops it
    dropped = open_pk()
    accept(dropped, 2, prefix="dropped")
    assert copied_seq(dropped) == 4
    assert checkpoint_of(dropped) == newer  # the newer origin's log is not retired
    assert len([p for p in log_dir(dropped).parent.iterdir() if ".log.retired-" in p.name]) == 1
    assert_refused(dropped, "knows the origin", "PURGEKEEPER_LOG_ORIGIN")
    monkeypatch.setenv("PURGEKEEPER_LOG_ORIGIN", NEW_ORIGIN)  # set back: the log catches up
    back = open_pk()
    accept(back, 1, prefix="back")
    assert opened(back, checkpoint_of(back)).size == 5
    back.receipts.check_key()


def test_init_never_gives_the_same_origin_a_fresh_key(open_pk: Callable[..., Pk]) -> None:
    pk = open_pk()
    accept(pk, 2)
    settings, database_id = pk.settings, pk.database_key
    settings.signing_key_path.unlink()
    shutil.rmtree(log_dir(pk))
    for origin in (None, f"purgekeeper/{database_id}"):
        with pytest.raises(purgekeeper.ValidationError) as refused:
            key_commands.create_signing_key(settings, database_id, origin=origin)
        assert "new origin" in refused.value.detail
    mark_path(pk).unlink()  # the mark lost too: the copy's head still says the log signed
    with pytest.raises(purgekeeper.ValidationError):
        key_commands.create_signing_key(settings, database_id)
    assert not settings.signing_key_path.exists()
    made = key_commands.create_signing_key(settings, database_id, origin=NEW_ORIGIN)
    shown = key_commands.show_mark(settings, database_id)
    assert f"purgekeeper/{database_id}" in [t["origin"] for t in shown["retired"]]
    assert made.name == NEW_ORIGIN


@pytest.mark.parametrize("how", ["missing", "garbage", "another key", "open to others"])
def test_a_mark_that_cannot_be_used_never_stops_the_copy(open_pk: Callable[..., Pk], how: str) -> None:
    pk = open_pk()
    accept(pk, 1)
    before = checkpoint_of(pk)
    path = mark_path(pk)
    kept = path.read_bytes()
    if how == "missing":
        path.unlink()
    elif how == "garbage":
        path.write_bytes(b"\x00\x00\x00\x10" + b"not a mark at all" * 100)
    elif how == "another key":
        other = note.Signer.generate(f"purgekeeper/{pk.database_key}")
        MarkFile(path).replace(Mark(counter=9), [other])
    else:
        path.chmod(0o644)
    later = open_pk()
    accepted = accept(later, 2, prefix="later")  # returns: no LedgerNotCopied
    assert copied_seq(later) == 3
    assert checkpoint_of(later) == before
    detail = assert_refused(later)
    assert "PRIVATE" not in detail
    with pytest.raises(purgekeeper.SigningKeyUnusable, match="mark"):  # not signed yet, and the receipt says why
        later.receipt(accepted[1].purge_id)
    path.unlink(missing_ok=True)
    path.write_bytes(kept)
    path.chmod(0o600)
    document = later.receipt(accepted[1].purge_id)  # the log catches up with the copy
    assert verify_receipt(document, later.log_key()).checkpoint.size == 3


def test_adopting_the_log_after_an_upgrade_without_a_mark(open_pk: Callable[..., Pk]) -> None:
    pk = open_pk()
    accept(pk, 2)
    mark_path(pk).unlink()  # as a version without marks left it
    later = open_pk()
    accept(later, 1, prefix="later")
    assert opened(later, checkpoint_of(later)).size == 2
    assert_refused(later, "--adopt")
    adopted = key_commands.adopt_mark(later.settings, later.database_key)
    assert [(t["origin"], t["size"]) for t in adopted["origins"]] == [(f"purgekeeper/{later.database_key}", 2)]
    with pytest.raises(purgekeeper.ValidationError):
        key_commands.adopt_mark(later.settings, later.database_key)  # a mark that verifies is kept
    accept(later, 1, prefix="adopted")
    assert opened(later, checkpoint_of(later)).size == 4
    later.receipts.check_key()


def test_a_rotation_is_followed_by_a_verifier_holding_the_old_key(open_pk: Callable[..., Pk]) -> None:
    pk = open_pk()
    accept(pk, 2)
    old_vkey = pk.log_key()
    with pk.copy.writers_kept_out():
        rotated = key_commands.rotate_signing_key(pk.settings, pk.database_key)
    assert rotated.old_vkey == old_vkey != rotated.vkey == pk.log_key()
    assert Path(rotated.retired_key).read_text().strip() != pk.settings.signing_key_path.read_text().strip()
    assert Path(rotated.retired_key).stat().st_mode & 0o777 == 0o600
    accepted = accept(pk, 2, prefix="after")  # the same handle signs with the new key: its file changed
    document = pk.receipt(accepted[1].purge_id)
    assert verify_receipt(document, old_vkey).checkpoint.size == 4  # followed from the old key
    with pytest.raises(ReceiptInvalid):
        open_checkpoint(document["checkpoint"], Verifier.from_vkey(old_vkey))  # the new key alone signed it
    (statement,) = [rotation["statement"] for rotation in document["rotations"]]
    assert pk.receipts.log_file(rotated.statement).decode() == statement
    forger = note.Signer.generate(Verifier.from_vkey(old_vkey).name)
    claimed = rotation_of(statement)
    forged = note.sign_note(KeyRotation(claimed.origin, 2, claimed.root, forger.vkey).text(), [forger])
    tampered = {**document, "rotations": [{**document["rotations"][0], "statement": forged}]}
    with pytest.raises(ReceiptInvalid):
        verify_receipt(tampered, old_vkey)
    assert key_commands.show_mark(pk.settings, pk.database_key)["rotations"][0]["vkey"] == rotated.vkey


def test_a_new_key_without_a_rotation_statement_is_refused(open_pk: Callable[..., Pk]) -> None:
    pk = open_pk()
    accept(pk, 1)
    before = checkpoint_of(pk)
    path, name = pk.settings.signing_key_path, Verifier.from_vkey(pk.log_key()).name
    path.unlink()
    signed_log.create_key(path, name=name)  # the same name, another key
    later = open_pk()
    accept(later, 2, prefix="later")
    assert copied_seq(later) == 3
    assert checkpoint_of(later) == before
    with pytest.raises(purgekeeper.SigningKeyUnusable) as refused:
        later.receipts.check_key()
    assert "another key" in refused.value.detail and "ledger key rotate" in refused.value.detail


# -- a key without its mark ---------------------------------------------------------------------


def test_a_key_moved_without_its_mark_never_signs_its_origin_again_from_size_one(open_pk: Callable[..., Pk]) -> None:
    """The key copied to a new host without its mark, the checkpoint directory new: nothing
    here says the log signed, yet the key did. Refused (the copy is still written)."""
    pk = open_pk()
    accept(pk, 2)
    mark_path(pk).unlink()
    shutil.rmtree(pk.settings.checkpoint_dir)
    later = open_pk()
    accept(later, 1, prefix="moved")
    assert copied_seq(later) == 3
    assert not (log_dir(later) / "checkpoint").exists()  # size 1 to 3 never signed again
    assert_refused(later, "missing", "--adopt")


def test_a_mark_without_its_key_is_never_replaced_by_a_first_key(open_pk: Callable[..., Pk]) -> None:
    pk = open_pk()
    accept(pk, 2)
    kept = mark_path(pk).read_bytes()
    pk.settings.signing_key_path.unlink()
    shutil.rmtree(pk.settings.checkpoint_dir)
    later = open_pk()
    accept(later, 1, prefix="keyless")
    assert copied_seq(later) == 3
    assert not pk.settings.signing_key_path.exists() and mark_path(pk).read_bytes() == kept
    with pytest.raises(purgekeeper.SigningKeyUnusable) as refused:
        later.receipts.check_key()
    assert str(mark_path(pk)) in refused.value.detail


# -- several databases, one key -----------------------------------------------------------------


def tips(pk: Pk) -> dict[str, int]:
    shown = key_commands.show_mark(pk.settings, pk.database_key)
    return {tip["origin"]: tip["size"] for tip in shown["origins"]}


def test_two_databases_sharing_one_key_take_turns_and_neither_tip_goes_back(
    open_pk: Callable[..., Pk], tmp_path: Path
) -> None:
    pk = open_pk()
    with purgekeeper.open(
        f"sqlite:///{tmp_path / 'other.db'}",
        blob_root=tmp_path / "other" / "blobs",
        file_root=tmp_path / "other" / "files",
        checkpoint_dir=pk.settings.checkpoint_dir,
        workers="none",
    ) as other:
        assert other.settings.signing_key_path == pk.settings.signing_key_path != other.database_key
        seen: dict[str, int] = {}
        for turn in range(3):
            for handle in (pk, other):
                accept(handle, 2, prefix=f"turn-{turn}")
                signed = opened(handle, checkpoint_of(handle))
                now = tips(handle)
                assert now[signed.origin] == signed.size
                assert all(now[origin] >= size for origin, size in seen.items()), (seen, now)
                seen = now
        assert sorted(seen.values()) == [6, 6]


WRITERS, ROWS = 4, 40


def shared_mark(key: Path) -> MarkFile:
    """The mark beside ``key`` as each database's log opens it (its own instance, its own memory)."""
    return MarkFile.beside(key)


def signing_in_turn(root: Path, key: Path, signer: note.Signer, index: int, went_back: list[str]) -> None:
    """One database's writer appending one row at a time to its signed log, reading the shared
    mark after each: its origin's tip is exactly its newest checkpoint (only it signs that origin)."""
    database_id = f"database-{index}"
    origin = f"purgekeeper.example/{database_id}"
    log = signed_log.SignedLog.beside(root, database_id, origin=origin, signer=signer, mark=shared_mark(key))
    copy = LedgerCopy(root, database_id, log=log)
    for row in chain(ROWS, start=Head(0, GENESIS_HASH, database_id, NOW)):
        copy.append([row])
        tip = shared_mark(key).current(signer.verifier).tip(origin)
        if tip is None or tip.size != row.seq:
            went_back.append(f"{origin} signed {row.seq}, the mark says {tip.size if tip else None}")


def test_concurrent_writers_sharing_one_key_lose_no_tree_from_its_mark(tmp_path: Path) -> None:
    key = tmp_path / "data" / "ledger-signing.key"
    key.parent.mkdir()
    signer = signed_log.create_key(key, name="purgekeeper.example/shared")
    shared_mark(key).replace(Mark(), [signer])
    went_back: list[str] = []
    threads = [
        threading.Thread(target=signing_in_turn, args=(tmp_path / "ledger", key, signer, index, went_back))
        for index in range(WRITERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert went_back == []
    final = shared_mark(key).current(signer.verifier)
    assert sorted((tip.origin, tip.size) for tip in final.origins) == [
        (f"purgekeeper.example/database-{index}", ROWS) for index in range(WRITERS)
    ]
