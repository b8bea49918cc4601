"""The ``decide`` of the kinds confirmed by a subject's id (a conversation, a channel, a bot),
with no database: the row ``lock`` returned stands in as a row of the real table, and each
lookup ``decide`` makes (the tombstone, the active runs, the holds) is faked with its answer;
one it makes unfaked fails the test. A bot's Memory is proven on a real directory."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from purgekeeper.commands.kinds import BOT, CHANNEL, CONVERSATION
from purgekeeper.commands.kinds.bot import BotDeletionRequest
from purgekeeper.commands.kinds.conversation import ConversationPurgeRequest
from purgekeeper.commands.kinds.kind import Already, Decision, Env
from purgekeeper.commands.kinds.selector_fields import RowInvalid
from purgekeeper.commands.records import RepositoryIdentity
from purgekeeper.schema import holds, purges
from purgekeeper.schema.errors import (
    ActiveRuns,
    LegalHold,
    MemoryErasureUnavailable,
    NotFound,
    ValidationError,
    VersionConflict,
)
from purgekeeper.schema.states import StepKind, TombstoneKind
from purgekeeper.schema.tables import bots, conversations
from purgekeeper.storage import memory
from tests.helpers.decide_fakes import NO_DATABASE, Queries, row_of


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> Queries:
    return Queries(monkeypatch)


def tombstones(queries: Queries, **found: tuple[str, int]) -> None:
    """``purges.tombstone_of`` finds the tombstones named by kind, and no other."""

    def tombstone_of(kind: TombstoneKind, the_id: str) -> Any:
        hit = found.get(kind.value)
        return SimpleNamespace(purge_id=hit[0], seq=hit[1]) if hit else None

    queries.computes(purges, "tombstone_of", tombstone_of)


# -- a conversation purge -------------------------------------------------------------------------


def conversation(version: int = 3, kind: str = "conversation") -> Any:
    return row_of(conversations, id="c1", kind=kind, state="active", version=version)


def purge_conversation(locked: Any, expected_version: int | None = None) -> Decision | Already:
    return CONVERSATION.decide(NO_DATABASE, None, ConversationPurgeRequest("c1", expected_version), locked)


def test_a_conversation_is_purged_with_its_bodies_and_then_its_attachments(queries: Queries) -> None:
    tombstones(queries)
    queries.returns(purges, "active_run_ids", [])
    queries.returns(holds, "holds_of_conversation", [])
    assert purge_conversation(conversation(kind="channel"), expected_version=3) == Decision(
        {"conversation_id": "c1", "conversation_kind": "channel", "reserved_absent_id": False},
        (StepKind.BODIES, StepKind.ATTACHMENTS),
        parked=(StepKind.ATTACHMENTS,),  # the bodies step unparks it
    )
    assert queries.arguments("active_run_ids") == [{"conversation_ids": ["c1"], "bot_id": None}]


def test_an_absent_conversation_s_id_is_reserved_without_looking_for_runs_or_holds(queries: Queries) -> None:
    tombstones(queries)  # active_run_ids and holds_of_conversation unfaked: a call fails the test
    assert purge_conversation(None, expected_version=7) == Decision(
        {"conversation_id": "c1", "conversation_kind": None, "reserved_absent_id": True}
    )


def test_a_purged_conversation_is_already_purged_whatever_version_was_expected(queries: Queries) -> None:
    tombstones(queries, conversation=("p1", 4))
    assert purge_conversation(conversation(version=9), expected_version=3) == Already("p1", 4)
    assert queries.arguments("tombstone_of") == [{"kind": TombstoneKind.CONVERSATION, "the_id": "c1"}]


def test_another_version_than_the_one_expected_is_a_conflict(queries: Queries) -> None:
    tombstones(queries)
    with pytest.raises(VersionConflict, match="c1 is at version 4, not 3"):
        purge_conversation(conversation(version=4), expected_version=3)


def test_no_expected_version_accepts_any(queries: Queries) -> None:
    tombstones(queries)
    queries.returns(purges, "active_run_ids", [])
    queries.returns(holds, "holds_of_conversation", [])
    assert isinstance(purge_conversation(conversation(version=40)), Decision)


def test_an_active_run_in_the_conversation_refuses(queries: Queries) -> None:
    tombstones(queries)
    queries.returns(purges, "active_run_ids", ["r1"])
    with pytest.raises(ActiveRuns) as refused:  # holds_of_conversation unfaked: not asked
        purge_conversation(conversation())
    assert refused.value.run_ids == ("r1",)


def test_a_hold_on_the_conversation_refuses(queries: Queries) -> None:
    tombstones(queries)
    queries.returns(purges, "active_run_ids", [])
    queries.returns(holds, "holds_of_conversation", ["h1"])
    with pytest.raises(LegalHold, match="legal hold h1 covers conversation c1") as refused:
        purge_conversation(conversation())
    assert refused.value.hold_ids == ("h1",)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"conversation_id": "c 1"}, "conversation_id"),
        ({"conversation_kind": "thread"}, "conversation_kind"),
        ({"reserved_absent_id": "no"}, "reserved_absent_id"),
    ],
)
def test_a_conversation_row_no_acceptance_would_write_is_refused(change: dict[str, Any], named: str) -> None:
    row = {"conversation_id": "c1", "conversation_kind": None, "reserved_absent_id": True}
    CONVERSATION.check_selectors(row)
    with pytest.raises(RowInvalid, match=named):
        CONVERSATION.check_selectors({**row, **change})


# -- a channel deletion ---------------------------------------------------------------------------


def test_a_channel_is_deleted_by_its_id_with_no_cleanup(queries: Queries) -> None:
    tombstones(queries)
    assert CHANNEL.decide(NO_DATABASE, None, "ch1", conversation(kind="channel")) == Decision({"channel_id": "ch1"})


@pytest.mark.parametrize("kind", ["channel", "conversation"])
def test_a_deleted_or_purged_channel_is_already_done(queries: Queries, kind: str) -> None:
    tombstones(queries, **{kind: ("p1", 2)})
    assert CHANNEL.decide(NO_DATABASE, None, "ch1", conversation(kind="channel")) == Already("p1", 2)


@pytest.mark.parametrize(
    ("locked", "refusal", "message"),
    [
        (None, NotFound, "no channel ch1"),
        (conversation(kind="conversation"), ValidationError, "ch1 is a conversation, not a channel"),
    ],
)
def test_only_a_channel_that_exists_is_deleted(
    queries: Queries, locked: Any, refusal: type[Exception], message: str
) -> None:
    queries.returns(purges, "lock_conversation", locked)
    with pytest.raises(refusal, match=message):
        CHANNEL.lock(NO_DATABASE, None, "ch1")


def test_a_channel_row_needs_its_id() -> None:
    CHANNEL.check_selectors({"channel_id": "ch1"})
    with pytest.raises(RowInvalid, match="lack channel_id"):
        CHANNEL.check_selectors({})


# -- a bot deletion -------------------------------------------------------------------------------


def bot(memory_path: str | None = "/srv/memory/b1", marker_id: str | None = "m1") -> Any:
    return row_of(bots, id="b1", name="Bot", state="active", memory_path=memory_path, marker_id=marker_id)


def delete_bot(
    locked: Any, *, erase: bool = False, reviewed: RepositoryIdentity | None = None, env: Any = None
) -> Decision | Already:
    return BOT.decide(NO_DATABASE, env, BotDeletionRequest("b1", erase, reviewed), locked)


@pytest.fixture
def live(queries: Queries) -> Queries:
    """A bot not deleted yet, with no active run."""
    tombstones(queries)
    queries.returns(purges, "active_run_ids", [])
    return queries


def test_a_bot_is_deleted_keeping_its_memory(live: Queries) -> None:
    """Its Memory's locator is kept, and neither the holds nor the repository are looked at."""
    assert delete_bot(bot()) == Decision(
        {"bot_id": "b1", "erase_memory": False, "memory_path": "/srv/memory/b1", "marker_id": "m1"}
    )
    assert live.arguments("active_run_ids") == [{"conversation_ids": (), "bot_id": "b1"}]


