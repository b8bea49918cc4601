"""Event uploads: a ``multipart/form-data`` body parsed as it arrives, each file part written
to a spool file under the blob root (the filesystem the blobs live on, not a ``/tmp`` that
may be memory), chunk by chunk, hashed on the way. Nothing holds a whole upload in memory.

The parts: the event's text fields (``FIELDS``, at most ``MAX_FIELD_BYTES`` each) and the
attachments, in the order sent: a part named ``file`` is a real file, one named ``cas`` a
content-addressed blob; its ``filename`` is the attachment's name. An attachment larger than
the limit is a ``413`` as soon as its bytes pass it. The spool files are the caller's to
``discard`` once the event is ingested (or refused); ``sweep_stale`` removes what a crash
left behind, at the app's start and before each upload.

A spool file holds its bytes sealed (AES-256-GCM, one record per chunk received, bound to
its place in the file) under a key that lives in this process's memory only and is never
written anywhere: content is never on disk in plain text, not for the length of an upload,
and a spool file a crash leaves behind can never be read.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request

from purgekeeper.commands import validation
from purgekeeper.commands.attachments import FileBytes, NewAttachment
from purgekeeper.schema.errors import ValidationError
from purgekeeper.schema.states import Binding
from purgekeeper.storage.sealing import NONCE_BYTES, new_key

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

SPOOL_DIRECTORY = ".uploads"
SPOOL_PREFIX = "upload-"
STALE_AFTER_S = 3600  # untouched this long: no upload is writing it (each chunk touches it)
FIELDS = ("author", "body", "provider_event_id", "event_id", "occurred_at")
BINDINGS = {"file": Binding.REAL_FILE, "cas": Binding.LEGACY_CAS}  # part name → how it is bound
MAX_FIELD_BYTES = validation.MAX_BODY_BYTES
MAX_HEADER_BYTES = 16 * 1024  # one part's headers
MAX_PARTS = len(FIELDS) + validation.MAX_ATTACHMENTS_PER_EVENT


class TooLarge(HTTPException):
    """413: more bytes than the limit allows; nothing is kept."""

    def __init__(self, detail: str) -> None:
        super().__init__(413, detail)


class UnsupportedMediaType(HTTPException):
    def __init__(self) -> None:
        super().__init__(415, "send the upload as multipart/form-data")


@dataclass
class SpooledFile:
    """One attachment's bytes in a spool file, sealed under a key of its own that is never
    written anywhere, with its size, hash and records so far."""

    source: str
    name: str
    path: Path
    handle: BinaryIO
    size: int = 0
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)
    key: bytes = field(default_factory=new_key, repr=False)
    records: int = 0

    def write(self, data: bytes) -> None:
        """One record: its length, a fresh nonce, and ``data`` sealed, bound to its index."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = AESGCM(self.key).encrypt(nonce, data, self.records.to_bytes(8, "big"))
        self.handle.write(len(sealed).to_bytes(4, "big") + nonce + sealed)
        self.digest.update(data)
        self.records += 1

    def attachment(self) -> NewAttachment:
        data = SpooledBytes(path=self.path, size=self.size, sha256=self.digest.hexdigest(), key=self.key)
        return NewAttachment(source=self.source, name=self.name, binding=BINDINGS[self.source], data=data)


@dataclass(frozen=True)
class SpooledBytes(FileBytes):
    """A spool file's bytes, opened record by record with its key as they are read (and
    hashed again: ``FileBytes``'s check)."""

    key: bytes = field(default=b"", repr=False)

    def chunks(self) -> Iterator[bytes]:
        aead = AESGCM(self.key)
        with self.path.open("rb") as handle:
            index = 0
            while header := handle.read(4):
                record = handle.read(NONCE_BYTES + int.from_bytes(header, "big"))
                try:
                    yield aead.decrypt(record[:NONCE_BYTES], record[NONCE_BYTES:], index.to_bytes(8, "big"))
                except InvalidTag:
                    raise ValidationError("an upload's spool file was changed; nothing was stored") from None
                index += 1


@dataclass
class EventUpload:
    """A parsed upload: the event's text fields and its attachments' spool files."""

    fields: dict[str, str] = field(default_factory=dict)
    files: list[SpooledFile] = field(default_factory=list)

    def attachments(self) -> list[NewAttachment]:
        return [spooled.attachment() for spooled in self.files]

    def discard(self) -> None:
        """Close and remove every spool file (they are never the blobs themselves)."""
        for spooled in self.files:
            spooled.handle.close()
            with contextlib.suppress(FileNotFoundError):
                spooled.path.unlink()


def spool_directory(blob_root: Path) -> Path:
    directory = blob_root / SPOOL_DIRECTORY
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return directory


def sweep_stale(blob_root: Path, *, older_than_s: float = STALE_AFTER_S) -> int:
    """Remove spool files a crashed upload left (untouched for an hour: another process's
    upload under way writes to its file with every chunk, so it is never touched); returns
    how many. Run when the app starts and before each upload."""
    directory = blob_root / SPOOL_DIRECTORY
    removed = 0
    if not directory.is_dir():
        return removed
    cutoff = time.time() - older_than_s
    for path in directory.glob(f"{SPOOL_PREFIX}*"):
        with contextlib.suppress(OSError):
            if path.stat(follow_symlinks=False).st_mtime < cutoff:
                path.unlink()
                removed += 1
    return removed


