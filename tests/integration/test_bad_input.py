"""Every bad input gets a typed error, and NOTHING is written: no row in any table changes and
no file appears or disappears under the blob root, the file root or the Memory paths."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

import purgekeeper
from purgekeeper import NewAttachment
from purgekeeper.commands.validation import MAX_ATTACHMENTS_PER_EVENT, MAX_BODY_BYTES, MAX_ID_LENGTH, MAX_PAYLOAD_BYTES
from purgekeeper.schema.tables import metadata

Pk = purgekeeper.Purgekeeper
LONG_ID = "x" * (MAX_ID_LENGTH + 1)


@dataclass(frozen=True)
class World:
    """What already exists before a bad call: a conversation with an attached event, a bot,
    a running and a finished run, and some paths that are not Memory repositories."""

    pk: Pk
    paths: Path


@pytest.fixture
def world(pk: Pk, tmp_path: Path) -> World:
    pk.register_bot("b1", name="Helper")
    pk.create_conversation("c1", bot_id="b1")
    pk.ingest_event(
        "c1",
        author="ada",
        body="hello",
        event_id="e1",
        provider_event_id="p1",
        attachments=[NewAttachment.cas(b"cas bytes", name="a.txt"), NewAttachment.file(b"file bytes", name="b.txt")],
    )
    pk.start_run("c1", bot_id="b1", run_id="r-live")
    pk.start_run("c1", bot_id="b1", run_id="r-done")
    pk.finish_run("r-done", status="succeeded", output={"text": "done"})
    paths = tmp_path / "paths"
    (paths / "plain-dir").mkdir(parents=True)
    (paths / "a-file").write_text("not a directory")
    (paths / "not-git" / "src").mkdir(parents=True)
    (paths / "not-git" / "src" / "main.py").write_text("print('hi')\n")
    subprocess.run(["git", "init", "-q", str(paths / "owned")], check=True, capture_output=True)
    pk.register_bot("b-owner", name="Owner", memory_path=paths / "owned")
    return World(pk=pk, paths=paths)


def snapshot(world: World) -> dict[str, Any]:
    """Every row of every table, and every file (with its bytes) under the roots and paths."""
    pk = world.pk
    state: dict[str, Any] = {}
    with pk.db.read() as conn:
        for table in metadata.sorted_tables:
            rows = sorted(repr(tuple(row)) for row in conn.execute(select(table)))
            state[table.name] = (len(rows), rows)
    for root in (pk.settings.blob_root, pk.settings.file_root, world.paths):
        state[str(root)] = sorted((str(p.relative_to(root)), p.read_bytes()) for p in root.rglob("*") if p.is_file())
    return state


def attach(*builders: Callable[[], NewAttachment]) -> Callable[[World], object]:
    """Ingest with attachments built inside the call, so a constructor that raises is a case too."""
    return lambda w: w.pk.ingest_event("c1", author="ada", body="x", attachments=[build() for build in builders])


def ingest(**kwargs: Any) -> Callable[[World], object]:
    arguments = {"author": "ada", "body": "x"} | kwargs
    conversation_id = arguments.pop("conversation_id", "c1")
    return lambda w: w.pk.ingest_event(conversation_id, **arguments)


def register(path: str) -> Callable[[World], object]:
    return lambda w: w.pk.register_bot("b-new", name="New", memory_path=w.paths / path)


CASES: list[Any] = [
    # unknown ids
    pytest.param(ingest(conversation_id="nowhere"), purgekeeper.NotFound, id="ingest-into-unknown-conversation"),
    pytest.param(
        ingest(
            conversation_id="nowhere",
            attachments=[NewAttachment.cas(b"fresh cas", name="n1"), NewAttachment.file(b"fresh file", name="n2")],
        ),
        purgekeeper.NotFound,
        id="ingest-with-new-attachments-into-unknown-conversation",
    ),
    pytest.param(lambda w: w.pk.place_event("ghost", "c1"), purgekeeper.NotFound, id="place-unknown-event"),
    pytest.param(
        lambda w: w.pk.place_event("e1", "nowhere"), purgekeeper.NotFound, id="place-into-unknown-conversation"
    ),
    pytest.param(lambda w: w.pk.start_run("c1", bot_id="ghost"), purgekeeper.NotFound, id="start-run-unknown-bot"),
    pytest.param(
        lambda w: w.pk.start_run("nowhere", bot_id="b1"), purgekeeper.NotFound, id="start-run-unknown-conversation"
    ),
    pytest.param(
        lambda w: w.pk.admit("e1", "ghost", payload={"a": 1}), purgekeeper.NotFound, id="admit-to-unknown-run"
    ),
    pytest.param(
        lambda w: w.pk.admit("ghost", "r-live", payload={"a": 1}), purgekeeper.NotFound, id="admit-unknown-event"
    ),
    pytest.param(lambda w: w.pk.finish_run("ghost", status="succeeded"), purgekeeper.NotFound, id="finish-unknown-run"),
    pytest.param(lambda w: w.pk.open_attachment("ghost"), purgekeeper.NotFound, id="open-unknown-attachment"),
    pytest.param(
        attach(lambda: NewAttachment.reuse("ghost", name="fwd")), purgekeeper.NotFound, id="reuse-unknown-blob"
    ),
    pytest.param(
        attach(lambda: NewAttachment.cas(b"staged first", name="ok"), lambda: NewAttachment.reuse("ghost", name="fwd")),
        purgekeeper.NotFound,
        id="reuse-unknown-blob-after-new-bytes",
    ),
    pytest.param(
        lambda w: w.pk.create_conversation("c-new", bot_id="ghost"), purgekeeper.NotFound, id="conversation-unknown-bot"
    ),
    pytest.param(
        lambda w: w.pk.add_derivative("nowhere", kind="summary", payload=1),
        purgekeeper.NotFound,
        id="derivative-in-unknown-conversation",
    ),
    pytest.param(
        lambda w: w.pk.add_derivative("c1", kind="summary", payload=1, source_event_ids=["e1", "ghost"]),
        purgekeeper.NotFound,
        id="derivative-from-unknown-event",
    ),
    # wrong types
    pytest.param(ingest(body=123), purgekeeper.ValidationError, id="body-is-an-int"),
    pytest.param(ingest(body=b"bytes"), purgekeeper.ValidationError, id="body-is-bytes"),
    pytest.param(ingest(author=None), purgekeeper.ValidationError, id="author-is-none"),
    pytest.param(ingest(author=42), purgekeeper.ValidationError, id="author-is-an-int"),
    pytest.param(
        ingest(attachments=NewAttachment.cas(b"x", name="a")), purgekeeper.ValidationError, id="attachments-not-a-list"
    ),
    pytest.param(ingest(attachments=42), purgekeeper.ValidationError, id="attachments-is-an-int"),
    pytest.param(ingest(attachments=None), purgekeeper.ValidationError, id="attachments-is-none"),
    pytest.param(ingest(attachments={"a": b"x"}), purgekeeper.ValidationError, id="attachments-is-a-dict"),
    pytest.param(ingest(attachments=[b"raw bytes"]), purgekeeper.ValidationError, id="attachments-hold-raw-bytes"),
    pytest.param(ingest(attachments="abc"), purgekeeper.ValidationError, id="attachments-is-a-string"),
    pytest.param(ingest(occurred_at="2024-01-01T00:00:00Z"), purgekeeper.ValidationError, id="occurred-at-a-string"),
    pytest.param(ingest(occurred_at=1704067200), purgekeeper.ValidationError, id="occurred-at-an-int"),
    pytest.param(ingest(conversation_id=7), purgekeeper.ValidationError, id="conversation-id-an-int"),
    pytest.param(ingest(provider_event_id=123), purgekeeper.ValidationError, id="provider-event-id-an-int"),
    pytest.param(
        lambda w: w.pk.create_conversation(None), purgekeeper.ValidationError, id="create-conversation-id-none"
    ),
    pytest.param(lambda w: w.pk.register_bot("b-new", name=None), purgekeeper.ValidationError, id="bot-name-none"),
    pytest.param(
        lambda w: w.pk.admit("e1", "r-live", payload=object()), purgekeeper.ValidationError, id="payload-not-json"
    ),
    pytest.param(
        lambda w: w.pk.admit("e1", "r-live", payload={"score": float("nan")}),
        purgekeeper.ValidationError,
        id="payload-with-nan",
    ),
    pytest.param(
        lambda w: w.pk.finish_run("r-live", status="succeeded", output=float("inf")),
        purgekeeper.ValidationError,
        id="output-infinity",
    ),
    pytest.param(
        lambda w: w.pk.add_derivative("c1", kind="summary", payload=1, source_event_ids="e1"),
        purgekeeper.ValidationError,
        id="derivative-sources-a-string",
    ),
    # empty or oversized values
    pytest.param(ingest(body=""), purgekeeper.ValidationError, id="body-empty"),
    pytest.param(ingest(body="x" * (MAX_BODY_BYTES + 1)), purgekeeper.ValidationError, id="body-one-byte-past-256KiB"),
    pytest.param(ingest(body="a\x00b"), purgekeeper.ValidationError, id="body-with-nul"),
    pytest.param(ingest(author=""), purgekeeper.ValidationError, id="author-empty"),
    pytest.param(ingest(author="x" * 201), purgekeeper.ValidationError, id="author-201-chars"),
    pytest.param(ingest(conversation_id=LONG_ID), purgekeeper.ValidationError, id="conversation-id-201-chars"),
    pytest.param(ingest(event_id=LONG_ID), purgekeeper.ValidationError, id="event-id-201-chars"),
    pytest.param(ingest(provider_event_id=LONG_ID), purgekeeper.ValidationError, id="provider-event-id-201-chars"),
    pytest.param(ingest(event_id=""), purgekeeper.ValidationError, id="event-id-empty"),
    pytest.param(ingest(event_id="e/1"), purgekeeper.ValidationError, id="event-id-with-slash"),
    pytest.param(lambda w: w.pk.create_conversation(LONG_ID), purgekeeper.ValidationError, id="create-id-201-chars"),
    pytest.param(lambda w: w.pk.create_conversation(""), purgekeeper.ValidationError, id="create-id-empty"),
    pytest.param(lambda w: w.pk.register_bot(LONG_ID, name="Long"), purgekeeper.ValidationError, id="bot-id-201-chars"),
    pytest.param(lambda w: w.pk.register_bot("b-new", name=""), purgekeeper.ValidationError, id="bot-name-empty"),
    pytest.param(
        lambda w: w.pk.start_run("c1", bot_id="b1", run_id=LONG_ID), purgekeeper.ValidationError, id="run-id-201-chars"
    ),
    pytest.param(
        ingest(attachments=[NewAttachment.cas(bytes([i]), name=f"a{i}") for i in range(MAX_ATTACHMENTS_PER_EVENT + 1)]),
        purgekeeper.ValidationError,
        id="33-attachments",
    ),
    pytest.param(
        lambda w: w.pk.admit("e1", "r-live", payload="x" * MAX_PAYLOAD_BYTES),
        purgekeeper.ValidationError,
        id="payload-past-256KiB",
    ),
    pytest.param(lambda w: w.pk.admit("e1", "r-live", payload={}), purgekeeper.ValidationError, id="payload-empty"),
    pytest.param(
        lambda w: w.pk.add_derivative("c1", kind="", payload=1), purgekeeper.ValidationError, id="derivative-kind-empty"
    ),
    pytest.param(
        lambda w: w.pk.add_derivative("c1", kind="k" * 65, payload=1),
        purgekeeper.ValidationError,
        id="derivative-kind-65-chars",
    ),
    # attachment names: the constructor raises inside the call, so ingest never runs
    pytest.param(
        attach(lambda: NewAttachment.cas(b"x", name="a/b")), purgekeeper.ValidationError, id="name-with-slash"
    ),
    pytest.param(attach(lambda: NewAttachment.file(b"x", name="..")), purgekeeper.ValidationError, id="name-dotdot"),
    pytest.param(
        attach(lambda: NewAttachment.file(b"x", name="../../etc")), purgekeeper.ValidationError, id="name-traversal"
    ),
    pytest.param(
        attach(lambda: NewAttachment.cas(b"x", name="a\x00b")), purgekeeper.ValidationError, id="name-with-nul"
    ),
    pytest.param(
        attach(lambda: NewAttachment.file(b"x", name="a\\b")), purgekeeper.ValidationError, id="name-with-backslash"
    ),
    pytest.param(
        attach(lambda: NewAttachment.file(b"x", name="a\nb")), purgekeeper.ValidationError, id="name-with-newline"
    ),
    pytest.param(attach(lambda: NewAttachment.cas(b"x", name="")), purgekeeper.ValidationError, id="name-empty"),
    pytest.param(
        attach(lambda: NewAttachment.cas(b"", name="empty")), purgekeeper.ValidationError, id="attachment-no-bytes"
    ),
    # Memory paths
    pytest.param(register("does-not-exist"), purgekeeper.ValidationError, id="memory-path-missing"),
    pytest.param(register("a-file"), purgekeeper.ValidationError, id="memory-path-is-a-file"),
    pytest.param(register("plain-dir"), purgekeeper.ValidationError, id="memory-path-without-dot-git"),
    pytest.param(register("not-git/src"), purgekeeper.ValidationError, id="memory-path-inside-a-non-repository"),
    pytest.param(register("owned"), purgekeeper.ValidationError, id="memory-path-owned-by-another-bot"),
    pytest.param(
        lambda w: w.pk.register_bot("b-new", name="New", memory_path=""),
        purgekeeper.ValidationError,
        id="memory-path-empty",
    ),
    pytest.param(
        lambda w: w.pk.register_bot("b-new", name="New", memory_path=42),
        purgekeeper.ValidationError,
        id="memory-path-an-int",
    ),
    # runs that are already settled, statuses that do not settle
    pytest.param(
        lambda w: w.pk.finish_run("r-done", status="failed"), purgekeeper.ValidationError, id="finish-terminal-run"
    ),
    pytest.param(
        lambda w: w.pk.finish_run("r-done", status="succeeded", output={"text": "rewritten"}),
        purgekeeper.ValidationError,
        id="finish-terminal-run-with-the-same-status",
    ),
    pytest.param(
        lambda w: w.pk.finish_run("r-live", status="waiting"),
        purgekeeper.ValidationError,
        id="finish-non-terminal-status",
    ),
    pytest.param(
        lambda w: w.pk.admit("e1", "r-done", payload={"a": 1}), purgekeeper.ValidationError, id="admit-to-finished-run"
    ),
    # identities that already exist
    pytest.param(lambda w: w.pk.register_bot("b1", name="Again"), purgekeeper.Conflict, id="bot-id-taken"),
    pytest.param(
        lambda w: w.pk.create_conversation("c1", kind="channel"),
        purgekeeper.Conflict,
        id="conversation-kind-change",
    ),
    pytest.param(ingest(event_id="e1"), purgekeeper.Conflict, id="event-id-taken"),
    pytest.param(
        ingest(event_id="e1", provider_event_id="p-new"),
        purgekeeper.Conflict,
        id="event-id-taken-with-new-provider-id",
    ),
    pytest.param(lambda w: w.pk.start_run("c1", bot_id="b1", run_id="r-live"), purgekeeper.Conflict, id="run-id-taken"),
]


@pytest.mark.parametrize(("call", "error"), CASES)
def test_bad_input_gets_a_typed_error_and_writes_nothing(
    world: World, call: Callable[[World], object], error: type[purgekeeper.PurgekeeperError]
) -> None:
    before = snapshot(world)
    with pytest.raises(purgekeeper.PurgekeeperError) as info:
        call(world)
    assert type(info.value) is error, f"raised {type(info.value).__name__}: {info.value}"
    assert info.value.detail
    assert snapshot(world) == before


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: NewAttachment.cas(b"x", name="a/b"), id="cas-slash"),
        pytest.param(lambda: NewAttachment.file(b"x", name="a/b"), id="file-slash"),
        pytest.param(lambda: NewAttachment.cas(b"x", name=".."), id="cas-dotdot"),
        pytest.param(lambda: NewAttachment.file(b"x", name="x\x00"), id="file-nul"),
        pytest.param(lambda: NewAttachment.reuse("b1", name="a/b"), id="reuse-slash"),
    ],
)
def test_a_bad_attachment_name_raises_at_construction(build: Callable[[], NewAttachment]) -> None:
    """Before any call: the cases above show that an ingest built with one writes nothing."""
    with pytest.raises(purgekeeper.ValidationError, match="attachment name"):
        build()


def test_the_snapshot_sees_a_write(world: World) -> None:
    """Guards the guard: a write that succeeds does change the snapshot."""
    before = snapshot(world)
    world.pk.finish_run("r-live", status="failed")
    assert snapshot(world) != before
    before = snapshot(world)
    world.pk.ingest_event("c1", author="ada", body=None, attachments=[NewAttachment.file(b"new", name="n")])
    after = snapshot(world)
    assert after["events"][0] == before["events"][0] + 1
    assert len(after[str(world.pk.settings.file_root)]) == len(before[str(world.pk.settings.file_root)]) + 1


def test_an_author_with_a_lone_surrogate_is_a_validation_error(world: World) -> None:
    before = snapshot(world)
    with pytest.raises(purgekeeper.ValidationError):
        world.pk.ingest_event("c1", author="ada\ud800", body="x")
    assert snapshot(world) == before


def test_an_unencodable_attachment_name_is_a_validation_error(world: World) -> None:
    with pytest.raises(purgekeeper.ValidationError):
        world.pk.ingest_event("c1", author="ada", body="x", attachments=[NewAttachment.file(b"x", name="\ud800")])


def test_a_failing_attachment_write_leaves_no_earlier_file_behind(world: World) -> None:
    before = snapshot(world)
    with pytest.raises((purgekeeper.PurgekeeperError, UnicodeEncodeError)):
        world.pk.ingest_event(
            "c1",
            author="ada",
            body="x",
            attachments=[NewAttachment.file(b"first", name="ok.txt"), NewAttachment.file(b"second", name="\ud800")],
        )
    assert snapshot(world) == before
