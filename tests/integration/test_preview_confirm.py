"""preview_purge and confirm_purge: the dependency report, its digest, and acceptance into
the ledger with fences and cleanup steps in one transaction. Both backends."""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

import pytest
from sqlalchemy import text

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.commands import scope as scope_module
from purgekeeper.commands.purge_commands import MAX_REASON_LENGTH

Pk = purgekeeper.Purgekeeper
T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def count(pk: Pk, sql: str, **params: Any) -> int:
    with pk.db.read() as conn:
        return int(conn.scalar(text(sql), params))


def written(pk: Pk) -> tuple[int, int, int]:
    """Ledger rows, tombstones and cleanup steps: what an acceptance writes."""
    return (
        count(pk, "SELECT count(*) FROM purge_ledger"),
        count(pk, "SELECT count(*) FROM tombstones"),
        count(pk, "SELECT count(*) FROM cleanup_steps"),
    )


def confirm(pk: Pk, scope: EventScope, **kwargs: Any) -> purgekeeper.Acceptance:
    preview = pk.preview_purge(scope)
    return pk.confirm_purge(scope, scope_digest=preview.scope_digest, actor="op", reason="asked to", **kwargs)


@pytest.fixture
def world(pk: Pk) -> dict[str, Any]:
    """c1 and c2 share e-shared; e1 (in c1) has an exclusive CAS attachment and a shared one;
    e-other (in c2) forwards the shared blob as real_file; r1 admitted e1 and finished."""
    pk.register_bot("b1", name="Bot")
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    e1 = pk.ingest_event(
        "c1",
        author="ada",
        body="TOP-SECRET-e1",
        event_id="e1",
        provider_event_id="prov-e1",
        occurred_at=T0,
        attachments=[NewAttachment.cas(b"only e1", name="mine.txt"), NewAttachment.cas(b"shared", name="s.txt")],
    )
    pk.ingest_event(
        "c2",
        author="bob",
        body="other",
        event_id="e-other",
        occurred_at=T0,
        attachments=[NewAttachment.reuse(e1.attachments[1].blob_id, name="fwd.txt", binding="real_file")],
    )
    pk.ingest_event("c1", author="bob", body="shared body", event_id="e-shared", occurred_at=T0 + dt.timedelta(1))
    pk.place_event("e-shared", "c2")
    pk.ingest_event("c1", author="ada", body="later", event_id="e-late", occurred_at=T0 + dt.timedelta(2))
    run = pk.start_run("c2", bot_id="b1", run_id="r1")
    pk.admit("e1", run.id, payload={"input": "TOP-SECRET-payload"})
    pk.finish_run(run.id, status="succeeded", output="TOP-SECRET-output")
    pk.add_derivative("c1", kind="summary", payload="TOP-SECRET-summary", source_event_ids=["e1", "e-late"])
    return {"e1": e1}


# -- the report -----------------------------------------------------------------------------


def test_preview_reports_every_dependency(pk: Pk, world: dict[str, Any]) -> None:
    preview = pk.preview_purge(EventScope(event_ids=["e1", "e-shared"]))
    assert preview.event_ids == ("e-shared", "e1")  # by id
    assert {e.id: e.placements for e in preview.events} == {"e1": ("c1",), "e-shared": ("c1", "c2")}
    assert [(a.event_id, a.run_id) for a in preview.admissions] == [("e1", "r1")]
    assert [(r.id, r.has_output, r.status) for r in preview.runs] == [("r1", True, "succeeded")]
    assert [(d.kind, d.source_event_ids) for d in preview.derivatives] == [("summary", ("e-late", "e1"))]
    assert [a.name for a in preview.exclusive_attachments] == ["mine.txt"]
    [shared] = preview.shared_attachments
    assert shared.name == "s.txt"
    assert [(r.event_id, r.binding) for r in shared.other_references] == [("e-other", "real_file")]
    assert preview.blocking_runs == ()
    assert preview.already_fenced == ()
    assert any("backup" in d.lower() for d in preview.disclosures)
    assert len(preview.scope_digest) == 64


