"""The signed log in monitoring (issue 35 item 2): ``/metrics`` exports the newest signed
checkpoint's size and age and whether the signing key can be used, and the console's overview
shows the log and a banner while the key cannot be used. A scrape reads the key's file and
stats the checkpoint: it walks nothing."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import purgekeeper
from purgekeeper.commands.web import metrics
from purgekeeper.storage import signed_log
from tests.helpers.console import app_of, page, parse, sign_in
from tests.helpers.receipts import accept, log_dir

Pk = purgekeeper.Purgekeeper
LOG_METRICS = ("purgekeeper_log_size", "purgekeeper_log_checkpoint_age_seconds", "purgekeeper_signing_key_usable")


def log_samples(pk: Pk) -> dict[str, float]:
    text = generate_latest(metrics.registry_for(pk)).decode()
    found = {sample.name: sample.value for family in text_string_to_metric_families(text) for sample in family.samples}
    return {name: value for name, value in found.items() if name in LOG_METRICS}


def test_metrics_export_the_log_and_whether_its_key_can_be_used(open_pk: Callable[..., Pk]) -> None:
    pk = open_pk()
    assert log_samples(pk) == {"purgekeeper_signing_key_usable": 1}  # nothing signed yet, no key yet: no problem
    accept(pk, 3)
    checkpoint = log_dir(pk) / signed_log.CHECKPOINT_FILE
    an_hour_ago = time.time() - 3600
    os.utime(checkpoint, (an_hour_ago, an_hour_ago))
    found = log_samples(pk)
    assert found["purgekeeper_log_size"] == 3 and found["purgekeeper_signing_key_usable"] == 1
    assert 3600 <= found["purgekeeper_log_checkpoint_age_seconds"] < 3660
    pk.settings.signing_key_path.chmod(0o640)
    found = log_samples(pk)
    assert found["purgekeeper_signing_key_usable"] == 0 and found["purgekeeper_log_size"] == 3


def test_the_console_shows_the_log_and_a_banner_while_the_key_cannot_be_used(open_pk: Callable[..., Pk]) -> None:
    pk = open_pk()
    accept(pk, 2)
    with app_of(pk) as client:
        sign_in(client)
        shown = parse(page(client))
        assert shown.by_id("log-size").text == "2" and shown.has_id("log-checkpoint-age")
        assert not shown.has_id("signing-key-banner")
        key = pk.settings.signing_key_path
        key.write_text("garbage\n")
        key.chmod(0o600)
        banner = parse(page(client)).by_id("signing-key-banner").text
    assert str(key) in banner and "not a signing key" in banner and "garbage" not in banner
