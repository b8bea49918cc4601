"""Attachments a host adds with an event: new CAS bytes, a new real file, or a reuse.

New bytes come in memory (``NewAttachment.cas(data)``, ``.file(data)``) or from a file on
disk (``.cas_from(path)``, ``.file_from(path)``): a file's bytes are hashed and stored in
chunks, never held whole, so an attachment of the full size limit costs no more memory than
a small one. The HTTP upload route spools its uploads to such files."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from purgekeeper.commands import validation
from purgekeeper.schema import content_queries
from purgekeeper.schema.errors import ContentPurged, NotFound, ValidationError
from purgekeeper.schema.states import Binding, BlobKind, BlobState
from purgekeeper.storage.blobstore import cas_path, file_path

CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class FileBytes:
    """The bytes of a file on disk, read in chunks of ``CHUNK_BYTES``. ``size`` and
    ``sha256`` are taken when it is made; a file that changes before it is stored is
    refused (the chunks are hashed again as they are read), never stored as other bytes."""

    path: Path
    size: int
    sha256: str

    @classmethod
    def of(cls, path: str | os.PathLike[str]) -> FileBytes:
        """Hash the file at ``path`` (one pass, in chunks)."""
        source = Path(path)
        digest = hashlib.sha256()
        size = 0
        try:
            with source.open("rb") as handle:
                while chunk := handle.read(CHUNK_BYTES):
                    digest.update(chunk)
                    size += len(chunk)
        except OSError as exc:
            raise ValidationError(f"attachment file cannot be read: {exc.strerror or type(exc).__name__}") from exc
        return cls(path=source, size=size, sha256=digest.hexdigest())

    def __iter__(self) -> Iterator[bytes]:
        """The bytes, chunk by chunk; ``ValidationError`` at the end if they are not the
        bytes that were hashed."""
        digest = hashlib.sha256()
        with self.path.open("rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                digest.update(chunk)
                yield chunk
        if digest.hexdigest() != self.sha256:
            raise ValidationError("the attachment file changed after it was given; nothing was stored")


@dataclass(frozen=True)
class NewAttachment:
    """One attachment to bind to a new event. Build it with ``cas``, ``file``, ``cas_from``,
    ``file_from`` or ``reuse``."""

    source: str
    name: str
    binding: Binding
    data: bytes | FileBytes | None = field(default=None, repr=False)
    blob_id: str | None = None

    def __post_init__(self) -> None:
        validation.check_name(self.name)
        if self.source in ("cas", "file"):
            if isinstance(self.data, FileBytes):
                _check_size(self.data.size)
            else:
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
    def cas_from(cls, path: str | os.PathLike[str], *, name: str) -> NewAttachment:
        """``cas`` of the bytes of the file at ``path``, read in chunks. The file must stay
        as it is until the event is ingested; it is left where it is."""
        return cls(source="cas", name=name, binding=Binding.LEGACY_CAS, data=FileBytes.of(path))

    @classmethod
    def file_from(cls, path: str | os.PathLike[str], *, name: str) -> NewAttachment:
        """``file`` of the bytes of the file at ``path``, read in chunks (as ``cas_from``)."""
        return cls(source="file", name=name, binding=Binding.REAL_FILE, data=FileBytes.of(path))

    @classmethod
    def reuse(cls, blob_id: str, *, name: str, binding: str = "real_file") -> NewAttachment:
        """Share an existing present blob (a forward), bound as ``real_file`` or ``legacy_cas``."""
        validation.check_choice(binding, "binding", [b.value for b in Binding])
        return cls(source="reuse", name=name, binding=Binding(binding), blob_id=blob_id)


def _check_size(size: int) -> None:
    if size == 0:
        raise ValidationError("attachment data must not be empty")
    if size > validation.MAX_ATTACHMENT_BYTES:
        raise ValidationError(f"attachment is larger than {validation.MAX_ATTACHMENT_BYTES} bytes")


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
    data = attachment.data
    if data is None:
        return None
    blob_id = uuid.uuid4().hex
    if isinstance(data, FileBytes):
        sha256, size = data.sha256, data.size
    else:
        sha256, size = hashlib.sha256(data).hexdigest(), len(data)
    if attachment.source == "cas":
        kind, path = BlobKind.CAS, cas_path(sha256, blob_id)
    else:
        kind, path = BlobKind.FILE, file_path(blob_id)
    return StagedBlob(blob_id=blob_id, kind=kind, sha256=sha256, size=size, path=path)


# -- binding an ingested event's attachments (in its transaction) ------------------------------


def bind(
    conn: Connection,
    event_id: str,
    attachment: NewAttachment,
    blob: StagedBlob | None,
    used: set[str],
    position: int,
) -> None:
    """Bind ``attachment`` to the event at ``position``: its blob (``_blob_for``) and the
    attachment row. ``used`` collects the staged blobs bound (the others are discarded)."""
    blob_id = _blob_for(conn, attachment, blob, used)
    content_queries.insert_attachment(
        conn,
        attachment_id=uuid.uuid4().hex,
        event_id=event_id,
        blob_id=blob_id,
        binding=attachment.binding.value,
        name=attachment.name,
        position=position,
    )


def _blob_for(conn: Connection, attachment: NewAttachment, blob: StagedBlob | None, used: set[str]) -> str:
    """The blob to bind: a reused one, a present CAS twin, or the newly staged bytes."""
    if blob is None:
        row = content_queries.blob_row(conn, attachment.blob_id or "", lock_shared=True)
        if row is None:
            raise NotFound(f"no blob {attachment.blob_id}")
        if row.state != BlobState.PRESENT:
            raise ContentPurged(f"blob {row.id} is {row.state}; it cannot be bound again")
        if content_queries.blob_holds_purged_content(conn, row.id):
            raise ContentPurged(f"blob {row.id} holds purged content; it cannot be bound again")
        return str(row.id)
    if attachment.source == "cas":
        twin = content_queries.present_cas_blob(conn, blob.sha256)
        if twin is not None:
            return str(twin.id)
    content_queries.insert_blob(
        conn, blob_id=blob.blob_id, kind=blob.kind.value, sha256=blob.sha256, size=blob.size, path=blob.path
    )
    used.add(blob.blob_id)
    return blob.blob_id


def check_attachments(attachments: Any) -> list[NewAttachment]:
    """The attachments of an event to ingest, as given: a list of NewAttachment values."""
    if isinstance(attachments, NewAttachment) or not isinstance(attachments, Sequence | tuple):
        raise ValidationError("attachments must be a list of NewAttachment")
    items = list(attachments)
    if len(items) > validation.MAX_ATTACHMENTS_PER_EVENT:
        raise ValidationError(f"an event holds at most {validation.MAX_ATTACHMENTS_PER_EVENT} attachments")
    for item in items:
        if not isinstance(item, NewAttachment):
            raise ValidationError("attachments must be NewAttachment.cas/.file/.reuse values")
    return items
