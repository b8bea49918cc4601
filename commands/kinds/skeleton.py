"""The one sequence every purge kind runs: preview, acceptance, and a merge's re-apply.

An acceptance is one transaction:

0. the holds-and-policies lock, when the kind takes it (``Kind.policy_lock``);
1. a repeated idempotency key returns the original acceptance (or a conflict);
2. the kind locks what it depends on (conversations, then events, in id order);
3. with ``head_first`` the ledger head is locked next, and the gate checked on it; the key is
   looked up again, under the locks (two calls with one key at once: the second waits on the
   first's locks, then returns its acceptance);
4. the kind decides: a refusal, ``already_purged``, or what to write;
5. the fences and tombstones, the cleanup steps, the versions;
6. the ledger head (if not taken yet: locked last, for the least time) and the ledger row. A
   kind whose fence writes state the triggers check against its ledger row
   (``Kind.ledger_first``: a policy, a run, a hold) appends the row before step 5.

Only after the commit is the enqueue hook called (``purgekeeper.commands.acceptance``).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from purgekeeper.commands import validation
from purgekeeper.commands.kinds.kind import Already, Decision, Env, Kind
from purgekeeper.commands.records import Acceptance
from purgekeeper.schema import holds, ledger, purges
from purgekeeper.schema.errors import ActiveRuns, IdempotencyConflict, LegalHold

MAX_ACTOR_LENGTH = 200
MAX_REASON_LENGTH = 1000
MAX_ORIGIN_LENGTH = 64
DEFAULT_ORIGIN = "python"

# The row this thread's acceptance appended in its committed transaction: copied out as it
# is, without reading it back (``Acceptor.copy_out``; any doubt, and the copy reads the
# database).
appended = threading.local()


@dataclass(frozen=True)
class Causal:
    """Who asked, why, and the causal metadata the ledger keeps (never any content)."""

    actor: str
    reason: str
    idempotency_key: str | None
    request_id: str
    origin: str

    @classmethod
    def check(cls, actor: Any, reason: Any, idempotency_key: Any, request_id: Any, origin: Any) -> Causal:
        return cls(
            actor=validation.check_text(actor, "actor", max_length=MAX_ACTOR_LENGTH),
            reason=validation.check_text(reason, "reason", max_length=MAX_REASON_LENGTH),
            idempotency_key=validation.check_optional_id(idempotency_key, "idempotency_key"),
            request_id=validation.check_optional_id(request_id, "request_id") or uuid.uuid4().hex,
            origin=validation.check_text(origin or DEFAULT_ORIGIN, "origin", max_length=MAX_ORIGIN_LENGTH),
        )


def accept(
    conn: Connection, kind: Kind, env: Env, args: Any, request: dict[str, Any], causal: Causal
) -> tuple[Acceptance, list[str]]:
    """One acceptance of ``kind`` (see the module docstring); returns it and the steps to wake."""
    if kind.policy_lock is not None:
        holds.lock_policies(conn, exclusive=kind.policy_lock == "exclusive")
    replay = _replayed(conn, causal, kind, request)
    if replay:
        return replay, []
    locked = kind.lock(conn, env, args)
    head = _head(conn, env) if kind.head_first else None
    replay = _replayed(conn, causal, kind, request)  # again under the locks: a twin that won the race
    if replay:
        return replay, []
    decision = kind.decide(conn, env, args, locked)
    if isinstance(decision, Already):
        return Acceptance(decision.purge_id, decision.seq, "already_purged", decision.disclosures), []
    purge_id = uuid.uuid4().hex
    if kind.ledger_first:
        entry = _append(conn, env, head, kind, purge_id, decision, request, causal)
    kind.fence(conn, purge_id, decision.selectors)
    steps = purges.create_steps(conn, purge_id, decision.steps, parked=decision.parked)
    if decision.touched:
        purges.bump_versions(conn, decision.touched)
    if not kind.ledger_first:
        entry = _append(conn, env, head, kind, purge_id, decision, request, causal)
    purges.record_conversations(conn, entry.purge_id, kind.conversations(conn, entry.selectors))
    appended.entry = entry  # this thread's acceptance copies it out once committed
    return Acceptance(entry.purge_id, entry.seq, "accepted", decision.disclosures, _reserved(entry.selectors)), steps


def _append(
    conn: Connection,
    env: Env,
    head: ledger.Head | None,
    kind: Kind,
    purge_id: str,
    decision: Decision,
    request: dict[str, Any],
    causal: Causal,
) -> ledger.LedgerEntry:
    """The acceptance's ledger row (the head locked now, if it was not yet)."""
    selectors = {**decision.selectors, "request": request}
    return ledger.append(
        conn,
        head or _head(conn, env),
        purge_id=purge_id,
        kind=kind.name.value,
        selectors=selectors,
        scope_digest=decision.digest or ledger.sha256_hex(ledger.canonical_json(selectors)),
        actor=causal.actor,
        reason=causal.reason,
        request_id=causal.request_id,
        idempotency_key=causal.idempotency_key,
        origin=causal.origin,
    )


def already(covering: Any) -> Already:
    """The covering purge of a tombstone or fence lookup (``purge_id``, ``seq``)."""
    return Already(covering.purge_id, int(covering.seq or 0))


def refuse_active_runs(run_ids: Sequence[str]) -> None:
    if run_ids:
        shown = ", ".join(run_ids[:10])
        raise ActiveRuns(f"non-terminal runs are affected: {shown}; settle or abandon them first", run_ids=run_ids)


def refuse_held(hold_ids: Sequence[str], what: str) -> None:
    """LegalHold naming the holds, if any covers what the purge would remove."""
    if hold_ids:
        shown = ", ".join(hold_ids[:10])
        raise LegalHold(f"legal hold {shown} covers {what}; release the hold first", hold_ids=hold_ids)


def _head(conn: Connection, env: Env) -> ledger.Head:
    head = ledger.lock_head(conn)
    env.gate.check_head(conn, head)
    return head


def _replayed(conn: Connection, causal: Causal, kind: Kind, request: dict[str, Any]) -> Acceptance | None:
    """The original acceptance for a repeated idempotency key, or a conflict. A key names
    one request: its kind, what it asked for, and who asked and why; any other request with
    the same key is an IdempotencyConflict."""
    if causal.idempotency_key is None:
        return None
    entry = ledger.entry_by_idempotency_key(conn, causal.idempotency_key)
    if entry is None:
        return None
    asked = (kind.name.value, json.loads(ledger.canonical_json(request)), causal.actor, causal.reason)
    if (entry.kind, entry.selectors.get("request"), entry.actor, entry.reason) != asked:
        raise IdempotencyConflict(f"idempotency key {causal.idempotency_key} was used for another request")
    return Acceptance(entry.purge_id, entry.seq, "accepted", reserved_absent=_reserved(entry.selectors))


def _reserved(selectors: Mapping[str, Any]) -> bool:
    """Whether the row reserved an id that did not exist (a conversation purge's flag)."""
    return selectors.get("reserved_absent_id") is True
