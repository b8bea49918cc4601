"""The HTTP API's receipt documents: ``purgekeeper.tlog.receipt``'s receipt, signed completion statement
and consistency proof, as the OpenAPI document declares them (checked offline by
``purgekeeper.tlog.verify``). They mirror no record of ``commands``: the documents are the contract."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class _Model(BaseModel):
    pass


class DisclosedFieldOut(_Model):
    value: str | None = Field(description="the field's value, as the ledger row holds it")
    salt: str = Field(description="base64 of the field's 16-byte salt, which its commitment in the leaf covers")


class KeyRotationOut(_Model):
    statement: str = Field(
        description="a note signed by the log's old key naming the new one, at a tree size and root "
        "(`purgekeeper-key-rotation/v1`; also served at `/log/rotation/<n>`)"
    )
    proof: list[str] = Field(description="base64 hashes: the consistency proof from the statement's tree to this one")


_ROTATIONS = (
    "the key's rotation statements, when the checkpoint is signed by a key a rotation handed over to: a verifier "
    "holding an older key follows them; absent when the key was never rotated"
)


class ReceiptOut(_Model):
    format: Literal["purgekeeper-receipt"]
    version: Literal[1, 2] = Field(description="2 with `disclosed` (the operator's receipt), 1 without it")
    purge_id: str
    ledger_seq: int
    leaf_index: int = Field(description="ledger_seq - 1")
    leaf: str = Field(
        description="base64 of the leaf: the row's canonical JSON without prev_hash and row_hash (leaf version 1, "
        "rows of before 0018), or with salted commitments of actor, reason, request_id, idempotency_key and origin "
        "in place of their values (`leaf_version` 2)"
    )
    inclusion_proof: list[str] = Field(description="base64 hashes from the leaf up (RFC 9162 §2.1.3)")
    checkpoint: str = Field(description="the signed checkpoint (C2SP signed note) the proof is for")
    disclosed: dict[str, DisclosedFieldOut] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,  # absent, not null: without it the receipt is version 1
        description="the committed fields' values and salts (a version 2 leaf; the verifier checks each against its "
        "commitment); absent from a data subject's receipt (`for_subject=true`) and from a version 1 leaf's",
    )
    rotations: list[KeyRotationOut] | None = Field(
        default=None, exclude_if=lambda value: value is None, description=_ROTATIONS
    )


class CompletionStepCountsOut(_Model):
    kind: str
    removed: int
    retained_shared: int
    held: int


class CompletionStatementOut(_Model):
    purge_id: str
    ledger_seq: int
    completed_at: str = Field(description="when the last step finished (database clock), as in the statement")
    attempts: int = Field(description="the cleanup attempts recorded for the purge, as in the statement")
    steps: list[CompletionStepCountsOut]
    statement: str = Field(
        description="the signed statement (C2SP signed note, the log's key) bound to the purge's leaf; "
        "the fields above repeat it unsigned"
    )


class ConsistencyProofOut(_Model):
    proof: list[str] = Field(description="base64 hashes (RFC 9162 §2.1.4) from the tree of size `from`")
    checkpoint: str = Field(description="the newest signed checkpoint")
    rotations: list[KeyRotationOut] | None = Field(
        default=None, exclude_if=lambda value: value is None, description=_ROTATIONS
    )
