-- purgekeeper 0020: content written before 0019 is sealed in place (commands/sealing_backfill.py),
-- and attachments name the key that seals their names (attachments.key_id, its event's key).
-- Statements are separated by lines reading "-- ;;". Every refusal raises
-- 'purgekeeper:<code>: <detail>'.
--
-- A row's key (key_id) is set once and never changes. Besides an ingest (INSERT) and a run's
-- finish (finish_run: its output and its key together), the one write that sets it is the
-- SEALING of content written before 0019: in one UPDATE, key_id goes from NULL to a value and
-- the content column from a non-NULL plain value to another value starting with 'pk1:', and
-- nothing else changes (an event without a body gets its key alone: it seals its attachments'
-- names). pk_<table>_sealing (BEFORE UPDATE OF key_id) refuses everything else that touches a
-- key (invalid_change), and the triggers that judge an ordinary change of content leave a
-- sealing to it.
-- - What a sealing may touch: live content only (content_purged: what a purge fenced is
--   NULLed by its cleanup, never written again), in a conversation that is not purged; the
--   history of a deleted channel may be sealed (what it reads stays the same).
-- - Held content is NOT sealed (legal_hold): a raw writer could otherwise replace held
--   content once, with any 'pk1:' value the trigger cannot open. The backfill skips what a
--   hold in force covers, reports it, and seals it once the hold is released.
-- - A sealing bumps no conversation version: what a reader gets is the same, so a preview
--   confirmed while older content is sealed stays valid. The trigger cannot open the sealed
--   value: a raw writer with the database's credentials can, once per row, write a
--   sealing-shaped UPDATE with other content, and no version moves (it could change the same
--   live content before, with a bump).
-- - A finished run's output only is sealed: a run still under way is sealed by its finish.
-- - An attachment's name is sealed under its event's key (its key_id must be the event's).
-- SQLite fires the triggers of one event newest first: every trigger created after one that
-- changes here is created again after it, unchanged, so the order of their refusals stays.
-- ;;
-- ;;
DROP TRIGGER pk_events_before_content_update;
-- ;;
DROP TRIGGER pk_events_held_content;
-- ;;
DROP TRIGGER pk_events_held_author;
-- ;;
DROP TRIGGER pk_events_canonical_times_update;
-- ;;
DROP TRIGGER pk_events_after_update;
-- ;;
CREATE TRIGGER pk_events_before_content_update BEFORE UPDATE ON events
WHEN NOT (NEW.body IS NULL AND NEW.author = OLD.author AND NEW.occurred_at = OLD.occurred_at AND NEW.created_at = OLD.created_at)
 AND NOT (OLD.key_id IS NULL AND NEW.key_id IS NOT NULL)  -- a sealing: pk_events_sealing judges it
BEGIN
    -- An erased event cannot leave its window, and no event moves into one (nor, by a change
    -- of author, to an author who is closed).
    SELECT RAISE(ABORT, 'purgekeeper:author_erased: the event is erased; its author and time never change')
     WHERE (NEW.author IS NOT OLD.author OR NEW.occurred_at IS NOT OLD.occurred_at)
       AND EXISTS (SELECT 1 FROM author_erasures a WHERE a.author = OLD.author AND a.window_end > OLD.occurred_at);
    SELECT RAISE(ABORT, 'purgekeeper:author_erased: the event would move into an erasure of its author')
     WHERE (NEW.author IS NOT OLD.author OR NEW.occurred_at IS NOT OLD.occurred_at)
       AND EXISTS (SELECT 1 FROM author_erasures a
                    WHERE a.author = NEW.author
                      AND (a.window_end > NEW.occurred_at OR (a.close_author AND NEW.author IS NOT OLD.author)));
    -- A retention run's window and exemptions are decided by an event's time and author.
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an event''s author and time never change while a retention policy stands or a retention run is under way')
     WHERE (NEW.author IS NOT OLD.author OR NEW.occurred_at IS NOT OLD.occurred_at)
       AND (EXISTS (SELECT 1 FROM retention_policies WHERE ended_by IS NULL) OR EXISTS (SELECT 1 FROM retention_fences));
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.id)
        OR EXISTS (SELECT 1 FROM author_erasures a WHERE a.author = OLD.author AND a.window_end > OLD.occurred_at)
        OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = OLD.id);
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the event is history of a deleted channel')
     WHERE EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                    WHERE p.event_id = OLD.id AND c.state = 'deleted');
END;
-- ;;
CREATE TRIGGER pk_events_held_content BEFORE UPDATE OF body ON events
WHEN OLD.body IS NOT NULL AND NEW.body IS NOT OLD.body
 AND EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
 AND EXISTS (SELECT 1 FROM pk_held_events WHERE event_id = OLD.id)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the event; its body stays until the hold is released');
