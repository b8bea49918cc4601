"""Sealed files: attachment bytes encrypted at rest in chunks, written and read as streams
(issue 36). :mod:`purgekeeper.storage.sealing` seals the small values of a row; this module
seals the files, under the blob's key.

A sealed file is a header and one record per chunk of the plaintext::

    b"PKS1" | file nonce (16 random bytes) | record 0 | record 1 | ... | record n
    record: nonce (12 random bytes) | ciphertext | GCM tag (16 bytes)

Each chunk is its own AES-256-GCM message. Every chunk but the last holds exactly
:data:`CHUNK` plaintext bytes and the last holds fewer (0 to ``CHUNK - 1``), so a plaintext
whose size is a multiple of ``CHUNK``, the empty one too, ends with an empty chunk: a
record's size says whether it is the last, and a reader needs no lookahead.

The associated data of chunk ``i`` is the header, ``i`` (8 bytes, big-endian), whether it is
the last (1 byte) and ``bound_to`` in UTF-8. So a chunk moved, repeated or dropped does not
open (its index), nor one taken from another file (the file nonce, ``bound_to``); a file cut
at a record's end lacks its last chunk, and one cut inside a record ends in a short record
that does not open; bytes after the last chunk are refused. Every chunk checks the header.
Whatever the cause, the reader raises :class:`~purgekeeper.storage.sealing.SealedInvalid` at
the read that meets it, and never returns a byte of a chunk that did not open. A chunk's
associated data starts with ``P`` and a sealed value's with its version byte (1), so under
one key neither opens as the other.

Random nonces are safe: a key seals one blob, and a file of 1 GiB is 16,384 chunks, far
below the 2**32 messages per key of GCM's birthday bound.
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from purgekeeper.storage.sealing import KEY_BYTES, NONCE_BYTES, TAG_BYTES, SealedInvalid

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = ["CHUNK", "open_sealed", "seal_stream", "sealed_size"]

CHUNK = 64 * 1024  # plaintext bytes per chunk
MAGIC = b"PKS1"  # the format and its version
FILE_NONCE_BYTES = 16
HEADER_BYTES = len(MAGIC) + FILE_NONCE_BYTES
RECORD_OVERHEAD = NONCE_BYTES + TAG_BYTES
RECORD_BYTES = CHUNK + RECORD_OVERHEAD  # the record of a full chunk
_POSITION = struct.Struct(">QB")  # a chunk's index and whether it is the last
Plaintext = bytes | bytearray | memoryview


def seal_stream(key: bytes, plaintext: Plaintext | Iterable[Plaintext], *, bound_to: str) -> Iterator[bytes]:
    """The sealed file's bytes, header first, for ``plaintext`` given whole or as pieces of any
    sizes. The pieces are read as the result is, one chunk ahead at most; each is read before
    the next is asked for, and not kept."""
    cipher = _cipher(key)  # a wrong key fails here, not at the first write
    pieces = (plaintext,) if isinstance(plaintext, bytes | bytearray | memoryview) else plaintext
    header = MAGIC + os.urandom(FILE_NONCE_BYTES)
    return _records(cipher, header, bound_to.encode(), _rechunked(pieces))


def sealed_size(plain_size: int) -> int:
    """The size of the sealed file of ``plain_size`` plaintext bytes."""
    if plain_size < 0:
        raise ValueError(f"a plaintext size is not negative: {plain_size}")
    return HEADER_BYTES + plain_size + (plain_size // CHUNK + 1) * RECORD_OVERHEAD


def open_sealed(raw: BinaryIO, key: bytes, *, bound_to: str, check_first: bool = False) -> io.BufferedReader:
    """The plaintext of the sealed file ``raw``, as a binary file read forward (not seekable).
    Each chunk is checked as it is reached. Closing it closes ``raw``. Nothing is read here,
    unless ``check_first``: then the first chunk is opened before it returns (SealedInvalid,
    ``raw`` closed, when it does not open), in the raw reader, not peeked through the buffer,
    which would make a whole ``read()`` copy the file again to join it."""
    reader = _SealedReader(raw, key, bound_to)
    if check_first:
        try:
            reader.open_first()
        except BaseException:
            reader.close()
            raise
    return io.BufferedReader(reader, buffer_size=CHUNK)


def _records(cipher: AESGCM, header: bytes, bound: bytes, chunks: Iterator[Plaintext]) -> Iterator[bytes]:
    yield header
    for index, chunk in enumerate(chunks):
        nonce = os.urandom(NONCE_BYTES)
        yield nonce + cipher.encrypt(nonce, chunk, _associated(header, index, len(chunk) < CHUNK, bound))


def _rechunked(pieces: Iterable[Plaintext]) -> Iterator[Plaintext]:
    """The pieces as full chunks and one shorter last chunk. A full chunk inside a piece is
    passed on as a view, not copied."""
    pending = bytearray()
    for piece in pieces:
        view = memoryview(piece).cast("B")
        if pending:
            taken = CHUNK - len(pending)
            pending += view[:taken]
            view = view[taken:]
            if len(pending) < CHUNK:
                continue
            yield pending
            pending = bytearray()
        while len(view) >= CHUNK:
            yield view[:CHUNK]
            view = view[CHUNK:]
        pending += view
    yield pending


def _associated(header: bytes, index: int, last: bool, bound: bytes) -> bytes:
    return header + _POSITION.pack(index, last) + bound


def _cipher(key: bytes) -> AESGCM:
    if len(key) != KEY_BYTES:
        raise ValueError(f"a sealing key is {KEY_BYTES} bytes, not {len(key)}")
    return AESGCM(key)


class _SealedReader(io.RawIOBase):
    """The plaintext of a sealed file, one checked chunk at a time. Once a chunk has not
    opened, every later read raises too."""

    def __init__(self, raw: BinaryIO, key: bytes, bound_to: str) -> None:
        super().__init__()
        self._raw = raw
        self._cipher = AESGCM(key) if len(key) == KEY_BYTES else None
        self._bound = bound_to.encode()
        self._header: bytes | None = None
        self._record = bytearray(RECORD_BYTES)  # one buffer for every record: fresh ones cost page faults
        self._index = 0
        self._chunk = memoryview(b"")
        self._offset = 0
        self._ended = False  # the last chunk has been opened
        self._broken = False

    def readable(self) -> bool:
        return True

    def open_first(self) -> None:
        """Open the first chunk now (SealedInvalid when it does not open)."""
        if self._index == 0:
            self._next_chunk()

    def readinto(self, buffer: WriteableBuffer) -> int:
        if self._offset == len(self._chunk) and not self._ended:
            self._next_chunk()
        size = min(len(target := memoryview(buffer).cast("B")), len(self._chunk) - self._offset)
        target[:size] = self._chunk[self._offset : self._offset + size]
        self._offset += size
        return size

    def readall(self) -> bytes:
        # Into one growing buffer, each chunk freed once copied: holding every chunk until a
        # join took a millisecond a MiB more here, most of it the fresh pages' faults.
        whole = io.BytesIO(self._chunk[self._offset :])
        whole.seek(0, io.SEEK_END)
        while not self._ended:
            self._next_chunk()
            whole.write(self._chunk)
        self._offset = len(self._chunk)
        return whole.getvalue()

    def close(self) -> None:
        if not self.closed:
            try:
                self._raw.close()
            finally:
                self._chunk = memoryview(b"")
                super().close()

    def _next_chunk(self) -> None:
        if self._broken:
            raise SealedInvalid()
        try:
            chunk, self._ended = self._open_next()
        except SealedInvalid:
            self._broken = True
            raise
        self._chunk, self._offset = memoryview(chunk), 0
        self._index += 1

    def _open_next(self) -> tuple[bytes, bool]:
        """The next chunk's plaintext, and whether it is the last."""
        if self._header is None:
            self._header = bytes(_read_up_to(self._raw, bytearray(HEADER_BYTES)))
        record = _read_up_to(self._raw, self._record)
        last = len(record) < RECORD_BYTES  # a byte appended to the file is read into this record
        if self._cipher is None or not self._header.startswith(MAGIC) or len(record) < RECORD_OVERHEAD:
            raise SealedInvalid()
        nonce, body = record[:NONCE_BYTES], record[NONCE_BYTES:]
        try:
            return self._cipher.decrypt(nonce, body, _associated(self._header, self._index, last, self._bound)), last
        except InvalidTag:
            raise SealedInvalid() from None


def _read_up_to(raw: BinaryIO, buffer: bytearray) -> memoryview:
    """As many bytes of ``raw`` as ``buffer`` holds, read into it; fewer only at its end (a
    short read is read on)."""
    view = memoryview(buffer)
    got = 0
    while got < len(view) and (count := _read_into(raw, view[got:])):
        got += count
    return view[:got]


def _read_into(raw: BinaryIO, view: memoryview) -> int:
    if isinstance(raw, io.BufferedIOBase | io.RawIOBase):  # any of io's files: no bytes object made
        return raw.readinto(view) or 0
    data = raw.read(len(view))
    view[: len(data)] = data
    return len(data)
