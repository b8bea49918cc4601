"""Every input check in commands/validation.py: bad values raise ValidationError, values at
exactly the documented limit pass. No database and no files."""

from __future__ import annotations

import datetime as dt
import json
import math

import pytest

from purgekeeper.commands import validation as v
from purgekeeper.commands.attachments import NewAttachment
from purgekeeper.schema.errors import ValidationError

UTC_PLUS_2 = dt.timezone(dt.timedelta(hours=2))
WIDEST_OFFSET = dt.timedelta(hours=24) - dt.timedelta(microseconds=1)  # what a tzinfo may return


class NoOffset(dt.tzinfo):
    """An aware-looking tzinfo whose utcoffset is None: still naive for Python."""

    def utcoffset(self, _when: dt.datetime | None) -> None:
        return None

    def dst(self, _when: dt.datetime | None) -> None:
        return None

    def tzname(self, _when: dt.datetime | None) -> str:
        return "none"


def rejects(check, *args, match: str | None = None, **kwargs) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError, match=match):
        check(*args, **kwargs)


# -- ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["a", "A9", "0", "a" * v.MAX_ID_LENGTH, "conv.1_x:y@z+w-v", "9-" + "b" * (v.MAX_ID_LENGTH - 2)],
    ids=["one-letter", "mixed-case", "one-digit", "exactly-200", "all-allowed-punctuation", "digit-start-200"],
)
def test_check_id_accepts_good_ids(value: str) -> None:
    assert v.check_id(value, "conversation_id") == value


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="none"),
        pytest.param(123, id="int"),
        pytest.param(b"abc", id="bytes"),
        pytest.param(["a"], id="list"),
        pytest.param("", id="empty"),
        pytest.param("a" * (v.MAX_ID_LENGTH + 1), id="201-chars"),
        pytest.param("-abc", id="starts-with-dash"),
        pytest.param(".abc", id="starts-with-dot"),
        pytest.param("_abc", id="starts-with-underscore"),
        pytest.param("a b", id="space"),
        pytest.param("a/b", id="slash"),
        pytest.param("a\\b", id="backslash"),
        pytest.param("a\x00b", id="nul"),
        pytest.param("a\nb", id="newline"),
        pytest.param("abc\n", id="trailing-newline"),
        pytest.param("a\tb", id="tab"),
        pytest.param("é", id="non-ascii"),
        pytest.param("a'b", id="quote"),
        pytest.param("a%b", id="percent"),
    ],
)
def test_check_id_rejects(value: object) -> None:
    rejects(v.check_id, value, "conversation_id")


def test_check_id_names_the_field_in_its_message() -> None:
    rejects(v.check_id, "", "run_id", match="run_id")


def test_check_optional_id() -> None:
    assert v.check_optional_id(None, "event_id") is None
    assert v.check_optional_id("e1", "event_id") == "e1"
    rejects(v.check_optional_id, "", "event_id")
    rejects(v.check_optional_id, "x" * (v.MAX_ID_LENGTH + 1), "event_id")


# -- provider event ids ------------------------------------------------------------------

PROVIDER_IDS = {
    "slack": "slack:T1/C1/1700000000.000100",
    "matrix": "$abc123:example.org",
    "email": "<CAF=x+y@mail.gmail.com>",
    "url": "https://example.org/posts/1?x=y#z",
    "non-ascii": "télégramme:Ω/1",
    "exactly-200": "p" * v.MAX_PROVIDER_ID_LENGTH,
}


@pytest.mark.parametrize("value", PROVIDER_IDS.values(), ids=PROVIDER_IDS.keys())
def test_check_provider_id_accepts_what_providers_send(value: str) -> None:
    assert v.check_provider_id(value) == value


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="none"),
        pytest.param(7, id="int"),
        pytest.param(b"slack:1", id="bytes"),
        pytest.param("", id="empty"),
        pytest.param("p" * (v.MAX_PROVIDER_ID_LENGTH + 1), id="201-chars"),
        pytest.param("a b", id="space"),
        pytest.param(" slack:1", id="leading-space"),
        pytest.param("slack:1 ", id="trailing-space"),
        pytest.param("a\u00a0b", id="no-break-space"),
        pytest.param("a\tb", id="tab"),
        pytest.param("a\nb", id="newline"),
        pytest.param("a\x00b", id="nul"),
        pytest.param("a\x1bb", id="escape"),
        pytest.param("a\x85b", id="c1-control"),
        pytest.param("a\u200bb", id="zero-width-space"),
        pytest.param("a\u2028b", id="line-separator"),
        pytest.param("a\ud800b", id="lone-surrogate"),
    ],
)
def test_check_provider_id_rejects(value: object) -> None:
    rejects(v.check_provider_id, value)


