"""The stand-ins the unit tests of ``decide`` use fail loudly where they could lie: a query
faked must exist and be called as it could be, a row has only its table's columns, and the
connection cannot be used."""

from __future__ import annotations

import pytest

from purgekeeper.schema import purges
from purgekeeper.schema.states import TombstoneKind
from purgekeeper.schema.tables import legal_holds
from tests.helpers.decide_fakes import NO_DATABASE, Queries, row_of


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> Queries:
    return Queries(monkeypatch)


def test_the_connection_cannot_be_used() -> None:
    with pytest.raises(AssertionError, match=r"\('execute'\) through a query this test does not fake"):
        NO_DATABASE.execute("SELECT 1")


def test_a_faked_query_answers_and_records_its_arguments_by_name(queries: Queries) -> None:
    queries.computes(purges, "tombstone_of", lambda kind, the_id: f"{kind.value}:{the_id}")
    assert purges.tombstone_of(NO_DATABASE, TombstoneKind.BOT, "b1") == "bot:b1"
    queries.returns(purges, "tombstone_of", None)  # faked again: still by the real signature
    assert purges.tombstone_of(NO_DATABASE, kind=TombstoneKind.BOT, the_id="b2") is None
    assert queries.arguments("tombstone_of") == [
        {"kind": TombstoneKind.BOT, "the_id": "b1"},
        {"kind": TombstoneKind.BOT, "the_id": "b2"},
    ]


def test_a_call_the_real_query_would_refuse_fails(queries: Queries) -> None:
    queries.returns(purges, "tombstone_of", None)
    with pytest.raises(TypeError):
        purges.tombstone_of(NO_DATABASE, TombstoneKind.BOT)
    with pytest.raises(AssertionError, match="another connection"):
        purges.tombstone_of(object(), TombstoneKind.BOT, "b1")


def test_a_query_that_does_not_exist_cannot_be_faked(queries: Queries) -> None:
    with pytest.raises(AttributeError):
        queries.returns(purges, "tombstone_off", None)


def test_a_row_has_its_table_s_columns_and_no_other() -> None:
    row = row_of(legal_holds, hold_id="h1", purge_id="p1")
    assert (row.hold_id, row.purge_id, row.released_by) == ("h1", "p1", None)
    with pytest.raises(TypeError, match=r"legal_holds has no column \['releasd_by'\]"):
        row_of(legal_holds, releasd_by="x")
