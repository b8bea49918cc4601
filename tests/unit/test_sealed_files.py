"""Sealed files (issue 36): a file sealed in chunks opens only whole, in order, under its key,
for its blob; the reader streams and raises at the read that meets a chunk that does not open."""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from purgekeeper.storage import sealed_files
from purgekeeper.storage.sealed_files import CHUNK, open_sealed, seal_stream, sealed_size
from purgekeeper.storage.sealing import SealedInvalid

KEY = bytes(range(32))
BLOB = "blob:b1"
HEADER = sealed_files.HEADER_BYTES
RECORD = sealed_files.RECORD_BYTES
SIZES = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5]


def plaintext(size: int) -> bytes:
    return bytes(i * 7 % 251 for i in range(size))


def odd_pieces(data: bytes) -> Iterator[bytes]:
    """``data`` in pieces of sizes that straddle chunk boundaries, an empty piece among them."""
    sizes = itertools.cycle([1, 0, 4099, CHUNK + 3, 17, 2 * CHUNK - 1])
    offset = 0
    while offset < len(data):
        size = next(sizes)
        yield data[offset : offset + size]
        offset += size


def sealed(data: bytes, *, key: bytes = KEY, bound_to: str = BLOB) -> bytes:
    return b"".join(seal_stream(key, odd_pieces(data), bound_to=bound_to))


def opened(raw: bytes, *, key: bytes = KEY, bound_to: str = BLOB) -> bytes:
    with open_sealed(io.BytesIO(raw), key, bound_to=bound_to) as reader:
        return reader.read()


def record(raw: bytes, index: int) -> bytes:
    return raw[HEADER + index * RECORD : HEADER + (index + 1) * RECORD]


def flipped(raw: bytes, at: int) -> bytes:
    return raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1 :]


def spliced(raw: bytes) -> bytes:
    """``raw`` with its first record taken from another sealing of the same plaintext, key and blob."""
    return raw[:HEADER] + record(sealed(plaintext(3 * CHUNK + 5)), 0) + raw[HEADER + RECORD :]


@pytest.mark.parametrize("size", SIZES)
def test_a_file_sealed_from_odd_pieces_opens_to_its_plaintext(size: int) -> None:
    """Sealed from pieces of 0 to 2 chunks and read whole: the plaintext, at sealed_size's size."""
    data = plaintext(size)
    raw = sealed(data)
    assert len(raw) == sealed_size(size)
    assert raw.startswith(b"PKS1") and (size < 16 or data[:16] not in raw)
    assert opened(raw) == data


@pytest.mark.parametrize("size", SIZES)
def test_small_reads_across_chunk_boundaries_give_the_plaintext(size: int) -> None:
    """read(n) with an n that divides no chunk, and readinto into a buffer: the same bytes."""
    data = plaintext(size)
    with open_sealed(io.BytesIO(sealed(data)), KEY, bound_to=BLOB) as reader:
        parts = list(iter(lambda: reader.read(10_007), b""))
    assert b"".join(parts) == data
    buffer = bytearray(CHUNK + 99)
    with open_sealed(io.BytesIO(sealed(data)), KEY, bound_to=BLOB) as reader:
        got = bytearray()
        while count := reader.readinto(buffer):
            got += buffer[:count]
    assert got == data


@pytest.mark.parametrize("whole", [b"abc" * CHUNK, bytearray(b"abc" * CHUNK), memoryview(b"abc" * CHUNK)])
def test_a_bytes_like_plaintext_is_one_piece(whole: bytes | bytearray | memoryview) -> None:
    """bytes, bytearray and memoryview passed directly are the plaintext, not an iterable of ints."""
    raw = b"".join(seal_stream(KEY, whole, bound_to=BLOB))
    assert opened(raw) == bytes(whole)


def test_lines_iterate_and_closing_closes_the_raw_file() -> None:
    """Iterating yields the plaintext's lines; leaving the with block closes the raw file."""
    data = b"".join(b"line %d\n" % i for i in range(20_000))
    raw = io.BytesIO(sealed(data))
    with open_sealed(raw, KEY, bound_to=BLOB) as reader:
        assert reader.readable() and not reader.seekable()
        assert list(reader) == data.splitlines(keepends=True)
    assert raw.closed and reader.closed


