-- Content fences (0012); the rules are those of schema/sql/postgresql/0012_content_fences.sql.
-- SQLite serialises writers (BEGIN IMMEDIATE): a writer's checks read the latest state, so a
-- transaction's snapshot cannot predate an erasure and the marks need no probe here; they are
-- kept as on PostgreSQL, for one schema.
--
-- Three views say once what the triggers below ask per row (each is flattened into the
-- asking query, which probes it by primary key):
--   pk_held_subjects  the conversations and authors a hold in force covers;
--   pk_live_events    an event with no event tombstone, no erasure covering it, and a live
--                     placement (pk_live_placements, 0009);
--   pk_held_events    a live event whose author is held, or that is placed in a held
--                     conversation.
CREATE VIEW pk_held_subjects AS
SELECT s.kind, s.subject_id
  FROM legal_hold_subjects s JOIN legal_holds h ON h.hold_id = s.hold_id
 WHERE h.released_by IS NULL;
-- ;;
CREATE VIEW pk_live_events AS
SELECT e.id AS event_id, e.author
  FROM events e
 WHERE NOT EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = e.id)
   AND NOT EXISTS (SELECT 1 FROM author_erasures a WHERE a.author = e.author AND a.window_end > e.occurred_at)
   AND EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = e.id);
-- ;;
CREATE VIEW pk_held_events AS
SELECT l.event_id
  FROM pk_live_events l
 WHERE EXISTS (SELECT 1 FROM pk_held_subjects WHERE kind = 'author' AND subject_id = l.author)
    OR EXISTS (SELECT 1 FROM placements p JOIN pk_held_subjects s ON s.kind = 'conversation' AND s.subject_id = p.conversation_id
                WHERE p.event_id = l.event_id);
-- ;;
-- 1. A hold preserves what it covers. Each trigger fires only for a write that removes or
--    overwrites content (its WHEN), and refuses it while that content is held and live. A
--    run's output and a derivative's payload are live while their conversation is not purged
--    and every event they came from is live; they are held when their conversation is, or one
--    of those events. An admission's payload is live while its run's conversation is not
--    purged and its event is live; held when the event or the run's conversation is.
CREATE TRIGGER pk_events_held_content BEFORE UPDATE OF body ON events
WHEN OLD.body IS NOT NULL AND NEW.body IS NOT OLD.body
 AND EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
 AND EXISTS (SELECT 1 FROM pk_held_events WHERE event_id = OLD.id)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the event; its body stays until the hold is released');
END;
-- ;;
CREATE TRIGGER pk_attachments_held_content BEFORE UPDATE OF name ON attachments
WHEN OLD.name IS NOT NULL AND NEW.name IS NOT OLD.name
 AND EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
 AND EXISTS (SELECT 1 FROM pk_held_events WHERE event_id = OLD.event_id)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the attachment''s event; its name stays until the hold is released');
END;
-- ;;
CREATE TRIGGER pk_attachments_held_delete BEFORE DELETE ON attachments
WHEN EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
 AND EXISTS (SELECT 1 FROM pk_held_events WHERE event_id = OLD.event_id)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the attachment''s event; the attachment stays until the hold is released');
END;
-- ;;
CREATE TRIGGER pk_admissions_held_content BEFORE UPDATE OF payload ON admissions
WHEN OLD.payload IS NOT NULL AND NEW.payload IS NOT OLD.payload
 AND EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
 AND EXISTS (SELECT 1 FROM pk_live_events WHERE event_id = OLD.event_id)
 AND EXISTS (SELECT 1 FROM runs r JOIN conversations c ON c.id = r.conversation_id
              WHERE r.id = OLD.run_id AND c.state <> 'purged'
                AND (EXISTS (SELECT 1 FROM pk_held_subjects WHERE kind = 'conversation' AND subject_id = r.conversation_id)
                     OR EXISTS (SELECT 1 FROM pk_held_events WHERE event_id = OLD.event_id)))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the admitted event or the run''s conversation; the payload stays until the hold is released');
