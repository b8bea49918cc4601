"""A content purge's preview reads in one statement on PostgreSQL, and a confirmation
reuses the report its preview built only when the rows it read under its locks are the
very rows that report was built from (issue 37). Both backends."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text

import purgekeeper
from purgekeeper import EventScope, NewAttachment
from purgekeeper.commands.kinds import content
from purgekeeper.schema import content_queries, driver, ledger, purge_scope

Pk = purgekeeper.Purgekeeper
T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def world(pk: Pk) -> list[str]:
    """e1 (an attachment shared with e-other, admitted to a finished run, a source of a
    derivative) and e2 in c1; e2 also placed in c2; e-other in c2 holds the blob too."""
    pk.register_bot("b1", name="Bot")
    pk.create_conversation("c1")
    pk.create_conversation("c2")
    e1 = pk.ingest_event(
        "c1", author="ada", body="one", event_id="e1", occurred_at=T0, attachments=[NewAttachment.cas(b"x", name="n")]
    )
    pk.ingest_event("c1", author="bob", body="two", event_id="e2", provider_event_id="p2", occurred_at=T0)
    pk.place_event("e2", "c2")
    pk.ingest_event(
        "c2",
        author="bob",
        body="three",
        event_id="e-other",
        attachments=[NewAttachment.reuse(e1.attachments[0].blob_id, name="f", binding="real_file")],
    )
    run = pk.start_run("c2", bot_id="b1", run_id="r1")
    pk.admit("e1", run.id, payload={"in": 1})
    pk.finish_run(run.id, status="succeeded", output="out")
    pk.add_derivative("c1", kind="summary", payload="s", source_event_ids=["e1", "e2"])
    return ["e1", "e2"]


def test_the_preview_statement_reads_what_the_separate_reads_read(pk: Pk, world: list[str]) -> None:
    with pk.db.read() as conn:
        read = purge_scope.preview_rows(conn, world)
        head = conn.execute(ledger.HEAD_GATE).one()
        assert (read.seq, read.head_hash, read.gate_reason) == (head.seq, head.head_hash, head.gate_reason)
        assert read.events == purge_scope.event_rows(conn, world)
        assert read.report == purge_scope.report_rows(conn, world)
        assert read.plain_content == content_queries.holds_plain_content(conn)
    assert [row[0] for row in read.events] == world
    assert read.report.placements and read.report.admissions and read.report.attachments
    assert read.report.derivatives and read.report.other_references


def last_selectors(pk: Pk) -> dict[str, Any]:
    with pk.db.read() as conn:
        return dict(json.loads(conn.scalar(text("SELECT selectors FROM purge_ledger ORDER BY seq DESC LIMIT 1"))))


@contextmanager
def statements_read(pk: Pk) -> Iterator[list[str]]:
    """The statements ``pk`` runs meanwhile, SQLAlchemy's and the driver's, but the saving
    of the preview and the settings of a transaction."""
    seen: list[str] = []
    run = driver.DriverStatement._run

    def counted(self: driver.DriverStatement, conn: Any, params: Any) -> Any:
        seen.append(self._compile(conn.dialect).sql)
        return run(self, conn, params)

    def listened(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(pk.db.engine, "before_cursor_execute", listened)
    driver.DriverStatement._run = counted  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        driver.DriverStatement._run = run  # type: ignore[method-assign]
        event.remove(pk.db.engine, "before_cursor_execute", listened)
    seen[:] = [sql for sql in seen if "purge_previews" not in sql and not sql.lstrip().upper().startswith("SET")]


@pytest.mark.postgres_only
def test_a_preview_by_ids_reads_in_one_statement_on_postgresql(pk: Pk, world: list[str]) -> None:
    """Head, events, report and the probe of content not sealed yet (e2 has no attachment
    whose name a preview opens)."""
    pk.preview_purge(EventScope(event_ids=["e2"]))  # past any first-use statement
    with statements_read(pk) as seen:
        pk.preview_purge(EventScope(event_ids=["e2"]))
    assert len(seen) == 1, seen


def test_a_confirmation_whose_rows_are_the_preview_s_reuses_its_report(
    pk: Pk, world: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    preview = pk.preview_purge(EventScope(event_ids=world))
    built: list[Any] = []
    build = content.report_of

    def counted(*args: Any) -> Any:
        built.append(args)
        return build(*args)

    monkeypatch.setattr(content, "report_of", counted)
    accepted = pk.confirm_purge(EventScope(event_ids=world), scope_digest=preview.scope_digest, actor="op", reason="r")
    assert accepted.outcome == "accepted" and not built
    assert last_selectors(pk)["event_ids"] == world


def test_rows_that_differ_only_in_a_fence_s_mark_are_reported_again(pk: Pk, world: list[str]) -> None:
    """The digest leaves the marks out, so it still matches; the report the preview built
    says e2 is not fenced, and reusing it would fence e2 a second time."""
    preview = pk.preview_purge(EventScope(event_ids=world))
    alone = pk.preview_purge(EventScope(event_ids=["e2"]))
    pk.confirm_purge(EventScope(event_ids=["e2"]), scope_digest=alone.scope_digest, actor="op", reason="r")
    pk.confirm_purge(EventScope(event_ids=world), scope_digest=preview.scope_digest, actor="op", reason="r")
    selectors = last_selectors(pk)
    assert (selectors["event_ids"], selectors["already_fenced"], selectors["provider_event_ids"]) == (
        ["e1"],
        ["e2"],
        [],
    )


def test_a_preview_of_another_process_is_reported_again(pk: Pk, world: list[str]) -> None:
    preview = pk.preview_purge(EventScope(event_ids=world))
    content.PREVIEWED.__init__()  # type: ignore[misc]  # this process never previewed it
    accepted = pk.confirm_purge(EventScope(event_ids=world), scope_digest=preview.scope_digest, actor="op", reason="r")
    assert accepted.outcome == "accepted"
