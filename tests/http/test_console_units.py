"""The console's pure parts, without a database: relative times and spans, the overview's
query (filters and cursor), the same-origin check on form posts, the session signer, and the
templates' autoescaping of every text a purge's page shows."""

from __future__ import annotations

import dataclasses
import datetime as dt
import errno
from pathlib import Path

import pytest

from purgekeeper.commands import touched
from purgekeeper.commands.records import Attempt, AuditEntry, PurgeDetail, PurgeStatus, StepProgress, StepState
from purgekeeper.commands.settings import Settings
from purgekeeper.commands.touched import PurgeTouched
from purgekeeper.commands.web import overview_page, pages, purge_page, times
from purgekeeper.commands.web.auth import (
    Operator,
    Session,
    SessionSigner,
    TokenHint,
    Tokens,
    load_or_create_token,
    same_origin,
    token_hint,
)
from purgekeeper.commands.web.status import STEP_HELPERS, Filters, Frame
from purgekeeper.schema.errors import ValidationError
from purgekeeper.storage import blobstore

NOW = dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("offset", "told"),
    [
        (dt.timedelta(0), "now"),
        (dt.timedelta(milliseconds=900), "now"),
        (dt.timedelta(milliseconds=-900), "now"),
        (dt.timedelta(seconds=40), "in 40 s"),
        (dt.timedelta(seconds=-40), "40 s ago"),
        (dt.timedelta(seconds=59.9), "in 59 s"),
        (dt.timedelta(minutes=3, seconds=59), "in 3 min"),
        (-dt.timedelta(minutes=3, seconds=20), "3 min ago"),
        (dt.timedelta(hours=2), "in 2 h"),
        (-dt.timedelta(hours=23, minutes=59), "23 h ago"),
        (-dt.timedelta(days=9500), "9500 d ago"),
    ],
)
def test_a_moment_is_told_relative_to_now_in_its_largest_whole_unit(offset: dt.timedelta, told: str) -> None:
    assert times.relative(NOW + offset, NOW) == told


def test_relative_times_do_not_depend_on_the_time_zone_they_are_given_in() -> None:
    elsewhere = dt.timezone(dt.timedelta(hours=-7))
    assert times.relative((NOW - dt.timedelta(minutes=5)).astimezone(elsewhere), NOW) == "5 min ago"
    assert times.utc(NOW.astimezone(elsewhere).replace(microsecond=123)) == "2026-12-01T09:30:00Z"


@pytest.mark.parametrize(
    ("seconds", "told"),
    [
        (0, "0 s"),
        (0.004, "0.00 s"),
        (0.345, "0.34 s"),
        (2.35, "2.4 s"),
        (40, "40 s"),
        (60, "1 min"),
        (200, "3 min 20 s"),
        (3600, "1 h"),
        (3661, "1 h 1 min"),
        (2 * 86_400 + 5 * 3600 + 59, "2 d 5 h"),
        (-200, "-3 min 20 s"),
    ],
)
def test_a_span_is_told_in_at_most_two_units(seconds: float, told: str) -> None:
    assert times.span(dt.timedelta(seconds=seconds)) == told


def test_the_overview_query_reads_filters_cursor_and_pause() -> None:
    assert Filters.parse({}) == Filters()
    assert Filters.parse({"status": "", "kind": "", "after": ""}) == Filters()
    parsed = Filters.parse({"status": "incomplete", "kind": "content", "after": "42", "refresh": "off"})
    assert parsed == Filters(status="incomplete", kind="content", after=42, paused=True)
    assert parsed.narrowed and not Filters(paused=True).narrowed
    for bad in ("-1", "4.2", "x", "1" * 20, "\u0663"):
        with pytest.raises(ValidationError):
            Filters.parse({"after": bad})


def test_the_overview_links_keep_the_filters_and_change_only_what_they_say() -> None:
    filters = Filters(status="incomplete", kind="retention_run", paused=True)
    assert filters.href("/status") == "/status?status=incomplete&kind=retention_run&refresh=off"
    assert filters.href("/status", after=7) == "/status?status=incomplete&kind=retention_run&after=7&refresh=off"
    assert filters.href("/status", paused=False) == "/status?status=incomplete&kind=retention_run"
    assert Filters().href("/root/status") == "/root/status"
    assert Filters(kind="a&b=c").href("/status") == "/status?kind=a%26b%3Dc"


@pytest.mark.parametrize(
    ("headers", "allowed"),
    [
        ({"host": "console.example"}, True),
        ({"host": "console.example", "origin": "https://console.example"}, True),
        ({"host": "console.example:8080", "origin": "http://console.example:8080"}, True),
        ({"host": "console.example", "sec-fetch-site": "same-origin"}, True),
        ({"host": "console.example", "origin": "https://evil.example"}, False),
        ({"host": "console.example", "origin": "https://console.example.evil.example"}, False),
        ({"host": "console.example", "origin": "null"}, False),
        ({"host": "console.example", "origin": "http://[::1"}, False),
        ({"host": "console.example", "sec-fetch-site": "cross-site"}, False),
        ({"host": "console.example", "sec-fetch-site": "same-site"}, False),
        ({"host": "console.example", "origin": "null", "sec-fetch-site": "same-origin"}, True),  # no-referrer
        ({"host": "console.example", "origin": "https://evil.example", "sec-fetch-site": "cross-site"}, False),
    ],
)
def test_a_form_post_from_another_site_is_told_apart(headers: dict[str, str], allowed: bool) -> None:
    assert same_origin(headers) is allowed


