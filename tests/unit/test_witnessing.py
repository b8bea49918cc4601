"""The log's side of witnessing without I/O: the witnesses setting, the quorum, and which
cosigned note is kept (``purgekeeper.storage.witnessed.merged``)."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from purgekeeper.commands.settings import Settings
from purgekeeper.commands.witnessing import check_quorum_setting, parse_witnesses
from purgekeeper.schema.errors import ValidationError
from purgekeeper.storage.witnessed import merged
from purgekeeper.tlog import note

ROOT = bytes(range(32))


def cosigner_vkey(name: str) -> str:
    """A cosignature/v1 vkey written by hand from C2SP tlog-cosignature (type 0x04)."""
    public = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(name.encode()).digest()).public_key()
    raw = public.public_bytes_raw()
    key_id = hashlib.sha256(name.encode() + b"\n\x04" + raw).digest()[:4]
    encoded = base64.b64encode(b"\x04" + raw).decode()
    return f"{name}+{key_id.hex()}+{encoded}"


def test_witnesses_are_url_and_vkey_pairs_separated_by_commas() -> None:
    text = f"http://127.0.0.1:7400 {cosigner_vkey('w.test/1')},\n https://w2.example/ {cosigner_vkey('w.test/2')}"
    found = parse_witnesses(text)
    assert [(w.url, w.name) for w in found] == [
        ("http://127.0.0.1:7400", "w.test/1"),
        ("https://w2.example", "w.test/2"),
    ]
    assert parse_witnesses(None) == () and parse_witnesses(" , ") == ()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("w.example " + cosigner_vkey("w.test/1"), "http"),  # no scheme
        ("http://w.example", "http"),  # no key
        ("http://w.example not+a+key", "cosigner key"),
        ("http://w.example " + note.Signer(name="log.test", seed=bytes(32)).vkey, "cosigner key"),  # a log's key (0x01)
        (f"http://a {cosigner_vkey('w.test/1')}, http://b {cosigner_vkey('w.test/1')}", "share a name"),
    ],
)
def test_a_witness_entry_that_is_not_one_is_refused_by_name(text: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        parse_witnesses(text)


def test_the_quorum_is_between_one_and_the_witnesses_and_defaults_to_all() -> None:
    two = parse_witnesses(f"http://a {cosigner_vkey('w.test/1')}, http://b {cosigner_vkey('w.test/2')}")
    assert check_quorum_setting(None, two) is None and check_quorum_setting(2, two) == 2
    with pytest.raises(ValidationError, match="from 1 to 2"):
        check_quorum_setting(3, two)
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ValidationError, match="WITNESS_QUORUM"):
            Settings.from_env({"PURGEKEEPER_WITNESS_QUORUM": bad})
    assert Settings.from_env({"PURGEKEEPER_WITNESS_QUORUM": "1"}).witness_quorum == 1


def signed(size: int, *lines: str) -> str:
    text = note.checkpoint_text("log.test/origin", size, ROOT)
    return note.sign_note(text, [note.Signer(name="log.test", seed=bytes(32))]) + "".join(lines)


def test_the_kept_note_only_moves_forward_and_gathers_lines_of_the_same_checkpoint() -> None:
    first, second, again = "\u2014 w1 AAAAAAAA\n", "\u2014 w2 BBBBBBBB\n", "\u2014 w1 CCCCCCCC\n"
    assert merged(None, signed(3, first)) == signed(3, first)
    assert merged(signed(3, first), signed(5, second)) == signed(5, second)  # a larger tree replaces
    assert merged(signed(5, second), signed(3, first)) is None  # a smaller one never does
    assert merged(signed(3, first), signed(3, second)) == signed(3, first, second)  # the same one gathers
    assert merged(signed(3, first, second), signed(3, first)) is None  # nothing new
    assert merged(signed(3, first), signed(3, again)) is None  # a witness keeps one line: a round per
    assert merged(None, signed(3, first, again)) == signed(3, first)  # process cannot pile them up


@pytest.mark.parametrize(
    "url",
    [
        "https://w.example/?token=abc",  # /add-checkpoint would follow the query
        "https://w.example/#frag",
        "https://ops:s3cret@w.example/",  # shown in monitoring; the protocol has no credentials
        "http:///nohost",
    ],
)
def test_a_witness_url_with_a_query_fragment_or_credentials_is_refused(url: str) -> None:
    with pytest.raises(ValidationError, match="URL") as refused:
        parse_witnesses(f"{url} {cosigner_vkey('w.test/1')}")
    assert "s3cret" not in str(refused.value)


def test_only_the_witness_line_that_verifies_is_kept_however_many_it_sends() -> None:
    """A witness's answer of a hundred lines under its name (a buggy one, or lines of a key
    type the log does not know): the one that verifies with its key is kept, the rest never
    reach the note (where over a hundred signatures would fail every quorum)."""
    from purgekeeper.commands.witnessing import Witness, Witnesses
    from purgekeeper.storage.log_format import TreeHead
    from purgekeeper.tlog.verify import Checkpoint
    from purgekeeper.tlog.witness import Cosigner

    cosigner = Cosigner(name="w.test/1", seed=bytes(range(32)))
    current = TreeHead(Checkpoint("log.test/origin", 3, ROOT), signed(3))
    good = cosigner.cosign(current.note, 1_700_000_000)
    junk = [f"\u2014 w.test/1 {base64.b64encode(bytes([i]) * 76).decode()}" for i in range(99)]
    body = "\n".join([*junk[:50], good.rstrip("\n"), *junk[50:]]) + "\n"
    witness = Witness("http://w.example", cosigner.key)
    assert Witnesses._checked_lines(witness, current, body) == [good]
