-- purgekeeper 0015: the totals a /metrics scrape shows of the history, kept as the history is
-- written (issue 27, item 6), in metric_counters: the steps that are done (by step kind: how
-- many, their attempts, what they removed and retained), and the retention runs (how many,
-- what their bodies steps expired and found held). A scrape reads these rows and adds the
-- steps still unfinished to them: its cost follows what changes, not the history.
-- Statements are separated by lines reading "-- ;;".
-- ;;
-- A step's totals count while it is done: added when it becomes done (or is written done), taken
-- back when it is done no more (a restore's re-arm), the difference when a done step changes.
CREATE TRIGGER pk_cleanup_steps_count_done_insert AFTER INSERT ON cleanup_steps
WHEN NEW.status = 'done'
BEGIN
    INSERT INTO metric_counters (metric, kind, bucket, value)
    VALUES ('done_steps', NEW.kind, 'steps', 1), ('done_steps', NEW.kind, 'attempts', NEW.attempts),
           ('done_steps', NEW.kind, 'removed', NEW.removed),
           ('done_steps', NEW.kind, 'retained_shared', NEW.retained_shared)
    ON CONFLICT (metric, kind, bucket) DO UPDATE SET value = value + excluded.value;
    INSERT INTO metric_counters (metric, kind, bucket, value)
    SELECT 'retention_' || b.name, 'retention_run', '', b.amount
      FROM (SELECT 'expired' AS name, NEW.removed AS amount UNION ALL SELECT 'held', NEW.held) AS b
     WHERE NEW.kind = 'bodies'
       AND EXISTS (SELECT 1 FROM purge_ledger WHERE purge_id = NEW.purge_id AND kind = 'retention_run')
    ON CONFLICT (metric, kind, bucket) DO UPDATE SET value = value + excluded.value;
END;
-- ;;
CREATE TRIGGER pk_cleanup_steps_count_done_update AFTER UPDATE ON cleanup_steps
WHEN (OLD.status = 'done' OR NEW.status = 'done')
 AND (OLD.status IS NOT NEW.status OR OLD.attempts IS NOT NEW.attempts OR OLD.removed IS NOT NEW.removed
      OR OLD.retained_shared IS NOT NEW.retained_shared OR OLD.held IS NOT NEW.held)
BEGIN
    INSERT INTO metric_counters (metric, kind, bucket, value)
    SELECT 'done_steps', NEW.kind, b.name, sum(b.amount)
      FROM (SELECT 'steps' AS name, -1 AS amount, OLD.status AS status
            UNION ALL SELECT 'attempts', -OLD.attempts, OLD.status
            UNION ALL SELECT 'removed', -OLD.removed, OLD.status
            UNION ALL SELECT 'retained_shared', -OLD.retained_shared, OLD.status
            UNION ALL SELECT 'steps', 1, NEW.status
            UNION ALL SELECT 'attempts', NEW.attempts, NEW.status
            UNION ALL SELECT 'removed', NEW.removed, NEW.status
            UNION ALL SELECT 'retained_shared', NEW.retained_shared, NEW.status) AS b
     WHERE b.status = 'done'
     GROUP BY b.name
    ON CONFLICT (metric, kind, bucket) DO UPDATE SET value = value + excluded.value;
    INSERT INTO metric_counters (metric, kind, bucket, value)
    SELECT 'retention_' || b.name, 'retention_run', '', sum(b.amount)
      FROM (SELECT 'expired' AS name, -OLD.removed AS amount, OLD.status AS status
            UNION ALL SELECT 'held', -OLD.held, OLD.status
            UNION ALL SELECT 'expired', NEW.removed, NEW.status
            UNION ALL SELECT 'held', NEW.held, NEW.status) AS b
     WHERE b.status = 'done' AND NEW.kind = 'bodies'
       AND EXISTS (SELECT 1 FROM purge_ledger WHERE purge_id = NEW.purge_id AND kind = 'retention_run')
     GROUP BY b.name
    ON CONFLICT (metric, kind, bucket) DO UPDATE SET value = value + excluded.value;
END;
-- ;;
-- The retention runs accepted: their ledger rows.
CREATE TRIGGER pk_purge_ledger_count_runs AFTER INSERT ON purge_ledger
WHEN NEW.kind = 'retention_run'
BEGIN
    INSERT INTO metric_counters (metric, kind, bucket, value)
    VALUES ('retention_runs', 'retention_run', '', 1)
    ON CONFLICT (metric, kind, bucket) DO UPDATE SET value = value + excluded.value;
END;
