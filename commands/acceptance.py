"""The skeleton's edges, each an object the handle builds once and hands to the commands that
need it: the ``Enqueuer``, which wakes the workers, and the ``Acceptor``, through which every
kind's preview and confirmation go (``purgekeeper.commands.kinds.skeleton``).

An acceptance is one transaction (the skeleton's). After the commit the row is copied to the
checkpoint directory, and only then are its cleanup steps woken, best effort: the
scheduler's sweep heals a wake-up that was lost.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection

from purgekeeper.commands.gate import Gate
from purgekeeper.commands.kinds.kind import PREVIEW_RETENTION, Env, Kind
from purgekeeper.commands.kinds.skeleton import Causal, accept, appended
from purgekeeper.commands.records import Acceptance
from purgekeeper.commands.settings import Settings
from purgekeeper.schema import content_queries, purges
from purgekeeper.schema.db import Database
from purgekeeper.schema.errors import LedgerNotCopied, PurgekeeperError
from purgekeeper.storage import ledger_copy
from purgekeeper.storage.content_keys import ContentKeys
from purgekeeper.storage.files import reason_of

log = logging.getLogger(__name__)

EnqueueHook = Callable[[Sequence[str]], None]

_COPY_FAILED: tuple[type[Exception], ...] = (*ledger_copy.COPY_FAILED, PurgekeeperError)


class Enqueuer:
    """Wakes the workers for cleanup steps through ``enqueue`` (the broker's, or a host's
    hook), after the commit and never before. Best effort: a failure is logged, and the
    scheduler's sweep re-sends what is due."""

    def __init__(self, enqueue: EnqueueHook) -> None:
        self.enqueue = enqueue

    def wake(self, step_ids: Sequence[str]) -> None:
        """After the commit, never before; a failure is logged and the sweep heals it."""
        try:
            self.enqueue(list(step_ids))
        except Exception:
            log.warning(
                "enqueue of cleanup steps %s failed; the scheduler will resume them", list(step_ids), exc_info=True
            )


def broker_hook(settings: Settings, workers: str, database_key: str, db: Database) -> EnqueueHook:
    """The enqueue hook of a handle given none: the broker's (Redis with a broker URL, else
    the in-process StubBroker); with ``workers="none"`` and no broker URL, none at all."""
    if workers == "none" and settings.broker_url is None:
        return _no_enqueue
    from purgekeeper.workers import broker  # lazy: dramatiq, which a one-shot command never needs

    broker.setup(settings.broker_url)
    return functools.partial(broker.enqueue, settings.broker_url, database_key, db=db)


def _no_enqueue(step_ids: Sequence[str]) -> None:
    """Until the workers are wired, an acceptance wakes nothing; the scheduler sweeps."""


_Disclosing = TypeVar("_Disclosing")
PLAIN_CONTENT_DISCLOSURE = (
    "This database holds content written before encryption at rest that is not sealed: what a purge removes "
    "of it may remain in plain text in the database's files, its WAL, replicas and backups until the space "
    "is reused (docs/guides/encryption.md)."
)


def with_plain_content_disclosed(result: _Disclosing, plain: bool) -> _Disclosing:
    """A preview or an acceptance, its disclosures naming the content not sealed yet when
    ``plain`` (``content_queries.holds_plain_content``)."""
    disclosures = getattr(result, "disclosures", None)
    if not plain or disclosures is None or PLAIN_CONTENT_DISCLOSURE in disclosures:
        return result
    return dataclasses.replace(result, disclosures=(*disclosures, PLAIN_CONTENT_DISCLOSURE))  # type: ignore[type-var]