def test_check_provider_id_names_the_field_and_none_is_optional() -> None:
    rejects(v.check_provider_id, "a b", match="provider_event_id")
    assert v.check_optional_provider_id(None) is None
    assert v.check_optional_provider_id("$x:y") == "$x:y"


def test_a_provider_id_fits_the_columns_that_hold_it() -> None:
    from purgekeeper.schema.tables import ID_LENGTH, events, tombstones

    assert v.MAX_PROVIDER_ID_LENGTH == ID_LENGTH
    assert events.c.provider_event_id.type.length == tombstones.c.id.type.length == ID_LENGTH  # type: ignore[attr-defined]


def test_a_ledger_row_takes_the_provider_ids_an_ingest_takes() -> None:
    from purgekeeper.commands.kinds import selector_fields

    selector_fields.provider_ids({"provider_event_ids": list(PROVIDER_IDS.values())}, "provider_event_ids")
    for bad in ("a b", "", "a\x00b", 7):
        with pytest.raises(selector_fields.RowInvalid, match="provider_event_ids"):
            selector_fields.provider_ids({"provider_event_ids": [bad]}, "provider_event_ids")


# -- short texts: author, bot name, derivative kind ---------------------------------------


@pytest.mark.parametrize(
    ("limit", "field"),
    [(v.MAX_AUTHOR_LENGTH, "author"), (v.MAX_BOT_NAME_LENGTH, "name"), (v.MAX_DERIVATIVE_KIND_LENGTH, "kind")],
    ids=["author-200", "bot-name-200", "derivative-kind-64"],
)
def test_check_text_limit(limit: int, field: str) -> None:
    at_limit = "é" * limit  # characters, not bytes
    assert v.check_text(at_limit, field, max_length=limit) == at_limit
    rejects(v.check_text, "é" * (limit + 1), field, max_length=limit, match="longer")


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="none"),
        pytest.param(7, id="int"),
        pytest.param(b"ada", id="bytes"),
        pytest.param("", id="empty"),
        pytest.param("   ", id="only-spaces"),
        pytest.param("\t\n", id="only-whitespace"),
        pytest.param("ad\x00a", id="nul"),
    ],
)
def test_check_text_rejects(value: object) -> None:
    rejects(v.check_text, value, "author", max_length=v.MAX_AUTHOR_LENGTH)


def test_check_text_keeps_the_value_as_given() -> None:
    assert v.check_text(" ada lovelace ", "author", max_length=20) == " ada lovelace "


def test_check_text_rejects_a_lone_surrogate() -> None:
    rejects(v.check_text, "ada\ud800", "author", max_length=v.MAX_AUTHOR_LENGTH)


# -- body ---------------------------------------------------------------------------------


def test_check_body_none_means_no_body() -> None:
    assert v.check_body(None) is None


@pytest.mark.parametrize(
    "body",
    ["x" * v.MAX_BODY_BYTES, "é" * (v.MAX_BODY_BYTES // 2), "hello\nworld\t!"],
    ids=["ascii-exactly-256KiB", "two-byte-chars-exactly-256KiB", "newlines-and-tabs"],
)
def test_check_body_accepts(body: str) -> None:
    assert v.check_body(body) == body


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(123, id="int"),
        pytest.param(b"bytes", id="bytes"),
        pytest.param(["a"], id="list"),
        pytest.param("", id="empty"),
        pytest.param("a\x00b", id="nul"),
        pytest.param("x" * (v.MAX_BODY_BYTES + 1), id="ascii-one-byte-past"),
        pytest.param("é" * (v.MAX_BODY_BYTES // 2) + "x", id="two-byte-chars-one-byte-past"),
        pytest.param("x" * (v.MAX_BODY_BYTES - 1) + "é", id="limit-counted-in-bytes-not-chars"),
    ],
)
def test_check_body_rejects(body: object) -> None:
    rejects(v.check_body, body)


def test_check_body_rejects_a_lone_surrogate_with_a_validation_error() -> None:
    rejects(v.check_body, "hello \ud800")


# -- attachment names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["a", "report.pdf", "x" * v.MAX_NAME_LENGTH, "é" * (v.MAX_NAME_LENGTH // 2), "a.b.c", "na me.txt", ".hidden"],
    ids=["one-char", "plain", "exactly-255", "254-bytes-non-ascii", "single-dots", "inner-space", "leading-dot"],
)
def test_check_name_accepts(name: str) -> None:
    assert v.check_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(None, id="none"),
        pytest.param(5, id="int"),
        pytest.param(b"a.txt", id="bytes"),
        pytest.param("", id="empty"),
        pytest.param("x" * (v.MAX_NAME_LENGTH + 1), id="256-chars"),
        pytest.param("é" * v.MAX_NAME_LENGTH, id="255-chars-but-510-bytes"),
        pytest.param("a/b", id="slash"),
        pytest.param("/etc", id="leading-slash"),
        pytest.param("a\\b", id="backslash"),
        pytest.param("..", id="dotdot"),
        pytest.param("a..b", id="inner-dotdot"),
        pytest.param("../x", id="parent-traversal"),
        pytest.param(".", id="dot"),
        pytest.param("a\x00b", id="nul"),
        pytest.param("a\nb", id="newline"),
        pytest.param("a\rb", id="carriage-return"),
        pytest.param("a\tb", id="tab"),
        pytest.param("a\x1bb", id="escape"),
        pytest.param("a\x7fb", id="delete"),
        pytest.param(" a", id="leading-space"),
        pytest.param("a ", id="trailing-space"),
    ],
)
def test_check_name_rejects(name: object) -> None:
    rejects(v.check_name, name)


