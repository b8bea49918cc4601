"""the totals a scrape shows of the history, kept as it is written (issue 27, item 6)

Revision ID: 0015
Revises: 0014

- ``metric_counters`` gains the totals ``/metrics`` and ``/status`` showed by walking the
  history on every scrape: the steps that are done, by step kind (``done_steps``: ``steps``,
  ``attempts``, ``removed``, ``retained_shared``), and the retention runs (``retention_runs``,
  ``retention_expired``, ``retention_held``; kind ``retention_run``). Triggers keep them
  (``0015_scrape_counters.sql``): a step's totals count while it is done, a run once its
  ledger row is written, whoever writes (the step protocol, a restore's merge or re-arm, a raw
  writer). On PostgreSQL once per statement (a bulk write adds up its rows once), after the
  first step row of each purge concerned is locked, as the step protocol locks it: step rows,
  then counters. They are filled here from the rows already written.
- A scrape reads these rows, and adds the steps still unfinished (through the status index):
  it costs the same with 100,000 retention runs as with 10.
"""

from __future__ import annotations

from alembic import op

from purgekeeper.schema import fences

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

COUNT_EXISTING = [
    """
    INSERT INTO metric_counters (metric, kind, bucket, value)
    SELECT 'done_steps', kind, 'steps', count(*) FROM cleanup_steps WHERE status = 'done' GROUP BY kind
    UNION ALL
    SELECT 'done_steps', kind, 'attempts', sum(attempts) FROM cleanup_steps WHERE status = 'done' GROUP BY kind
    UNION ALL
    SELECT 'done_steps', kind, 'removed', sum(removed) FROM cleanup_steps WHERE status = 'done' GROUP BY kind
    UNION ALL
    SELECT 'done_steps', kind, 'retained_shared', sum(retained_shared) FROM cleanup_steps
     WHERE status = 'done' GROUP BY kind
    """,
    """
    INSERT INTO metric_counters (metric, kind, bucket, value)
    SELECT 'retention_runs', 'retention_run', '', count(*) FROM purge_ledger WHERE kind = 'retention_run'
    """,
    """
    INSERT INTO metric_counters (metric, kind, bucket, value)
    SELECT 'retention_expired', 'retention_run', '', coalesce(sum(s.removed), 0)
      FROM cleanup_steps s JOIN purge_ledger l ON l.purge_id = s.purge_id AND l.kind = 'retention_run'
     WHERE s.kind = 'bodies' AND s.status = 'done'
    UNION ALL
    SELECT 'retention_held', 'retention_run', '', coalesce(sum(s.held), 0)
      FROM cleanup_steps s JOIN purge_ledger l ON l.purge_id = s.purge_id AND l.kind = 'retention_run'
     WHERE s.kind = 'bodies' AND s.status = 'done'
    """,
]


def upgrade() -> None:
    for statement in COUNT_EXISTING:
        op.execute(statement)
    fences.install(op.get_bind(), "0015_scrape_counters.sql")


def downgrade() -> None:
    raise NotImplementedError("purgekeeper migrations are forward-only")
