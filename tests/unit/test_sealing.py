"""Sealing (issue 36): a sealed value opens only under its key, for its row, as it was written."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest

from purgekeeper.storage import sealing
from purgekeeper.storage.sealing import SealedInvalid, seal, seal_text, unseal, unseal_text

KEY = bytes(range(32))
ROW = "event:e1:body"


def test_a_sealed_value_opens_under_its_key_for_its_row() -> None:
    sealed = seal(KEY, b"hello", bound_to=ROW)
    assert b"hello" not in sealed and sealed[0] == sealing.VERSION
    assert len(sealed) == len(b"hello") + sealing.OVERHEAD
    assert unseal(KEY, sealed, bound_to=ROW) == b"hello"
    assert seal(KEY, b"hello", bound_to=ROW) != sealed  # a fresh nonce each time


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda s: (sealing.new_key(), s, ROW), id="another key"),
        pytest.param(lambda s: (KEY, s, "event:e2:body"), id="another row"),
        pytest.param(lambda s: (KEY, s[:-1] + bytes([s[-1] ^ 1]), ROW), id="a changed tag byte"),
        pytest.param(lambda s: (KEY, s[:20] + bytes([s[20] ^ 1]) + s[21:], ROW), id="a changed ciphertext byte"),
        pytest.param(lambda s: (KEY, s[:-1], ROW), id="truncated"),
        pytest.param(lambda s: (KEY, s[: sealing.OVERHEAD - 1], ROW), id="shorter than its overhead"),
        pytest.param(lambda s: (KEY, bytes([2]) + s[1:], ROW), id="another version"),
        pytest.param(lambda s: (KEY[:16], s, ROW), id="a short key"),
    ],
)
def test_what_does_not_open_is_sealed_invalid(damage: Callable[[bytes], tuple[bytes, bytes, str]]) -> None:
    key, sealed, row = damage(seal(KEY, b"a body of some length", bound_to=ROW))
    with pytest.raises(SealedInvalid):
        unseal(key, sealed, bound_to=row)


def test_text_is_sealed_with_a_prefix_a_migration_can_tell() -> None:
    value = seal_text(KEY, "bonjour \N{SNOWMAN}", bound_to="attachment:a1:name")
    assert value.startswith("pk1:") and value.isascii() and sealing.is_sealed_text(value)
    assert not sealing.is_sealed_text("bonjour")
    assert unseal_text(KEY, value, bound_to="attachment:a1:name") == "bonjour \N{SNOWMAN}"


@pytest.mark.parametrize("value", ["plain text", "pk1:not base64!", "pk1:", "pk1:AAAA"])
def test_a_text_that_is_not_sealed_does_not_open(value: str) -> None:
    with pytest.raises(SealedInvalid):
        unseal_text(KEY, value, bound_to=ROW)


def test_sealed_bytes_that_are_not_text_do_not_open_as_text() -> None:
    value = "pk1:" + base64.b64encode(seal(KEY, b"\xff\xfe", bound_to=ROW)).decode()
    with pytest.raises(SealedInvalid):
        unseal_text(KEY, value, bound_to=ROW)


def test_sealing_refuses_a_key_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        seal(KEY[:31], b"x", bound_to=ROW)


def test_the_error_is_a_purgekeeper_error_with_its_docstring_as_message() -> None:
    assert str(SealedInvalid()).startswith("The sealed value does not open")