def test_preview_by_conversation_window_and_author(pk: Pk, world: dict[str, Any]) -> None:
    window = EventScope(conversation_id="c1", after=T0 + dt.timedelta(hours=1), before=T0 + dt.timedelta(days=2))
    assert pk.preview_purge(window).event_ids == ("e-shared",)
    by_author = EventScope(conversation_id="c1", author="ada")
    assert pk.preview_purge(by_author).event_ids == ("e-late", "e1")
    assert pk.preview_purge(EventScope(conversation_id="c1")).event_ids == ("e-late", "e-shared", "e1")


def test_the_same_scope_gives_the_same_digest(pk: Pk, world: dict[str, Any]) -> None:
    scope = EventScope(event_ids=["e1"])
    assert pk.preview_purge(scope).scope_digest == pk.preview_purge(scope).scope_digest
    assert pk.preview_purge(scope).scope_digest != pk.preview_purge(EventScope(event_ids=["e-late"])).scope_digest


BAD_SCOPES = {
    "no event ids": lambda: EventScope(event_ids=[]),
    "nothing selected": lambda: EventScope(),
    "ids and a conversation": lambda: EventScope(event_ids=["e1"], conversation_id="c1"),
    "window backwards": lambda: EventScope(conversation_id="c1", after=T0, before=T0),
    "naive window": lambda: EventScope(conversation_id="c1", after=dt.datetime(2026, 1, 1)),
    "bad id": lambda: EventScope(event_ids=["../x"]),
    "empty author": lambda: EventScope(conversation_id="c1", author=""),
}


@pytest.mark.parametrize("build", BAD_SCOPES.values(), ids=BAD_SCOPES.keys())
def test_a_bad_scope_is_a_validation_error(build: Any) -> None:
    with pytest.raises(purgekeeper.ValidationError):
        build()