async def receive(request: Request, *, spool: Path, max_attachment_bytes: int) -> EventUpload:
    """Parse the request's multipart body as it arrives. On any failure (bad framing: a
    ``ValidationError``; too large: ``TooLarge``) the spool files are gone before it raises."""
    boundary = _boundary(request.headers.get("content-type"))
    parts = _Parts(spool, max_attachment_bytes)
    try:
        parser = MultipartParser(boundary, parts.callbacks())
        async for chunk in request.stream():
            parser.write(chunk)
            await run_in_threadpool(parts.flush)
        parser.finalize()
        parts.finish()
    except BaseException as exc:
        parts.upload.discard()
        if isinstance(exc, FormParserError):
            raise ValidationError("body: not valid multipart/form-data") from None
        if isinstance(exc, ClientDisconnect):  # no one to answer; not a fault of ours to log
            raise HTTPException(400, "the client went away before the end of the body") from None
        raise
    return parts.upload


def _boundary(content_type: str | None) -> bytes:
    media_type, options = parse_options_header(content_type)
    if media_type != b"multipart/form-data":
        raise UnsupportedMediaType()
    boundary = options.get(b"boundary")
    if not boundary or len(boundary) > 70:  # RFC 2046: 1 to 70 characters
        raise ValidationError("body: the multipart boundary is missing or too long")
    return boundary


class _Parts:
    """The parser's callbacks: text fields kept (bounded), file parts queued for writing."""

    def __init__(self, spool: Path, max_attachment_bytes: int) -> None:
        self.spool = spool
        self.max_attachment_bytes = max_attachment_bytes
        self.upload = EventUpload()
        self.pending: list[tuple[SpooledFile, bytes]] = []
        self.count = 0
        self.ended = False
        self._headers: dict[bytes, bytes] = {}
        self._header = [b"", b""]
        self._header_bytes = 0
        self._name = ""
        self._text: bytearray | None = None
        self._file: SpooledFile | None = None

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self.on_part_begin,
            "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value,
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
            "on_end": self.on_end,
        }

    def on_part_begin(self) -> None:
        self.count += 1
        if self.count > MAX_PARTS:
            raise ValidationError(f"body: at most {MAX_PARTS} parts (fields and attachments)")
        self._headers, self._header_bytes, self._text, self._file = {}, 0, None, None

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header[0] += self._counted(data[start:end])

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header[1] += self._counted(data[start:end])

    def on_header_end(self) -> None:
        self._headers[self._header[0].lower()] = self._header[1]
        self._header = [b"", b""]

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b"").decode("latin-1"))
        self._name = _text(options.get(b"name", b""), "a part's name")
        if self._name in BINDINGS:
            if b"filename" not in options:
                raise ValidationError(f"{self._name}: a file part needs a filename (the attachment's name)")
            self._file = self._spool(self._name, _text(options[b"filename"], "a filename"))
        elif self._name in FIELDS:
            if b"filename" in options:
                raise ValidationError(f"{self._name}: a text field, not a file")
            if self._name in self.upload.fields:
                raise ValidationError(f"{self._name}: sent twice")
            self._text = bytearray()
        else:
            raise ValidationError(f"body: an unknown part; the parts are {', '.join((*FIELDS, *BINDINGS))}")

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._file is not None:
            self._file.size += end - start
            if self._file.size > self.max_attachment_bytes:
                number = len(self.upload.files)
                raise TooLarge(f"attachment {number} is larger than {self.max_attachment_bytes} bytes")
            self.pending.append((self._file, data[start:end]))
        elif self._text is not None:
            self._text += data[start:end]
            if len(self._text) > MAX_FIELD_BYTES:
                raise ValidationError(f"{self._name}: longer than {MAX_FIELD_BYTES} bytes")

    def on_part_end(self) -> None:
        if self._text is not None:
            self.upload.fields[self._name] = _text(bytes(self._text), self._name)

    def on_end(self) -> None:
        self.ended = True

    def flush(self) -> None:
        """Write and hash what the last chunk brought (in a worker thread: disk writes)."""
        for spooled, data in self.pending:
            spooled.write(data)
        self.pending.clear()

    def finish(self) -> None:
        if not self.ended:
            raise ValidationError("body: the multipart body ends before its closing boundary")
        for number, spooled in enumerate(self.upload.files):
            if spooled.size == 0:  # refused here too, so that a replay of a delivery is no way past it
                raise ValidationError(f"attachment {number} is empty")
        for spooled in self.upload.files:
            spooled.handle.close()

    def _spool(self, source: str, name: str) -> SpooledFile:
        if len(self.upload.files) >= validation.MAX_ATTACHMENTS_PER_EVENT:
            raise ValidationError(f"an event holds at most {validation.MAX_ATTACHMENTS_PER_EVENT} attachments")
        fd, path = tempfile.mkstemp(prefix=SPOOL_PREFIX, dir=self.spool)
        spooled = SpooledFile(source, name, Path(path), os.fdopen(fd, "wb"))
        self.upload.files.append(spooled)
        return spooled

    def _counted(self, data: bytes) -> bytes:
        self._header_bytes += len(data)
        if self._header_bytes > MAX_HEADER_BYTES:
            raise ValidationError(f"body: a part's headers are longer than {MAX_HEADER_BYTES} bytes")
        return data


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationError(f"{what} is not UTF-8") from None
