"""An author erasure ("Purge Everywhere"): everything one author wrote, in every
conversation, with ``occurred_at < before`` when a ``before`` is given.

- **Acceptance is O(1)**: one ``author_erasures`` row, which every reader and every writer
  (the triggers) checks from that moment; the bodies step then fences the events one by one
  (``event`` tombstones) and NULLs their content in batches, and unparks the attachments step.
- **The window.** With ``before`` the window is ``occurred_at < before``. Without it, the
  window ends at the acceptance (the database clock), or just after the author's latest
  ``occurred_at`` if that is later: every event that exists is inside it. Ingesting an event
  by the author inside the window raises ``AuthorErased`` whatever ``close_author`` says, so a
  provider backfill cannot bring erased messages back; with ``close_author`` (the default:
  author ids are never reused) every new event by the author does.
- **Staleness.** The preview's digest hashes what the preview shows. Confirming checks, in
  O(1), that the preview was made (it is kept for a day) of this author and window, and that
  no event by the author was ingested since (the author's newest event by ingest time): a
  new event is a changed scope, ``StaleConfirmation``. A new placement, admission or
  derivative of an event already in the scope is not: the erasure covers each event wherever
  it is when the bodies step runs, and the preview says so.
- **Repeats.** An erasure that would fence no event the author's earlier erasures leave
  outside their windows, and adds no closure, is ``already_purged``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from purgekeeper.commands import validation
from purgekeeper.commands.kinds import selector_fields, skeleton
from purgekeeper.commands.kinds.kind import Already, Decision, Env, Kind
from purgekeeper.commands.records import AuthorErasurePreview, ConversationCount, ErasureTotals, SharedAttachment
from purgekeeper.commands.scope import DISCLOSURES
from purgekeeper.schema import authors, holds, ledger, purges, restore, steps
from purgekeeper.schema.errors import StaleConfirmation
from purgekeeper.schema.ledger import canonical_json, sha256_hex, utc_text
from purgekeeper.schema.states import PurgeKind, StepKind
from purgekeeper.workers import cleanup

LISTED_CONVERSATIONS = 100  # the preview lists at most this many conversations (and shared attachments)
DIGEST_VERSION = 2  # 2: the legal holds' marks

AUTHOR_DISCLOSURES = (
    *DISCLOSURES,
    "An event by this author placed in several conversations is one piece of content: it is erased "
    "in every one of them, including placements, admissions and derivatives made after this preview.",
    "The author's identifier stays in the purge ledger and its copy: the fence that refuses their "
    "content must name them.",
)


@dataclass(frozen=True)
class Window:
    author: str
    before: dt.datetime | None


@dataclass(frozen=True)
class ErasureConfirmation:
    window: Window
    scope_digest: str
    close_author: bool


# -- the bodies step (the workers run it: ``purgekeeper.commands.kinds.bodies_steps``) --------------


def erase_author_events(ctx: cleanup.StepContext, held: steps.Claim, entry: ledger.LedgerEntry) -> cleanup.Ran:
    """An author erasure: the author's events in the window, a batch at a time in
    (occurred_at, id) order, get their ``event`` tombstones and lose their content; the batch
    that finds none left unparks the attachments step and finishes this one. A rerun walks
    them again from the start (tombstones and NULLs are idempotent)."""
    selectors = entry.selectors
    window_end = ledger.from_utc_text(str(selectors["window_end"]))
    batch = functools.partial(
        _erase_batch, purge_id=entry.purge_id, author=str(selectors["author"]), window_end=window_end
    )
    after: tuple[Any, ...] | None = None
    while True:
        done = cleanup.run_batch(ctx, held, functools.partial(batch, after=after, limit=ctx.batch_size))
        if done.get("done"):
            break
        after = done["after"]
    return cleanup.Ran(tuple(done["wake"]), finished=True)


def _erase_batch(
    conn: Connection, *, purge_id: str, author: str, window_end: dt.datetime, after: Any, limit: int
) -> dict[str, Any]:
    erased, last = authors.erase_batch(
        conn, purge_id=purge_id, author=author, window_end=window_end, after=after, limit=limit
    )
    if last is not None:
        return {"removed": len(erased), "after": last}
    return {"removed": len(erased), "done": True, "wake": steps.unpark(conn, purge_id, StepKind.ATTACHMENTS.value)}


# -- the kind ---------------------------------------------------------------------------------


class AuthorKind(Kind[ErasureConfirmation, dt.datetime]):
    label = "author erasure"
    name = PurgeKind.AUTHOR
    head_first = False  # the author's lock serialises erasures of one author; the head is taken last
    policy_lock = "shared"
    bodies = staticmethod(erase_author_events)

    def preview(self, conn: Connection, env: Env, args: Window) -> tuple[AuthorErasurePreview, dict[str, Any]]:
        """Under the author's lock, taken first: every ingest by the author that began before
        has committed, and every later one gets a newer mark (its ``created_at`` is set at
        insert, under the same lock, on PostgreSQL)."""
        authors.lock_author(conn, args.author)
        newest = _fingerprint(authors.newest_ingest(conn, args.author))
        report = _report(conn, args, authors.window_end(conn, args.author, args.before))
        return dataclasses.replace(report, scope_digest=_digest(report, newest)), _saved(args, newest, report)

    def check_selectors(self, selectors: Mapping[str, Any]) -> None:
        if "author" not in selectors:
            raise selector_fields.RowInvalid("the selectors lack author")
        selector_fields.text(selectors["author"], "author", validation.MAX_AUTHOR_LENGTH)
        selector_fields.timestamp(selectors, "before")
        selector_fields.timestamp(selectors, "window_end", required=True)
        if not isinstance(selectors.get("close_author"), bool):
            raise selector_fields.RowInvalid("close_author is not true or false")

    def lock(self, conn: Connection, env: Env, args: ErasureConfirmation) -> dt.datetime:
        authors.lock_author(conn, args.window.author)
        return authors.window_end(conn, args.window.author, args.window.before)

    def decide(self, conn: Connection, env: Env, args: ErasureConfirmation, locked: dt.datetime) -> Decision | Already:
        window, end = args.window, locked
        saved = purges.saved_preview(conn, args.scope_digest)
        if saved is None or saved.get("author_erasure") != _window_key(window):
            raise StaleConfirmation(
                f"no preview of the erasure of {window.author} with this window has this digest (a preview is "
                "kept for a day); preview it again"
            )
        if saved.get("newest_ingest") != _fingerprint(authors.newest_ingest(conn, window.author)):
            raise StaleConfirmation(f"events by {window.author} were ingested since the preview; preview it again")
        skeleton.refuse_active_runs(authors.active_runs_admitting(conn, window.author, end))
        covering = _covering(conn, window.author, end, args.close_author)
        if covering is not None:
            return covering
        skeleton.refuse_held(holds.holds_of_author(conn, window.author, end), f"content by {window.author}")
        if saved.get("held_by"):
            raise StaleConfirmation(
                f"the legal holds on {window.author}'s content changed since the preview; preview it again"
            )
        selectors = {
            "author": window.author,
            "before": utc_text(window.before) if window.before else None,
            "window_end": utc_text(end),
            "close_author": args.close_author,
        }
        steps = (StepKind.BODIES, StepKind.ATTACHMENTS)
        return Decision(selectors, steps, parked=(StepKind.ATTACHMENTS,), digest=args.scope_digest)

    def fence(self, conn: Connection, purge_id: str, selectors: Mapping[str, Any]) -> None:
        authors.lock_author(conn, str(selectors["author"]))  # a merge's writer-race, as at acceptance
        authors.insert_erasure(
            conn,
            purge_id=purge_id,
            author=str(selectors["author"]),
            window_end=_window_end(selectors),
            close_author=bool(selectors["close_author"]),
        )

    def left_after_restore(self, conn: Connection, entry: ledger.LedgerEntry) -> list[tuple[StepKind, bool]]:
        if authors.content_left(conn, str(entry.selectors["author"]), _window_end(entry.selectors)):
            # the bodies step fences the events again, then unparks attachments
            return [(StepKind.BODIES, False), (StepKind.ATTACHMENTS, True)]
        return [(StepKind.ATTACHMENTS, False)] if restore.bytes_left(conn, entry.purge_id) else []


def _report(conn: Connection, window: Window, end: dt.datetime) -> AuthorErasurePreview:
    found = authors.erasure_totals(conn, window.author, end, conversation_limit=LISTED_CONVERSATIONS)
    totals = ErasureTotals(**{f.name: getattr(found, f.name) for f in dataclasses.fields(ErasureTotals)})
    return AuthorErasurePreview(
        author=window.author,
        before=window.before,
        totals=totals,
        conversations=tuple(ConversationCount(c, int(n)) for c, n in found.conversation_counts),
        shared_attachments=tuple(SharedAttachment(a, e, b, int(n)) for a, e, b, n in found.shared),
        blocking_runs=tuple(authors.active_runs_admitting(conn, window.author, end)),
        disclosures=AUTHOR_DISCLOSURES,
        scope_digest="",
        held_by=tuple(holds.holds_of_author(conn, window.author, end)),
    )


def _covering(conn: Connection, author: str, end: dt.datetime, close_author: bool) -> Already | None:
    """The author's latest erasure, if the earlier ones already do everything this one would:
    a closed author takes no new event, so a later window adds nothing while no event lies
    between; an open one needs the wider window, which refuses more backfill."""
    earlier = authors.erasures_of(conn, author)
    if not earlier:
        return None
    covered_until = max(row.window_end for row in earlier)
    closed = any(row.close_author for row in earlier)
    if close_author and not closed:
        return None
    if closed and authors.any_event_between(conn, author, covered_until, end):
        return None
    if not closed and covered_until < end:
        return None
    latest = max(earlier, key=lambda row: row.window_end)
    entry = ledger.entry_by_purge_id(conn, latest.purge_id)
    return Already(latest.purge_id, entry.seq if entry else 0)


def _window_end(selectors: Mapping[str, Any]) -> dt.datetime:
    end = selector_fields.timestamp(selectors, "window_end", required=True)
    assert end is not None
    return end


def _window_key(window: Window) -> list[Any]:
    return [window.author, utc_text(window.before) if window.before else None]


def _fingerprint(newest: tuple[str, str] | None) -> list[str] | None:
    return None if newest is None else list(newest)


def _saved(window: Window, newest: list[str] | None, report: AuthorErasurePreview) -> dict[str, Any]:
    """What a confirmation checks the preview against (no content: the author is an id)."""
    return {"author_erasure": _window_key(window), "newest_ingest": newest, "held_by": list(report.held_by)}


def _digest(report: AuthorErasurePreview, newest: list[str] | None) -> str:
    shown = {
        "kind": PurgeKind.AUTHOR.value,
        "digest_version": DIGEST_VERSION,
        "author": report.author,
        "before": report.before,
        "totals": vars(report.totals),
        "conversations": [[c.conversation_id, c.events] for c in report.conversations],
        "shared_attachments": [vars(a) for a in report.shared_attachments],
        "blocking_runs": list(report.blocking_runs),
        "held_by": list(report.held_by),
        "newest_ingest": newest,  # not shown, but a digest names one state of the author's events
    }
    return sha256_hex(canonical_json(shown))
