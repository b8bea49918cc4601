"""Real provider event ids (Slack, Matrix, email Message-IDs, URLs) on both backends: ingest
takes them and stays idempotent on them, a purge tombstones them in the ledger's selectors,
and neither the library nor a raw writer (the triggers) can ingest a purged one again."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

import purgekeeper
from purgekeeper import ContentPurged, EventScope, NewAttachment
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import translate_db_error
from tests import helpers

WHO = {"actor": "ops@example.org", "reason": "the user asked"}
SLACK = "slack:T1/C1/1700000000.000100"
MATRIX = "$abc123:example.org"
EMAIL = "<CAF=x+y@mail.gmail.com>"
URL = "https://example.org/posts/1?x=y#z"


def ingest(pk: purgekeeper.Purgekeeper, provider_event_id: str, body: str = "hello") -> purgekeeper.Event:
    return pk.ingest_event("c-1", author="ada", body=body, provider_event_id=provider_event_id)


def purge(pk: purgekeeper.Purgekeeper, *event_ids: str) -> purgekeeper.Acceptance:
    scope = EventScope(event_ids=event_ids)
    return pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO)


def raw_insert_refused(database_url: str, provider_event_id: str) -> None:
    """A writer that bypasses the library: the trigger refuses the purged provider id."""
    db = Database(database_url)
    try:
        with pytest.raises(Exception) as info, db.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO events (id, provider_event_id, author, occurred_at, body) "
                    "VALUES ('raw-again', :p, 'ada', CURRENT_TIMESTAMP, 'back again')"
                ),
                {"p": provider_event_id},
            )
        assert isinstance(translate_db_error(info.value), ContentPurged), info.value
    finally:
        db.dispose()


def test_ingest_takes_real_provider_ids_and_is_idempotent_on_them(pk: purgekeeper.Purgekeeper) -> None:
    pk.create_conversation("c-1")
    first = {p: ingest(pk, p) for p in (SLACK, MATRIX, EMAIL, URL)}
    assert {e.provider_event_id for e in first.values()} == {SLACK, MATRIX, EMAIL, URL}
    for provider_event_id, event in first.items():
        assert ingest(pk, provider_event_id, body="redelivered").id == event.id
    assert [e.provider_event_id for e in pk.read_conversation("c-1")] == [SLACK, MATRIX, EMAIL, URL]


def test_a_purged_matrix_id_or_url_is_never_ingested_again(pk: purgekeeper.Purgekeeper, database_url: str) -> None:
    pk.create_conversation("c-1")
    matrix = pk.ingest_event(
        "c-1",
        author="ada",
        body="secret",
        provider_event_id=MATRIX,
        attachments=[NewAttachment.file(b"secret bytes", name="a.txt")],
    )
    url = ingest(pk, URL)
    accepted = purge(pk, matrix.id, url.id)
    selectors = json.loads(
        helpers.scalar(pk, "SELECT selectors FROM purge_ledger WHERE purge_id = :p", p=accepted.purge_id)
    )
    assert selectors["provider_event_ids"] == sorted([MATRIX, URL])
    for provider_event_id in (MATRIX, URL):
        with pytest.raises(ContentPurged):
            ingest(pk, provider_event_id, body="back again")
        raw_insert_refused(database_url, provider_event_id)
    assert pk.verify_ledger().ok
