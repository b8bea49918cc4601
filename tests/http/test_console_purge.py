"""The console's page of one purge, and its Retry form, on SQLite and PostgreSQL: steps with
their leases, every attempt, the audit rows; 404 and 400 pages; a retry recorded under the
signed-in operator's name, and every refusal (CSRF token missing, wrong or another session's,
another site's Origin, no reason, a reason too long, nothing incomplete, no session) changing
nothing. A worker holding a step is a real claim (``purgekeeper.schema.steps.claim``) that never finishes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

import purgekeeper
from purgekeeper.commands.http.app import create_app
from purgekeeper.commands.web.auth import COOKIE_NAME
from purgekeeper.commands.web.status import FORGED_FORM, OPERATOR_HEADER, RETRIED
from tests.helpers import settle
from tests.helpers.console import (
    HOST,
    HOSTILE,
    OPERATOR,
    OPERATOR_NAME,
    SECRET,
    TOKENS,
    WHO,
    Element,
    TestClient,
    app_of,
    claim,
    incomplete_purge,
    page,
    parse,
    purge_new_event,
    retrying_purge,
    sign_in,
)
from tests.helpers.steps import FailingStore

Pk = purgekeeper.Purgekeeper
REASON = "freed the blob path; see ticket OPS-42"
HOSTILE_NAME = "<img src=x onerror=alert(1)>"
SAME_SITE = {"Origin": "null", "Sec-Fetch-Site": "same-origin"}  # as Chromium sends it under no-referrer


@pytest.fixture
def client(pk: Pk) -> Iterator[TestClient]:
    with app_of(pk) as test_client:
        assert sign_in(test_client).status_code == 303
        yield test_client


def purge_page(client: TestClient, purge_id: str) -> Element:
    return parse(page(client, f"/status/purges/{purge_id}"))


def csrf_of(client: TestClient, purge_id: str) -> str:
    return purge_page(client, purge_id).find("form", cls="retry").find("input", name="csrf").attrs["value"]


def retry(client: TestClient, purge_id: str, *, headers: dict[str, str] | None = None, **fields: str) -> Any:
    """The form POST, as a browser on this site sends it unless ``headers`` say otherwise."""
    sent = SAME_SITE if headers is None else headers
    return client.post(f"/status/purges/{purge_id}/retry", data=fields, headers=sent, follow_redirects=False)


def unchanged(pk: Pk, purge_id: str) -> None:
    detail = pk.purge_detail(purge_id)
    assert detail.status.status == "incomplete" and detail.audit == ()


# -- what the page shows ---------------------------------------------------------------------------


def test_an_incomplete_purge_shows_its_steps_attempts_and_the_retry_form(pk: Pk, client: TestClient) -> None:
    purge_id = incomplete_purge(pk, "c1")
    response = client.get(f"/status/purges/{purge_id}")
    assert response.status_code == 200
    html = response.text
    shown = parse(html)
    assert shown.by_id("purge-title").attrs["data-status"] == "incomplete"
    assert shown.find("span", cls="badge").text == "INCOMPLETE"
    facts = {key: shown.by_id(f"purge-{key}").text for key in ("label", "kind", "status", "seq", "completed")}
    assert facts == {
        "label": "content purge",
        "kind": "content",
        "status": "incomplete",
        "seq": "1",
        "completed": "not yet",
    }
    accepted = shown.by_id("purge-accepted").find("time")
    assert accepted.attrs["title"] == pk.status(purge_id).accepted_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert shown.by_id("purge-duration").text.endswith(" so far")

    failed = shown.find("tr", cls="step", data_kind="attachments").cells()
    assert failed[:3] == ["attachments", "incomplete", "1/1"] and failed[7] == ""  # no lease held
    assert failed[-1] == "OSError"  # its name; the whole text has a row of its own (issue 34)
    error_row = shown.find("tr", cls="step-error", data_error_of="attachments")
    assert error_row.find("td", cls="last-error").attrs["colspan"] == str(len(failed))
    error = error_row.find("span", cls="error-text").text
    assert error.startswith("OSError: could not unlink the file of blob ")
    with pk.db.read() as conn:
        [blob_id] = conn.execute(text("SELECT blob_id FROM attachments")).scalars().all()
    [where] = shown.by_id("where-to-act").find_all("div", cls="where")  # once, above the steps
    assert where.text == (
        f"attachments: the file root (PURGEKEEPER_FILE_ROOT), {pk.settings.file_root.name}/{blob_id[:2]}/{blob_id}"
    )  # issue 26: the root by name and the path below it, which holds no attachment name
    assert where.attrs["data-step"] == "attachments" and len(shown.find_all("div", cls="where")) == 1
    assert str(pk.settings.file_root) not in html
    attempts = {
        row.attrs["data-step"]: row.cells() for row in shown.by_id("attempt-rows").find_all("tr", cls="attempt")
    }
    [failed_attempt] = [cells for cells in attempts.values() if cells[0] == "attachments"]
    assert failed_attempt[1:3] == ["1", "1"] and failed_attempt[7] == "incomplete"  # round 1, attempt 1
    assert re.fullmatch(r"[\d.]+ s", failed_attempt[6]) and failed_attempt[3]  # a duration, an owner
    assert failed_attempt[8] == error  # the attempt's own error, and no place again
    assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in html and "<script" not in html
    assert "No operator has acted on this purge." in shown.by_id("audit").text

    form = shown.find("form", cls="retry")
    assert form.attrs["method"] == "post" and form.attrs["action"] == f"/status/purges/{purge_id}/retry"
    assert len(form.find("input", name="csrf").attrs["value"]) >= 32
    assert "required" in form.find("textarea", name="reason").attrs and OPERATOR_NAME in form.text
    assert 'http-equiv="refresh"' not in html  # a reason being typed is never wiped
    for hidden in (SECRET, WHO["actor"], WHO["reason"], "doc.txt"):
        assert hidden not in html, hidden


def test_a_retrying_purge_offers_retry_now_and_the_retry_makes_its_step_due(pk: Pk, client: TestClient) -> None:
    """Issue 26: an operator who fixed the cause hurries a ``retrying`` step from the console
    too (its next attempt was an hour away); the retry is audited under the operator."""
    purge_id = retrying_purge(pk, "c1")
    shown = purge_page(client, purge_id)
    assert shown.by_id("retry-submit").text == "Retry now"
    response = retry(client, purge_id, csrf=csrf_of(client, purge_id), reason=REASON)
    assert response.status_code == 303, response.text
    [step] = [s for s in pk.status(purge_id).steps if s.kind == "attachments"]
    assert (step.status, step.attempts) == ("pending", 0)
    assert step.next_attempt_at is not None and step.next_attempt_at <= dt.datetime.now(dt.UTC)
    [audit] = pk.purge_detail(purge_id).audit
    assert (audit.action, audit.actor, audit.reason) == ("retry", OPERATOR_NAME, REASON)


def test_what_each_kind_touched_is_shown_in_ids_and_counts_never_content(pk: Pk, client: TestClient) -> None:
    """Issue 26: a purge's page names its conversations and counts the events and attachments
    it fenced; an erasure names its author, a bot deletion its bot, a hold its subjects."""
    content = purge_new_event(pk, "c1", attachment=True)
    pk.create_conversation("c-ada")
    pk.ingest_event("c-ada", author="ada-lovelace", body=f"{SECRET} body")
    erasure = pk.preview_author_erasure("ada-lovelace")
    erased = pk.erase_author("ada-lovelace", scope_digest=erasure.scope_digest, **WHO).purge_id
    assert settle(pk, erased).status == "complete"
    pk.register_bot("bot-7", name="Helper")
    deleted = pk.delete_bot("bot-7", **WHO).purge_id
    hold = pk.place_hold("h-case", conversation_ids=["c-ada", "c-none"], authors=["grace"], **WHO).purge_id

    def touched(purge_id: str) -> dict[str, str]:
        html = page(client, f"/status/purges/{purge_id}")
        for hidden in (SECRET, "doc.txt", WHO["actor"], WHO["reason"]):
            assert hidden not in html, hidden
        shown = parse(html).by_id("touched").find("dl")
        return {dt_.text: dd.text for dt_, dd in zip(shown.find_all("dt"), shown.find_all("dd"), strict=True)}

    assert touched(content) == {"Conversations": "c1", "Events": "1 fenced so far", "Attachments": "1 on those events"}
    assert touched(erased) == {
        "Conversations": "c-ada",
        "Events": "1 fenced",
        "Attachments": "0 on those events",
        "Author": "ada-lovelace",
    }
    assert touched(deleted) == {"Bot": "bot-7, its Memory kept"}
    assert touched(hold) == {"Conversations": "c-ada, c-none", "Authors": "grace", "Legal hold": "h-case"}
    assert "Nothing to clean up" in page(client, f"/status/purges/{hold}")


def test_a_step_a_worker_holds_shows_its_lease_and_the_page_refreshes(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c1", attachment=True)
    bodies = next(step.id for step in pk.status(purge_id).steps if step.kind == "bodies")
    claim(pk, bodies, "worker-a:7:f00d")
    html = page(client, f"/status/purges/{purge_id}")
    shown = parse(html)
    row = shown.find("tr", cls="step", data_kind="bodies")
    assert row.find("td", cls="lease-owner").text == "worker-a:7:f00d"
    expires = row.find("td", cls="next-attempt").find("time").text  # the lease's end is its next attempt
    assert re.fullmatch(r"in [45] min", expires), expires
    assert row.find("td", cls="next-attempt").text == f"running, lease ends {expires}"
    running = shown.find("tr", cls="attempt", data_step=bodies)
    assert running.classes == {"attempt", "running"}
    assert running.cells()[3] == "worker-a:7:f00d" and running.cells()[7] == "running"
    assert not shown.find_all("form", cls="retry")  # nothing is incomplete
    assert '<meta http-equiv="refresh" content="5">' in html
    toggle = shown.by_id("refresh-toggle")
    assert toggle.attrs["href"] == f"/status/purges/{purge_id}?refresh=off"
    assert 'http-equiv="refresh"' not in client.get(toggle.attrs["href"]).text


def test_a_complete_purge_shows_when_it_finished_and_how_long_it_took(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c1", attachment=True)
    status = settle(pk, purge_id)
    assert status.completed_at is not None and status.duration is not None
    html = page(client, f"/status/purges/{purge_id}")
    shown = parse(html)
    assert shown.by_id("purge-completed").find("time").attrs["title"] == status.completed_at.strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    assert re.fullmatch(r"[\d.]+ s", shown.by_id("purge-duration").text)
    assert [row.cells()[7] for row in shown.find_all("tr", cls="attempt")] == ["done", "done"]
    assert not shown.find_all("form", cls="retry") and 'http-equiv="refresh"' not in html


BAD_PATHS = [
    ("/status/purges/no-such-purge", 404, "not_found: no purge no-such-purge"),
    ("/status/purges/bad%20id", 400, "validation_error: purge_id may hold only"),
    ("/status/purges/%3Cscript%3Ealert(1)%3C", 400, "validation_error: purge_id may hold only"),
]


def test_an_unknown_purge_is_a_404_page_and_a_bad_id_a_400(client: TestClient) -> None:
    for path, code, said in BAD_PATHS:
        response = client.get(path)
        assert response.status_code == code and response.headers["content-type"].startswith("text/html"), path
        assert parse(response.text).by_id("problem").text.startswith(said)
        assert "<script" not in response.text
        csrf = "0" * 43
        assert retry(client, path.rpartition("/")[2], reason=REASON, csrf=csrf).status_code == code


# -- retrying -------------------------------------------------------------------------------------------


def test_a_retry_with_a_reason_is_recorded_under_the_operator_and_shown(pk: Pk, client: TestClient) -> None:
    purge_id = incomplete_purge(pk, "c1")
    response = retry(client, purge_id, reason=REASON, csrf=csrf_of(client, purge_id))
    assert response.status_code == 303
    assert response.headers["location"] == f"/status/purges/{purge_id}?retried=1"

    [entry] = pk.purge_detail(purge_id).audit
    assert (entry.action, entry.actor, entry.reason, len(entry.step_ids)) == ("retry", OPERATOR_NAME, REASON, 1)
    after = client.get(response.headers["location"]).text
    shown = parse(after)
    assert shown.by_id("notice").text == RETRIED
    [row] = shown.by_id("audit-rows").find_all("tr", cls="audit")
    assert row.cells()[:4] == ["retry", OPERATOR_NAME, REASON, "1"]
    assert row.find("time").text in ("now",) or row.find("time").text.endswith(" s ago")
    assert shown.find("tr", cls="step", data_kind="attachments").cells()[1] in ("pending", "retrying")
    assert not shown.find_all("form", cls="retry")  # nothing incomplete now
    assert '<meta http-equiv="refresh" content="5">' in after  # cleaning again: the page follows it

    # issue 26: the step fails again; its attempts are told by round, never "1" twice
    store = FailingStore(pk.blobs.blob_root, pk.blobs.file_root, message=HOSTILE)
    assert settle(pk, purge_id, dataclasses.replace(pk.step_context(), blobs=store)).status == "incomplete"
    again = purge_page(client, purge_id)
    told = [row.cells()[:3] for row in again.by_id("attempt-rows").find_all("tr", cls="attempt")]
    assert ["attachments", "1", "1"] in told and ["attachments", "2", "1"] in told, told
    assert again.find("tr", cls="step", data_kind="attachments").find("td", cls="attempts").text == "1/1, round 2"


REFUSALS = [
    ({"reason": REASON}, SAME_SITE, 403, FORGED_FORM),
    ({"reason": REASON, "csrf": "0" * 43}, SAME_SITE, 403, FORGED_FORM),
    (
        {"reason": REASON, "csrf": "{csrf}"},
        {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
        403,
        FORGED_FORM,
    ),
    ({"reason": REASON, "csrf": "{csrf}"}, {"Sec-Fetch-Site": "same-site"}, 403, FORGED_FORM),
    ({"reason": REASON, "csrf": "{csrf}"}, {"Origin": "https://evil.example"}, 403, FORGED_FORM),  # no Sec-Fetch-*
    ({"reason": REASON, "csrf": "{csrf}"}, {"Origin": "null"}, 403, FORGED_FORM),
    ({"csrf": "{csrf}"}, SAME_SITE, 400, "reason must not be empty"),
    ({"reason": "  \n ", "csrf": "{csrf}"}, SAME_SITE, 400, "reason must not be empty"),
    ({"reason": "x" * 1001, "csrf": "{csrf}"}, SAME_SITE, 400, "reason is longer than 1000 characters"),
]


def test_a_refused_retry_says_why_keeps_the_reason_and_changes_nothing(pk: Pk, client: TestClient) -> None:
    purge_id = incomplete_purge(pk, "c1", message="the disk said no")
    csrf = csrf_of(client, purge_id)
    for fields, headers, code, said in REFUSALS:
        sent = {name: value.format(csrf=csrf) for name, value in fields.items()}
        response = retry(client, purge_id, headers=headers, **sent)
        assert response.status_code == code, (fields, headers)
        shown = parse(response.text)
        assert shown.by_id("retry-error").text == said
        assert shown.find("textarea", name="reason").text == " ".join(sent.get("reason", "").split())
        unchanged(pk, purge_id)


def test_another_sessions_csrf_token_is_refused(pk: Pk, client: TestClient) -> None:
    purge_id = incomplete_purge(pk, "c1", message="the disk said no")
    with app_of(pk) as other:
        sign_in(other, name="someone else")
        foreign = csrf_of(other, purge_id)
    assert foreign != csrf_of(client, purge_id)
    assert retry(client, purge_id, reason=REASON, csrf=foreign).status_code == 403
    unchanged(pk, purge_id)


def test_retrying_a_purge_with_nothing_incomplete_is_refused(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c1")
    csrf = csrf_of(client, incomplete_purge(pk, "c2", message="the disk said no"))
    response = retry(client, purge_id, reason=REASON, csrf=csrf)
    assert response.status_code == 409
    assert (
        parse(response.text).by_id("retry-error").text
        == f"purge {purge_id} has no incomplete or retrying step to retry"
    )
    assert pk.purge_detail(purge_id).audit == ()


def test_a_retry_without_a_session_gets_the_sign_in_form(pk: Pk) -> None:
    purge_id = incomplete_purge(pk, "c1", message="the disk said no")
    with app_of(pk) as stranger:
        response = retry(stranger, purge_id, reason=REASON, csrf="anything")
        assert response.status_code == 401
        assert parse(response.text).find("input", name="next").attrs["value"] == f"/status/purges/{purge_id}"
        forged = retry(stranger, purge_id, headers={"Cookie": f"{COOKIE_NAME}=forged"}, reason=REASON, csrf="x")
        assert forged.status_code == 401
    unchanged(pk, purge_id)


def test_a_script_retries_with_the_bearer_token_and_names_itself(pk: Pk) -> None:
    purge_id = incomplete_purge(pk, "c1", message="the disk said no")
    with app_of(pk) as script:
        bearer = {"Authorization": f"Bearer {OPERATOR}", OPERATOR_HEADER: "deploy-bot"}
        assert retry(script, purge_id, headers=bearer, reason=REASON).status_code == 303  # no CSRF token to send
        refused = retry(script, purge_id, headers={"Authorization": f"Bearer {HOST}"}, reason=REASON)
        assert refused.status_code == 401
    [entry] = pk.purge_detail(purge_id).audit
    assert (entry.actor, entry.reason) == ("deploy-bot", REASON)

    again = incomplete_purge(pk, "c2", message="the disk said no")
    with app_of(pk) as script:
        assert retry(script, again, headers={"Authorization": f"Bearer {OPERATOR}"}, reason=REASON).status_code == 303
    assert pk.purge_detail(again).audit[0].actor == "operator"


def test_a_hostile_operator_name_and_reason_are_shown_as_text(pk: Pk) -> None:
    purge_id = incomplete_purge(pk, "c1", message="the disk said no")
    with app_of(pk) as hostile:
        assert sign_in(hostile, name=HOSTILE_NAME).status_code == 303
        assert retry(hostile, purge_id, reason=HOSTILE, csrf=csrf_of(hostile, purge_id)).status_code == 303
        html = page(hostile, f"/status/purges/{purge_id}")
    [row] = parse(html).find_all("tr", cls="audit")
    assert row.cells()[1:3] == [HOSTILE_NAME, HOSTILE]
    assert parse(html).by_id("operator").text == f"Signed in as {HOSTILE_NAME}"
    assert "<img" not in html and "<script" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_the_whole_app_serves_the_console_and_its_retry_form(pk: Pk) -> None:
    """Through ``create_app``: its request guard reads the form body and replays it."""
    purge_id = incomplete_purge(pk, "c1", message="the disk said no")
    with TestClient(create_app(pk, tokens=TOKENS)) as full:
        assert sign_in(full).status_code == 303
        older_browser = {"Origin": "http://testserver"}  # no Sec-Fetch-Site: its Origin names this host
        sent = retry(full, purge_id, headers=older_browser, reason=REASON, csrf=csrf_of(full, purge_id))
        assert sent.status_code == 303
        assert full.get("/status/workers").status_code == 200
    assert pk.purge_detail(purge_id).audit[0].actor == OPERATOR_NAME


def test_a_done_step_shows_its_earlier_error_as_history_not_as_a_failure(pk: Pk, client: TestClient) -> None:
    """A step that failed once and then was done keeps its last error: shown greyed, as what
    happened before it was done, never in the failure's red."""
    purge_id = purge_new_event(pk, "c1")
    assert settle(pk, purge_id).status == "complete"
    with pk.db.write() as conn:  # as a retried attempt leaves it
        conn.execute(
            text("UPDATE cleanup_steps SET last_error = 'OSError: disk full' WHERE purge_id = :p"), {"p": purge_id}
        )
    page_of = purge_page(client, purge_id)
    shown = page_of.find("tr", cls="step-error", data_error_of="bodies")
    assert shown.find("span", cls="earlier-error").text == "before it was done: OSError: disk full"
    assert shown.find_all("span", cls="error-text") == []
    named = page_of.find("tr", cls="step", data_kind="bodies").find("td", cls="error-name").find("a")
    assert named.text == "OSError" and "earlier" in named.classes
    assert not page_of.has_id("where-to-act")  # history: nothing to act on
