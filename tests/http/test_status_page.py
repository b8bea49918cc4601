"""The operator's HTML status page on SQLite and PostgreSQL, through a tiny app of its router:
sign-in (form, cookie, bearer), what the page shows and in which order, that it escapes every
text and never shows content, and the ledger and messaging summary.

The faults are real steps run with ``runner.run_step``: a blob store whose unlink fails with a
hostile message, a step's due time pushed into the past with raw SQL (stalled), and a ledger row
tampered with the append-only triggers out of the way.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import hypothesis
import pytest
from fastapi import FastAPI
from hypothesis import strategies as st
from sqlalchemy import bindparam, text

import commands
from commands import EventScope, NewAttachment
from commands.web import status as status_page
from commands.web.auth import COOKIE_NAME, Tokens
from schema.tables import UtcDateTime
from tests.helpers import FailingStore, settle

with warnings.catch_warnings():  # starlette warns at import when httpx2 is not installed
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
    from fastapi.testclient import TestClient

Pk = commands.Purgekeeper

OPERATOR = "operator-token-7f3a"
HOST = "host-token-91c2"
TOKENS = Tokens(api=HOST, operator=OPERATOR)
SECRET = "S3CR3T-content"
WHO = {"actor": "actor-not-shown@example.org", "reason": "reason-not-shown"}
HOSTILE = "<script>alert('pwned')</script> & \"quoted\""
LONG_AGO = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


# -- the app and its client -------------------------------------------------------------------------


def app_of(pk: Pk, tokens: Tokens = TOKENS, **options: Any) -> TestClient:
    app = FastAPI()
    app.include_router(status_page.router(pk, tokens, **options))
    return TestClient(app)


@pytest.fixture
def client(pk: Pk) -> Iterator[TestClient]:
    with app_of(pk) as test_client:
        yield test_client


def sign_in(client: TestClient, token: str = OPERATOR) -> Any:
    return client.post("/status/login", data={"token": token}, follow_redirects=False)


def page(client: TestClient) -> str:
    response = client.get("/status")
    assert response.status_code == 200, response.text
    return response.text


def article(html: str, purge_id: str) -> str:
    found = re.search(rf'<article [^>]*id="purge-{purge_id}".*?</article>', html, re.S)
    assert found, f"purge {purge_id} is not on the page"
    return found.group(0)


def section(html: str, name: str) -> str:
    found = re.search(rf'<section id="{name}">.*?</section>', html, re.S)
    assert found, name
    return found.group(0)


# -- purges in every state ----------------------------------------------------------------------------


def purge_new_event(pk: Pk, conversation_id: str, *, attachment: bool = False) -> str:
    pk.create_conversation(conversation_id)
    files = [NewAttachment.file(f"{SECRET} bytes".encode(), name="doc.txt")] if attachment else []
    event = pk.ingest_event(conversation_id, author="ada", body=f"{SECRET} body", attachments=files)
    scope = EventScope(event_ids=[event.id])
    acceptance = pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **WHO)
    return acceptance.purge_id


def incomplete_purge(pk: Pk, conversation_id: str, message: str = HOSTILE) -> str:
    """A purge whose attachments step fails on its only attempt with ``message``."""
    purge_id = purge_new_event(pk, conversation_id, attachment=True)
    with pk.db.write() as conn:
        conn.execute(text("UPDATE cleanup_steps SET max_attempts = 1 WHERE purge_id = :p"), {"p": purge_id})
    store = FailingStore(pk.blobs.blob_root, pk.blobs.file_root, message=message)
    status = settle(pk, purge_id, dataclasses.replace(pk.step_context(), blobs=store))
    assert status.status == "incomplete"
    return purge_id


def stall(pk: Pk, purge_id: str) -> None:
    """Raw SQL: the purge's waiting steps have been due since long ago (no worker runs)."""
    statement = text("UPDATE cleanup_steps SET next_attempt_at = :past WHERE purge_id = :p").bindparams(
        bindparam("past", type_=UtcDateTime())
    )
    with pk.db.write() as conn:
        assert conn.execute(statement, {"past": LONG_AGO, "p": purge_id}).rowcount >= 1
    assert pk.status(purge_id).stalled