END;
-- ;;
CREATE TRIGGER pk_events_held_author BEFORE UPDATE OF author ON events
WHEN NEW.author IS NOT OLD.author
 AND EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the event; its author stays until the hold is released')
     WHERE EXISTS (SELECT 1 FROM pk_held_events WHERE event_id = OLD.id);
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
CREATE TRIGGER pk_events_after_update AFTER UPDATE ON events
WHEN (NEW.body IS NOT OLD.body OR NEW.author IS NOT OLD.author OR NEW.occurred_at IS NOT OLD.occurred_at)
 AND NOT (OLD.key_id IS NULL AND NEW.key_id IS NOT NULL)  -- a sealing: nothing a reader gets changes
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (SELECT conversation_id FROM placements WHERE event_id = NEW.id);
END;
-- ;;
CREATE TRIGGER pk_events_sealing BEFORE UPDATE OF key_id ON events
WHEN NEW.key_id IS NOT OLD.key_id
BEGIN
    -- The sealing of an event written before 0019: its key, and its plain body sealed (or none,
    -- for an event without a body), nothing else; live (a deleted channel's history may be
    -- sealed), and no hold covers it.
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an event''s key (key_id) is set once, by sealing the plain content written before it (the content replaced by a pk1: value, nothing else changed), and never changes')
     WHERE OLD.key_id IS NOT NULL OR NEW.key_id IS NULL
        OR NEW.author IS NOT OLD.author OR NEW.occurred_at IS NOT OLD.occurred_at OR NEW.created_at IS NOT OLD.created_at
        OR NOT ((OLD.body IS NULL AND NEW.body IS NULL)
                OR (OLD.body IS NOT NULL AND NEW.body IS NOT OLD.body AND substr(NEW.body, 1, 4) IS 'pk1:'));
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE NOT EXISTS (SELECT 1 FROM pk_live_events WHERE event_id = OLD.id);
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the event; it is sealed once the hold is released')
     WHERE EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)
       AND EXISTS (SELECT 1 FROM pk_held_events WHERE event_id = OLD.id);
END;
-- ;;
DROP TRIGGER pk_runs_after_update;
-- ;;
CREATE TRIGGER pk_runs_after_update AFTER UPDATE ON runs
WHEN NOT (OLD.key_id IS NULL AND NEW.key_id IS NOT NULL AND NEW.status = OLD.status)  -- a sealing of the output
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (NEW.conversation_id);
END;
-- ;;
CREATE TRIGGER pk_runs_sealing BEFORE UPDATE OF key_id ON runs
WHEN NEW.key_id IS NOT OLD.key_id
BEGIN
    -- A run's key is set with its sealed output: when it finishes (its status moves), or when
    -- the output of a finished run written before 0019 is sealed, nothing else changed. Whether
    -- the output may be written at all is pk_runs_before_update's and pk_runs_held_content's.
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a run''s key (key_id) is set once, with its sealed output: when the run finishes, or by sealing the plain output of a finished run written before it (nothing else changed); it never changes')
     WHERE OLD.key_id IS NOT NULL OR NEW.key_id IS NULL OR substr(NEW.output, 1, 4) IS NOT 'pk1:'
        OR (NEW.status = OLD.status
            AND NOT (OLD.output IS NOT NULL AND NEW.output IS NOT OLD.output
                     AND OLD.status IN ('succeeded', 'failed', 'cancelled', 'abandoned')
                     AND NEW.finished_at IS OLD.finished_at AND NEW.created_at IS OLD.created_at));