def test_a_deleted_bot_is_already_done(queries: Queries) -> None:
    tombstones(queries, bot=("p1", 5))
    assert delete_bot(bot(), erase=True) == Already("p1", 5)


def test_a_bot_with_an_active_run_is_refused(queries: Queries) -> None:
    tombstones(queries)
    queries.returns(purges, "active_run_ids", ["r1", "r2"])
    with pytest.raises(ActiveRuns, match="r1, r2"):
        delete_bot(bot())


def test_a_hold_refuses_the_memory_erasure(live: Queries) -> None:
    live.returns(holds, "holds_of_bot", ["h1"])
    with pytest.raises(LegalHold, match="Memory erasure was asked for") as refused:
        delete_bot(bot(), erase=True, reviewed=RepositoryIdentity("/srv/memory/b1", "m1"))
    assert refused.value.hold_ids == ("h1",)


@pytest.mark.parametrize(
    ("locked", "reviewed", "reason"),
    [
        (bot(memory_path=None, marker_id=None), None, "no_repository"),
        (bot(), None, "identity_changed"),
        (bot(), RepositoryIdentity("/srv/memory/b2", "m1"), "identity_changed"),
        (bot(), RepositoryIdentity("/srv/memory/b1", "m2"), "identity_changed"),
    ],
    ids=["no repository", "nothing reviewed", "another path", "another marker"],
)
def test_memory_erasure_needs_the_repository_that_was_reviewed(
    live: Queries, locked: Any, reviewed: RepositoryIdentity | None, reason: str
) -> None:
    live.returns(holds, "holds_of_bot", [])
    with pytest.raises(MemoryErasureUnavailable) as refused:  # kept_repositories unfaked: nothing proven
        delete_bot(locked, erase=True, reviewed=reviewed)
    assert refused.value.reason == reason


