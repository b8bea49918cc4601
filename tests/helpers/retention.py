"""Retention under test: dates some days ago, setting a policy (previewed first), one scheduler turn
and its cleanup, and what a conversation still shows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

import purgekeeper
from tests.helpers import reads
from tests.helpers.backups import Backups
from tests.helpers.steps import settle

Pk = purgekeeper.Purgekeeper
DAY = dt.timedelta(days=1)


def ago(days: float) -> dt.datetime:
    return dt.datetime.now(dt.UTC) - days * DAY


def set_policy(pk: Pk, policy_id: str, days: int, conversation_id: str | None = None) -> purgekeeper.Acceptance:
    preview = pk.preview_retention(max_age=days * DAY, conversation_id=conversation_id)
    return pk.set_retention(
        policy_id,
        max_age=days * DAY,
        conversation_id=conversation_id,
        scope_digest=preview.scope_digest,
        actor="dpo@example.com",
        reason="retention schedule",
    )


def held_back_by_a_stuck_run(pk: Pk, run_id: str = "r-stuck") -> None:
    """Conversation c1 of bot b1, whose one event (40 days old) a run that never ends
    admitted, under a global policy ``p-all`` of 30 days: every turn defers it."""
    pk.create_conversation("c1")
    pk.register_bot("b1", name="Bot")
    pk.ingest_event("c1", author="ada", body="admitted", event_id="admitted", occurred_at=ago(40))
    pk.start_run("c1", bot_id="b1", run_id=run_id)
    pk.admit("admitted", run_id, payload="the prompt")
    set_policy(pk, "p-all", days=30)


def turn(pk: Pk) -> list[purgekeeper.RetentionRunOutcome]:
    """One scheduler turn, and the cleanup of every run it accepted."""
    outcomes = pk.run_retention()
    for outcome in outcomes:
        if outcome.purge_id:
            settle(pk, outcome.purge_id)
    return outcomes


def texts(pk: Pk, conversation_id: str) -> list[str | None]:
    return [e.body for e in pk.read_conversation(conversation_id)]


def body_of(pk: Pk, event_id: str) -> Any:
    """The event's body as stored, opened (``tests.helpers.reads.body_of``)."""
    return reads.body_of(pk, event_id)


def set_policy_of(pk: Pk, policy_id: str, max_age: dt.timedelta, conversation_id: str | None) -> None:
    preview = pk.preview_retention(max_age=max_age, conversation_id=conversation_id)
    pk.set_retention(
        policy_id, max_age=max_age, conversation_id=conversation_id, scope_digest=preview.scope_digest,
        actor="dpo", reason="r",
    )  # fmt: skip


def restored_after(pk: Pk, backups: Backups, backup: str, open_pk: Callable[[], Pk]) -> tuple[Pk, Any]:
    pk.close()
    backups.restore(backup)
    handle = open_pk()
    with pytest.raises(purgekeeper.MessagingUnavailable):
        handle.read_conversation("c1")  # the database lacks rows its checkpoint holds
    return handle, handle.merge_ledger(handle.settings.checkpoint_dir)
