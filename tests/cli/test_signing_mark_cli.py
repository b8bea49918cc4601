"""``purgectl ledger key`` and the key's mark (``purgekeeper.storage.signing_mark``): ``health``
fails while the mark refuses, ``ledger key mark`` shows it and ``--adopt`` writes it back from
the log's checkpoint, ``ledger key init`` refuses the same origin a fresh key, and ``ledger key
rotate`` hands the log to a new key that a verifier holding the old one follows."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import purgekeeper
from purgekeeper.tlog.verify import verify_receipt
from tests.helpers.purgectl import Purgectl
from tests.helpers.receipts import accept, log_dir

Pk = purgekeeper.Purgekeeper


@pytest.fixture
def shared(purgectl: Purgectl, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Purgectl:
    """purgectl, initialised; handles opened afterwards share its data directory (key, mark)."""
    purgectl.json("init")
    monkeypatch.setenv("PURGEKEEPER_DATA_DIR", str(tmp_path / "data"))
    return purgectl


@pytest.mark.sqlite_only  # the key and its mark are the data directory's, whatever the database
def test_health_fails_while_the_mark_is_missing_until_adopted(
    shared: Purgectl, open_pk: Callable[..., Pk], tmp_path: Path
) -> None:
    pk = open_pk()
    accept(pk, 2)
    mark = tmp_path / "data" / "ledger-signing.key.mark"
    assert shared.json("ledger", "key", "mark")["origins"][0]["size"] == 2
    mark.unlink()
    refused = shared.error(4, "signing_key_unusable", "health")
    assert str(mark) in refused["detail"] and "--adopt" in refused["detail"]
    adopted = shared.json("ledger", "key", "mark", "--adopt")
    assert [(t["origin"], t["size"]) for t in adopted["origins"]] == [(f"purgekeeper/{pk.database_key}", 2)]
    assert shared.json("health")["ok"] is True
    shared.error(2, "validation_error", "ledger", "key", "mark", "--adopt")  # a mark that verifies is kept


@pytest.mark.sqlite_only
def test_init_refuses_the_same_origin_a_fresh_key(shared: Purgectl, open_pk: Callable[..., Pk], tmp_path: Path) -> None:
    pk = open_pk()
    accept(pk, 1)
    (tmp_path / "data" / "ledger-signing.key").unlink()
    for path in log_dir(pk).parent.iterdir():
        if path.name.startswith(log_dir(pk).name):
            shutil.rmtree(path)
    refused = shared.error(2, "validation_error", "ledger", "key", "init")
    assert "new origin" in refused["detail"]
    made = shared.json("ledger", "key", "init", "--origin", "purgekeeper.example/new")
    assert made["vkey"].startswith("purgekeeper.example/new+")


@pytest.mark.sqlite_only
def test_rotate_hands_the_log_to_a_new_key(shared: Purgectl, open_pk: Callable[..., Pk], tmp_path: Path) -> None:
    pk = open_pk()
    accept(pk, 2)
    old_vkey = shared.json("ledger", "key")["vkey"]
    rotated = shared.json("ledger", "key", "rotate")
    assert rotated["old_vkey"] == old_vkey and shared.json("ledger", "key")["vkey"] == rotated["vkey"]
    assert (log_dir(pk) / rotated["statement"]).exists()
    accepted = accept(pk, 1, prefix="after")
    assert verify_receipt(pk.receipt(accepted[0].purge_id), old_vkey).checkpoint.size == 3
    assert shared.json("health")["ok"] is True


@pytest.mark.sqlite_only
def test_health_fails_for_a_key_moved_without_its_mark(
    shared: Purgectl, open_pk: Callable[..., Pk], tmp_path: Path
) -> None:
    """The key copied to a new host without its mark, the checkpoint directory new: refused,
    not signed again from size 1."""
    pk = open_pk()
    accept(pk, 2)
    (tmp_path / "data" / "ledger-signing.key.mark").unlink()
    shutil.rmtree(pk.settings.checkpoint_dir)
    accept(open_pk(), 1, prefix="moved")
    refused = shared.error(4, "signing_key_unusable", "health")
    assert "ledger-signing.key.mark" in refused["detail"] and "--adopt" in refused["detail"]
    assert not (log_dir(pk) / "checkpoint").exists()


@pytest.mark.sqlite_only
def test_a_key_made_outside_purgekeeper_needs_never_signed_and_only_where_nothing_was_signed(
    purgectl: Purgectl, tmp_path: Path, open_pk: Callable[..., Pk]
) -> None:
    """A key named by PURGEKEEPER_SIGNING_KEY_FILE with no mark: refused until the operator
    says it never signed (``--adopt --never-signed``); once the log has signed, that answer is
    refused (the mark is then restored, or adopted from a checkpoint)."""
    from purgekeeper.tlog.note import Signer

    key = tmp_path / "outside.key"
    key.write_text(Signer.generate("example.org/purges").skey + "\n")
    key.chmod(0o600)
    named = purgectl.with_env(PURGEKEEPER_SIGNING_KEY_FILE=str(key))
    named.json("init")
    assert "--adopt" in named.text("ledger", "key", "mark", "--never-signed", code=2).stderr  # it goes with --adopt
    adopted = named.json("ledger", "key", "mark", "--adopt", "--never-signed")
    assert adopted["origins"] == [] and key.with_name("outside.key.mark").exists()
    assert named.json("health")["ok"] is True
    key.with_name("outside.key.mark").unlink()
    pk = open_pk()
    accept(pk, 1)  # the copy records a tree (signed with the data directory's own key)
    refused = named.error(2, "validation_error", "ledger", "key", "mark", "--adopt", "--never-signed")
    assert "nothing to adopt" in refused["detail"]