@pytest.mark.parametrize("name", ["a\x85b", "a\x9b31mb"], ids=["next-line-U+0085", "csi-U+009B"])
def test_check_name_rejects_c1_control_characters(name: str) -> None:
    rejects(v.check_name, name)


# -- attachment bytes and NewAttachment ---------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"x", bytearray(b"xy"), memoryview(b"xyz"), bytes(v.MAX_ATTACHMENT_BYTES)],
    ids=["one-byte", "bytearray", "memoryview", "exactly-64MiB"],
)
def test_check_data_accepts_bytes_like(data: bytes) -> None:
    out = v.check_data(data)
    assert isinstance(out, bytes)
    assert out == bytes(data)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(None, id="none"),
        pytest.param("text", id="str"),
        pytest.param([1, 2], id="list"),
        pytest.param(b"", id="empty"),
        pytest.param(bytes(v.MAX_ATTACHMENT_BYTES + 1), id="one-byte-past-64MiB"),
    ],
)
def test_check_data_rejects(data: object) -> None:
    rejects(v.check_data, data)


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: NewAttachment.cas(b"x", name="a/b"), id="cas-slash"),
        pytest.param(lambda: NewAttachment.file(b"x", name=".."), id="file-dotdot"),
        pytest.param(lambda: NewAttachment.file(b"x", name="a\x00"), id="file-nul"),
        pytest.param(lambda: NewAttachment.cas(b"", name="a"), id="cas-empty-bytes"),
        pytest.param(lambda: NewAttachment.file("text", name="a"), id="file-str-data"),  # type: ignore[arg-type]
        pytest.param(lambda: NewAttachment.reuse("", name="a"), id="reuse-empty-id"),
        pytest.param(lambda: NewAttachment.reuse("b" * 201, name="a"), id="reuse-201-char-id"),
        pytest.param(lambda: NewAttachment.reuse("b1", name="a", binding="symlink"), id="reuse-unknown-binding"),
        pytest.param(lambda: NewAttachment(source="url", name="a", binding="real_file"), id="unknown-source"),  # type: ignore[arg-type]
    ],
)
def test_new_attachment_validates_at_construction(build) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError):
        build()


def test_new_attachment_good_values() -> None:
    cas = NewAttachment.cas(b"abc", name="a.txt")
    assert (cas.source, cas.binding.value, cas.data) == ("cas", "legacy_cas", b"abc")
    real = NewAttachment.file(b"abc", name="x" * v.MAX_NAME_LENGTH)
    assert (real.source, real.binding.value) == ("file", "real_file")
    forward = NewAttachment.reuse("blob-1", name="fwd", binding="legacy_cas")
    assert (forward.source, forward.binding.value, forward.data, forward.blob_id) == (
        "reuse",
        "legacy_cas",
        None,
        "blob-1",
    )
    assert NewAttachment.reuse("blob-1", name="fwd").binding.value == "real_file"


# -- occurred_at --------------------------------------------------------------------------


def test_check_occurred_at_none_means_now_later() -> None:
    assert v.check_occurred_at(None) is None


