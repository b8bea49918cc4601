"""The signed log's signing key (issue 35 items 2 and 6), both backends.

Reading the key never makes one: a missing key is SigningKeyMissing naming its file, and only
a brand-new installation (no log of the database ever signed) gets its first key without an
operator. A key that cannot be used (missing, truncated, garbage, empty, a directory, a
dangling symlink, open to others) never delays or prevents the ledger's copy: the acceptance
returns, the copy holds its row, and the log catches up at the next signing once the key is
fixed. Receipts and the key's check meanwhile say why, naming the file, never its contents."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import purgekeeper
from purgekeeper.storage.ledger_copy import LedgerCopy
from purgekeeper.tlog.verify import verify_receipt
from tests.helpers.receipts import accept, log_dir

Pk = purgekeeper.Purgekeeper


def break_key(path: Path, how: str) -> None:
    secret = path.read_bytes()
    path.unlink()
    if how == "truncated":
        path.write_bytes(secret[:30])
    elif how == "garbage":
        path.write_bytes(b"\xff\xfe" + secret[2:])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "directory":
        path.mkdir()
    elif how == "dangling symlink":
        path.symlink_to(path.with_name("nowhere.key"))
    elif how == "open to others":
        path.write_bytes(secret)
        path.chmod(0o644)
    if path.is_file():
        path.chmod(0o644 if how == "open to others" else 0o600)


def put_back(path: Path, secret: bytes) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    path.write_bytes(secret)
    path.chmod(0o600)


def assert_names_the_file(error: purgekeeper.SigningKeyUnusable, path: Path, secret: bytes) -> None:
    assert str(path) in error.detail
    assert "PRIVATE" not in error.detail and secret.decode().rsplit("+", 1)[-1][:12] not in error.detail


def test_reading_the_key_never_makes_one(open_pk: Callable[..., Pk]) -> None:
    first = open_pk()
    accept(first, 1)
    path = first.settings.signing_key_path
    secret = path.read_bytes()
    path.unlink()
    later = open_pk()
    with pytest.raises(purgekeeper.SigningKeyMissing) as missing:
        later.log_key()
    assert_names_the_file(missing.value, path, secret)
    with pytest.raises(purgekeeper.SigningKeyMissing):
        later.receipt(accept(later, 1)[0].purge_id)
    assert not os.path.lexists(path)  # neither the read nor the signing made one: the log has signed


def test_a_new_installation_makes_its_first_key_at_its_first_signature(open_pk: Callable[..., Pk]) -> None:
    pk = open_pk()
    path = pk.settings.signing_key_path
    with pytest.raises(purgekeeper.SigningKeyMissing):
        pk.log_key()
    pk.receipts.check_key()  # no log has signed: a missing key is no problem yet
    assert not path.exists()
    accepted = accept(pk, 1)
    assert path.stat().st_mode & 0o777 == 0o600
    verify_receipt(pk.receipt(accepted[0].purge_id), pk.log_key())


def test_no_key_is_made_for_a_copy_whose_rows_were_signed(open_pk: Callable[..., Pk]) -> None:
    """The log's directory lost as well as the key: the copy's head still says its rows were
    signed, and the key must come from the operator."""
    first = open_pk()
    accept(first, 2)
    first.settings.signing_key_path.unlink()
    shutil.rmtree(log_dir(first))
    later = open_pk()
    accept(later, 1, prefix="later")
    assert not first.settings.signing_key_path.exists()
    with pytest.raises(purgekeeper.SigningKeyMissing):
        later.receipts.check_key()


@pytest.mark.parametrize(
    "how", ["missing", "truncated", "garbage", "empty", "directory", "dangling symlink", "open to others"]
)
def test_an_unusable_key_never_stops_the_copy(open_pk: Callable[..., Pk], how: str) -> None:
    first = open_pk()
    accept(first, 1)
    path = first.settings.signing_key_path
    secret = path.read_bytes()
    break_key(path, how)
    later = open_pk()  # nothing of the key in its memory
    accepted = accept(later, 2, prefix="later")  # returns: no LedgerNotCopied
    head = LedgerCopy(later.settings.checkpoint_dir, later.database_key).head()
    assert head is not None and head.seq == 3
    for ask in (lambda: later.receipt(accepted[1].purge_id), later.receipts.check_key):
        with pytest.raises(purgekeeper.SigningKeyUnusable) as unusable:
            ask()
        assert_names_the_file(unusable.value, path, secret)
    assert later.receipts.log_state().key_problem is not None
    put_back(path, secret)
    document = later.receipt(accepted[1].purge_id)  # the log catches up with the copy
    assert verify_receipt(document, later.log_key()).checkpoint.size == 3
    assert later.receipts.log_state().key_problem is None
