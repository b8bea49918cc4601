"""The signing key from ``purgectl`` (issue 35 items 2 and 6): ``ledger key`` reads the key and
never makes one, ``ledger key init`` makes one and never replaces one, and ``health`` fails
(exit 4) while the key cannot be used, naming its file."""

from __future__ import annotations

from pathlib import Path

import pytest

import purgekeeper
from purgekeeper.tlog.verify import Verifier
from tests.helpers.purgectl import Purgectl

Pk = purgekeeper.Purgekeeper


@pytest.mark.sqlite_only  # the key is the data directory's, whatever the database
def test_reading_the_key_never_makes_one_and_init_makes_one(purgectl: Purgectl, tmp_path: Path) -> None:
    purgectl.json("init")  # a brand-new installation: its first key
    key = tmp_path / "data" / "ledger-signing.key"
    key.unlink()
    missing = purgectl.error(4, "signing_key_missing", "ledger", "key")
    assert str(key) in missing["detail"] and "ledger key init" in missing["detail"]
    assert not key.exists()
    made = purgectl.text("ledger", "key", "init").stdout.strip()
    assert key.stat().st_mode & 0o777 == 0o600
    assert Verifier.from_vkey(made).name.startswith("purgekeeper/")
    purgectl.error(3, "signing_key_exists", "ledger", "key", "init")
    assert purgectl.json("ledger", "key") == {"vkey": made}
    assert purgectl.json("health")["ok"] is True


@pytest.mark.sqlite_only
def test_health_fails_while_the_key_cannot_be_used(purgectl: Purgectl, tmp_path: Path) -> None:
    purgectl.json("init")
    key = tmp_path / "data" / "ledger-signing.key"
    secret = key.read_text()
    key.chmod(0o644)
    refused = purgectl.error(4, "signing_key_unusable", "health")
    assert str(key) in refused["detail"] and "chmod 600" in refused["detail"]
    assert secret.strip().rsplit("+", 1)[-1] not in refused["detail"]
    key.write_text("not a key\n")
    key.chmod(0o600)
    purgectl.error(4, "signing_key_unusable", "health")
    purgectl.error(4, "signing_key_unusable", "ledger", "key")


@pytest.mark.sqlite_only
def test_init_never_makes_a_key_for_a_log_that_has_signed(pk: Pk, purgectl: Purgectl, tmp_path: Path) -> None:
    """``pk`` signs the log in the checkpoint directory purgectl shares, with its own data
    directory's key: purgectl's data directory has none, and init (a migration) makes none."""
    pk.purge_conversation("c-1", actor="op", reason="signing key cli test")
    done = purgectl.text("init")
    key = tmp_path / "data" / "ledger-signing.key"
    assert not key.exists() and str(key) in done.stderr
    purgectl.error(4, "signing_key_missing", "ledger", "key")
    purgectl.error(4, "signing_key_missing", "health")