def test_check_occurred_at_returns_the_same_instant_in_utc() -> None:
    local = dt.datetime(2024, 5, 1, 14, 30, 15, 123456, tzinfo=UTC_PLUS_2)
    out = v.check_occurred_at(local)
    assert out == local
    assert out is not None and out.utcoffset() == dt.timedelta(0)
    assert (out.hour, out.minute, out.microsecond) == (12, 30, 123456)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(dt.datetime(2024, 5, 1, 12, 0), id="naive-datetime"),
        pytest.param(dt.datetime(2024, 5, 1, 12, 0, tzinfo=NoOffset()), id="tzinfo-without-offset"),
        pytest.param("2024-05-01T12:00:00Z", id="iso-string"),
        pytest.param(dt.date(2024, 5, 1), id="date"),
        pytest.param(1714564800, id="epoch-int"),
    ],
)
def test_check_occurred_at_rejects(value: object) -> None:
    rejects(v.check_occurred_at, value)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(dt.datetime.max.replace(tzinfo=dt.UTC), id="datetime-max"),
        pytest.param(dt.datetime.min.replace(tzinfo=dt.UTC), id="datetime-min"),
        pytest.param(v.LATEST_MOMENT + dt.timedelta(microseconds=1), id="just-after-the-range"),
        pytest.param(v.EARLIEST_MOMENT - dt.timedelta(microseconds=1), id="just-before-the-range"),
        pytest.param(
            dt.datetime(9998, 12, 31, 23, tzinfo=dt.timezone(-dt.timedelta(hours=2))), id="in-range-locally-not-in-utc"
        ),
        pytest.param(dt.datetime(1, 1, 1, tzinfo=UTC_PLUS_2), id="not-a-utc-datetime"),
    ],
)
def test_a_moment_outside_the_accepted_range_is_refused(value: dt.datetime) -> None:
    """Every time from input (occurred_at, a scope's after/before, an erasure's before, the
    list filters) goes through check_optional_moment or to_utc: one range for all of them."""
    rejects(v.check_occurred_at, value, match="occurred_at")
    rejects(v.check_optional_moment, value, "since", match="since")
    rejects(v.to_utc, value, "before", match="before")


def test_the_ends_of_the_accepted_range_are_accepted_and_leave_room_for_a_window() -> None:
    assert v.check_occurred_at(v.EARLIEST_MOMENT) == v.EARLIEST_MOMENT
    assert v.check_occurred_at(v.LATEST_MOMENT) == v.LATEST_MOMENT
    assert (v.EARLIEST_MOMENT.year, v.LATEST_MOMENT.year) == (2, 9998)
    # a window's end (latest + 1 µs), a day's offset either way: none of it overflows
    for moment in (v.EARLIEST_MOMENT, v.LATEST_MOMENT):
        for shift in (dt.timedelta(days=1), dt.timedelta(microseconds=1)):
            assert moment - shift < moment < moment + shift
        for offset in (WIDEST_OFFSET, -WIDEST_OFFSET):
            assert moment.astimezone(dt.timezone(offset)) == moment  # shown in any local time


# -- JSON payloads and run output ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({"b": 1, "a": [1, 2]}, '{"b":1,"a":[1,2]}'),
        ("hello", '"hello"'),
        (0, "0"),
        (False, "false"),
        ({"text": "é"}, '{"text":"é"}'),
    ],
    ids=["object", "string", "zero", "false", "non-ascii-kept"],
)
def test_check_json_returns_compact_text(value: object, text: str) -> None:
    assert v.check_json(value, "payload", max_bytes=v.MAX_PAYLOAD_BYTES) == text
    assert json.loads(text) == value


@pytest.mark.parametrize("limit", [v.MAX_PAYLOAD_BYTES, v.MAX_OUTPUT_BYTES], ids=["payload", "output"])
def test_check_json_size_limit_is_on_the_serialised_bytes(limit: int) -> None:
    at_limit = "x" * (limit - 2)  # the two quotes make it exactly `limit`
    assert len(v.check_json(at_limit, "payload", max_bytes=limit).encode()) == limit
    rejects(v.check_json, at_limit + "x", "payload", max_bytes=limit, match="larger")
    rejects(v.check_json, "é" * ((limit - 2) // 2) + "x", "payload", max_bytes=limit, match="larger")


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="none"),
        pytest.param(math.nan, id="nan"),
        pytest.param({"score": math.inf}, id="inf-inside"),
        pytest.param([-math.inf], id="minus-inf"),
        pytest.param(object(), id="object"),
        pytest.param({1, 2}, id="set"),
        pytest.param(b"bytes", id="bytes"),
        pytest.param({"when": dt.datetime(2024, 1, 1, tzinfo=dt.UTC)}, id="datetime-inside"),
        pytest.param({("a", "b"): 1}, id="tuple-key"),
        pytest.param("", id="empty-string"),
        pytest.param({}, id="empty-object"),
        pytest.param([], id="empty-list"),
    ],
)
def test_check_json_rejects(value: object) -> None:
    rejects(v.check_json, value, "payload", max_bytes=v.MAX_PAYLOAD_BYTES)


