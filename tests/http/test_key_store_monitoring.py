"""The key store in monitoring (issue 36): while it cannot be written, no ingest can seal its
content and no purge can shred, so ``/metrics`` exports ``purgekeeper_key_store_usable`` 0,
the console's overview shows a banner naming its path, and ``purgectl health``'s check
refuses (KeyStoreUnusable, an InfrastructureError). A full disk is the store's own failpoint
(``keystore.write=ENOSPC``), as the key store's tests use it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import purgekeeper
from purgekeeper.commands.web import metrics
from purgekeeper.schema.errors import InfrastructureError
from purgekeeper.storage import failpoints
from purgekeeper.storage.keystore import KeyStoreUnusable
from tests.helpers.console import app_of, page, parse, sign_in

Pk = purgekeeper.Purgekeeper


@pytest.fixture(autouse=True)
def _disarmed() -> Iterator[None]:
    yield
    failpoints.disarm()


def usable(pk: Pk) -> float:
    text = generate_latest(metrics.registry_for(pk)).decode()
    found = {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}
    return found["purgekeeper_key_store_usable"]


def test_a_key_store_that_cannot_be_written_shows_everywhere_and_clears(open_pk: Callable[..., Pk]) -> None:
    """Tried: the key store's disk full, then freed. The metric goes 0 and back to 1, the
    console's banner names the store's directory while it lasts, the health check raises,
    and an ingest fails with nothing written (no event, no plain text)."""
    pk = open_pk()
    pk.create_conversation("c1")  # no ingest yet: this process has made no keys ahead
    assert usable(pk) == 1
    failpoints.arm("keystore.write=ENOSPC")
    assert usable(pk) == 0
    with pytest.raises(KeyStoreUnusable, match="No space left") as raised:
        pk.key_store.check()
    assert isinstance(raised.value, InfrastructureError)
    with app_of(pk) as client:
        sign_in(client)
        banner = parse(page(client)).by_id("key-store-banner").text
        assert str(pk.key_store.directory) in banner and "No space left" in banner
        with pytest.raises(KeyStoreUnusable):
            pk.ingest_event("c1", author="ada", body="never written")
        assert pk.read_conversation("c1") == []
        failpoints.disarm()
        assert not parse(page(client)).has_id("key-store-banner")
    assert usable(pk) == 1
    assert [e.body for e in [pk.ingest_event("c1", author="ada", body="written")]] == ["written"]
