"""The add-checkpoint request body of C2SP tlog-witness (``purgekeeper.tlog.witness``): the
spec's example reads, and what the spec forbids is refused with a reason."""

from __future__ import annotations

import base64
import hashlib

import pytest

from purgekeeper.tlog import witness
from purgekeeper.tlog.witness import AddCheckpoint, RequestInvalid, add_checkpoint_body, parse_add_checkpoint

SPEC_CHECKPOINT = (
    "example.com/behind-the-sofa\n"
    "20852163\n"
    "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    "\n"
    "— example.com/behind-the-sofa "
    "Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
    "— example.com/behind-the-sofa "
    "opLqBQsREYCgu6xQkYQwJr9fo45a62DN9EdmHXnZdXNqlcVGlCum2Wks+49/V6267UEjw6QUXTS5Rovnzv++qbSzm9Q=\n"
)
SPEC_PROOF = [
    "PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=",
    "jrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=",
    "5+pKlUdi2LeF/BcMHBn+Ku6yhPGNCswZZD1X/6QgPd8=",
    "/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=",
]
SPEC_BODY = ("old 20852014\n" + "".join(line + "\n" for line in SPEC_PROOF) + "\n" + SPEC_CHECKPOINT).encode()
HASH = hashlib.sha256(b"h").digest()


def test_the_spec_s_example_body_reads_and_is_written_back_byte_for_byte() -> None:
    request = parse_add_checkpoint(SPEC_BODY)
    assert request == AddCheckpoint(20852014, tuple(base64.b64decode(h) for h in SPEC_PROOF), SPEC_CHECKPOINT)
    assert add_checkpoint_body(request.old_size, request.proof, request.note) == SPEC_BODY


def test_a_first_submission_has_old_zero_and_no_proof() -> None:
    body = add_checkpoint_body(0, [], SPEC_CHECKPOINT)
    assert body.startswith(b"old 0\n\nexample.com/behind-the-sofa\n")
    assert parse_add_checkpoint(body) == AddCheckpoint(0, (), SPEC_CHECKPOINT)


def test_63_proof_lines_are_read_and_64_refused() -> None:
    assert len(parse_add_checkpoint(add_checkpoint_body(5, [HASH] * 63, SPEC_CHECKPOINT)).proof) == 63
    body = b"old 5\n" + (base64.b64encode(HASH) + b"\n") * 64 + b"\n" + SPEC_CHECKPOINT.encode()
    with pytest.raises(RequestInvalid, match="more than 63 lines"):
        parse_add_checkpoint(body)
    with pytest.raises(ValueError, match="at most 63"):
        add_checkpoint_body(5, [HASH] * 64, SPEC_CHECKPOINT)


CP = SPEC_CHECKPOINT.encode()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"old 020852014\n\n" + CP, "not 'old <size>'"),
        (b"old 00\n\n" + CP, "not 'old <size>'"),
        (b"old -1\n\n" + CP, "not 'old <size>'"),
        (b"old  5\n\n" + CP, "not 'old <size>'"),
        (b"new 5\n\n" + CP, "not 'old <size>'"),
        (b"old 5\n" + CP.replace(b"\n\n", b"\n"), "no empty line"),
        (b"old 5\n" + CP, "line 1 is not base64"),  # without the empty line, the origin reads as a proof line
        (b"old 5\n" + base64.b64encode(HASH) + b"\n" + CP.replace(b"\n\n", b"\n"), "no empty line"),
        (b"old 9223372036854775808\n\n" + CP, "above 2\\^63-1"),
        (b"old 5\nnot base64!\n\n" + CP, "line 1 is not base64"),
        (b"old 5\n" + base64.b64encode(HASH[:31]) + b"\n\n" + CP, "line 1 is 31 bytes"),
        (b"old 5\n\n", "no checkpoint"),
        (b"old 5\n\n\xff\n", "not UTF-8"),
    ],
)
def test_a_malformed_body_is_refused_with_its_reason(body: bytes, reason: str) -> None:
    with pytest.raises(RequestInvalid, match=reason):
        parse_add_checkpoint(body)


def test_a_body_over_the_bound_is_refused_before_it_is_read() -> None:
    body = b"old 5\n\n" + SPEC_CHECKPOINT.encode() + b"x" * witness.MAX_BODY
    with pytest.raises(RequestInvalid, match=f"over {witness.MAX_BODY} bytes"):
        parse_add_checkpoint(body)
