"""What a purge kind is: the stages every kind says something about.

A kind is one module (``commands/kinds/<kind>.py``) with one :class:`Kind` subclass. The
skeleton (``purgekeeper.commands.kinds.skeleton``) runs the same sequence for every kind, and calls the
kind at each stage:

- ``preview``: the report a person reviews before confirming, read in one read transaction,
  and what to remember of it under its ``scope_digest`` (ids and marks, never content; the
  skeleton saves it for ``PREVIEW_RETENTION`` in a short write of its own); ``None``: the kind
  is confirmed by its ids alone, and a class attribute says so;
- ``check_selectors``: what the kind accepts in a ledger row (a merge checks every row it
  would append);
- ``lock``: lock the rows the acceptance depends on, in the order every writer takes them,
  and read what ``decide`` needs; with ``head_first`` the ledger head is locked next (a kind
  whose subject may have no row to lock is serialised by the head). Before it, the skeleton
  takes the holds-and-policies lock as the kind's ``policy_lock`` says: ``"shared"`` for a
  kind that removes content (a hold placed meanwhile waits, then sees it; it waits for a hold
  being placed, then sees that), ``"exclusive"`` for a change of a hold or a policy;
- ``decide``: refuse (stale, version, active runs...), say the purge is already done, or
  return the :class:`Decision`: the selectors the ledger records and the cleanup steps;
- ``fence``: turn the selectors into fences and tombstones, at acceptance and again at every
  restore merge (an existing fence is kept as it is); a kind whose fence writes state the
  triggers check against its ledger row (a policy, a hold: ``ledger_first``) has its row
  appended before the fence, as a merge does;
- ``left_after_restore``: what, after a restore, counts as this purge's content come back:
  the cleanup steps to re-arm, as ``(kind, parked)``;
- ``bodies``: the plain function of ``purgekeeper.workers.cleanup`` that carries out the bodies step of
  this kind (``None``: the kind creates no bodies step).

And two things the surfaces show: ``label``, the row in a few words (``{policy_id}`` and
``{hold_id}`` are filled from its selectors; never who was erased), and ``operator_only``,
whether its row holds an operator's words (a policy's, a hold's: a host's purge list and
status leave them out).

A kind is generic in its request (what ``confirm`` is given) and in what ``lock`` returns to
``decide``: ``class ContentKind(Kind[ScopeConfirmation, PurgePreview])``.
"""

from __future__ import annotations

import abc
import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from purgekeeper.schema.ledger import LedgerEntry
from purgekeeper.schema.states import PurgeKind, StepKind

if TYPE_CHECKING:  # for the annotations only: a command that shows a purge's label loads neither
    from sqlalchemy import Connection

    from purgekeeper.commands.gate import Gate
    from purgekeeper.commands.settings import Settings
    from purgekeeper.storage.content_keys import ContentKeys
    from purgekeeper.workers.cleanup import BodiesStep

PREVIEW_RETENTION = dt.timedelta(days=1)  # how long a confirmation can name a preview's digest

STAGES = ("preview", "check_selectors", "lock", "decide", "fence", "left_after_restore", "bodies")
OPTIONAL_STAGES = frozenset({"preview", "bodies"})  # declared None by a kind that has none


@dataclass(frozen=True)
class Env:
    """What a kind's stages may use of the handle."""

    gate: Gate
    settings: Settings
    keys: ContentKeys  # to show a preview's sealed names (``purgekeeper.commands.sealed_content``)


@dataclass(frozen=True)
class Decision:
    """An acceptance to write: the selectors the ledger records (the skeleton adds the
    request), the cleanup steps (``parked`` ones wait for another step to unpark them), the
    digest the row carries (empty: the selectors' own), the conversations whose version
    rises, and what the acceptance discloses to its caller (never content)."""

    selectors: dict[str, Any]
    steps: tuple[StepKind, ...] = ()
    parked: tuple[StepKind, ...] = ()
    digest: str = ""
    touched: tuple[str, ...] = ()
    disclosures: tuple[str, ...] = ()


@dataclass(frozen=True)
class Already:
    """Nothing new to purge: the purge that already covers it (its id and ledger seq), and
    what that says to the caller again."""

    purge_id: str
    seq: int
    disclosures: tuple[str, ...] = ()


RequestT = TypeVar("RequestT")
LockedT = TypeVar("LockedT")
Preview = Callable[..., tuple[Any, dict[str, Any] | None]]  # (conn, env, request) -> (report, to remember)


class Kind(abc.ABC, Generic[RequestT, LockedT]):
    """One purge kind: every stage of :data:`STAGES` is defined in the subclass itself."""

    name: ClassVar[PurgeKind]
    label: ClassVar[str]
    operator_only: ClassVar[bool] = False
    names_policy: ClassVar[bool] = False  # its selectors name a retention policy (``policy_id``)
    head_first: ClassVar[bool] = True
    policy_lock: ClassVar[str | None] = None  # "shared", "exclusive", or None: not taken
    ledger_first: ClassVar[bool] = False  # the ledger row is appended before the fence
    preview: Any  # a Preview method, or None: confirmed by its ids alone
    bodies: BodiesStep | None

    @abc.abstractmethod
    def check_selectors(self, selectors: Mapping[str, Any]) -> None:
        """Raise ``fields.RowInvalid`` unless a ledger row of this kind could hold these."""

    @abc.abstractmethod
    def lock(self, conn: Connection, env: Env, args: RequestT) -> LockedT:
        """Lock what the acceptance depends on; return what ``decide`` reads."""

    @abc.abstractmethod
    def decide(self, conn: Connection, env: Env, args: RequestT, locked: LockedT) -> Decision | Already:
        """Refuse, or say what the acceptance writes."""

    @abc.abstractmethod
    def fence(self, conn: Connection, purge_id: str, selectors: Mapping[str, Any]) -> None:
        """The fences and tombstones the selectors imply; idempotent."""

    @abc.abstractmethod
    def left_after_restore(self, conn: Connection, entry: LedgerEntry) -> list[tuple[StepKind, bool]]:
        """The cleanup steps (kind, parked) this purge needs again after a restore."""

    def conversations(self, conn: Connection, selectors: Mapping[str, Any]) -> list[str]:
        """The conversations a row of this kind names, for listing purges by conversation
        (none: an author erasure's, a bot's; a kind that names some says which)."""
        named = selectors.get("conversation_ids") or []
        single = selectors.get("conversation_id")
        return [str(c) for c in (*named, *([single] if single else []))]
