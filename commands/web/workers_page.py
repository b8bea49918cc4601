"""The console's Workers view: what it reads and what its template is given.

The route and the sign-in live with the other console routes (``commands/web/status.py``);
this module owns what the page shows, so that the view can change without touching them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from commands.handle import Purgekeeper
from commands.records import WorkerLeases

TEMPLATE = "workers.html"


@dataclass(frozen=True)
class WorkersView:
    now: dt.datetime  # the database's clock, which every time on the page is relative to
    workers: tuple[WorkerLeases, ...]

    def context(self) -> dict[str, Any]:
        """What the template is given besides the frame."""
        return {"workers": self.workers}


def gather(pk: Purgekeeper) -> WorkersView:
    """Bounded reads only; raises ``PurgekeeperError`` when the database cannot answer."""
    return WorkersView(now=pk.database_now(), workers=tuple(pk.worker_leases()))