def test_check_json_rejects_a_cycle() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)
    rejects(v.check_json, cyclic, "payload", max_bytes=v.MAX_PAYLOAD_BYTES)


def test_check_json_keeps_a_nul_escaped_so_both_backends_store_it() -> None:
    text = v.check_json({"t": "a\x00b"}, "payload", max_bytes=v.MAX_PAYLOAD_BYTES)
    assert "\x00" not in text and json.loads(text) == {"t": "a\x00b"}


def test_check_json_accepts_a_literal_backslash_u0000_text() -> None:
    value = {"path": "C:\\u0000\\file"}  # a backslash followed by 'u0000': no NUL character
    assert "\x00" not in value["path"]
    assert json.loads(v.check_json(value, "payload", max_bytes=v.MAX_PAYLOAD_BYTES)) == value


def test_check_json_rejects_a_lone_surrogate_with_a_validation_error() -> None:
    rejects(v.check_json, {"t": "\ud800"}, "payload", max_bytes=v.MAX_PAYLOAD_BYTES)


def test_check_optional_json() -> None:
    assert v.check_optional_json(None, "output", max_bytes=v.MAX_OUTPUT_BYTES) is None
    assert v.check_optional_json({"a": 1}, "output", max_bytes=v.MAX_OUTPUT_BYTES) == '{"a":1}'
    rejects(v.check_optional_json, math.nan, "output", max_bytes=v.MAX_OUTPUT_BYTES)


# -- id lists and choices -----------------------------------------------------------------


def test_check_id_list_keeps_order_and_drops_repeats() -> None:
    assert v.check_id_list(["b", "a", "b"], "source_event_ids", max_count=5) == ["b", "a"]
    assert v.check_id_list((), "source_event_ids", max_count=5) == []


def test_check_id_list_at_the_limit() -> None:
    ids = [f"e{i}" for i in range(v.MAX_DERIVATIVE_SOURCES)]
    assert v.check_id_list(ids, "source_event_ids", max_count=v.MAX_DERIVATIVE_SOURCES) == ids
    rejects(v.check_id_list, [*ids, "one-more"], "source_event_ids", max_count=v.MAX_DERIVATIVE_SOURCES)


@pytest.mark.parametrize(
    "values",
    [
        pytest.param("e1", id="a-string"),
        pytest.param(b"e1", id="bytes"),
        pytest.param(None, id="none"),
        pytest.param(7, id="int"),
        pytest.param({"e1": 1}, id="dict"),
        pytest.param(["e1", ""], id="an-empty-id"),
        pytest.param(["e1", 2], id="an-int-id"),
        pytest.param(["a/b"], id="a-bad-id"),
    ],
)
def test_check_id_list_rejects(values: object) -> None:
    rejects(v.check_id_list, values, "source_event_ids", max_count=v.MAX_DERIVATIVE_SOURCES)


def test_check_choice() -> None:
    assert v.check_choice("channel", "kind", ["conversation", "channel"]) == "channel"
    for bad in ("Channel", "", None, 1, "channel "):
        rejects(v.check_choice, bad, "kind", ["conversation", "channel"])


def test_limits_are_the_documented_ones() -> None:
    assert (v.MAX_ID_LENGTH, v.MAX_AUTHOR_LENGTH, v.MAX_BOT_NAME_LENGTH) == (200, 200, 200)
    assert v.MAX_PROVIDER_ID_LENGTH == 200
    assert (v.MAX_BODY_BYTES, v.MAX_PAYLOAD_BYTES, v.MAX_OUTPUT_BYTES) == (256 * 1024,) * 3
    assert (v.MAX_NAME_LENGTH, v.MAX_ATTACHMENT_BYTES, v.MAX_ATTACHMENTS_PER_EVENT) == (255, 64 * 1024 * 1024, 32)
    assert (v.MAX_DERIVATIVE_KIND_LENGTH, v.MAX_DERIVATIVE_SOURCES) == (64, 1000)
