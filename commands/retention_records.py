"""What the retention and legal-hold commands return (``purgekeeper.commands.records`` re-exports
them)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row

from purgekeeper.commands.purge_records import ConversationCount

# -- retention and legal holds -----------------------------------------------------------------


@dataclass(frozen=True)
class RetentionPreview:
    """What a retention policy would do if it ran now (``cutoff`` = now - ``max_age``):
    ``events`` expire from ``placements`` in ``conversations`` (``by_conversation`` lists the
    most placements first, bounded; the totals count them all); ``kept_elsewhere`` of those
    events stay live in a conversation the policy leaves alone. ``held`` events past the
    cutoff are kept by the legal holds ``hold_ids``. A global policy leaves alone the
    conversations with a policy of their own (``governed_elsewhere``, bounded). ``replaces``:
    the standing policy of the same scope. ``scope_digest`` covers the policy's definition
    (its scope and ``max_age``), not what it finds: confirm with ``set_retention``."""

    conversation_id: str | None
    max_age: dt.timedelta
    cutoff: dt.datetime
    events: int
    placements: int
    conversations: int
    kept_elsewhere: int
    by_conversation: tuple[ConversationCount, ...]
    held: int
    hold_ids: tuple[str, ...]
    governed_elsewhere: tuple[str, ...]
    replaces: str | None
    disclosures: tuple[str, ...]
    scope_digest: str


@dataclass(frozen=True)
class RetentionPolicy:
    """A standing retention policy: its scope (``conversation_id``; None is every
    conversation and channel), ``max_age``, the ledger row that set this version
    (``purge_id``, ``set_at``, ``set_by``), and its runs: ``last_run`` (a run, or a check
    that found nothing to expire), ``last_cutoff`` and ``last_purge_id`` of the last run
    accepted, ``next_run`` when it is next due."""

    policy_id: str
    conversation_id: str | None
    max_age: dt.timedelta
    purge_id: str
    set_at: dt.datetime | None
    set_by: str | None
    last_run: dt.datetime | None
    last_cutoff: dt.datetime | None
    last_purge_id: str | None
    next_run: dt.datetime | None

    @classmethod
    def from_row(cls, row: Row[Any]) -> RetentionPolicy:
        return cls(
            policy_id=row.policy_id,
            conversation_id=row.conversation_id,
            max_age=dt.timedelta(seconds=int(row.max_age_seconds)),
            purge_id=row.purge_id,
            set_at=row.set_at,
            set_by=row.set_by,
            last_run=row.last_run_at,
            last_cutoff=row.last_cutoff,
            last_purge_id=row.last_purge_id,
            next_run=row.next_run_at,
        )


@dataclass(frozen=True)
class PolicyDeferral:
    """What non-terminal agent runs hold back of a standing policy, as its last turn found:
    ``events`` it would expire that they admitted (what occurred after the earliest of them
    waits too), admitted by ``run_ids`` (the first 20), since ``since``: the first turn of
    this deferral (each turn since deferred something)."""

    since: dt.datetime
    events: int
    run_ids: tuple[str, ...]

    def age(self, now: dt.datetime) -> dt.timedelta:
        """How long the policy has been held back at ``now`` (the database clock)."""
        return max(now - self.since, dt.timedelta(0))


@dataclass(frozen=True)
class StandingPolicy:
    """A standing policy as the operator's surfaces list it (``purgectl retention list``, the
    console): the ``policy``, who took its last turn and why (``last_run_by``,
    ``last_run_reason``: the scheduler's, or an operator's ``retention run``; None for a turn
    taken before migration 0017 recorded them), and what agent runs hold back of it (``deferral``;
    None when its last turn deferred nothing)."""

    policy: RetentionPolicy
    last_run_by: str | None
    last_run_reason: str | None
    deferral: PolicyDeferral | None

    @classmethod
    def from_row(cls, row: Row[Any]) -> StandingPolicy:
        deferral = None
        if row.deferred_since is not None:
            run_ids = tuple(str(run) for run in json.loads(row.deferred_run_ids or "[]"))
            deferral = PolicyDeferral(row.deferred_since, int(row.deferred_events), run_ids)
        return cls(RetentionPolicy.from_row(row), row.last_run_by, row.last_run_reason, deferral)


@dataclass(frozen=True)
class RetentionRunOutcome:
    """What one due policy's turn did: ``purge_id`` of the run accepted (or resumed), or None
    when nothing had expired (no ledger row); ``error`` when the turn failed (the next one
    tries again). ``cutoff`` is the run's, lowered below now - max_age when non-terminal agent
    runs admitted events it would expire: ``deferred_events`` of them wait for a later run,
    admitted by ``deferred_run_ids`` (the first 20), also when the turn wrote no row."""

    policy_id: str
    cutoff: dt.datetime | None
    purge_id: str | None
    error: str | None = None
    deferred_events: int = 0
    deferred_run_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class HoldCount:
    """A hold in force, in counts: how many conversations and authors it covers."""

    hold_id: str
    conversations: int
    authors: int
    placed_at: dt.datetime | None


@dataclass(frozen=True)
class Hold:
    """A legal hold: the conversations (everything placed in them) and authors (everything
    they wrote) it covers, who placed it and why (its ledger row, ``purge_id``), and who
    released it and when (the release's row, ``release_purge_id``; None while in force)."""

    hold_id: str
    conversation_ids: tuple[str, ...]
    authors: tuple[str, ...]
    purge_id: str
    placed_at: dt.datetime | None
    placed_by: str | None
    reason: str | None
    release_purge_id: str | None
    released_by: str | None
    released_at: dt.datetime | None
