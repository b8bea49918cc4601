"""The key store, and the content not sealed yet, in monitoring (issue 36). While the key
store cannot be written, no ingest can seal its content and no purge can shred, so
``/metrics`` exports ``purgekeeper_key_store_usable`` 0, the console's overview shows a banner
naming its path, and ``purgectl health``'s check refuses (KeyStoreUnusable). A full disk is
the store's own failpoint (``keystore.write=ENOSPC``), as the key store's tests use it. Rows
written before encryption at rest are counted in ``purgekeeper_plain_content_rows`` and named
on the console until the scheduler's duty has sealed them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import insert

import purgekeeper
from purgekeeper.commands.web import metrics
from purgekeeper.schema.errors import InfrastructureError
from purgekeeper.schema.tables import events, placements
from purgekeeper.storage import failpoints
from purgekeeper.storage.keystore import KeyStoreUnusable
from tests.helpers.console import app_of, page, parse, sign_in

Pk = purgekeeper.Purgekeeper
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


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


def plain_rows(pk: Pk) -> dict[str, float]:
    text = generate_latest(metrics.registry_for(pk)).decode()
    return {
        s.labels["table"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "purgekeeper_plain_content_rows"
    }


def test_older_content_shows_until_the_schedulers_duty_has_sealed_it(open_pk: Callable[..., Pk]) -> None:
    """Tried: two events written as before encryption at rest (raw inserts: plain bodies, no
    key). /metrics counts them, the console names them; the scheduler's duty seals them in one
    round (the reads are unchanged), after which the metric is 0, the notice is gone, and a
    further duty runs no round (nothing is left: it waits)."""
    pk = open_pk()
    pk.create_conversation("c-old")
    with pk.db.write() as conn:  # as an older version wrote them
        for event_id in ("e-1", "e-2"):
            conn.execute(insert(events).values(id=event_id, author="bob", occurred_at=NOW, body=f"{event_id} words"))
            conn.execute(insert(placements).values(event_id=event_id, conversation_id="c-old"))
    assert plain_rows(pk)["events"] == 2
    with app_of(pk) as client:
        sign_in(client)
        assert "events 2" in parse(page(client)).by_id("plain-content").text
        sealed = pk.seal_older_content()
        assert sealed is not None and sealed.sealed["events"] == 2
        assert not parse(page(client)).has_id("plain-content")
    assert plain_rows(pk)["events"] == 0
    assert sorted(e.body or "" for e in pk.read_conversation("c-old")) == ["e-1 words", "e-2 words"]
    assert pk.seal_older_content() is None  # nothing left: no round