def test_a_session_round_trips_and_nothing_else_reads_as_one() -> None:
    signer = SessionSigner("the-token")
    session = Session.start("Grace")
    assert signer.read(signer.sign(session)) == session
    assert session.form_allows(session.csrf) and not session.form_allows(session.csrf[:-1])
    assert not session.form_allows("") and not session.form_allows(None)
    assert Session.start("Grace").csrf != session.csrf
    for value in (None, "", "x", "a.b.c", signer.sign(session) + "x"):
        assert signer.read(value) is None
    assert SessionSigner("another-token").read(signer.sign(session)) is None


def test_a_session_expires_after_its_time_to_live() -> None:
    clock = [1_800_000_000.0]
    signer = SessionSigner("the-token", ttl=dt.timedelta(minutes=10), clock=lambda: clock[0])
    value = signer.sign(Session.start("Grace"))
    clock[0] += 600
    assert signer.read(value) is not None
    clock[0] += 1
    assert signer.read(value) is None
    clock[0] -= 1200  # signed "in the future" from here
    assert signer.read(value) is None


# -- every text is escaped -------------------------------------------------------------------------

HOSTILE = "<img src=x onerror=alert(1)>\"'&"


def hostile_detail() -> PurgeDetail:
    """A purge whose every text field is markup (the ids and times are what the database holds)."""
    step = StepState(
        id="s1",
        kind=HOSTILE,
        status="incomplete",
        attempts=1,
        max_attempts=1,
        last_error=HOSTILE,
        next_attempt_at=NOW,
        progress=StepProgress(removed=0, retained_shared=1, retained_reasons={HOSTILE: {"count": 1}}, remaining=None),
        lease_owner=HOSTILE,
        lease_expires_at=NOW,
        updated_at=NOW,
    )
    status = PurgeStatus(
        purge_id="p1",
        kind=HOSTILE,
        status="incomplete",
        stalled=True,
        ledger_seq=1,
        accepted_at=NOW,
        actor="actor-never-shown",
        reason="reason-never-shown",
        steps=(step,),
        label=HOSTILE,
    )
    attempt = Attempt("s1", HOSTILE, 1, HOSTILE, NOW, NOW, "incomplete", HOSTILE)
    return PurgeDetail(status, (attempt,), (AuditEntry(HOSTILE, HOSTILE, HOSTILE, ("s1",), NOW),))


def test_every_text_a_page_shows_is_escaped_and_the_purges_own_actor_and_reason_never_shown() -> None:
    detail = hostile_detail()
    operator = Operator(HOSTILE, Session(HOSTILE, HOSTILE))
    frame = Frame(base="/status", operator=operator, now=NOW, refresh=True, toggle="/status?x=<y>")
    touched = PurgeTouched(
        "p1", HOSTILE, conversations=(HOSTILE,), authors=(HOSTILE,), bot_id=HOSTILE, hold_id=HOSTILE, events=1,
        attachments=1,
    )  # fmt: skip
    page = pages.render(
        "purge.html",
        frame=frame,
        detail=detail,
        purge=detail.status,
        touched=touched,
        attempts=purge_page.numbered(detail.attempts),
        rounds={"s1": 2},
        where=(),
        error=HOSTILE,
        notice=HOSTILE,
        reason=HOSTILE,
        max_reason=1000,
        action="/status/purges/p1/retry",
        **STEP_HELPERS,
    )
    card = pages.ENVIRONMENT.from_string(
        '{% from "_macros.html" import purge_rows with context %}{{ purge_rows([purge], frame, "t") }}'
    ).render(purge=detail.status, frame=frame, **STEP_HELPERS)
    for html in (page, card):
        assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;&#34;&#39;&amp;" in html
        assert "actor-never-shown" not in html and "reason-never-shown" not in html
    assert page.count("&lt;img src=x onerror=alert(1)&gt;") >= 16  # every field above, and the form
    sign_in = pages.render(
        "login.html", frame=Frame(base="/status"), action="/status/login", error=HOSTILE, name=HOSTILE,
        next_path=HOSTILE, max_name=200, hint=TokenHint(HOSTILE, HOSTILE, HOSTILE),
    )  # fmt: skip
    assert "<img" not in sign_in and sign_in.count("&lt;img src=x onerror=alert(1)&gt;") >= 5


# -- issue 26: due times, rounds, rows, failure places, the token's whereabouts -------------------------


