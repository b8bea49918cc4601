"""Attachments a host adds with an event: new CAS bytes, a new real file, or a reuse."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field

from commands import validation
from schema.errors import ValidationError
from schema.states import Binding, BlobKind
from workers.blobstore import cas_path, file_path


@dataclass(frozen=True)
class NewAttachment:
    """One attachment to bind to a new event. Build it with ``cas``, ``file`` or ``reuse``."""

    source: str
    name: str
    binding: Binding
    data: bytes | None = field(default=None, repr=False)
    blob_id: str | None = None

    def __post_init__(self) -> None:
        validation.check_name(self.name)
        if self.source in ("cas", "file"):
            validation.check_data(self.data)
        elif self.source == "reuse":
            validation.check_id(self.blob_id, "blob_id")
        else:
            raise ValidationError(f"unknown attachment source {self.source!r}")

    @classmethod
    def cas(cls, data: bytes, *, name: str) -> NewAttachment:
        """Content-addressed (legacy) bytes, shared by hash with present blobs."""
        return cls(source="cas", name=name, binding=Binding.LEGACY_CAS, data=data)

    @classmethod
    def file(cls, data: bytes, *, name: str) -> NewAttachment:
        """A managed real file of its own under the file root."""
        return cls(source="file", name=name, binding=Binding.REAL_FILE, data=data)

    @classmethod
    def reuse(cls, blob_id: str, *, name: str, binding: str = "real_file") -> NewAttachment:
        """Share an existing present blob (a forward), bound as ``real_file`` or ``legacy_cas``."""
        validation.check_choice(binding, "binding", [b.value for b in Binding])
        return cls(source="reuse", name=name, binding=Binding(binding), blob_id=blob_id)


@dataclass(frozen=True)
class StagedBlob:
    """New bytes written to their own path before the transaction that may bind them."""

    blob_id: str
    kind: BlobKind
    sha256: str
    size: int
    path: str


def stage(attachment: NewAttachment) -> StagedBlob | None:
    """Where new bytes go; None for a reuse, which writes nothing."""
    if attachment.data is None:
        return None
    blob_id = uuid.uuid4().hex
    sha256 = hashlib.sha256(attachment.data).hexdigest()
    if attachment.source == "cas":
        kind, path = BlobKind.CAS, cas_path(sha256, blob_id)
    else:
        kind, path = BlobKind.FILE, file_path(blob_id)
    return StagedBlob(blob_id=blob_id, kind=kind, sha256=sha256, size=len(attachment.data), path=path)
