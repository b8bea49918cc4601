"""``purgectl receipt show ID --for-subject`` and its offline check, both backends: the receipt
for the person whose data was purged holds no actor, reason or request metadata, and
``receipt verify`` says they are committed, not disclosed; the operator's receipt shows them;
a purge of before leaf version 2 is refused (exit 2, validation_error)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import purgekeeper
from purgekeeper.tlog.verify import verify_receipt
from tests.helpers.purgectl import Purgectl, concurrently
from tests.helpers.subject_receipts import SECRETS, WHO, old_row, purge_with_who

Pk = purgekeeper.Purgekeeper


@pytest.fixture
def signing(pk: Pk, purgectl: Purgectl) -> Purgectl:
    """purgectl with the handle's key (its own data directory would hold another)."""
    return purgectl.with_env(PURGEKEEPER_SIGNING_KEY_FILE=str(pk.settings.signing_key_path))


def test_receipt_show_for_subject_and_verify(pk: Pk, signing: Purgectl, tmp_path: Path) -> None:
    purge_id = purge_with_who(pk)
    old = old_row(pk)
    shown, full, refused = concurrently(
        lambda: signing.text("receipt", "show", purge_id, "--for-subject").stdout,
        lambda: signing.json("receipt", purge_id),
        lambda: signing.error(2, "validation_error", "receipt", "show", old.purge_id, "--for-subject"),
    )
    assert not any(secret in shown for secret in SECRETS)
    assert "in clear" in refused["detail"] and WHO["actor"] not in refused["detail"]
    assert verify_receipt(full, pk.log_key()).disclosed == WHO
    (tmp_path / "subject.json").write_text(shown)
    (tmp_path / "log.vkey").write_text(pk.log_key())
    line = signing.text("receipt", "verify", str(tmp_path / "subject.json"), "--key", str(tmp_path / "log.vkey"))
    assert line.stdout.startswith("ok: a conversation purge, id ")
    assert line.stdout.rstrip().endswith("; actor, reason and request committed, not disclosed")
    verified = signing.json(
        "receipt", "verify", str(tmp_path / "subject.json"), "--key", str(tmp_path / "log.vkey"), "--json"
    )
    assert verified["leaf_version"] == 2 and verified["disclosed"] is None
    assert set(verified["undisclosed"]) >= {"actor", "reason"}
    (tmp_path / "full.json").write_text(json.dumps(full))
    verified = signing.json(
        "receipt", "verify", str(tmp_path / "full.json"), "--key", str(tmp_path / "log.vkey"), "--json"
    )
    assert verified["disclosed"] == WHO and verified["undisclosed"] == []
