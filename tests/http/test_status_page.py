"""The operator console's overview and sign-in on SQLite and PostgreSQL, through a tiny app of
its router: sign-in (form, itsdangerous-signed cookie, bearer), what the overview shows and in
which order, that it escapes every text and never shows content, and the ledger and messaging
summary. The console's other pages are in ``test_console_*.py``; the helpers all share are in
``tests/helpers/console.py``.

The faults are real steps run with ``runner.run_step``: a blob store whose unlink fails with a
hostile message, a step's due time pushed into the past with raw SQL (stalled), and a ledger row
tampered with the append-only triggers out of the way. Pages are read with a small tree builder
on the standard library's ``html.parser``, and checked raw where escaping is the point.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
from hypothesis import strategies as st
from itsdangerous import URLSafeTimedSerializer
from sqlalchemy import text

import purgekeeper
from purgekeeper.commands.web import pages, times
from purgekeeper.commands.web.auth import COOKIE_NAME, SESSION_SALT, Session, Tokens
from tests.helpers import settle
from tests.helpers.console import (
    HOST,
    HOSTILE,
    OPERATOR,
    OPERATOR_NAME,
    SECRET,
    WHO,
    Element,
    TestClient,
    app_of,
    article,
    incomplete_purge,
    page,
    parse,
    positions,
    purge_new_event,
    section,
    sign_in,
    signer,
    stall,
    step_row,
    tamper_ledger,
)

Pk = purgekeeper.Purgekeeper


# -- the client ------------------------------------------------------------------------------------


@pytest.fixture
def client(pk: Pk) -> Iterator[TestClient]:
    with app_of(pk) as test_client:
        yield test_client


# -- signing in -----------------------------------------------------------------------------------------


def test_without_a_session_the_page_is_the_sign_in_form(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c1")
    response = client.get("/status")
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["www-authenticate"].startswith("Bearer")
    form = parse(response.text).find("form", id="sign-in")
    assert form.attrs["method"] == "post" and form.attrs["action"] == "/status/login"
    assert form.find("input", name="token").attrs["type"] == "password"
    assert "required" in form.find("input", name="name").attrs
    assert form.find("input", name="next").attrs["value"] == "/status"
    assert purge_id not in response.text and "Ledger head" not in response.text
    assert 'http-equiv="refresh"' not in response.text  # a typed token is not wiped every 5 s
    assert "set-cookie" not in response.headers
    hint = parse(response.text).by_id("token-hint").text  # issue 26: where the token is, never the token
    assert hint == "The console takes the operator token: it is PURGEKEEPER_OPERATOR_TOKEN in the server's environment."
    assert OPERATOR not in response.text and HOST not in response.text


WRONG_TOKENS = ("wrong-token", "", HOST, OPERATOR + " ", OPERATOR.upper())


def test_a_wrong_token_gets_401_the_form_and_an_error_and_no_cookie(client: TestClient) -> None:
    for presented in WRONG_TOKENS:
        response = sign_in(client, presented)
        assert response.status_code == 401, presented
        shown = parse(response.text)
        assert shown.find("p", cls="login-error").text == "That token is not valid."
        assert shown.find("input", name="name").attrs["value"] == OPERATOR_NAME  # kept; the token is not
        assert "value" not in shown.find("input", name="token").attrs
        assert "set-cookie" not in response.headers
        assert client.get("/status").status_code == 401


def test_a_missing_token_field_is_a_wrong_token(client: TestClient) -> None:
    response = client.post("/status/login", data={"name": OPERATOR_NAME, "other": OPERATOR}, follow_redirects=False)
    assert response.status_code == 401 and "That token is not valid." in response.text


UNUSABLE_NAMES = {"": "must not be empty", "   ": "must not be empty", "x" * 201: "longer than 200"}


def test_the_right_token_without_a_usable_name_is_refused_with_the_reason(client: TestClient) -> None:
    for name, said in UNUSABLE_NAMES.items():
        response = sign_in(client, name=name)
        assert response.status_code == 400 and "set-cookie" not in response.headers
        assert said in parse(response.text).find("p", cls="login-error").text


def test_the_right_token_sets_an_httponly_strict_itsdangerous_cookie(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c1")
    response = sign_in(client)
    assert response.status_code == 303
    assert response.headers["location"] == "/status"
    cookie = response.headers["set-cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "samesite", "path", "max-age"} <= attributes
    assert "samesite=strict" in cookie.lower() and "path=/status;" in cookie.lower() + ";"
    assert f"max-age={12 * 3600}" in cookie.lower()
    assert "secure" not in attributes  # plain http here; Secure over https
    value = client.cookies[COOKIE_NAME]
    assert OPERATOR not in cookie and OPERATOR not in value and HOST not in value

    # itsdangerous' own reader, keyed by the operator token, finds the name and a CSRF token
    reader = URLSafeTimedSerializer(
        OPERATOR, salt=SESSION_SALT, signer_kwargs={"key_derivation": "hmac", "digest_method": hashlib.sha256}
    )
    session = reader.loads(value, max_age=60)
    assert session["operator"] == OPERATOR_NAME and len(session["csrf"]) >= 32

    html = page(client)
    assert purge_id in html and '<meta http-equiv="refresh" content="5">' in html
    assert parse(html).by_id("operator").text == f"Signed in as {OPERATOR_NAME}"
    with app_of(pk) as other:  # the cookie alone, in another client (and another router)
        fresh = other.get("/status", headers={"Cookie": f"{COOKIE_NAME}={value}"})
    assert fresh.status_code == 200 and purge_id in fresh.text


def test_over_https_the_cookie_is_secure(pk: Pk) -> None:
    with app_of(pk) as secure:
        secure.base_url = secure.base_url.copy_with(scheme="https")
        response = sign_in(secure)
    assert response.status_code == 303 and "secure" in response.headers["set-cookie"].lower().split("; ")


def _rewrite_payload(value: str, **changes: str) -> str:
    """The cookie with its payload changed and the old signature kept."""
    payload, _, stamp_and_mac = value.partition(".")
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged = base64.urlsafe_b64encode(json.dumps({**data, **changes}).encode()).rstrip(b"=").decode()
    return f"{forged}.{stamp_and_mac}"


def forged_cookies() -> dict[str, str]:
    genuine = signer().sign(Session.start(OPERATOR_NAME))
    middle = len(genuine) - 10  # inside the signature (its last character holds padding bits too)
    flipped = "A" if genuine[middle] != "A" else "B"
    ttl = 12 * 3600
    return {
        "the raw token": OPERATOR,
        "a changed signature": genuine[:middle] + flipped + genuine[middle + 1 :],
        "a changed name": _rewrite_payload(genuine, operator="mallory"),
        "expired": signer(clock=lambda: time.time() - ttl - 5).sign(Session.start(OPERATOR_NAME)),
        "signed in the future": signer(clock=lambda: time.time() + 3600).sign(Session.start(OPERATOR_NAME)),
        "signed with the host token": signer(HOST).sign(Session.start(OPERATOR_NAME)),
        "another salt": URLSafeTimedSerializer(OPERATOR).dumps({"operator": "x", "csrf": "y" * 40}),
        "no signature": genuine.rpartition(".")[0],
        "garbage": "not-a-session",
    }


def test_a_forged_expired_or_foreign_cookie_is_refused(client: TestClient) -> None:
    for forgery, value in forged_cookies().items():
        response = client.get("/status", headers={"Cookie": f"{COOKIE_NAME}={value}"})
        assert response.status_code == 401, forgery
    genuine = signer().sign(Session.start(OPERATOR_NAME))
    assert client.get("/status", headers={"Cookie": f"{COOKIE_NAME}={genuine}"}).status_code == 200


def test_a_session_lasts_its_time_to_live_and_no_longer(pk: Pk) -> None:
    ttl = dt.timedelta(minutes=30)
    with app_of(pk, session_ttl=ttl) as short:
        within = signer(ttl=ttl, clock=lambda: time.time() - 29 * 60).sign(Session.start(OPERATOR_NAME))
        beyond = signer(ttl=ttl, clock=lambda: time.time() - 31 * 60).sign(Session.start(OPERATOR_NAME))
        assert short.get("/status", headers={"Cookie": f"{COOKIE_NAME}={within}"}).status_code == 200
        assert short.get("/status", headers={"Cookie": f"{COOKIE_NAME}={beyond}"}).status_code == 401
        assert "max-age=1800" in sign_in(short).headers["set-cookie"].lower()


@hypothesis.settings(
    max_examples=300, deadline=None, suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture]
)
@hypothesis.given(
    value=st.one_of(
        st.text(max_size=300),
        st.builds(lambda digits, mac: f"{digits}.{mac}", st.text("0123456789", min_size=1, max_size=6000), st.text()),
        st.builds(lambda a, b, c: f"{a}.{b}.{c}", st.text(max_size=80), st.text(max_size=20), st.text(max_size=60)),
        st.sampled_from(
            ["9" * 5000 + ".00", "1" * 4301, ".", "..", "1.", "-1.ab", "1e309.x", "\u0000.1", "e30.AAAA.x"]
        ),
    )
)
def test_any_cookie_value_gets_the_login_page_never_a_server_error(client: TestClient, value: str) -> None:
    """Issue 11, case 14: fuzzed session cookies, among them an expiry of 5,000 digits (past
    Python's integer-string limit). Each is refused with 401 and the sign-in form."""
    response = client.get("/status", headers={"Cookie": f"{COOKIE_NAME}={_cookie_safe(value)}"})
    assert response.status_code == 401, (value[:80], response.status_code)


def _cookie_safe(value: str) -> str:
    """What a client can put in a Cookie header: visible ASCII without ; or a quote."""
    return "".join(c for c in value if " " < c < "\x7f" and c not in ';"\\,') or "x"


def test_a_session_ends_when_the_token_changes(pk: Pk, client: TestClient) -> None:
    assert sign_in(client).status_code == 303
    value = client.cookies[COOKIE_NAME]
    with app_of(pk, Tokens(api=HOST, operator="rotated-operator-token")) as rotated:
        assert rotated.get("/status", headers={"Cookie": f"{COOKIE_NAME}={value}"}).status_code == 401
    with app_of(pk) as same:
        assert same.get("/status", headers={"Cookie": f"{COOKIE_NAME}={value}"}).status_code == 200


def test_sign_out_clears_the_cookie(client: TestClient) -> None:
    assert sign_in(client).status_code == 303
    assert client.get("/status").status_code == 200
    response = client.post("/status/logout", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/status"
    cookie = response.headers["set-cookie"].lower()
    assert cookie.startswith(f"{COOKIE_NAME}=") and "max-age=0" in cookie and "path=/status" in cookie
    assert COOKIE_NAME not in client.cookies
    assert client.get("/status").status_code == 401


@pytest.mark.parametrize("forged", [{"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://elsewhere.example"}])
def test_another_site_cannot_sign_the_operator_out(client: TestClient, forged: dict[str, str]) -> None:
    """A form on another site posting to /status/logout (a top-level POST carries the
    SameSite=Strict cookie's deletion with it): refused, the session stays."""
    assert sign_in(client).status_code == 303
    response = client.post("/status/logout", headers=forged, follow_redirects=False)
    assert response.status_code == 403 and "set-cookie" not in response.headers
    assert client.get("/status").status_code == 200


def test_signing_in_returns_to_the_console_page_asked_for_and_nowhere_else(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c1")
    asked = client.get(f"/status/purges/{purge_id}")
    assert asked.status_code == 401
    wanted = parse(asked.text).find("input", name="next").attrs["value"]
    assert wanted == f"/status/purges/{purge_id}"
    assert sign_in(client, next=wanted).headers["location"] == wanted
    for elsewhere in ("https://evil.example/status", "//evil.example/status", "/statusx", "/status/\\evil", "/v1/x"):
        assert sign_in(client, next=elsewhere).headers["location"] == "/status", elsewhere


def test_a_bearer_operator_token_shows_the_page_and_the_host_token_does_not(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c1")
    shown = client.get("/status", headers={"Authorization": f"Bearer {OPERATOR}"})
    assert shown.status_code == 200 and purge_id in shown.text
    assert parse(shown.text).by_id("operator").text == "Signed in as operator"
    assert client.get("/status", headers={"Authorization": f"Bearer {HOST}"}).status_code == 401
    assert client.get("/status", headers={"Authorization": f"Basic {OPERATOR}"}).status_code == 401
    with app_of(pk, Tokens(api=HOST)) as host_only:  # no operator token: the host token operates
        assert host_only.get("/status", headers={"Authorization": f"Bearer {HOST}"}).status_code == 200
        assert sign_in(host_only, HOST).status_code == 303


def test_responses_forbid_scripts_framing_and_caching(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c1")
    responses = [client.get("/status"), sign_in(client), client.get("/status")]
    shown = (f"/status/purges/{purge_id}", "/status/workers", "/status/purges/nope", "/status/search?q=c")
    responses += [client.get(path) for path in shown]
    for response in responses:
        assert response.headers["cache-control"] == "no-store"
        csp = response.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp and "frame-ancestors 'none'" in csp
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "no-referrer"


def test_the_inline_stylesheet_is_the_one_the_policy_allows(client: TestClient) -> None:
    signed_out = client.get("/status")
    sign_in(client)
    for response in (signed_out, client.get("/status")):
        [style] = re.findall(r"<style>(.*?)</style>", response.text, re.S)
        digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
        assert f"style-src 'sha256-{digest}'" in response.headers["content-security-policy"]
        assert style == pages.STYLE and "<" not in style


# -- what the page shows ---------------------------------------------------------------------------------


def test_incomplete_and_stalled_purges_come_first_marked_with_their_errors(pk: Pk, client: TestClient) -> None:
    failed = incomplete_purge(pk, "c-failed")
    stalled = purge_new_event(pk, "c-stalled")
    stall(pk, stalled)
    done = purge_new_event(pk, "c-done", attachment=True)
    assert settle(pk, done).status == "complete"
    waiting = purge_new_event(pk, "c-waiting")  # the newest: accepted, nothing attempted yet
    sign_in(client)
    html = page(client)

    top, rest = section(html, "attention").text, section(html, "recent").text
    assert failed in top and stalled in top and done not in top and waiting not in top
    assert done in rest and waiting in rest and failed not in rest and stalled not in rest
    order = positions(html, [failed, stalled, done, waiting])  # where each purge first appears
    assert max(order[:2]) < min(order[2:]), "a purge needing attention is below another"

    failed_row = article(html, failed)  # one table row per purge (issue 26), no card
    assert failed_row.tag == "tr" and failed_row.classes == {"purge", "incomplete"}
    assert failed_row.attrs["data-status"] == "incomplete"
    assert failed_row.find("span", cls="badge").text == "INCOMPLETE"
    assert failed_row.find("a", cls="purge-link").attrs["href"] == f"/status/purges/{failed}"
    assert cells_of(failed_row)[1:] == ["incomplete INCOMPLETE", "content purge seq 1", "steps 1/2"]
    error = failed_row.find("span", cls="error-text").text
    assert failed_row.find("td", cls="last-error").text.startswith("attachments: OSError: ")
    assert error.startswith("OSError: could not unlink the file of blob ")  # by blob id, never the path
    assert error.endswith(" ".join(HOSTILE.split()))
    assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt; &amp; &#34;quoted&#34;" in html
    assert "<script" not in html  # nowhere, not only in the error text

    stalled_row = article(html, stalled)
    assert stalled_row.classes == {"purge", "stalled"} and stalled_row.find("span", cls="badge").text == "STALLED"
    assert "INCOMPLETE" not in stalled_row.text
    due_cell = stalled_row.find("td", cls="last-error")  # issue 26: overdue, not "ago"
    assert re.fullmatch(r"bodies: due, overdue by \d+ d, no worker has taken it", due_cell.text), due_cell.text
    assert due_cell.find("time").attrs["title"] == "2000-01-01T00:00:00Z"
    assert article(html, done).attrs["data-status"] == "complete" and article(html, done).classes == {"purge"}
    assert article(html, waiting).attrs["data-status"] == "accepted"
    shown = parse(html)
    assert (shown.by_id("incomplete-count").text, shown.by_id("stalled-count").text) == ("1", "1")


def test_the_attention_list_is_newest_first(pk: Pk, client: TestClient) -> None:
    older = incomplete_purge(pk, "c-older", message="older failure")
    newer = purge_new_event(pk, "c-newer")
    stall(pk, newer)
    sign_in(client)
    top = section(page(client), "attention")
    assert [row.attrs["id"] for row in top.find_all("tr", cls="purge")] == [f"purge-{newer}", f"purge-{older}"]


def test_a_purge_needing_attention_outside_the_recent_window_is_still_on_top(pk: Pk) -> None:
    failed = incomplete_purge(pk, "c-failed", message="failed long ago")
    stalled = purge_new_event(pk, "c-stalled")
    stall(pk, stalled)
    newer = [purge_new_event(pk, f"c-new-{n}") for n in range(3)]
    with app_of(pk, page_size=2) as client:
        sign_in(client)
        html = page(client)
    top, rest = section(html, "attention").text, section(html, "recent").text
    assert failed in top and "failed long ago" in top and stalled in top
    assert [p in rest for p in newer] == [False, True, True]  # only the newest two are listed


def test_each_row_counts_steps_done_and_a_purge_page_shows_progress(pk: Pk, client: TestClient) -> None:
    done = purge_new_event(pk, "c-done", attachment=True)
    settle(pk, done)
    pk.create_conversation("c-whole")
    pk.ingest_event("c-whole", author="ada", body=f"{SECRET} body")
    whole = pk.purge_conversation("c-whole", **WHO).purge_id
    pk.place_hold("h-1", conversation_ids=["c-other"], **WHO)
    sign_in(client)
    html = page(client)
    assert article(html, done).find("td", cls="steps-done").text == "2/2"
    assert article(html, whole).find("td", cls="steps-done").attrs["title"] == "attachments pending, bodies pending"
    hold_row = parse(html).find("tr", cls="purge", data_kind="hold")  # no "No cleanup steps" card (issue 26)
    assert cells_of(hold_row)[1:] == ["complete", "legal hold h-1 placed seq 3", "no cleanup"]
    age = article(html, done).find("td", cls="age").text
    assert age == "now" or re.fullmatch(r"\d+ s ago", age), age

    detail = parse(page(client, f"/status/purges/{done}"))
    assert step_row(detail, "attachments")[:5] == ["attachments", "done", "1/5", "1", "0"]
    assert step_row(detail, "bodies")[:3] == ["bodies", "done", "1/5"]
    parked = step_row(parse(page(client, f"/status/purges/{whole}")), "attachments")
    assert parked[:3] == ["attachments", "pending", "0/5"] and parked[-2] == "after the bodies step"


def test_each_kind_is_named_and_an_erased_author_is_not(pk: Pk, client: TestClient) -> None:
    pk.create_conversation("c-ada")
    pk.ingest_event("c-ada", author="ada-lovelace", body=f"{SECRET} body")
    preview = pk.preview_author_erasure("ada-lovelace")
    erased = pk.erase_author("ada-lovelace", scope_digest=preview.scope_digest, **WHO).purge_id
    whole = pk.purge_conversation("c-ada", **WHO).purge_id
    sign_in(client)
    html = page(client)
    assert article(html, erased).find("td", cls="kind").text == "author erasure seq 1"
    assert article(html, whole).find("td", cls="kind").text == "conversation purge seq 2"
    assert "ada-lovelace" not in html and SECRET not in html


def test_the_page_never_shows_content_actor_or_reason(pk: Pk, client: TestClient) -> None:
    accepted = purge_new_event(pk, "c1", attachment=True)  # fenced, bodies still in the database
    incomplete_purge(pk, "c2", message="unlink failed")
    sign_in(client)
    html = page(client)
    assert accepted in html
    for hidden in (SECRET, WHO["actor"], WHO["reason"], "doc.txt"):
        assert hidden not in html
    assert not re.search(r"\bada\b", html)  # the author (as a word: hex ids may hold "ada")


def test_the_ledger_head_and_its_verification_are_shown(pk: Pk, client: TestClient) -> None:
    sign_in(client)
    empty = parse(page(client))
    assert empty.by_id("ledger-seq").text == "0" and empty.by_id("ledger-verified").text == "yes"
    for conversation_id in ("c1", "c2"):
        purge_new_event(pk, conversation_id)
    report = pk.verify_ledger()
    shown = parse(page(client))
    assert shown.by_id("ledger-seq").text == "2" and shown.by_id("ledger-head").text == report.head_hash
    assert shown.by_id("ledger-verified").classes == {"ok"} and shown.by_id("messaging").text == "available"
    assert not shown.has_id("ledger-problems")

    tamper_ledger(pk, "UPDATE purge_ledger SET reason = 'nothing happened' WHERE seq = 1")
    pk.gate.stop_audit()  # the test takes the audit's step itself, at once
    pk.gate.audit_cycle = 0
    pk.gate.audit_step()
    broken = parse(page(client))
    assert broken.by_id("ledger-verified").text == "NO" and broken.by_id("ledger-verified").classes == {"bad"}
    assert broken.by_id("ledger-problems").find_all("li")[0].text.startswith("tampered row at seq 1 ")
    assert not pk.gate.evaluate().open  # as at the next start, or after a merge
    closed_html = page(client)
    closed = parse(closed_html)
    assert closed.by_id("messaging").text == "UNAVAILABLE"
    problems = [item.text for item in closed.by_id("messaging-problems").find_all("li")]
    assert problems[0].startswith("the ledger does not verify: tampered row at seq 1 ")
    assert "nothing happened" not in closed_html  # a problem names the row, never its fields


def test_a_merge_under_way_shows_messaging_unavailable_with_its_reason(pk: Pk, client: TestClient) -> None:
    with pk.db.write() as conn:  # what a merge writes first, seen by every process
        conn.execute(text("UPDATE ledger_head SET gate_reason = 'a <b>ledger</b> merge is under way' WHERE id = 1"))
    sign_in(client)
    html = page(client)
    shown = parse(html)
    assert shown.by_id("messaging").text == "UNAVAILABLE" and shown.by_id("ledger-verified").text == "yes"
    assert "<li>a &lt;b&gt;ledger&lt;/b&gt; merge is under way</li>" in html


def test_a_database_fault_is_a_503_page_not_a_traceback(
    pk: Pk, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def busy(*args: Any, **kwargs: Any) -> Any:
        raise purgekeeper.InfrastructureError("the database stayed busy after 5 attempts")

    sign_in(client)
    monkeypatch.setattr(pk, "list_purges", busy)
    response = client.get("/status")
    assert response.status_code == 503 and response.headers["content-type"].startswith("text/html")
    assert parse(response.text).by_id("problem").text == (
        "infrastructure_error: the database stayed busy after 5 attempts"
    )
    assert 'http-equiv="refresh"' in response.text and "Traceback" not in response.text


def cells_of(row: Element) -> list[str]:
    """A purge row's cells up to its age (which moves), the steps cell named."""
    cells = row.cells()
    return [*cells[:3], *([f"steps {cells[4]}"] if cells[4] and cells[4] != "no cleanup" else [cells[4]])]


# -- retention and legal holds ----------------------------------------------------------------------------


def set_policy(pk: Pk, policy_id: str, max_age: dt.timedelta, conversation_id: str | None = None) -> str:
    preview = pk.preview_retention(max_age=max_age, conversation_id=conversation_id)
    return pk.set_retention(
        policy_id, max_age=max_age, conversation_id=conversation_id, scope_digest=preview.scope_digest, **WHO
    ).purge_id


def test_without_policies_or_holds_the_section_says_so(client: TestClient) -> None:
    sign_in(client)
    retention = section(page(client), "retention")
    assert retention.find("h2").text == "Retention and holds"
    assert "No retention policies." in retention.text and "No legal holds in force." in retention.text
    assert retention.by_id("retention-policies-count").text == "0" and retention.by_id("legal-holds-count").text == "0"


def test_policies_holds_and_runs_are_shown_by_id_and_count_never_an_author(pk: Pk, client: TestClient) -> None:
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=40)
    for conversation_id in ("c-old", "c-kept", "c-own"):
        pk.create_conversation(conversation_id)
    pk.ingest_event("c-old", author="ada-lovelace", body=f"{SECRET} body", occurred_at=old)
    pk.ingest_event("c-kept", author="grace-hopper", body=f"{SECRET} kept", occurred_at=old)
    placed = pk.place_hold(
        "h-case", conversation_ids=["c-kept", "c-none"], authors=["grace-hopper"], actor="counsel@example.org",
        reason="reason-not-shown",
    )  # fmt: skip
    set_policy(pk, "p-all", dt.timedelta(days=30))
    set_policy(pk, "p-own", dt.timedelta(hours=12), "c-own")
    [run] = [outcome.purge_id for outcome in pk.run_retention() if outcome.purge_id]
    assert settle(pk, run).status == "complete"
    policies = {p.policy_id: p for p in pk.list_retention()}
    sign_in(client)
    html = page(client)

    retention = section(html, "retention")
    for name, expected in (("policies-count", 2), ("runs", 1), ("expired", 1), ("held", 1), ("fences", 0)):
        assert retention.by_id(f"retention-{name}").text == str(expected), name
    assert retention.by_id("legal-holds-count").text == "1"
    every = retention.find("tr", data_policy="p-all")
    assert every.cells()[:3] == ["p-all", "every conversation", "30 days"] and every.cells()[5] == run
    last_run, next_run = (cell.find("time").attrs["title"] for cell in every.find_all("td")[3:5])
    assert last_run == times.utc(policies["p-all"].last_run)  # type: ignore[arg-type]
    assert next_run == times.utc(policies["p-all"].next_run)  # type: ignore[arg-type]
    own = retention.find("tr", data_policy="p-own").cells()
    assert own[1:3] == ["conversation c-own", "12 hours"] and own[5] == ""  # checked, nothing expired: no run
    held = retention.find("tr", data_hold="h-case")
    assert held.cells()[:3] == ["h-case", "2", "1"]
    assert held.find("time").attrs["title"] == times.utc(pk.list_holds()[0].placed_at)

    assert article(html, run).find("td", cls="kind").text.startswith("retention purge (policy p-all) seq ")
    run_page = parse(page(client, f"/status/purges/{run}"))
    assert step_row(run_page, "bodies")[:6] == ["bodies", "done", "1/5", "1", "0", "1"]  # expired 1, held 1
    assert article(html, placed.purge_id).find("td", cls="kind").text == "legal hold h-case placed seq 1"
    for hidden in ("ada-lovelace", "grace-hopper", SECRET, "reason-not-shown", "counsel@example.org", WHO["actor"]):
        assert hidden not in html, hidden
