"""Issue 26, item 8, a Schemathesis finding: a preview that selects an event already purged
lists its attachments with a ``null`` name (cleanup clears a name, which is content), and the
document declared the name a string. The answer now matches its model, as every response of
``make_client`` is checked. Both backends."""

from __future__ import annotations

from purgekeeper import EventScope, NewAttachment
from tests.helpers.cleanup import clean
from tests.helpers.http import AS_HOST, WHO, Pk, make_client, ok


def test_a_purged_attachment_is_previewed_with_a_null_name(pk: Pk) -> None:
    pk.create_conversation("c1")
    pk.ingest_event(
        "c1", author="ada", body="the contract", event_id="e1", attachments=[NewAttachment.file(b"%PDF", name="x.pdf")]
    )
    scope = EventScope(event_ids=("e1",))
    pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO)
    clean(pk)
    with make_client(pk) as client:
        preview = ok(client.post("/v1/purges/preview", json={"event_ids": ["e1"]}, headers=AS_HOST))
    assert [event["already_fenced"] for event in preview["events"]] == [True]
    assert [attachment["name"] for attachment in preview["exclusive_attachments"]] == [None]
