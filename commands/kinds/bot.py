"""A bot deletion: refused while the bot has non-terminal runs; it closes new runs and
admissions, tombstones the id and keeps a durable locator of the Memory repository. With
``erase_memory`` the reviewed repository must still match and be provably the bot's alone;
a ``memory`` cleanup step then removes it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Row

from purgekeeper.commands.kinds import selector_fields, skeleton
from purgekeeper.commands.kinds.kind import Already, Decision, Env, Kind
from purgekeeper.commands.records import BotDeletionPreview, MemoryPreview, RepositoryIdentity
from purgekeeper.schema import content_queries, holds, ledger, purges
from purgekeeper.schema.errors import MemoryErasureUnavailable, NotFound
from purgekeeper.schema.states import PurgeKind, StepKind, TombstoneKind
from purgekeeper.storage import memory

MAX_MARKER_LENGTH = 64

BOT_DISCLOSURES = (
    "Deleting a bot keeps its Memory repository unless Memory erasure is chosen; its id is never reused.",
    "Memory erasure removes only the reviewed repository, with its local Git history; Git remotes, "
    "exports and backups are not touched.",
    "A request already sent to a model or provider is not recalled.",
)


@dataclass(frozen=True)
class BotDeletionRequest:
    bot_id: str
    erase_memory: bool
    reviewed_repository: RepositoryIdentity | None


class BotKind(Kind[BotDeletionRequest, Row[Any]]):
    label = "bot deletion"
    name = PurgeKind.BOT
    head_first = True
    policy_lock = "shared"  # Memory erasure is refused while a hold covers the bot's conversations
    bodies = None  # a bot's own content lives in its conversations; Memory has its own step

    def preview(self, conn: Connection, env: Env, bot_id: str) -> tuple[BotDeletionPreview, None]:
        """What deleting the bot does, and whether its Memory can be erased (with the reason)."""
        bot = content_queries.bot_row(conn, bot_id)
        if bot is None:
            raise NotFound(f"no bot {bot_id}")
        blocking = purges.active_run_ids(conn, bot_id=bot_id)
        verdict = _ownership(conn, env, bot)
        identity = RepositoryIdentity(bot.memory_path, bot.marker_id) if bot.memory_path and bot.marker_id else None
        memory_preview = MemoryPreview(bot.memory_path, verdict.provable, verdict.reason, verdict.detail, identity)
        held = tuple(holds.holds_of_bot(conn, bot_id))
        preview = BotDeletionPreview(
            bot.id, bot.name, bot.state, tuple(blocking), memory_preview, BOT_DISCLOSURES, held_by=held
        )
        return preview, None

    def check_selectors(self, selectors: Mapping[str, Any]) -> None:
        selector_fields.require_id(selectors, "bot_id")
        selector_fields.flag(selectors, "erase_memory")
        selector_fields.optional_text(selectors, "memory_path", None)
        selector_fields.optional_text(selectors, "marker_id", MAX_MARKER_LENGTH)
        if selectors.get("erase_memory") and not (selectors.get("memory_path") and selectors.get("marker_id")):
            raise selector_fields.RowInvalid("a bot row with erase_memory needs its memory_path and marker_id")

    def lock(self, conn: Connection, env: Env, args: BotDeletionRequest) -> Row[Any]:
        bot = purges.lock_bot(conn, args.bot_id)
        if bot is None:
            raise NotFound(f"no bot {args.bot_id}")
        return bot

    def decide(self, conn: Connection, env: Env, args: BotDeletionRequest, locked: Row[Any]) -> Decision | Already:
        bot = locked
        done = purges.tombstone_of(conn, TombstoneKind.BOT, args.bot_id)
        if done:
            return skeleton.already(done)
        skeleton.refuse_active_runs(purges.active_run_ids(conn, bot_id=args.bot_id))
        if args.erase_memory:
            held = holds.holds_of_bot(conn, args.bot_id)
            skeleton.refuse_held(held, f"the conversations of bot {args.bot_id}, whose Memory erasure was asked for")
            _require_erasable(conn, env, bot, args.reviewed_repository)
        selectors = {
            "bot_id": args.bot_id,
            "erase_memory": args.erase_memory,
            "memory_path": bot.memory_path,
            "marker_id": bot.marker_id,
        }
        return Decision(selectors, (StepKind.MEMORY,) if args.erase_memory else ())

    def fence(self, conn: Connection, purge_id: str, selectors: Mapping[str, Any]) -> None:
        if selectors.get("erase_memory"):  # first: once the tombstone is in, the bot row is final
            purges.mark_memory_erasure(conn, str(selectors["bot_id"]))
        purges.insert_tombstones(conn, purge_id, {TombstoneKind.BOT: [selectors["bot_id"]]})

    def left_after_restore(self, conn: Connection, entry: ledger.LedgerEntry) -> list[tuple[StepKind, bool]]:
        selectors = entry.selectors
        if not (selectors.get("erase_memory") and selectors.get("memory_path")):
            return []
        back = _repository_back(
            Path(str(selectors["memory_path"])), str(selectors["bot_id"]), selectors.get("marker_id")
        )
        return [(StepKind.MEMORY, False)] if back else []


def _ownership(conn: Connection, env: Env, bot: Any) -> memory.Ownership:
    if not bot.memory_path:
        return memory.Ownership.refused("no_repository")
    return memory.prove_ownership(
        bot.memory_path,
        bot_id=bot.id,
        marker_id=bot.marker_id,
        memory_roots=env.settings.memory_roots,
        other_repositories=purges.kept_repositories(conn, except_bot=bot.id),
    )


def _require_erasable(conn: Connection, env: Env, bot: Any, reviewed: RepositoryIdentity | None) -> None:
    if not bot.memory_path:
        raise MemoryErasureUnavailable(memory.OWNERSHIP_REASONS["no_repository"], reason="no_repository")
    current = RepositoryIdentity(bot.memory_path, bot.marker_id or "")
    if reviewed is None or _normal(reviewed) != _normal(current):
        detail = memory.OWNERSHIP_REASONS["identity_changed"]
        raise MemoryErasureUnavailable(detail, reason="identity_changed")
    verdict = _ownership(conn, env, bot)
    if not verdict.provable:
        raise MemoryErasureUnavailable(verdict.detail, reason=verdict.reason or "unprovable")


def _normal(identity: RepositoryIdentity) -> tuple[str, str]:
    return (str(Path(identity.path).expanduser().absolute()), identity.marker_id)


def _repository_back(path: Path, bot_id: str, marker_id: Any) -> bool:
    """An erased repository that is present again, carrying the marker the ledger recorded."""
    if not os.path.lexists(path) or path.is_symlink():
        return False
    return memory.read_marker(path) == memory.Marker(bot_id, str(marker_id))
