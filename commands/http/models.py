"""The HTTP API's response bodies, as the OpenAPI document declares them.

Each model mirrors a record of ``commands`` (``MIRRORS`` pairs them, and a test holds the
fields equal) in the JSON that ``purgekeeper.commands.surface.plain`` makes of it: times are UTC ISO
8601 with a ``Z``, durations whole seconds, tuples lists, enums their values. The routes
send ``plain`` JSON; these models are its contract, for the document and generated clients.

Each name ends in ``Out`` (``ConversationOut`` mirrors ``records.Conversation``; ``ErrorOut`` is
the body of every error), so no name is both a record and an HTTP model; the request bodies
(``bodies``) end in ``In``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, Field, JsonValue

from purgekeeper.commands import gate, ingest_batch, records, restore_commands, scope
from purgekeeper.schema.states import Binding, BotState, ConversationKind, ConversationState, RunStatus, StepStatus

PurgeState = Literal["accepted", "cleaning", "complete", "incomplete"]
Utc = dt.datetime  # always UTC, written with a ``Z``


class _Model(BaseModel):
    pass


# -- content --------------------------------------------------------------------------------


class ConversationOut(_Model):
    id: str
    kind: ConversationKind
    state: ConversationState
    version: int = Field(description="rises by 1 on every change of the conversation or its content")
    bot_id: str | None
    created_at: Utc


class ConversationListOut(_Model):
    conversations: list[ConversationOut] = Field(description="purged conversations are omitted")


class BotOut(_Model):
    id: str
    name: str
    state: BotState
    memory_path: str | None
    marker_id: str | None
    created_at: Utc


class AttachmentOut(_Model):
    id: str
    blob_id: str
    binding: Binding
    name: str
    size: int = Field(description="bytes")


class EventOut(_Model):
    id: str
    provider_event_id: str | None
    author: str
    occurred_at: Utc
    body: str | None
    attachments: list[AttachmentOut]


class EventListOut(_Model):
    events: list[EventOut] = Field(description="the events no purge fences, oldest first")


class IngestResultOut(_Model):
    status: ingest_batch.IngestStatus = Field(description="accepted (stored now), duplicate (stored before) or refused")
    event: EventOut | None = Field(description="accepted: the event stored; duplicate: the event stored first")
    error: str | None = Field(description="refused: the code of the error that refused it (nothing of it written)")
    message: str | None = Field(description="refused: the error's message")


class IngestBatchOut(_Model):
    results: list[IngestResultOut] = Field(description="one per event given, in the order given")


class PlacementOut(_Model):
    event_id: str
    conversation_id: str


class RunOut(_Model):
    id: str
    conversation_id: str
    bot_id: str
    status: RunStatus
    output: JsonValue = Field(description="the run's terminal output (JSON), null until it has one")
    created_at: Utc
    finished_at: Utc | None


class AdmissionOut(_Model):
    id: str
    event_id: str
    run_id: str
    payload: JsonValue


class DerivativeOut(_Model):
    id: str
    conversation_id: str
    kind: str
    payload: JsonValue
    source_event_ids: list[str]


# -- previews -------------------------------------------------------------------------------


class EventScopeOut(_Model):
    event_ids: list[str] | None
    conversation_id: str | None
    after: Utc | None
    before: Utc | None
    author: str | None


class PreviewEventOut(_Model):
    id: str
    provider_event_id: str | None
    author: str
    occurred_at: Utc
    placements: list[str] = Field(description="the conversations it is placed in")
    already_fenced: bool


class PreviewAdmissionOut(_Model):
    id: str
    event_id: str
    run_id: str


class PreviewRunOut(_Model):
    id: str
    conversation_id: str
    bot_id: str
    status: str
    has_output: bool


class PreviewDerivativeOut(_Model):
    id: str
    conversation_id: str
    kind: str
    source_event_ids: list[str]


class ReferenceOut(_Model):
    attachment_id: str
    event_id: str
    binding: str


class PreviewAttachmentOut(_Model):
    id: str
    event_id: str
    blob_id: str
    binding: str
    name: str | None = Field(description="null once the purge's cleanup has cleared it (a name is content)")
    size: int
    other_references: list[ReferenceOut] = Field(description="bindings outside the scope that keep the bytes")


class HeldEventOut(_Model):
    event_id: str
    hold_ids: list[str]


class PurgePreviewOut(_Model):
    scope: EventScopeOut
    events: list[PreviewEventOut]
    admissions: list[PreviewAdmissionOut]
    runs: list[PreviewRunOut] = Field(description="runs that admitted a selected event: their outputs are NULLed too")
    derivatives: list[PreviewDerivativeOut]
    exclusive_attachments: list[PreviewAttachmentOut] = Field(description="their bytes will be deleted")
    shared_attachments: list[PreviewAttachmentOut] = Field(description="their bytes are kept")
    blocking_runs: list[PreviewRunOut] = Field(description="non-terminal runs that refuse the purge")
    disclosures: list[str]
    scope_digest: str = Field(description="send it with the confirmation")
    held: list[HeldEventOut] = Field(description="selected events under a legal hold")


class RepositoryIdentityOut(_Model):
    path: str
    marker_id: str


class MemoryPreviewOut(_Model):
    path: str | None
    erasable: bool
    reason: str | None
    detail: str | None
    identity: RepositoryIdentityOut | None = Field(description="send it back as reviewed_repository")


class ConversationPreviewOut(_Model):
    conversation_id: str
    kind: Literal["conversation", "channel"] | None = Field(description="null when no conversation has the id")
    exists: bool
    unknown: bool = Field(description="no conversation has the id and no purge reserved it: most often a typo")
    version: int | None = Field(description="send it as `expected_version` to refuse a conversation that changed")
    purged_by: str | None = Field(description="the purge that already purged it")
    removes_content: bool = Field(description="false for a channel's deletion, which removes nothing")
    events: int
    events_placed_elsewhere: int
    attachments: int
    runs: int
    active_runs: list[str] = Field(description="runs not ended, which refuse the purge (409 `active_runs`)")
    derivatives: int
    holds: list[str] = Field(description="legal holds that refuse the purge (409 `legal_hold`)")
    disclosures: list[str]


class BotDeletionPreviewOut(_Model):
    bot_id: str
    name: str
    state: str
    blocking_runs: list[str]
    memory: MemoryPreviewOut
    disclosures: list[str]
    held_by: list[str]


class ErasureTotalsOut(_Model):
    events: int
    placements: int
    conversations: int
    admissions: int
    run_outputs: int
    derivatives: int
    exclusive_attachments: int
    shared_attachments: int
    already_fenced: int


class ConversationCountOut(_Model):
    conversation_id: str
    events: int


class SharedAttachmentOut(_Model):
    attachment_id: str
    event_id: str
    blob_id: str
    other_references: int


class AuthorErasurePreviewOut(_Model):
    author: str
    before: Utc | None
    totals: ErasureTotalsOut
    conversations: list[ConversationCountOut]
    shared_attachments: list[SharedAttachmentOut]
    blocking_runs: list[str]
    disclosures: list[str]
    scope_digest: str
    held_by: list[str]


# -- purges ---------------------------------------------------------------------------------


class AcceptanceOut(_Model):
    purge_id: str = Field(description="its status is at /v1/purges/{purge_id} (the Location header)")
    ledger_seq: int
    outcome: Literal["accepted", "already_purged"]
    disclosures: list[str]
    reserved_absent: bool = Field(
        description="true when a conversation purge named an id no conversation had: the id is now reserved for ever"
    )


class StepProgressOut(_Model):
    removed: int
    retained_shared: int
    retained_reasons: dict[str, Any]
    remaining: int | None
    held: int = Field(description="what legal holds kept out of a retention run")


class StepStateOut(_Model):
    id: str
    kind: str = Field(description="bodies, attachments or memory")
    status: StepStatus
    attempts: int
    max_attempts: int
    last_error: str | None
    next_attempt_at: Utc
    progress: StepProgressOut
    lease_owner: str | None
    lease_expires_at: Utc | None
    updated_at: Utc | None


class PurgeStatusOut(_Model):
    purge_id: str
    kind: str = Field(description="content, conversation, channel, bot, author, retention, ..., hold_release")
    status: PurgeState
    stalled: bool
    ledger_seq: int
    accepted_at: Utc
    actor: str
    reason: str
    steps: list[StepStateOut]
    label: str = Field(description="what the row is, in a few words")
    policy_id: str | None
    completed_at: Utc | None


class PurgePageOut(_Model):
    purges: list[PurgeStatusOut] = Field(description="newest first")
    next_after: int | None = Field(description="pass as ?after= for the next page; null on the last page")


# -- operating ------------------------------------------------------------------------------


class ResumedOut(_Model):
    resent: int = Field(description="how many due cleanup steps were sent again")


class LedgerReportOut(_Model):
    ok: bool
    rows: int
    head_hash: str
    problems: list[str]


class GateStateOut(_Model):
    open: bool
    problems: list[str]
    ledger_rows: int
    checkpoint: str | None
    warnings: list[str]
    checked_at: Utc | None


class MergeReportOut(_Model):
    files: list[str] = Field(description="the uploaded files, named as the client named them")
    sources: list[str]
    appended: list[str]
    already_known: int
    runs_abandoned: int
    steps_rearmed: list[str]
    deleted_files_removed: int
    gate: GateStateOut
    verbatim: int


# -- retention and legal holds --------------------------------------------------------------


class RetentionPreviewOut(_Model):
    conversation_id: str | None
    max_age: int = Field(description="seconds")
    cutoff: Utc
    events: int
    placements: int
    conversations: int
    kept_elsewhere: int
    by_conversation: list[ConversationCountOut]
    held: int
    hold_ids: list[str]
    governed_elsewhere: list[str]
    replaces: str | None
    disclosures: list[str]
    scope_digest: str


class RetentionPolicyOut(_Model):
    policy_id: str
    conversation_id: str | None
    max_age: int = Field(description="seconds")
    purge_id: str
    set_at: Utc | None
    set_by: str | None
    last_run: Utc | None
    last_cutoff: Utc | None
    last_purge_id: str | None
    next_run: Utc | None


class RetentionRunOutcomeOut(_Model):
    policy_id: str
    cutoff: Utc | None
    purge_id: str | None = Field(description="the run accepted; null when nothing new had expired")
    error: str | None
    deferred_events: int
    deferred_run_ids: list[str]


class PolicyListOut(_Model):
    policies: list[RetentionPolicyOut]


class HoldOut(_Model):
    hold_id: str
    conversation_ids: list[str]
    authors: list[str]
    purge_id: str
    placed_at: Utc | None
    placed_by: str | None
    reason: str | None
    release_purge_id: str | None
    released_by: str | None
    released_at: Utc | None


class HoldListOut(_Model):
    holds: list[HoldOut]


# -- probes (``routes.probes``: no token, and nothing in them but a status) ---------------------


class ProbeOut(_Model):
    status: Literal["ok"]


NotReadyReason = Literal["database_unreachable", "messaging_unavailable"]


class NotReadyOut(_Model):
    status: Literal["unavailable"]
    reason: NotReadyReason = Field(
        description="the database did not answer, or content reads and writes are closed (the gate)"
    )


# -- errors ---------------------------------------------------------------------------------


class ErrorOut(_Model):
    """``{"error": CODE, "detail": ...}``; a few errors add machine-readable fields."""

    error: str = Field(description="the error's class name in snake_case, e.g. validation_error")
    detail: str
    reason: str | None = Field(default=None, description="memory_erasure_unavailable: why")
    diagnostics: list[str] | None = Field(default=None, description="messaging_unavailable: bounded problems")
    run_ids: list[str] | None = Field(default=None, description="active_runs: the runs that block")
    hold_ids: list[str] | None = Field(default=None, description="legal_hold: the holds that refuse")
    purge_id: str | None = Field(default=None, description="ledger_not_copied: the purge, accepted and fenced")
    ledger_seq: int | None = Field(default=None, description="ledger_not_copied: its ledger row")


# Each model and the record it mirrors (the wrappers, ResumedOut, the probes' and ErrorOut mirror none).
MIRRORS: dict[type[BaseModel], type[Any]] = {
    ConversationOut: records.Conversation,
    BotOut: records.Bot,
    AttachmentOut: records.Attachment,
    EventOut: records.Event,
    IngestResultOut: ingest_batch.IngestResult,
    PlacementOut: records.Placement,
    RunOut: records.Run,
    AdmissionOut: records.Admission,
    DerivativeOut: records.Derivative,
    EventScopeOut: scope.EventScope,
    PreviewEventOut: scope.PreviewEvent,
    PreviewAdmissionOut: scope.PreviewAdmission,
    PreviewRunOut: scope.PreviewRun,
    PreviewDerivativeOut: scope.PreviewDerivative,
    ReferenceOut: scope.Reference,
    PreviewAttachmentOut: scope.PreviewAttachment,
    HeldEventOut: scope.HeldEvent,
    PurgePreviewOut: scope.PurgePreview,
    RepositoryIdentityOut: records.RepositoryIdentity,
    MemoryPreviewOut: records.MemoryPreview,
    BotDeletionPreviewOut: records.BotDeletionPreview,
    ConversationPreviewOut: records.ConversationPreview,
    ErasureTotalsOut: records.ErasureTotals,
    ConversationCountOut: records.ConversationCount,
    SharedAttachmentOut: records.SharedAttachment,
    AuthorErasurePreviewOut: records.AuthorErasurePreview,
    AcceptanceOut: records.Acceptance,
    StepProgressOut: records.StepProgress,
    StepStateOut: records.StepState,
    PurgeStatusOut: records.PurgeStatus,
    PurgePageOut: records.PurgePage,
    LedgerReportOut: records.LedgerReport,
    GateStateOut: gate.GateState,
    MergeReportOut: restore_commands.MergeReport,
    RetentionPreviewOut: records.RetentionPreview,
    RetentionPolicyOut: records.RetentionPolicy,
    RetentionRunOutcomeOut: records.RetentionRunOutcome,
    HoldOut: records.Hold,
}
