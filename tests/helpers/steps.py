"""Running a purge's steps as a worker would, and a blob store whose unlinks fail."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

import purgekeeper
from purgekeeper.storage.blobstore import BlobStore
from purgekeeper.workers import runner

# Short timings: a 2 s lease, a 10 ms backoff capped at 50 ms.
POLICY = runner.Policy(
    lease=dt.timedelta(seconds=2),
    backoff_base=dt.timedelta(milliseconds=10),
    backoff_cap=dt.timedelta(milliseconds=50),
)
SETTLE_S = 10.0


def settle(
    pk: purgekeeper.Purgekeeper,
    purge_id: str,
    ctx: Any = None,
    *,
    policy: runner.Policy = POLICY,
    timeout_s: float = SETTLE_S,
) -> purgekeeper.PurgeStatus:
    """Run the purge's steps, as a worker would, until each is done or incomplete."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = pk.status(purge_id)
        waiting = [s for s in status.steps if s.status not in ("done", "incomplete")]
        if not waiting:
            return status
        assert time.monotonic() < deadline, waiting
        for step in waiting:
            runner.run_step(ctx or pk.step_context(), step.id, policy=policy)


@dataclass(frozen=True)
class FailingStore(BlobStore):
    """The real store, except that every unlink fails with ``message``."""

    message: str = "the disk said no"

    def discard(self, blob_id: str, kind: Any, relative: str, **_: Any) -> bool:
        raise OSError(self.message)