END;
-- ;;
CREATE TRIGGER pk_admissions_held_delete BEFORE DELETE ON admissions
WHEN OLD.payload IS NOT NULL
 AND EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
 AND EXISTS (SELECT 1 FROM pk_live_events WHERE event_id = OLD.event_id)
 AND EXISTS (SELECT 1 FROM runs r JOIN conversations c ON c.id = r.conversation_id
              WHERE r.id = OLD.run_id AND c.state <> 'purged'
                AND (EXISTS (SELECT 1 FROM pk_held_subjects WHERE kind = 'conversation' AND subject_id = r.conversation_id)
                     OR EXISTS (SELECT 1 FROM pk_held_events WHERE event_id = OLD.event_id)))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the admitted event or the run''s conversation; the admission stays until the hold is released');
END;
-- ;;
CREATE TRIGGER pk_runs_held_content BEFORE UPDATE OF output ON runs
WHEN OLD.output IS NOT NULL AND NEW.output IS NOT OLD.output
 AND EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
 AND EXISTS (SELECT 1 FROM conversations WHERE id = OLD.conversation_id AND state <> 'purged')
 AND NOT EXISTS (SELECT 1 FROM admissions a WHERE a.run_id = OLD.id
                    AND NOT EXISTS (SELECT 1 FROM pk_live_events WHERE event_id = a.event_id))
 AND (EXISTS (SELECT 1 FROM pk_held_subjects WHERE kind = 'conversation' AND subject_id = OLD.conversation_id)
      OR EXISTS (SELECT 1 FROM admissions a JOIN pk_held_events h ON h.event_id = a.event_id WHERE a.run_id = OLD.id))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the run''s conversation or what it admitted; its output stays until the hold is released');
END;
-- ;;
CREATE TRIGGER pk_runs_held_delete BEFORE DELETE ON runs
WHEN OLD.output IS NOT NULL
 AND EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
 AND EXISTS (SELECT 1 FROM conversations WHERE id = OLD.conversation_id AND state <> 'purged')
 AND NOT EXISTS (SELECT 1 FROM admissions a WHERE a.run_id = OLD.id
                    AND NOT EXISTS (SELECT 1 FROM pk_live_events WHERE event_id = a.event_id))
 AND (EXISTS (SELECT 1 FROM pk_held_subjects WHERE kind = 'conversation' AND subject_id = OLD.conversation_id)
      OR EXISTS (SELECT 1 FROM admissions a JOIN pk_held_events h ON h.event_id = a.event_id WHERE a.run_id = OLD.id))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the run''s conversation or what it admitted; the run stays until the hold is released');
END;
-- ;;
CREATE TRIGGER pk_derivatives_held_content BEFORE UPDATE OF payload ON derivatives
WHEN OLD.payload IS NOT NULL AND NEW.payload IS NOT OLD.payload
 AND EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
 AND EXISTS (SELECT 1 FROM conversations WHERE id = OLD.conversation_id AND state <> 'purged')
 AND NOT EXISTS (SELECT 1 FROM derivative_sources s WHERE s.derivative_id = OLD.id
                    AND NOT EXISTS (SELECT 1 FROM pk_live_events WHERE event_id = s.event_id))
 AND (EXISTS (SELECT 1 FROM pk_held_subjects WHERE kind = 'conversation' AND subject_id = OLD.conversation_id)
      OR EXISTS (SELECT 1 FROM derivative_sources s JOIN pk_held_events h ON h.event_id = s.event_id
                  WHERE s.derivative_id = OLD.id))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the derivative''s conversation or what it came from; its payload stays until the hold is released');
END;
-- ;;
CREATE TRIGGER pk_derivatives_held_delete BEFORE DELETE ON derivatives
WHEN OLD.payload IS NOT NULL
 AND EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
 AND EXISTS (SELECT 1 FROM conversations WHERE id = OLD.conversation_id AND state <> 'purged')
 AND NOT EXISTS (SELECT 1 FROM derivative_sources s WHERE s.derivative_id = OLD.id
                    AND NOT EXISTS (SELECT 1 FROM pk_live_events WHERE event_id = s.event_id))
 AND (EXISTS (SELECT 1 FROM pk_held_subjects WHERE kind = 'conversation' AND subject_id = OLD.conversation_id)
      OR EXISTS (SELECT 1 FROM derivative_sources s JOIN pk_held_events h ON h.event_id = s.event_id
                  WHERE s.derivative_id = OLD.id))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the derivative''s conversation or what it came from; the derivative stays until the hold is released');