def tamper_ledger(pk: Pk, sql: str) -> None:
    """Committed SQL with the ledger's append-only triggers out of the way (an attacker with the
    database password). The test database is thrown away."""
    with pk.db.engine.connect() as conn, conn.begin():
        if pk.db.is_sqlite:
            for trigger in ("pk_purge_ledger_no_update", "pk_purge_ledger_no_delete", "pk_purge_ledger_chain"):
                conn.execute(text(f"DROP TRIGGER IF EXISTS {trigger}"))
        else:
            conn.execute(text("ALTER TABLE purge_ledger DISABLE TRIGGER USER"))
        conn.execute(text(sql))
        if not pk.db.is_sqlite:
            conn.execute(text("ALTER TABLE purge_ledger ENABLE TRIGGER USER"))


def positions(html: str, needles: Sequence[str]) -> list[int]:
    found = [html.find(needle) for needle in needles]
    assert -1 not in found, dict(zip(needles, found, strict=True))
    return found


# -- signing in -----------------------------------------------------------------------------------------


def test_without_a_session_the_page_is_the_sign_in_form(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c1")
    response = client.get("/status")
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert '<form method="post" action="/status/login">' in response.text
    assert 'name="token"' in response.text and 'type="password"' in response.text
    assert purge_id not in response.text and "Ledger head" not in response.text
    assert 'http-equiv="refresh"' not in response.text  # a typed token is not wiped every 5 s
    assert "set-cookie" not in response.headers


WRONG_TOKENS = ("wrong-token", "", HOST, OPERATOR + " ", OPERATOR.upper())


def test_a_wrong_token_gets_401_the_form_and_an_error_and_no_cookie(client: TestClient) -> None:
    for presented in WRONG_TOKENS:
        response = sign_in(client, presented)
        assert response.status_code == 401, presented
        assert '<p class="login-error" role="alert">That token is not valid.</p>' in response.text
        assert '<form method="post" action="/status/login">' in response.text
        assert "set-cookie" not in response.headers
        assert client.get("/status").status_code == 401


def test_a_missing_token_field_is_a_wrong_token(client: TestClient) -> None:
    response = client.post("/status/login", data={"other": OPERATOR}, follow_redirects=False)
    assert response.status_code == 401 and "That token is not valid." in response.text


def test_the_right_token_sets_an_httponly_strict_cookie_that_is_not_the_token(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c1")
    response = sign_in(client)
    assert response.status_code == 303
    assert response.headers["location"] == "/status"
    cookie = response.headers["set-cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "samesite", "path", "max-age"} <= attributes
    assert "samesite=strict" in cookie.lower() and "path=/status;" in cookie.lower() + ";"
    assert "secure" not in attributes  # plain http here; Secure over https
    value = client.cookies[COOKIE_NAME]
    assert OPERATOR not in cookie and OPERATOR not in value and HOST not in value
    assert re.fullmatch(r"\d+\.[0-9a-f]{64}", value)

    html = page(client)
    assert purge_id in html and '<meta http-equiv="refresh" content="5">' in html
    with app_of(pk) as other:  # the cookie alone, in another client (and another router)
        fresh = other.get("/status", headers={"Cookie": f"{COOKIE_NAME}={value}"})
    assert fresh.status_code == 200 and purge_id in fresh.text


def forged_cookies() -> dict[str, str]:
    later = int(time.time()) + 3600
    valid = status_page.session_value(OPERATOR, expires=later)
    return {
        "the raw token": OPERATOR,
        "a changed mac": valid[:-1] + ("0" if valid[-1] != "0" else "1"),
        "a moved expiry": f"{later + 1}.{valid.partition('.')[2]}",
        "an expired session": status_page.session_value(OPERATOR, expires=int(time.time()) - 1),
        "signed with the host token": status_page.session_value(HOST, expires=later),
        "no mac": f"{later}.",
        "garbage": "not-a-session",
    }


def test_a_forged_expired_or_foreign_cookie_is_refused(client: TestClient) -> None:
    for forgery, value in forged_cookies().items():
        response = client.get("/status", headers={"Cookie": f"{COOKIE_NAME}={value}"})
        assert response.status_code == 401, forgery
    genuine = status_page.session_value(OPERATOR, expires=int(time.time()) + 3600)
    assert client.get("/status", headers={"Cookie": f"{COOKIE_NAME}={genuine}"}).status_code == 200
    for digit in ("\u00b2", "\u0663"):  # str.isdigit() says yes, int() says no (or reads 3)
        assert not status_page.session_valid(f"{digit}.{genuine.partition('.')[2]}", OPERATOR, now=time.time())


@hypothesis.settings(
    max_examples=300, deadline=None, suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture]
)
@hypothesis.given(
    value=st.one_of(
        st.text(max_size=300),
        st.builds(lambda digits, mac: f"{digits}.{mac}", st.text("0123456789", min_size=1, max_size=6000), st.text()),
        st.sampled_from(["9" * 5000 + ".00", "1" * 4301, ".", "..", "1.", "-1.ab", "1e309.x", "\u0000.1"]),
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


def test_sign_out_clears_the_cookie(client: TestClient) -> None:
    assert sign_in(client).status_code == 303
    assert client.get("/status").status_code == 200
    response = client.post("/status/logout", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/status"
    cookie = response.headers["set-cookie"].lower()
    assert cookie.startswith(f"{COOKIE_NAME}=") and "max-age=0" in cookie and "path=/status" in cookie
    assert COOKIE_NAME not in client.cookies
    assert client.get("/status").status_code == 401


def test_a_bearer_operator_token_shows_the_page_and_the_host_token_does_not(pk: Pk, client: TestClient) -> None:
    purge_id = purge_new_event(pk, "c1")
    shown = client.get("/status", headers={"Authorization": f"Bearer {OPERATOR}"})
    assert shown.status_code == 200 and purge_id in shown.text
    assert client.get("/status", headers={"Authorization": f"Bearer {HOST}"}).status_code == 401
    assert client.get("/status", headers={"Authorization": f"Basic {OPERATOR}"}).status_code == 401
    with app_of(pk, Tokens(api=HOST)) as host_only:  # no operator token: the host token operates
        assert host_only.get("/status", headers={"Authorization": f"Bearer {HOST}"}).status_code == 200
        assert sign_in(host_only, HOST).status_code == 303


def test_responses_forbid_scripts_framing_and_caching(client: TestClient) -> None:
    for response in (client.get("/status"), sign_in(client), client.get("/status")):
        assert response.headers["cache-control"] == "no-store"
        csp = response.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp and "frame-ancestors 'none'" in csp
        assert response.headers["x-content-type-options"] == "nosniff"


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

    top, rest = section(html, "attention"), section(html, "recent")
    assert failed in top and stalled in top and done not in top and waiting not in top
    assert done in rest and waiting in rest and failed not in rest and stalled not in rest
    order = positions(html, [failed, stalled, done, waiting])  # where each purge first appears
    assert max(order[:2]) < min(order[2:]), "a purge needing attention is below another"

    failed_html = article(html, failed)
    assert re.search(r'class="purge incomplete"', failed_html)
    assert '<span class="badge incomplete">INCOMPLETE</span>' in failed_html
    assert (
        '<tr class="step incomplete" data-kind="attachments"><td>attachments</td><td>incomplete</td><td>1/1</td>'
        in (failed_html)
    )
    assert "OSError: could not unlink the file of blob " in failed_html  # by blob id, never the file's path
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt; &amp; &quot;quoted&quot;" in failed_html
    assert "<script" not in html  # nowhere, not only in the error text

    stalled_html = article(html, stalled)
    assert 'class="purge stalled"' in stalled_html and '<span class="badge stalled">STALLED</span>' in stalled_html
    assert "INCOMPLETE" not in stalled_html and "2000-01-01T00:00:00" in stalled_html
    assert 'data-status="complete"' in article(html, done) and 'class="purge"' in article(html, done)
    assert 'data-status="accepted"' in article(html, waiting)
    assert re.search(r'id="incomplete-count">1<.*id="stalled-count">1<', html, re.S)


def test_the_attention_list_is_newest_first(pk: Pk, client: TestClient) -> None:
    older = incomplete_purge(pk, "c-older", message="older failure")
    newer = purge_new_event(pk, "c-newer")
    stall(pk, newer)
    sign_in(client)
    top = section(page(client), "attention")
    assert positions(top, [newer, older]) == sorted(positions(top, [newer, older]))


def test_a_purge_needing_attention_outside_the_recent_window_is_still_on_top(pk: Pk) -> None:
    failed = incomplete_purge(pk, "c-failed", message="failed long ago")
    stalled = purge_new_event(pk, "c-stalled")
    stall(pk, stalled)
    newer = [purge_new_event(pk, f"c-new-{n}") for n in range(3)]
    with app_of(pk, recent=2) as client:
        sign_in(client)
        html = page(client)
    top, rest = section(html, "attention"), section(html, "recent")
    assert failed in top and "failed long ago" in top and stalled in top
    assert [p in rest for p in newer] == [False, True, True]  # only the newest two are listed


def test_step_progress_attempts_and_parked_steps_are_shown(pk: Pk, client: TestClient) -> None:
    done = purge_new_event(pk, "c-done", attachment=True)
    settle(pk, done)
    pk.create_conversation("c-whole")
    pk.ingest_event("c-whole", author="ada", body=f"{SECRET} body")
    whole = pk.purge_conversation("c-whole", **WHO).purge_id
    sign_in(client)
    html = page(client)
    rows = re.findall(r'<tr class="step[^"]*" data-kind="(\w+)">(.*?)</tr>', article(html, done))
    cells = {kind: re.findall(r"<td>(.*?)</td>", row) for kind, row in rows}
    assert cells["attachments"][:5] == ["attachments", "done", "1/5", "1", "0"]
    assert cells["bodies"][:3] == ["bodies", "done", "1/5"]
    parked = article(html, whole)
    assert re.search(
        r'data-kind="attachments"><td>attachments</td><td>pending</td><td>0/5</td>.*?'
        r"<td>after the bodies step</td>",
        parked,
    )


def test_each_kind_is_named_and_an_erased_author_is_not(pk: Pk, client: TestClient) -> None:
    pk.create_conversation("c-ada")
    pk.ingest_event("c-ada", author="ada-lovelace", body=f"{SECRET} body")
    preview = pk.preview_author_erasure("ada-lovelace")
    erased = pk.erase_author("ada-lovelace", scope_digest=preview.scope_digest, **WHO).purge_id
    whole = pk.purge_conversation("c-ada", **WHO).purge_id
    sign_in(client)
    html = page(client)
    assert "author erasure, ledger seq 1" in article(html, erased)
    assert "conversation purge, ledger seq 2" in article(html, whole)
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
    empty = page(client)
    assert 'id="ledger-seq">0<' in empty and 'id="ledger-verified" class="ok">yes<' in empty
    for conversation_id in ("c1", "c2"):
        purge_new_event(pk, conversation_id)
    report = pk.verify_ledger()
    html = page(client)
    assert 'id="ledger-seq">2<' in html and f'<code id="ledger-head">{report.head_hash}</code>' in html
    assert 'id="ledger-verified" class="ok">yes<' in html and 'id="messaging" class="ok">available<' in html
    assert "ledger-problems" not in html

    tamper_ledger(pk, "UPDATE purge_ledger SET reason = 'nothing happened' WHERE seq = 1")
    pk.gate.stop_audit()  # the test takes the audit's step itself, at once
    pk.gate.audit_cycle = 0
    pk.gate.audit_step()
    broken = page(client)
    assert 'id="ledger-verified" class="bad">NO<' in broken
    assert re.search(r'<ul id="ledger-problems"><li>tampered row at seq 1 ', broken)
    assert not pk.gate.evaluate().open  # as at the next start, or after a merge
    closed = page(client)
    assert 'id="messaging" class="bad">UNAVAILABLE<' in closed
    assert re.search(r'<ul id="messaging-problems"><li>the ledger does not verify: tampered row at seq 1 ', closed)
    assert "nothing happened" not in closed  # a problem names the row, never its fields


def test_a_merge_under_way_shows_messaging_unavailable_with_its_reason(pk: Pk, client: TestClient) -> None:
    with pk.db.write() as conn:  # what a merge writes first, seen by every process
        conn.execute(text("UPDATE ledger_head SET gate_reason = 'a <b>ledger</b> merge is under way' WHERE id = 1"))
    sign_in(client)
    html = page(client)
    assert 'id="messaging" class="bad">UNAVAILABLE<' in html and 'id="ledger-verified" class="ok">yes<' in html
    assert '<ul id="messaging-problems"><li>a &lt;b&gt;ledger&lt;/b&gt; merge is under way</li></ul>' in html


def test_a_database_fault_is_a_503_page_not_a_traceback(
    pk: Pk, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def busy(*args: Any, **kwargs: Any) -> Any:
        raise commands.InfrastructureError("the database stayed busy after 5 attempts")

    sign_in(client)
    monkeypatch.setattr(pk, "list_purges", busy)
    response = client.get("/status")
    assert response.status_code == 503 and response.headers["content-type"].startswith("text/html")
    assert "infrastructure_error: the database stayed busy after 5 attempts" in response.text
    assert 'http-equiv="refresh"' in response.text and "Traceback" not in response.text


# -- retention and legal holds ----------------------------------------------------------------------------


def set_policy(pk: Pk, policy_id: str, max_age: dt.timedelta, conversation_id: str | None = None) -> str:
    preview = pk.preview_retention(max_age=max_age, conversation_id=conversation_id)
    return pk.set_retention(
        policy_id, max_age=max_age, conversation_id=conversation_id, scope_digest=preview.scope_digest, **WHO
    ).purge_id


def row_cells(html: str, attribute: str, value: str) -> list[str]:
    found = re.search(rf'<tr [^>]*{attribute}="{value}">(.*?)</tr>', html, re.S)
    assert found, f"no row {attribute}={value}"
    return re.findall(r"<td>(.*?)</td>", found.group(1))


def test_without_policies_or_holds_the_section_says_so(client: TestClient) -> None:
    sign_in(client)
    retention = section(page(client), "retention")
    assert "<h2>Retention and holds</h2>" in retention
    assert "No retention policies." in retention and "No legal holds in force." in retention
    assert 'id="retention-policies-count">0<' in retention and 'id="legal-holds-count">0<' in retention


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
        assert f'id="retention-{name}">{expected}<' in retention, name
    assert 'id="legal-holds-count">1<' in retention
    assert row_cells(retention, "data-policy", "p-all") == [
        "<code>p-all</code>",
        "every conversation",
        "30 days",
        status_page.plain(policies["p-all"].last_run),
        status_page.plain(policies["p-all"].next_run),
        f"<code>{run}</code>",
    ]
    own = row_cells(retention, "data-policy", "p-own")
    assert own[1:3] == ["conversation c-own", "12 hours"] and own[5] == ""  # checked, nothing expired: no run
    held = row_cells(retention, "data-hold", "h-case")
    assert held == ["<code>h-case</code>", "2", "1", status_page.plain(pk.list_holds()[0].placed_at)]

    run_article = article(html, run)
    assert "retention purge (policy p-all), ledger seq" in run_article
    bodies = row_cells(run_article, "data-kind", "bodies")
    assert bodies[:6] == ["bodies", "done", "1/5", "1", "0", "1"]  # expired 1, held 1
    assert "legal hold h-case placed, ledger seq 1" in article(html, placed.purge_id)
    for hidden in ("ada-lovelace", "grace-hopper", SECRET, "reason-not-shown", "counsel@example.org", WHO["actor"]):
        assert hidden not in html, hidden
