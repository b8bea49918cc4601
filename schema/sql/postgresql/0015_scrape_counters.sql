-- purgekeeper 0015: the totals a /metrics scrape shows of the history, kept as the history is
-- written (issue 27, item 6), in metric_counters: the steps that are done (by step kind: how
-- many, their attempts, what they removed and retained), and the retention runs (how many,
-- what their bodies steps expired and found held). A scrape reads these rows and adds the
-- steps still unfinished to them: its cost follows what changes, not the history.
-- Statements are separated by lines reading "-- ;;".
-- ;;
-- A step's totals count while it is done: added when it becomes done (or is written done), taken
-- back when it is done no more (a restore's re-arm), the difference when a done step changes.
-- Once per statement (a bulk write adds its rows up once), and only after the first step row of
-- each purge concerned is locked, as the step protocol locks it: step rows, then counters,
-- everywhere (schema.steps), and the counters in the order of their keys.
CREATE FUNCTION pk_count_done_steps(gone cleanup_steps[], came cleanup_steps[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(gone) + cardinality(came) = 0 THEN
        RETURN;
    END IF;
    PERFORM 1 FROM cleanup_steps
     WHERE id IN (SELECT min(s.id) FROM cleanup_steps s
                   WHERE s.purge_id IN (SELECT g.purge_id FROM unnest(gone) AS g
                                        UNION SELECT c.purge_id FROM unnest(came) AS c)
                   GROUP BY s.purge_id)
     ORDER BY id
       FOR UPDATE;
    WITH changes AS (
        SELECT -1 AS sign, g.* FROM unnest(gone) AS g
        UNION ALL
        SELECT 1, c.* FROM unnest(came) AS c
    ), amounts AS (
        SELECT 'done_steps' AS metric, ch.kind, b.bucket, ch.sign * b.amount AS amount
          FROM changes AS ch
         CROSS JOIN LATERAL (VALUES ('steps', 1::bigint), ('attempts', ch.attempts::bigint),
                                    ('removed', ch.removed), ('retained_shared', ch.retained_shared)) AS b (bucket, amount)
        UNION ALL
        SELECT 'retention_' || b.name, 'retention_run', '', ch.sign * b.amount
          FROM changes AS ch
          JOIN purge_ledger AS l ON l.purge_id = ch.purge_id AND l.kind = 'retention_run'
         CROSS JOIN LATERAL (VALUES ('expired', ch.removed), ('held', ch.held)) AS b (name, amount)
         WHERE ch.kind = 'bodies'
    )
    INSERT INTO metric_counters AS m (metric, kind, bucket, value)
    SELECT a.metric, a.kind, a.bucket, sum(a.amount) FROM amounts AS a
     GROUP BY a.metric, a.kind, a.bucket
     ORDER BY a.metric, a.kind, a.bucket
    ON CONFLICT (metric, kind, bucket) DO UPDATE SET value = m.value + excluded.value;
END $$;
-- ;;
CREATE FUNCTION pk_cleanup_steps_count_done_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_count_done_steps('{}', ARRAY(SELECT ROW(n.*)::cleanup_steps FROM new_rows AS n WHERE n.status = 'done'));
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_cleanup_steps_count_done_insert AFTER INSERT ON cleanup_steps
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_cleanup_steps_count_done_insert();
-- ;;
CREATE FUNCTION pk_cleanup_steps_count_done_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- the rows whose counted fields changed, with a side that is done
    PERFORM pk_count_done_steps(
        ARRAY(SELECT ROW(o.*)::cleanup_steps FROM old_rows AS o JOIN new_rows AS n ON n.id = o.id
               WHERE o.status = 'done'
                 AND (o.status, o.attempts, o.removed, o.retained_shared, o.held)
                     IS DISTINCT FROM (n.status, n.attempts, n.removed, n.retained_shared, n.held)),
        ARRAY(SELECT ROW(n.*)::cleanup_steps FROM old_rows AS o JOIN new_rows AS n ON n.id = o.id
               WHERE n.status = 'done'
                 AND (o.status, o.attempts, o.removed, o.retained_shared, o.held)
                     IS DISTINCT FROM (n.status, n.attempts, n.removed, n.retained_shared, n.held)));
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_cleanup_steps_count_done_update AFTER UPDATE ON cleanup_steps
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_cleanup_steps_count_done_update();
-- ;;
-- The retention runs accepted: their ledger rows, once per statement (a merge appends many).
CREATE FUNCTION pk_purge_ledger_count_runs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    runs bigint;
BEGIN
    SELECT count(*) INTO runs FROM new_rows WHERE kind = 'retention_run';
    IF runs > 0 THEN
        INSERT INTO metric_counters AS m (metric, kind, bucket, value)
        VALUES ('retention_runs', 'retention_run', '', runs)
        ON CONFLICT (metric, kind, bucket) DO UPDATE SET value = m.value + excluded.value;
    END IF;
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_purge_ledger_count_runs AFTER INSERT ON purge_ledger
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_purge_ledger_count_runs();