END;
-- ;;
-- Without its sources a held derivative would no longer name the held event it came from.
CREATE TRIGGER pk_derivative_sources_held_delete BEFORE DELETE ON derivative_sources
WHEN EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
 AND EXISTS (SELECT 1 FROM pk_held_events WHERE event_id = OLD.event_id)
 AND EXISTS (SELECT 1 FROM derivatives d JOIN conversations c ON c.id = d.conversation_id
              WHERE d.id = OLD.derivative_id AND d.payload IS NOT NULL AND c.state <> 'purged')
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the event the derivative came from; the source stays until the hold is released');
END;
-- ;;
-- What makes content held does not change under the hold: a held live event's author, and
-- a live placement of a live event in a held conversation (moving the event out, then
-- removing its content, was two plain statements).
CREATE TRIGGER pk_events_held_author BEFORE UPDATE OF author ON events
WHEN NEW.author IS NOT OLD.author
 AND EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the event; its author stays until the hold is released')
     WHERE EXISTS (SELECT 1 FROM pk_held_events WHERE event_id = OLD.id);
END;
-- ;;
-- REPLACE deletes the row it conflicts with without its DELETE or UPDATE triggers: a held
-- event is not written over with other content (the same event again, a duplicate
-- delivery, still is taken).
CREATE TRIGGER pk_events_held_replace BEFORE INSERT ON events
WHEN EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
 AND EXISTS (SELECT 1 FROM events WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the event; it is not written over until the hold is released')
     WHERE EXISTS (SELECT 1 FROM pk_held_events h JOIN events e ON e.id = h.event_id
                    WHERE h.event_id = NEW.id
                      AND (NEW.body IS NOT e.body OR NEW.author IS NOT e.author OR NEW.occurred_at IS NOT e.occurred_at));
END;
-- ;;
CREATE TRIGGER pk_placements_held_delete BEFORE DELETE ON placements
WHEN EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the conversation; the event stays placed in it until the hold is released')
     WHERE EXISTS (SELECT 1 FROM pk_held_subjects WHERE kind = 'conversation' AND subject_id = OLD.conversation_id)
       AND EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = OLD.event_id AND conversation_id = OLD.conversation_id)
       AND EXISTS (SELECT 1 FROM pk_live_events WHERE event_id = OLD.event_id);
END;
-- ;;
-- 2. Every erasure row marks its author (author_erasure_marks); the marks never go back.
CREATE TRIGGER pk_author_erasures_mark AFTER INSERT ON author_erasures
BEGIN
    INSERT INTO author_erasure_marks (author, erasures) VALUES (NEW.author, 1)
        ON CONFLICT (author) DO UPDATE SET erasures = erasures + 1;
