"""The console's search box (``GET /status/search?q=``): a purge id, or the first characters
of one, a conversation id, a legal hold's or a retention policy's id, or an actor (who
accepted a purge, or retried one; a name with a space is looked for as an actor only). One
purge found opens its page; several are listed in the overview's table, with how many were
found each way; none found says so.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from purgekeeper.commands.handle import Purgekeeper
from purgekeeper.commands.records import PurgeStatus
from purgekeeper.commands.touched import PurgeSearch
from purgekeeper.commands.web.overview_page import status_or_none

TEMPLATE = "search.html"


@dataclass(frozen=True)
class SearchView:
    now: dt.datetime  # the database's clock, which every time on the page is relative to
    search: PurgeSearch
    purges: tuple[PurgeStatus, ...]  # what it found, newest first

    @property
    def only(self) -> PurgeStatus | None:
        """The one purge found, when it is one (the page to open)."""
        return self.purges[0] if len(self.purges) == 1 and not self.search.more else None

    @property
    def ways(self) -> list[tuple[int, str]]:
        """How many purges each way found, and the words before the query ("whose id begins
        with"), for the ways that found any."""
        found = self.search
        counted = (
            (len(found.by_id), "whose id begins with"),
            (len(found.by_conversation), "naming conversation"),
            (len(found.by_hold), "of legal hold"),
            (len(found.by_policy), "of retention policy"),
            (len(found.by_actor), "accepted or retried by"),
        )
        return [(count, words) for count, words in counted if count]

    def context(self) -> dict[str, Any]:
        """What the template is given besides the frame."""
        return {"search": self.search, "purges": self.purges, "ways": self.ways}


def gather(pk: Purgekeeper, query: str) -> SearchView:
    """Raises ``ValidationError`` for a query too long for any id or actor."""
    search = pk.find_purges(query)
    found = (status_or_none(pk, purge_id) for purge_id in search.purge_ids)
    purges = sorted((p for p in found if p is not None), key=lambda p: p.ledger_seq, reverse=True)
    return SearchView(now=pk.database_now(), search=search, purges=tuple(purges))
