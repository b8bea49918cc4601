"""A preview's digest is the same however its events section is made: the fast path that
builds each event's hashed form beside the event equals what ``_hashable`` makes of the
event (or every digest reviewed before would be stale after)."""

from __future__ import annotations

import datetime as dt

from purgekeeper.commands.kinds.content import _hashable, _hashed_event
from purgekeeper.commands.scope import PreviewEvent
from purgekeeper.schema.ledger import canonical_json


def test_an_event_hashes_the_same_by_either_path() -> None:
    when = dt.datetime(2026, 3, 1, 12, 0, 0, 250, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    for provider_id, placements, fenced in ((None, ("c1",), False), ("p-1", ("c1", "c2"), True)):
        event = PreviewEvent("e-1", provider_id, "ada", when, placements, fenced)
        fast = _hashed_event(event.id, event.provider_event_id, event.author, event.occurred_at, event.placements)
        assert canonical_json(fast) == canonical_json(_hashable(event))
    assert set(fast) == set(PreviewEvent.__dataclass_fields__) - {"already_fenced"}, "a field is missing"