@pytest.mark.parametrize(
    ("offset", "told"),
    [
        (dt.timedelta(seconds=40), "in 40 s"),
        (dt.timedelta(milliseconds=-300), "now"),
        (dt.timedelta(seconds=-27), "overdue by 27 s"),
        (-dt.timedelta(minutes=34, seconds=5), "overdue by 34 min"),
    ],
)
def test_a_due_time_that_passed_is_overdue_not_ago(offset: dt.timedelta, told: str) -> None:
    assert times.due(NOW + offset, NOW) == told


def attempt(step: str, number: int, minute: int) -> Attempt:
    return Attempt(step, "attachments", number, "w", NOW + dt.timedelta(minutes=minute), None, None, None)


def test_attempts_are_numbered_by_round_across_retries() -> None:
    history = [attempt("a", 1, 0), attempt("b", 1, 1), attempt("a", 2, 2), attempt("a", 1, 3), attempt("a", 1, 4)]
    told = [(n.attempt.step_id, n.round, n.attempt.attempt) for n in purge_page.numbered(history)]
    assert told == [("a", 1, 1), ("b", 1, 1), ("a", 1, 2), ("a", 2, 1), ("a", 3, 1)]
    retry = AuditEntry("retry", "Grace", "fixed", ("a",), NOW)
    assert purge_page.step_round("a", [retry, retry]) == 3 and purge_page.step_round("b", [retry]) == 1


def test_a_row_counts_done_steps_and_shows_the_error_of_a_step_not_done() -> None:
    detail = hostile_detail()
    done = dataclasses.replace(detail.status.steps[0], id="s0", kind="bodies", status="done", last_error="old")
    purge = dataclasses.replace(detail.status, steps=(done, detail.status.steps[0]))
    assert overview_page.steps_done(purge) == "1/2" and overview_page.failing_step(purge) is purge.steps[1]
    assert overview_page.failing_step(dataclasses.replace(purge, steps=(done,))) is None  # history, not trouble
    assert overview_page.steps_done(dataclasses.replace(purge, steps=())) == ""


def test_a_failed_unlink_is_placed_by_root_and_relative_path_never_by_name() -> None:
    blob_id = "057b9e0d1c2f4a3b8e6d5c4b3a291807"
    error = str(blobstore.discard_failed(blob_id, IsADirectoryError(errno.EISDIR, "Is a directory", "/x/n.txt")))
    assert touched.FAILED_BLOB.findall(error) == [blob_id]  # the origin's text and the reader agree
    reads = touched.TouchedCommands(None, Settings.from_env({"PURGEKEEPER_DATA_DIR": "/srv/pk"}))  # type: ignore[arg-type]
    canonical = reads.place(Row(blob_id, "file", "e3" * 32, blobstore.file_path(blob_id)))
    assert (canonical.root, canonical.setting, canonical.shown) == (
        "file root",
        "PURGEKEEPER_FILE_ROOT",
        f"files/05/{blob_id}",
    )
    cas = reads.place(Row(blob_id, "cas", "ab" * 32, blobstore.cas_path("ab" * 32, blob_id)))
    assert cas.shown == f"blobs/ab/{'ab' * 32}-{blob_id}" and cas.setting == "PURGEKEEPER_BLOB_ROOT"
    older = reads.place(Row(blob_id, "file", "e3" * 32, f"05/{blob_id}/secret-name.txt"))
    assert older.shown == f"files/05/{blob_id}/" and not older.complete  # the name stays out
    found = touched.PurgeTouched("p", "content", failures={blob_id: canonical})
    assert found.places_in(f"OSError: {error}; again: {error}") == [canonical] and found.places_in(None) == []


@dataclasses.dataclass
class Row:
    id: str
    kind: str
    sha256: str
    path: str


def test_the_sign_in_page_says_where_the_token_is_never_the_token(tmp_path: Path) -> None:
    settings = Settings.from_env({"PURGEKEEPER_DATA_DIR": str(tmp_path)})
    assert token_hint(Tokens(api="h", operator="o"), settings).where.startswith("PURGEKEEPER_OPERATOR_TOKEN")
    by_variable = Settings.from_env({"PURGEKEEPER_DATA_DIR": str(tmp_path), "PURGEKEEPER_API_TOKEN": "h"})
    assert token_hint(Tokens(api="h"), by_variable).where.startswith("PURGEKEEPER_API_TOKEN")
    token, path, _created = load_or_create_token(tmp_path)
    in_file = token_hint(Tokens(api=token), settings)
    assert str(path) in in_file.where and in_file.command == f'cat "${{PURGEKEEPER_DATA_DIR:-{tmp_path}}}/api-token"'
    assert token not in repr(in_file)
    assert token_hint(Tokens(api="another"), settings).where.startswith("the host token the server was started")


def test_a_step_s_error_is_named_by_its_exception_and_nothing_else() -> None:
    """Issue 34: the steps table names the error (its whole text has a row of its own)."""
    assert pages.error_name("IsADirectoryError: [Errno 21] could not unlink the file of blob b1") == "IsADirectoryError"
    assert pages.error_name("LockTimeout") == "LockTimeout"
    assert pages.error_name(HOSTILE) == "error" and pages.error_name("a b: c") == "error"
