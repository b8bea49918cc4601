"""A data subject's receipt over HTTP, both backends: ``GET /v1/purges/{id}/receipt?for_subject=true``
leaves out the actor, the reason and the request's metadata and verifies; without it the
operator's receipt discloses them; a purge of before leaf version 2 is refused (400)."""

from __future__ import annotations

import base64

import purgekeeper
from purgekeeper.tlog.verify import describe, verify_receipt
from tests.helpers.http import TestClient, ok
from tests.helpers.subject_receipts import SECRETS, WHO, disclosed_values, old_row, purge_with_who

Pk = purgekeeper.Purgekeeper


def test_a_subject_s_receipt_over_http(pk: Pk, client: TestClient) -> None:
    purge_id = purge_with_who(pk)
    response = client.get(f"/v1/purges/{purge_id}/receipt", params={"for_subject": "true"})
    subject = ok(response)
    assert "disclosed" not in subject and not any(secret in response.text for secret in SECRETS)
    assert not any(secret.encode() in base64.b64decode(subject["leaf"]) for secret in SECRETS)
    assert describe(verify_receipt(subject, pk.log_key())).endswith("committed, not disclosed")
    full = ok(client.get(f"/v1/purges/{purge_id}/receipt"))
    assert disclosed_values(full) == WHO and verify_receipt(full, pk.log_key()).disclosed == WHO
    assert ok(client.get(f"/v1/purges/{purge_id}/receipt", params={"for_subject": "false"})) == full


def test_a_subject_s_receipt_of_a_row_of_before_leaf_version_2_is_refused(pk: Pk, client: TestClient) -> None:
    entry = old_row(pk)
    refused = client.get(f"/v1/purges/{entry.purge_id}/receipt", params={"for_subject": "true"})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"] == "validation_error" and "in clear" in refused.json()["detail"]
    assert WHO["actor"] not in refused.text
    full = ok(client.get(f"/v1/purges/{entry.purge_id}/receipt"))
    assert full["version"] == 1 and verify_receipt(full, pk.log_key()).leaf_version == 1
    assert client.get(f"/v1/purges/{entry.purge_id}/receipt", params={"for_subject": "maybe"}).status_code == 400
