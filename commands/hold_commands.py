"""Legal holds: placed and released by a person, each a ledger row, so a restore of an older
backup brings back the latest state (see ``purgekeeper.commands.kinds.hold``). While a hold is in force,
every purge of what it covers raises ``LegalHold``, and retention keeps it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from purgekeeper.commands import kinds, validation
from purgekeeper.commands.acceptance import Acceptor
from purgekeeper.commands.kinds.hold import Placing
from purgekeeper.commands.kinds.hold_release import Release
from purgekeeper.commands.kinds.skeleton import Causal
from purgekeeper.commands.records import Acceptance, Hold, HoldCount
from purgekeeper.schema import holds
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import ValidationError

MAX_HOLD_SUBJECTS = 1000  # conversations and authors one hold names
MAX_COUNTED = 1000  # holds ``count_holds`` lists at most


class HoldCommands:
    """The legal-hold commands of :class:`commands.Purgekeeper` (each documented there): a
    hold placed or released through ``acceptance``, the holds read from ``db``."""

    def __init__(self, db: Database, acceptance: Acceptor) -> None:
        self.db = db
        self.acceptance = acceptance

    def place_hold(
        self,
        hold_id: str,
        *,
        conversation_ids: Iterable[str] = (),
        authors: Iterable[str] = (),
        actor: str,
        reason: str,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        origin: str | None = None,
    ) -> Acceptance:
        """Place a legal hold on conversations (everything placed in them) and authors
        (everything they wrote). It does not undo a purge accepted before it: the
        acceptance's ``disclosures`` name what was already purged in its scope."""
        validation.check_id(hold_id, "hold_id")
        placing = Placing(hold_id, _conversation_ids(conversation_ids), _authors(authors))
        if not (placing.conversation_ids or placing.authors):
            raise ValidationError("a hold covers at least one conversation or author")
        causal = Causal.check(actor, reason, idempotency_key, request_id, origin)
        request = {
            "hold_id": hold_id,
            "conversation_ids": list(placing.conversation_ids),
            "authors": list(placing.authors),
        }
        return self.acceptance.accept(kinds.HOLD, placing, request, causal)

    def release_hold(
        self,
        hold_id: str,
        *,
        actor: str,
        reason: str,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        origin: str | None = None,
    ) -> Acceptance:
        """Release a hold: purges of what it covered are possible again, and retention runs
        expire what it kept past their cutoffs at their next turn."""
        validation.check_id(hold_id, "hold_id")
        causal = Causal.check(actor, reason, idempotency_key, request_id, origin)
        return self.acceptance.accept(kinds.HOLD_RELEASE, Release(hold_id), {"hold_id": hold_id}, causal)

    def list_holds(self, *, include_released: bool = False) -> list[Hold]:
        """The holds in force (with ``include_released``, the released ones too), by id."""
        if not isinstance(include_released, bool):
            raise ValidationError("include_released must be true or false")
        with self.db.read() as conn:
            rows = holds.list_holds(conn, include_released=include_released)
            covered = holds.subjects_of(conn, [row.hold_id for row in rows])
        return [
            Hold(
                hold_id=row.hold_id,
                conversation_ids=tuple(covered[row.hold_id][0]),
                authors=tuple(covered[row.hold_id][1]),
                purge_id=row.purge_id,
                placed_at=row.placed_at,
                placed_by=row.placed_by,
                reason=row.placed_reason,
                release_purge_id=row.released_by,
                released_by=row.released_by_actor,
                released_at=row.released_at,
            )
            for row in rows
        ]

    def count_holds(self, *, limit: int = 100) -> list[HoldCount]:
        """The first ``limit`` holds in force by id, each with how many conversations and
        authors it covers (no subjects: what ``/status`` shows)."""
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_COUNTED:
            raise ValidationError(f"limit must be an integer from 1 to {MAX_COUNTED}")
        with self.db.read() as conn:
            rows = holds.counts_in_force(conn, limit=limit)
        return [HoldCount(row.hold_id, int(row.conversations), int(row.authors), row.placed_at) for row in rows]


def _conversation_ids(values: Any) -> tuple[str, ...]:
    ids = validation.check_id_list(_listed(values, "conversation_ids"), "conversation_ids", max_count=MAX_HOLD_SUBJECTS)
    return tuple(sorted(set(ids)))


def _authors(values: Any) -> tuple[str, ...]:
    listed = _listed(values, "authors")
    if len(listed) > MAX_HOLD_SUBJECTS:
        raise ValidationError(f"authors names at most {MAX_HOLD_SUBJECTS} authors")
    checked = [validation.check_text(a, "authors", max_length=validation.MAX_AUTHOR_LENGTH) for a in listed]
    return tuple(sorted(set(checked)))


def _listed(values: Any, field: str) -> list[Any]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise ValidationError(f"{field} must be a list")
    return list(values)