END;
-- ;;
DROP TRIGGER pk_admissions_before_update;
-- ;;
DROP TRIGGER pk_admissions_held_content;
-- ;;
CREATE TRIGGER pk_admissions_before_update BEFORE UPDATE ON admissions
BEGIN
    -- Its payload NULLed (the purge's own cleanup), or sealed with its key set (judged by
    -- pk_admissions_sealing); nothing else.
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an admission receipt never changes')
     WHERE NOT (NEW.id = OLD.id AND NEW.event_id = OLD.event_id AND NEW.run_id = OLD.run_id
                AND ((NEW.payload IS NULL AND NEW.key_id IS OLD.key_id) OR (OLD.key_id IS NULL AND NEW.key_id IS NOT NULL)));
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
CREATE TRIGGER pk_admissions_sealing BEFORE UPDATE OF key_id ON admissions
WHEN NEW.key_id IS NOT OLD.key_id
BEGIN
    -- The sealing of a payload written before 0019, nothing else changed: of a live event, in
    -- a run whose conversation is not purged.
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an admission''s key (key_id) is set once, by sealing the plain content written before it (the content replaced by a pk1: value, nothing else changed), and never changes')
     WHERE OLD.key_id IS NOT NULL OR NEW.key_id IS NULL OR OLD.payload IS NULL OR NEW.payload IS OLD.payload
        OR substr(NEW.payload, 1, 4) IS NOT 'pk1:' OR NEW.created_at IS NOT OLD.created_at;
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE EXISTS (SELECT 1 FROM runs r JOIN conversations c ON c.id = r.conversation_id
                    WHERE r.id = OLD.run_id AND c.state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE NOT EXISTS (SELECT 1 FROM pk_live_events WHERE event_id = OLD.event_id);
END;
-- ;;
DROP TRIGGER pk_derivatives_before_content_update;
-- ;;
DROP TRIGGER pk_derivatives_held_content;
-- ;;
DROP TRIGGER pk_derivatives_after_update;
-- ;;
CREATE TRIGGER pk_derivatives_before_content_update BEFORE UPDATE ON derivatives
WHEN NOT (NEW.payload IS NULL AND NEW.kind = OLD.kind)
 AND NOT (OLD.key_id IS NULL AND NEW.key_id IS NOT NULL)  -- a sealing: pk_derivatives_sealing judges it
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = NEW.conversation_id)
        OR EXISTS (SELECT 1 FROM conversations WHERE id = NEW.conversation_id AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the channel is deleted')
     WHERE EXISTS (SELECT 1 FROM conversations WHERE id = NEW.conversation_id AND state = 'deleted');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the derivative comes from an event that is purged or no longer live; its payload stays NULL')
     WHERE NEW.payload IS NOT NULL
       AND EXISTS (SELECT 1 FROM derivative_sources s WHERE s.derivative_id = NEW.id
                      AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = s.event_id)
                           OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                                       WHERE e.id = s.event_id)
                           OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = s.event_id)));
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
CREATE TRIGGER pk_derivatives_after_update AFTER UPDATE ON derivatives
WHEN NOT (OLD.key_id IS NULL AND NEW.key_id IS NOT NULL)  -- a sealing: nothing a reader gets changes
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (NEW.conversation_id);
END;
-- ;;
CREATE TRIGGER pk_derivatives_sealing BEFORE UPDATE OF key_id ON derivatives
WHEN NEW.key_id IS NOT OLD.key_id
BEGIN
    -- The sealing of a payload written before 0019, nothing else changed, in a conversation
    -- that is not purged (a deleted channel's may be sealed), of events that are all live.
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a derivative''s key (key_id) is set once, by sealing the plain content written before it (the content replaced by a pk1: value, nothing else changed), and never changes')
     WHERE OLD.key_id IS NOT NULL OR NEW.key_id IS NULL OR OLD.payload IS NULL OR NEW.payload IS OLD.payload
        OR substr(NEW.payload, 1, 4) IS NOT 'pk1:' OR NEW.kind IS NOT OLD.kind OR NEW.created_at IS NOT OLD.created_at;
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = OLD.conversation_id)
        OR EXISTS (SELECT 1 FROM conversations WHERE id = OLD.conversation_id AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the derivative comes from an event that is purged or no longer live; its payload stays NULL')
     WHERE EXISTS (SELECT 1 FROM derivative_sources s WHERE s.derivative_id = OLD.id
                      AND NOT EXISTS (SELECT 1 FROM pk_live_events WHERE event_id = s.event_id));
END;
-- ;;
DROP TRIGGER pk_attachments_before_update;
-- ;;
DROP TRIGGER pk_attachments_held_content;
-- ;;
-- The attachments written under a sealed event (0019) take their event's key: their names are
-- sealed under it. Between the DROP and the CREATE of the trigger that refuses it.
UPDATE attachments SET key_id = (SELECT e.key_id FROM events e WHERE e.id = attachments.event_id)
 WHERE key_id IS NULL AND (name IS NULL OR substr(name, 1, 4) = 'pk1:')
   AND EXISTS (SELECT 1 FROM events e WHERE e.id = attachments.event_id AND e.key_id IS NOT NULL);
-- ;;
CREATE TRIGGER pk_attachments_before_update BEFORE UPDATE ON attachments
BEGIN
    -- Its name NULLed (the purge's own cleanup), or sealed with its key set (judged by
    -- pk_attachments_sealing); nothing else.
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an attachment never changes')
     WHERE NOT (NEW.id = OLD.id AND NEW.event_id = OLD.event_id AND NEW.blob_id = OLD.blob_id
                AND NEW.binding = OLD.binding AND NEW.position = OLD.position AND NEW.created_at = OLD.created_at
                AND ((NEW.name IS NULL AND NEW.key_id IS OLD.key_id) OR (OLD.key_id IS NULL AND NEW.key_id IS NOT NULL)));
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
CREATE TRIGGER pk_attachments_sealing BEFORE UPDATE OF key_id ON attachments
WHEN NEW.key_id IS NOT OLD.key_id
BEGIN
    -- The sealing of a name written before 0019, under its event's key, of a live event.
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an attachment''s key (key_id) is its event''s, set once, by sealing the plain name written before it (the name replaced by a pk1: value, nothing else changed); it never changes')
     WHERE OLD.key_id IS NOT NULL OR OLD.name IS NULL OR NEW.name IS OLD.name OR substr(NEW.name, 1, 4) IS NOT 'pk1:'
        OR NEW.key_id IS NOT (SELECT key_id FROM events WHERE id = OLD.event_id);
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE NOT EXISTS (SELECT 1 FROM pk_live_events WHERE event_id = OLD.event_id);
END;