class Acceptor:
    """Every kind's preview and acceptance: the skeleton run in ``db`` while ``gate`` is
    open (``settings`` for the kinds' stages), the ledger row copied to ``copy`` after the
    commit, then the steps woken through ``enqueuer``."""

    def __init__(
        self,
        db: Database,
        gate: Gate,
        settings: Settings,
        copy: ledger_copy.LedgerCopy,
        enqueuer: Enqueuer,
        keys: ContentKeys,
        *,
        copied: Callable[[], None] | None = None,
    ) -> None:
        self.db = db
        self.gate = gate
        self.copy = copy
        self.enqueuer = enqueuer
        self.env = Env(gate, settings, keys)
        self._copied = copied  # told after each copy: the witnesses' thread wakes (never waited for)

    def preview(self, kind: Kind, args: Any) -> Any:
        """A kind's preview, in one read transaction while the gate is open; then, in a short
        write of its own, what a confirmation checks it against."""
        with self.db.read() as conn:
            self.gate.require_open(conn)
            report, remembered = kind.preview(conn, self.env, args)
            report = with_plain_content_disclosed(report, content_queries.holds_plain_content(conn))
        if remembered is not None:
            digest = report.scope_digest
            self.db.transact(lambda conn: purges.save_preview(conn, digest, remembered, keep_for=PREVIEW_RETENTION))
        return report

    def preview_read_once(self, kind: Any, args: Any) -> Any:
        """The preview of a kind that checks the gate itself, on the head its report's own
        statement read (``kind.preview_read``: the content kind's, one statement on
        PostgreSQL), and says whether content not sealed yet is left. What a confirmation
        checks it against is written without waiting for the WAL flush: only a stale
        confirmation reads it, to name what changed, and one lost to a crash of the server
        makes that message "preview it again" (the confirmation checks the digest against
        the database, never against this)."""
        with self.db.read() as conn:
            report, remembered, plain = kind.preview_read(conn, self.env, args)
        report = with_plain_content_disclosed(report, plain)
        digest = report.scope_digest
        self.db.transact(
            lambda conn: purges.save_preview(conn, digest, remembered, keep_for=PREVIEW_RETENTION), durable=False
        )
        return report

    def accept(self, kind: Kind, args: Any, request: dict[str, Any], causal: Causal) -> Acceptance:
        """Commit, then copy the ledger row out (flushed), then wake the steps; the call
        returns only once the row is in the checkpoint directory."""
        env = self.env

        def work(conn: Connection) -> tuple[Acceptance, list[str]]:
            acceptance, step_ids = accept(conn, kind, env, args, request, causal)
            return with_plain_content_disclosed(acceptance, content_queries.holds_plain_content(conn)), step_ids

        acceptance, step_ids = self.db.transact(work)
        try:
            self.copy_out(acceptance)
        finally:
            if step_ids:
                self.enqueuer.wake(step_ids)
        return acceptance

    def copy_out(self, acceptance: Acceptance) -> None:
        """After the commit, never before: a row may be outside and not yet in a database
        that was later restored, never the reverse. A failure leaves the purge accepted."""
        written = getattr(appended, "entry", None)
        appended.entry = None
        if written is not None and (written.seq, written.purge_id) != (acceptance.ledger_seq, acceptance.purge_id):
            written = None  # not this acceptance's row (a replay appends none): read it instead
        try:
            ledger_copy.catch_up(self.db, self.copy, upto=acceptance.ledger_seq, committed=written)
            if self._copied is not None:
                self._copied()
        except _COPY_FAILED as exc:
            raise LedgerNotCopied(
                f"purge {acceptance.purge_id} is accepted and fenced (ledger seq {acceptance.ledger_seq}), but its "
                f"ledger row is not in the checkpoint directory yet ({reason_of(exc)}); the same request again "
                "(same idempotency key), the next acceptance or the scheduler completes the copy",
                purge_id=acceptance.purge_id,
                ledger_seq=acceptance.ledger_seq,
            ) from exc

    def copy_ledger(self) -> int:
        """Copy every committed ledger row the checkpoint directory lacks (the scheduler does
        this after every sweep; an acceptance copies its own row before it returns). Returns
        the seq the copy holds."""
        try:
            return ledger_copy.catch_up(self.db, self.copy).seq
        except ledger_copy.COPY_FAILED as exc:
            raise LedgerNotCopied(
                f"the ledger could not be copied to the checkpoint directory: {reason_of(exc)}"
            ) from exc