def test_empty_unknown_and_oversized_selections(pk: Pk, world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(purgekeeper.ValidationError, match="selects no events"):
        pk.preview_purge(EventScope(conversation_id="c1", author="nobody"))
    with pytest.raises(purgekeeper.NotFound):
        pk.preview_purge(EventScope(event_ids=["e1", "ghost"]))
    with pytest.raises(purgekeeper.NotFound):
        pk.preview_purge(EventScope(conversation_id="nowhere"))
    monkeypatch.setattr(scope_module, "MAX_SCOPE_EVENTS", 2)
    with pytest.raises(purgekeeper.ValidationError, match="more than 2 events"):
        pk.preview_purge(EventScope(conversation_id="c1"))
    assert written(pk) == (0, 0, 0)


# -- confirmation ---------------------------------------------------------------------------


def test_confirm_accepts_fences_and_creates_steps_in_one_go(pk: Pk, world: dict[str, Any]) -> None:
    version_before = pk.get_conversation("c1").version  # type: ignore[union-attr]
    acceptance = confirm(pk, EventScope(event_ids=["e1"]))
    assert acceptance.outcome == "accepted" and acceptance.ledger_seq == 1
    assert [e.id for e in pk.read_conversation("c1")] == ["e-shared", "e-late"]
    with pytest.raises(purgekeeper.ContentPurged):
        pk.open_attachment(world["e1"].attachments[0].id)
    with pytest.raises(purgekeeper.ContentPurged):
        pk.ingest_event("c1", author="ada", body="again", provider_event_id="prov-e1")
    status = pk.status(acceptance.purge_id)
    assert status.status == "accepted" and status.kind == "content"
    assert sorted((s.kind, s.status) for s in status.steps) == [("attachments", "pending"), ("bodies", "pending")]
    assert pk.get_conversation("c1").version > version_before  # type: ignore[union-attr]
    with pk.db.read() as conn:
        row = conn.execute(text("SELECT * FROM purge_ledger")).mappings().one()
        tombs = {tuple(row) for row in conn.execute(text("SELECT kind, id FROM tombstones"))}
    assert json.loads(row["selectors"])["event_ids"] == ["e1"]
    assert tombs == {("event", "e1"), ("provider_event", "prov-e1")}
    assert not any("TOP-SECRET" in str(value) for value in row.values()), "no content ever enters the ledger"


def test_enqueue_hook_runs_after_the_commit_and_a_failure_does_not_undo(
    database_url: str, roots: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[list[str], int]] = []

    def hook(step_ids: list[str]) -> None:
        with other.db.read() as conn:  # another handle sees the acceptance: it is committed
            seen.append((list(step_ids), int(conn.scalar(text("SELECT count(*) FROM purge_ledger")))))
        raise RuntimeError("broker down")

    opened: dict[str, Any] = {name: roots[name] for name in ("blob_root", "file_root", "checkpoint_dir")}
    opened["workers"] = "none"
    other = purgekeeper.open(database_url, **opened)
    pk = purgekeeper.open(database_url, enqueue=hook, **opened)
    try:
        pk.create_conversation("c1")
        pk.ingest_event("c1", author="ada", body="x", event_id="e1")
        with caplog.at_level(logging.WARNING):
            acceptance = confirm(pk, EventScope(event_ids=["e1"]))
        assert acceptance.outcome == "accepted"
        [(step_ids, ledger_rows)] = seen
        assert ledger_rows == 1
        assert sorted(step_ids) == sorted(s.id for s in pk.status(acceptance.purge_id).steps)
        assert "will resume them" in caplog.text
    finally:
        pk.close()
        other.close()


STALE_CHANGES = {
    "a matching event arrives": (
        EventScope(conversation_id="c1"),
        lambda pk: pk.ingest_event("c1", author="eve", body="new", event_id="e-new"),
        "events added: e-new",
    ),
    "an attachment becomes shared": (
        EventScope(event_ids=["e1"]),
        lambda pk: pk.ingest_event(
            "c2",
            author="eve",
            body="fwd",
            attachments=[NewAttachment.reuse(pk.read_conversation("c1")[0].attachments[0].blob_id, name="f")],
        ),
        "shared attachments added",
    ),
    "a run starts": (
        EventScope(event_ids=["e1"]),
        lambda pk: pk.start_run("c1", bot_id="b1", run_id="r-new"),
        "blocking runs added: r-new",
    ),
    "the event is placed elsewhere": (
        EventScope(event_ids=["e1"]),
        lambda pk: pk.place_event("e1", "c2"),
        "placements added: e1@c2",
    ),
}


@pytest.mark.parametrize("scope, change, named", STALE_CHANGES.values(), ids=STALE_CHANGES.keys())
def test_a_changed_scope_is_stale_and_names_what_changed(
    pk: Pk, world: dict[str, Any], scope: EventScope, change: Any, named: str
) -> None:
    preview = pk.preview_purge(scope)
    change(pk)
    with pytest.raises(purgekeeper.StaleConfirmation, match=named):
        pk.confirm_purge(scope, scope_digest=preview.scope_digest, actor="op", reason="r")
    assert written(pk) == (0, 0, 0)


def test_an_unknown_digest_is_stale(pk: Pk, world: dict[str, Any]) -> None:
    with pytest.raises(purgekeeper.StaleConfirmation, match="preview it again"):
        pk.confirm_purge(EventScope(event_ids=["e1"]), scope_digest="a" * 64, actor="op", reason="r")


def test_active_runs_refuse_the_purge(pk: Pk, world: dict[str, Any]) -> None:
    pk.start_run("c1", bot_id="b1", run_id="r-busy")
    scope = EventScope(event_ids=["e1"])
    preview = pk.preview_purge(scope)
    assert [r.id for r in preview.blocking_runs] == ["r-busy"]
    with pytest.raises(purgekeeper.ActiveRuns) as info:
        pk.confirm_purge(scope, scope_digest=preview.scope_digest, actor="op", reason="r")
    assert info.value.run_ids == ("r-busy",)
    assert written(pk) == (0, 0, 0)


def test_fenced_marks_are_shown_not_hashed_and_the_new_row_fences_only_the_rest(pk: Pk, world: dict[str, Any]) -> None:
    both = EventScope(event_ids=["e1", "e-late"])
    preview = pk.preview_purge(both)
    first = confirm(pk, EventScope(event_ids=["e1"]))
    assert pk.preview_purge(both).already_fenced == ("e1",)
    second = pk.confirm_purge(both, scope_digest=preview.scope_digest, actor="op", reason="r")
    assert second.outcome == "accepted" and second.purge_id != first.purge_id
    with pk.db.read() as conn:
        selectors = json.loads(conn.scalar(text("SELECT selectors FROM purge_ledger WHERE seq = 2")))
    assert selectors["event_ids"] == ["e-late"] and selectors["already_fenced"] == ["e1"]


def test_a_fully_fenced_scope_is_already_purged_and_writes_nothing(pk: Pk, world: dict[str, Any]) -> None:
    confirm(pk, EventScope(event_ids=["e1"]))
    latest = confirm(pk, EventScope(event_ids=["e-late"]))
    before = written(pk)
    again = confirm(pk, EventScope(event_ids=["e1", "e-late"]))
    assert (again.outcome, again.purge_id, again.ledger_seq) == ("already_purged", latest.purge_id, 2)
    assert written(pk) == before


def test_idempotency_key_replays_or_conflicts(pk: Pk, world: dict[str, Any]) -> None:
    scope = EventScope(event_ids=["e1"])
    first = confirm(pk, scope, idempotency_key="req-1")
    again = confirm(pk, scope, idempotency_key="req-1")
    assert again == first
    with pytest.raises(purgekeeper.IdempotencyConflict):
        confirm(pk, EventScope(event_ids=["e-late"]), idempotency_key="req-1")
    with pytest.raises(purgekeeper.IdempotencyConflict):
        pk.purge_conversation("c2", actor="op", reason="r", idempotency_key="req-1")
    assert count(pk, "SELECT count(*) FROM purge_ledger") == 1


def _accept(pk: Pk, kind: str, target: str, *, actor: str = "op", reason: str = "asked to", key: str = "k-1") -> Any:
    """One acceptance of ``kind`` on ``target`` with the idempotency key ``key``."""
    who = {"actor": actor, "reason": reason, "idempotency_key": key}
    if kind == "content":
        scope = EventScope(event_ids=[target])
        return pk.confirm_purge(scope, scope_digest=pk.preview_purge(scope).scope_digest, **who)
    if kind == "conversation":
        return pk.purge_conversation(target, **who)
    if kind == "channel":
        return pk.delete_channel(target, **who)
    return pk.delete_bot(target, **who)


KEYED = {"content": ("e1", "e-late"), "conversation": ("c1", "c2"), "channel": ("ch1", "ch2"), "bot": ("b1", "b2")}


@pytest.mark.parametrize("kind", KEYED)
def test_an_idempotency_key_conflicts_on_every_other_request(pk: Pk, world: dict[str, Any], kind: str) -> None:
    """Issue 11, case 17. A key names one request: its kind, its scope or target, and who
    asked why. The same request again replays the acceptance; the same key on another kind,
    another scope, another actor's request or another reason is IdempotencyConflict and
    writes nothing."""
    for channel in ("ch1", "ch2"):
        pk.create_conversation(channel, kind="channel")
    pk.register_bot("b2", name="Other")
    first, other = KEYED[kind]
    accepted = _accept(pk, kind, first)
    assert _accept(pk, kind, first) == accepted
    before = written(pk)
    another_kind = next(k for k in KEYED if k != kind)
    attempts = {
        "another kind": lambda: _accept(pk, another_kind, KEYED[another_kind][1]),
        "another scope": lambda: _accept(pk, kind, other),
        "another actor's request": lambda: _accept(pk, kind, first, actor="mallory"),
        "another reason": lambda: _accept(pk, kind, first, reason="something else"),
    }
    for name, attempt in attempts.items():
        with pytest.raises(purgekeeper.IdempotencyConflict):
            attempt()
        assert written(pk) == before, name
    assert _accept(pk, kind, first) == accepted


BAD_CONFIRMATIONS = {
    "reason too long": {"reason": "x" * (MAX_REASON_LENGTH + 1)},
    "empty reason": {"reason": ""},
    "empty actor": {"actor": " "},
    "digest not hex": {"scope_digest": "z" * 64},
    "digest too short": {"scope_digest": "abc"},
    "bad idempotency key": {"idempotency_key": "has space"},
    "scope not a scope": {"scope": {"event_ids": ["e1"]}},
}


@pytest.mark.parametrize("override", BAD_CONFIRMATIONS.values(), ids=BAD_CONFIRMATIONS.keys())
def test_bad_confirmation_input_writes_nothing(pk: Pk, world: dict[str, Any], override: dict[str, Any]) -> None:
    scope = EventScope(event_ids=["e1"])
    arguments: dict[str, Any] = {
        "scope": scope,
        "scope_digest": pk.preview_purge(scope).scope_digest,
        "actor": "op",
        "reason": "r",
    } | override
    with pytest.raises(purgekeeper.ValidationError):
        pk.confirm_purge(arguments.pop("scope"), **arguments)
    assert written(pk) == (0, 0, 0)