END;
-- ;;
CREATE TRIGGER pk_author_erasure_marks_no_delete BEFORE DELETE ON author_erasure_marks
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: an author''s erasure mark is never removed');
END;
-- ;;
CREATE TRIGGER pk_author_erasure_marks_before_update BEFORE UPDATE ON author_erasure_marks
WHEN NEW.author IS NOT OLD.author OR NEW.erasures <= OLD.erasures
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: an author''s erasure mark only counts up');
END;
-- ;;
-- 3. Times are compared as text: every time a trigger or the library compares is in the form
--    the library writes, 'YYYY-MM-DD HH:MM:SS.ffffff' (UTC), or the column defaults'
--    'YYYY-MM-DD HH:MM:SS' (CURRENT_TIMESTAMP, UTC), which sorts as the start of its second. A
--    'T', a zone or an offset sorts the text elsewhere than its instant. The date and time
--    must exist: datetime() of the whole seconds gives them back unchanged (not month 13,
--    February 30, or 24:00), in a year a datetime holds (not 0000: the reads would fail). An update is checked for the times it changes: a row an earlier
--    raw writer left in another form keeps it (the cleanup's keysets read it as stored).
CREATE TRIGGER pk_events_canonical_times BEFORE INSERT ON events
WHEN EXISTS (SELECT 1 FROM (SELECT NEW.occurred_at AS t UNION ALL SELECT NEW.created_at)
              WHERE t IS NOT NULL
                AND NOT (typeof(t) = 'text'
                         AND (t GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                              OR t GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]')
                         AND t >= '0001-01-01' AND datetime(substr(t, 1, 19), '+0 seconds') IS substr(t, 1, 19)))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an event''s times are UTC, written YYYY-MM-DD HH:MM:SS.ffffff');
END;
-- ;;
CREATE TRIGGER pk_events_canonical_times_update BEFORE UPDATE OF occurred_at, created_at ON events
WHEN EXISTS (SELECT 1 FROM (SELECT NEW.occurred_at AS t WHERE NEW.occurred_at IS NOT OLD.occurred_at
                            UNION ALL SELECT NEW.created_at WHERE NEW.created_at IS NOT OLD.created_at)
              WHERE t IS NOT NULL
                AND NOT (typeof(t) = 'text'
                         AND (t GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                              OR t GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]')
                         AND t >= '0001-01-01' AND datetime(substr(t, 1, 19), '+0 seconds') IS substr(t, 1, 19)))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an event''s times are UTC, written YYYY-MM-DD HH:MM:SS.ffffff');
END;
-- ;;
CREATE TRIGGER pk_placements_canonical_times BEFORE INSERT ON placements
WHEN EXISTS (SELECT 1 FROM (SELECT NEW.created_at AS t)
              WHERE t IS NOT NULL
                AND NOT (typeof(t) = 'text'
                         AND (t GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                              OR t GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]')
                         AND t >= '0001-01-01' AND datetime(substr(t, 1, 19), '+0 seconds') IS substr(t, 1, 19)))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a placement''s time is UTC, written YYYY-MM-DD HH:MM:SS.ffffff');
END;
-- ;;
CREATE TRIGGER pk_author_erasures_canonical_times BEFORE INSERT ON author_erasures
WHEN EXISTS (SELECT 1 FROM (SELECT NEW.window_end AS t)
              WHERE t IS NOT NULL
                AND NOT (typeof(t) = 'text'
                         AND (t GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                              OR t GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]')
                         AND t >= '0001-01-01' AND datetime(substr(t, 1, 19), '+0 seconds') IS substr(t, 1, 19)))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an erasure''s window end is a UTC time, written YYYY-MM-DD HH:MM:SS.ffffff');
END;
-- ;;
CREATE TRIGGER pk_retention_fences_canonical_times BEFORE INSERT ON retention_fences
WHEN EXISTS (SELECT 1 FROM (SELECT NEW.cutoff AS t UNION ALL SELECT NEW.window_start UNION ALL SELECT NEW.placed_before)
              WHERE t IS NOT NULL
                AND NOT (typeof(t) = 'text'
                         AND (t GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                              OR t GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]')
                         AND t >= '0001-01-01' AND datetime(substr(t, 1, 19), '+0 seconds') IS substr(t, 1, 19)))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention fence''s times are UTC, written YYYY-MM-DD HH:MM:SS.ffffff');
END;
-- ;;
CREATE TRIGGER pk_retention_policies_canonical_times BEFORE INSERT ON retention_policies
WHEN EXISTS (SELECT 1 FROM (SELECT NEW.pending_cutoff AS t UNION ALL SELECT NEW.expired_through)
              WHERE t IS NOT NULL
                AND NOT (typeof(t) = 'text'
                         AND (t GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                              OR t GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]')
                         AND t >= '0001-01-01' AND datetime(substr(t, 1, 19), '+0 seconds') IS substr(t, 1, 19)))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s times are UTC, written YYYY-MM-DD HH:MM:SS.ffffff');
END;
-- ;;
CREATE TRIGGER pk_retention_policies_canonical_times_update BEFORE UPDATE OF pending_cutoff, expired_through ON retention_policies
WHEN EXISTS (SELECT 1 FROM (SELECT NEW.pending_cutoff AS t WHERE NEW.pending_cutoff IS NOT OLD.pending_cutoff
                            UNION ALL SELECT NEW.expired_through WHERE NEW.expired_through IS NOT OLD.expired_through)
              WHERE t IS NOT NULL
                AND NOT (typeof(t) = 'text'
                         AND (t GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]'
                              OR t GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9][0-9][0-9][0-9]')
                         AND t >= '0001-01-01' AND datetime(substr(t, 1, 19), '+0 seconds') IS substr(t, 1, 19)))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s times are UTC, written YYYY-MM-DD HH:MM:SS.ffffff');
END;