@pytest.fixture
def repository(tmp_path: Path) -> tuple[Path, memory.Marker]:
    """Bot b1's Memory repository, with its marker, under a Memory root."""
    path = tmp_path / "memory" / "b1"
    memory.git_dir(path).mkdir(parents=True)
    return path, memory.write_marker(path, "b1")


def memory_env(tmp_path: Path) -> Any:
    return Env(gate=None, settings=SimpleNamespace(memory_roots=(tmp_path / "memory",)), keys=None)


def test_a_proven_repository_is_erased_by_a_memory_step(
    live: Queries, repository: tuple[Path, memory.Marker], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, marker = repository
    live.returns(holds, "holds_of_bot", [])
    live.returns(purges, "kept_repositories", [str(tmp_path / "memory" / "b2")])
    monkeypatch.chdir(tmp_path)  # the reviewed path, as the host spelled it, is the same repository
    reviewed = RepositoryIdentity("memory/b1", marker.marker_id)
    decision = delete_bot(bot(str(path), marker.marker_id), erase=True, reviewed=reviewed, env=memory_env(tmp_path))
    assert decision == Decision(
        {"bot_id": "b1", "erase_memory": True, "memory_path": str(path), "marker_id": marker.marker_id},
        (StepKind.MEMORY,),
    )
    assert live.arguments("kept_repositories") == [{"except_bot": "b1"}]


@pytest.mark.parametrize(
    ("others", "reason"),
    [(lambda path: [], "marker_changed"), (lambda path: [str(path)], "shared_with_other_bot")],
)
def test_a_repository_that_is_not_provably_the_bot_s_alone_is_refused(
    live: Queries, repository: tuple[Path, memory.Marker], tmp_path: Path, others: Any, reason: str
) -> None:
    """The marker the bot row recorded is not the one on disk; or another bot keeps the
    same repository."""
    path, marker = repository
    live.returns(holds, "holds_of_bot", [])
    live.returns(purges, "kept_repositories", others(path))
    marker_id = "m-other" if reason == "marker_changed" else marker.marker_id
    with pytest.raises(MemoryErasureUnavailable) as refused:
        delete_bot(
            bot(str(path), marker_id),
            erase=True,
            reviewed=RepositoryIdentity(str(path), marker_id),
            env=memory_env(tmp_path),
        )
    assert refused.value.reason == reason


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"erase_memory": "yes"}, "erase_memory"),
        ({"marker_id": "m" * 65}, "marker_id"),
        ({"memory_path": None}, "needs its memory_path and marker_id"),
        ({"marker_id": None}, "needs its memory_path and marker_id"),
    ],
)
def test_a_bot_row_no_acceptance_would_write_is_refused(change: dict[str, Any], named: str) -> None:
    row = {"bot_id": "b1", "erase_memory": True, "memory_path": "/srv/memory/b1", "marker_id": "m1"}
    BOT.check_selectors(row)
    BOT.check_selectors({**row, "erase_memory": False, "memory_path": None, "marker_id": None})
    with pytest.raises(RowInvalid, match=named):
        BOT.check_selectors({**row, **change})
