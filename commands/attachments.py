"""Attachments a host adds with an event: new CAS bytes, a new real file, or a reuse.

New bytes come in memory (``NewAttachment.cas(data)``, ``.file(data)``) or from a file on
disk (``.cas_from(path)``, ``.file_from(path)``): a file's bytes are hashed and stored in
chunks, never held whole, so an attachment of the full size limit costs no more memory than
a small one. The HTTP upload route spools its uploads to such files."""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from purgekeeper.commands import validation
from purgekeeper.commands.records import Attachment
from purgekeeper.commands.sealed_content import SealedEvent, blob_bound
from purgekeeper.schema import content_queries
from purgekeeper.schema.errors import ContentPurged, InfrastructureError, NotFound, ValidationError
from purgekeeper.schema.states import Binding, BlobKind, BlobState
from purgekeeper.storage.blobstore import BlobStore, cas_path, file_path
from purgekeeper.storage.content_keys import ContentKeys
from purgekeeper.storage.files import reason_of
from purgekeeper.storage.sealed_files import seal_stream

CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class FileBytes:
    """The bytes of a file on disk, read in chunks of ``CHUNK_BYTES``. ``size`` and
    ``sha256`` are taken when it is made; a file that changes before it is stored is
    refused (the chunks are hashed again as they are read), never stored as other bytes."""

    path: Path
    size: int
    sha256: str

    def chunks(self) -> Iterator[bytes]:
        """The file's bytes as they are on disk, in chunks (a subclass may open them)."""
        with self.path.open("rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                yield chunk

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
        for chunk in self.chunks():
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
    sha256: str  # of the plain bytes: a CAS twin is found by it
    size: int  # of the plain bytes
    path: str
    key_id: str  # the key that seals the bytes on disk (``purgekeeper.storage.sealed_files``)
    key: bytes = field(repr=False)

    @property
    def bound_to(self) -> str:
        """What the sealed bytes are bound to: this blob, whatever its path."""
        return blob_bound(self.blob_id)


def write_staged(blobs: BlobStore, new: Sequence[NewAttachment], staged: Sequence[StagedBlob | None]) -> None:
    """Each new blob's bytes, sealed under its key, at its path; on a failure, none of them
    (InfrastructureError for the file system's)."""
    written: list[StagedBlob] = []
    try:
        for attachment, blob in zip(new, staged, strict=True):
            if blob is not None and attachment.data is not None:
                written.append(blob)
                blobs.write(blob.kind, blob.path, seal_stream(blob.key, attachment.data, bound_to=blob.bound_to))
    except BaseException as exc:
        discard_staged(blobs, written)
        if isinstance(exc, OSError):
            raise InfrastructureError(f"could not write attachment bytes: {reason_of(exc)}") from exc
        raise


def discard_staged(blobs: BlobStore, staged: Iterable[StagedBlob | None]) -> None:
    """Remove staged bytes no row binds (best effort: a leftover file is bound to nothing)."""
    for blob in staged:
        if blob is not None:
            with contextlib.suppress(OSError):
                blobs.discard(blob.blob_id, blob.kind, blob.path)


def stage(attachment: NewAttachment, keys: ContentKeys) -> StagedBlob | None:
    """Where new bytes go, and the new key that seals them; None for a reuse, which writes
    nothing."""
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
    key_id, key = keys.take()
    return StagedBlob(blob_id=blob_id, kind=kind, sha256=sha256, size=size, path=path, key_id=key_id, key=key)


# -- binding an ingested event's attachments (in its transaction) ------------------------------


def bind(
    conn: Connection,
    event_id: str,
    attachment: NewAttachment,
    blob: StagedBlob | None,
    used: set[str],
    position: int,
    *,
    attachment_id: str,
    sealed_name: str,
) -> None:
    """Bind ``attachment`` to the event at ``position``: its blob (``_blob_for``) and the
    attachment row ``attachment_id``, with its name as sealed under the event's key (which the
    row names: ``insert_attachment`` copies the event's ``key_id``). ``used`` collects the
    staged blobs bound (the others are discarded)."""
    blob_id = _blob_for(conn, attachment, blob, used)
    content_queries.insert_attachment(
        conn,
        attachment_id=attachment_id,
        event_id=event_id,
        blob_id=blob_id,
        binding=attachment.binding.value,
        name=sealed_name,
        position=position,
    )


def bind_all(
    conn: Connection,
    event_id: str,
    new: Sequence[NewAttachment],
    staged: Sequence[StagedBlob | None],
    sealed: SealedEvent,
    used: set[str],
) -> tuple[Attachment, ...]:
    """Bind each attachment in its order (``bind``), its name as ``sealed`` sealed it; what
    was written, as a read returns it (its names are known: not opened again)."""
    for position, (attachment, blob) in enumerate(zip(new, staged, strict=True)):
        attachment_id, name = sealed.attachments[position]
        bind(conn, event_id, attachment, blob, used, position, attachment_id=attachment_id, sealed_name=name)
    return sealed.attached(content_queries.attachments_of(conn, [event_id]))


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
        conn,
        blob_id=blob.blob_id,
        kind=blob.kind.value,
        sha256=blob.sha256,
        size=blob.size,
        path=blob.path,
        key_id=blob.key_id,
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