class Trickle(io.RawIOBase):
    """A raw file that gives at most 777 bytes a read, as a pipe or a socket may."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self.data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self.data.readinto(memoryview(buffer)[:777])


class OnlyRead:
    """A file-like object with read and close and nothing else, 777 bytes at most a read."""

    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)

    def read(self, size: int = -1) -> bytes:
        return self.data.read(min(size, 777))

    def close(self) -> None:
        self.data.close()


@pytest.mark.parametrize("source", [Trickle, OnlyRead])
def test_a_raw_file_that_reads_short_is_read_on(source: Callable[[bytes], Any]) -> None:
    """A raw io file and a bare read() object, each short-reading: the whole plaintext."""
    data = plaintext(2 * CHUNK + 3)
    with open_sealed(source(sealed(data)), KEY, bound_to=BLOB) as reader:
        assert reader.read() == data


def test_each_sealing_is_fresh() -> None:
    """The same plaintext sealed twice: different bytes (file nonce, chunk nonces), both open."""
    first, second = sealed(b"same"), sealed(b"same")
    assert first != second and opened(first) == opened(second) == b"same"


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda s: flipped(s, 0), id="a header's magic byte"),
        pytest.param(lambda s: flipped(s, HEADER - 1), id="a header's file nonce byte"),
        pytest.param(lambda s: flipped(s, HEADER + RECORD + 3), id="a chunk's nonce byte"),
        pytest.param(lambda s: flipped(s, HEADER + RECORD + 500), id="a chunk's ciphertext byte"),
        pytest.param(lambda s: flipped(s, HEADER + 2 * RECORD - 1), id="a chunk's tag byte"),
        pytest.param(lambda s: flipped(s, len(s) - 1), id="the last chunk's tag byte"),
        pytest.param(lambda s: s[:HEADER] + record(s, 1) + record(s, 0) + s[HEADER + 2 * RECORD :], id="two swapped"),
        pytest.param(lambda s: s[: HEADER + RECORD] + record(s, 0) + s[HEADER + RECORD :], id="a repeated chunk"),
        pytest.param(lambda s: s[:HEADER] + s[HEADER + RECORD :], id="the first chunk dropped"),
        pytest.param(lambda s: s[: HEADER + 3 * RECORD], id="the last chunk dropped"),
        pytest.param(lambda s: s[: HEADER + RECORD + 100], id="cut inside a chunk"),
        pytest.param(lambda s: s[: len(s) - 1], id="cut inside the last chunk"),
        pytest.param(lambda s: s[:HEADER], id="cut to the header"),
        pytest.param(lambda s: s[: HEADER - 1], id="cut inside the header"),
        pytest.param(lambda s: b"", id="empty"),
        pytest.param(lambda s: s + record(s, 1), id="a chunk appended"),
        pytest.param(lambda s: s + b"\x00", id="a byte appended"),
        pytest.param(spliced, id="a chunk of another sealing of the same blob"),
    ],
)
def test_a_damaged_file_is_sealed_invalid(damage: Callable[[bytes], bytes]) -> None:
    """Each damage to a file of three full chunks and a short last one raises on reading it whole."""
    raw = damage(sealed(plaintext(3 * CHUNK + 5)))
    with pytest.raises(SealedInvalid):
        opened(raw)


@pytest.mark.parametrize(
    ("key", "bound_to"),
    [
        pytest.param(bytes(32), BLOB, id="another key"),
        pytest.param(KEY[:16], BLOB, id="a short key"),
        pytest.param(KEY, "blob:b2", id="another blob"),
    ],
)
@pytest.mark.parametrize("size", [0, CHUNK + 1])
def test_a_file_opened_with_another_key_or_for_another_blob_is_sealed_invalid(
    key: bytes, bound_to: str, size: int
) -> None:
    """The right bytes read under a wrong key or binding, for an empty and a two-chunk file."""
    with pytest.raises(SealedInvalid):
        opened(sealed(plaintext(size)), key=key, bound_to=bound_to)


def test_the_empty_plaintext_is_a_header_and_one_empty_chunk() -> None:
    """Sealing nothing still writes a last chunk, so a file cut to its header is refused."""
    raw = sealed(b"")
    assert len(raw) == HEADER + sealed_files.RECORD_OVERHEAD
    assert opened(raw) == b""
    with pytest.raises(SealedInvalid):
        opened(raw[:HEADER])


def test_the_chunks_before_the_damage_are_read_and_the_read_that_meets_it_raises() -> None:
    """A file whose second chunk is repeated: two chunks read, then every later read raises,
    even where the chunks after the repeat would open in their places."""
    data = plaintext(3 * CHUNK + 5)
    raw = sealed(data)
    raw = raw[: HEADER + 2 * RECORD] + record(raw, 1) + raw[HEADER + 2 * RECORD :]
    with open_sealed(io.BytesIO(raw), KEY, bound_to=BLOB) as reader:
        assert reader.read(2 * CHUNK) == data[: 2 * CHUNK]
        with pytest.raises(SealedInvalid):
            reader.read(1)
        with pytest.raises(SealedInvalid):
            reader.read()


def test_a_file_cut_at_a_chunks_end_fails_at_its_end_not_before() -> None:
    """Cut after its first full chunk: that chunk reads, and the read past it raises (no quiet EOF)."""
    data = plaintext(2 * CHUNK)
    raw = sealed(data)[: HEADER + RECORD]
    with open_sealed(io.BytesIO(raw), KEY, bound_to=BLOB) as reader:
        assert reader.read(CHUNK) == data[:CHUNK]
        with pytest.raises(SealedInvalid):
            reader.read(1)


def test_sealed_size_matches_what_is_written_and_refuses_a_negative_size() -> None:
    """sealed_size at and around several chunk boundaries; -1 is a ValueError."""
    for size in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK, 5 * CHUNK + 1]:
        assert sealed_size(size) == len(b"".join(seal_stream(KEY, bytes(size), bound_to=BLOB))), size
    with pytest.raises(ValueError):
        sealed_size(-1)


def test_sealing_a_wrong_sized_key_fails_when_called() -> None:
    """A 16-byte key: ValueError at the call, before any byte is produced."""
    with pytest.raises(ValueError):
        seal_stream(KEY[:16], b"x", bound_to=BLOB)


def test_sealing_consumes_its_input_lazily() -> None:
    """A generator of half-chunk pieces: the header and first record ask for at most three."""
    asked: list[int] = []

    def pieces() -> Iterator[bytes]:
        for index in range(10):
            asked.append(index)
            yield bytes(CHUNK // 2)

    stream = seal_stream(KEY, pieces(), bound_to=BLOB)
    header = next(stream)
    assert len(header) == HEADER and asked == []
    first = next(stream)
    assert len(first) == RECORD and len(asked) <= 3
    assert opened(header + first + b"".join(stream)) == bytes(5 * CHUNK) and len(asked) == 10


def test_reading_reads_the_raw_file_a_chunk_at_a_time() -> None:
    """A 10-chunk file read 10 bytes at a time: the raw file has given at most a header and a record."""
    raw = io.BytesIO(sealed(plaintext(10 * CHUNK)))
    with open_sealed(raw, KEY, bound_to=BLOB) as reader:
        assert reader.read(10) == plaintext(10)
        assert raw.tell() <= HEADER + RECORD


def test_reading_the_rest_after_a_read_that_ends_inside_a_chunk() -> None:
    """read(CHUNK + 10), buffered, and read(10) of the unbuffered reader stop inside a chunk;
    read() and readall() then give all the rest."""
    data = plaintext(3 * CHUNK + 5)
    with open_sealed(io.BytesIO(sealed(data)), KEY, bound_to=BLOB) as reader:
        assert reader.read(CHUNK + 10) == data[: CHUNK + 10]
        assert reader.read() == data[CHUNK + 10 :]
        assert reader.read() == b""
    with open_sealed(io.BytesIO(sealed(data)), KEY, bound_to=BLOB) as reader:
        unbuffered = reader.raw
        assert isinstance(unbuffered, io.RawIOBase)
        assert unbuffered.read(10) == data[:10]
        assert unbuffered.readall() == data[10:]
