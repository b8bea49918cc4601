"""The timestamp form the chain hashes: the fast path (``isoformat``) gives exactly what the
definition (``strftime``) gives, for every offset, microsecond and year, or a row written by
one version would not verify under the other."""

from __future__ import annotations

import datetime as dt
import random

from purgekeeper.schema.ledger import utc_text

DEFINITION = "%Y-%m-%dT%H:%M:%S.%fZ"


def test_the_fast_path_formats_as_the_definition_does() -> None:
    chosen = random.Random(12)
    for _ in range(20_000):
        moment = dt.datetime(
            chosen.randint(1, 9999),
            chosen.randint(1, 12),
            chosen.randint(1, 28),
            chosen.randint(0, 23),
            chosen.randint(0, 59),
            chosen.randint(0, 59),
            chosen.choice([0, 1, 999_999, chosen.randint(0, 999_999)]),
            tzinfo=dt.timezone(dt.timedelta(minutes=chosen.randint(-14 * 60, 14 * 60))),
        )
        try:
            utc = moment.astimezone(dt.UTC)
        except OverflowError:
            continue  # not representable in UTC: to_utc refuses such input before it is hashed
        assert utc_text(moment) == utc.strftime(DEFINITION), moment
    assert utc_text(dt.datetime(2026, 11, 30, 6, 18, 18, 123456, tzinfo=dt.UTC)) == "2026-11-30T06:18:18.123456Z"
    assert utc_text(dt.datetime(2026, 11, 30, 6, 18, 18, tzinfo=dt.UTC)) == "2026-11-30T06:18:18.000000Z"


def test_sqlite_timestamps_read_fast_are_read_as_the_column_type_reads_them() -> None:
    from purgekeeper.schema.content_queries import utc_from_text
    from purgekeeper.schema.tables import UtcDateTime

    column = UtcDateTime()
    for stored in (
        "2026-01-01 00:00:00.000000",  # as this code writes them
        "2026-01-01 00:00:00",
        "2026-01-01T05:30:00+05:30",  # a raw writer's offset
        "2026-01-01T00:00:00Z",
    ):
        assert utc_from_text(stored) == column.process_result_value(stored, None), stored  # type: ignore[arg-type]
        assert utc_from_text(stored).tzinfo is dt.UTC
    moment = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert utc_from_text(moment) is moment
