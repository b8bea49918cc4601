"""After a restore: every purge's steps run again, as a worker would, until each is done or
incomplete."""

from __future__ import annotations

import datetime as dt
import time

import purgekeeper
from purgekeeper.workers import runner
from tests.helpers.reads import rows

Pk = purgekeeper.Purgekeeper

POLICY = runner.Policy(
    lease=dt.timedelta(seconds=5),
    backoff_base=dt.timedelta(milliseconds=10),
    backoff_cap=dt.timedelta(milliseconds=50),
)
SETTLE_S = 20.0


def clean(pk: Pk) -> None:
    """Run every purge's steps, as a worker would, until each is done or incomplete."""
    purge_ids = [r[0] for r in rows(pk, "SELECT purge_id FROM purge_ledger")]
    ctx = pk.step_context()
    deadline = time.monotonic() + SETTLE_S
    while True:
        waiting = [s for p in purge_ids for s in pk.status(p).steps if s.status not in ("done", "incomplete")]
        if not waiting:
            return
        assert time.monotonic() < deadline, waiting
        if all(runner.run_step(ctx, s.id, policy=POLICY).status == "skipped" for s in waiting):
            time.sleep(0.01)
