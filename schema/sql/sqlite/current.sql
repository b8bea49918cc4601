-- purgekeeper: every trigger and view the SQLite migrations install, as they stand at the
-- newest revision (0020). Reviewed source, not a migration: the migrations (schema/sql/sqlite/
-- NNNN_*.sql) install it, this file says in one place what they have installed.
-- tests/integration/test_current_sql.py fails when the two disagree; schema/rules.py names
-- the rule each trigger enforces. Statements are separated by lines reading "-- ;;".
-- Every refusal raises 'purgekeeper:<code>: <detail>'; schema/errors.py maps the codes.
-- SQLite serialises writers (BEGIN IMMEDIATE), so a check inside the writing transaction cannot
-- be overtaken by a purge. Within a table the triggers are in the order the migrations created
-- them (SQLite fires the triggers of one event in an order fixed by their creation).
-- The views first, then one group per table.
-- ;;
-- ================================================================================================
-- views
-- What the triggers ask per row, said once: a live placement (conversation not purged, no
-- retention fence expiring it), the subjects of the holds in force, the live events, and the
-- live events a hold covers.
-- ================================================================================================
CREATE VIEW pk_live_placements AS
SELECT p.event_id, p.conversation_id
  FROM placements p JOIN conversations c ON c.id = p.conversation_id JOIN events e ON e.id = p.event_id
 WHERE c.state <> 'purged'
   AND NOT EXISTS (SELECT 1 FROM retention_fences f
                    WHERE f.cutoff > e.occurred_at AND f.placed_before > p.created_at
                      AND (f.conversation_id IS NULL OR f.conversation_id = p.conversation_id)
                      AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = f.purge_id
                                       AND x.kind = 'conversation' AND x.subject_id = p.conversation_id)
                      AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = f.purge_id
                                       AND x.kind = 'author' AND x.subject_id = e.author));
-- ;;
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
-- ================================================================================================
-- conversations
-- A conversation is created active, under an id no tombstone has reserved, and a bot that
-- is not deleted. Its id and kind never change; its state only moves forward (a channel to deleted,
-- any conversation to purged), and only with its tombstone; its version never falls.
-- SQLite: an update that leaves the version as it was bumps it (pk_conversations_bump_version).
-- ================================================================================================
CREATE TRIGGER pk_conversations_before_insert BEFORE INSERT ON conversations
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:id_reserved: the conversation id is reserved')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE id = NEW.id AND kind IN ('conversation', 'channel'));
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a conversation is created active') WHERE NEW.state <> 'active';
    SELECT RAISE(ABORT, 'purgekeeper:bot_deleted: the bot is deleted')
     WHERE NEW.bot_id IS NOT NULL AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'bot' AND id = NEW.bot_id)
        OR EXISTS (SELECT 1 FROM bots WHERE id = NEW.bot_id AND state = 'deleted'));
END;
-- ;;
CREATE TRIGGER pk_conversations_before_update BEFORE UPDATE ON conversations
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE OLD.state = 'purged';
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a conversation id and kind never change') WHERE NEW.id <> OLD.id OR NEW.kind <> OLD.kind;
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the channel is deleted')
     WHERE OLD.state = 'deleted' AND NEW.state <> 'purged';
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a conversation is purged only by its tombstone') WHERE NEW.state = 'purged' AND OLD.state <> 'purged' AND NOT EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = NEW.id);
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: only a channel is deleted') WHERE NEW.state = 'deleted' AND OLD.state <> 'deleted' AND NEW.kind <> 'channel';
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a channel is deleted only by its tombstone') WHERE NEW.state = 'deleted' AND OLD.state <> 'deleted' AND NOT EXISTS (SELECT 1 FROM tombstones WHERE kind = 'channel' AND id = NEW.id);
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a conversation never becomes active again') WHERE NEW.state = 'active' AND OLD.state <> 'active';
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a conversation version never falls') WHERE NEW.version < OLD.version;
END;
-- ;;
CREATE TRIGGER pk_conversations_bump_version AFTER UPDATE ON conversations
WHEN NEW.version = OLD.version
BEGIN
    UPDATE conversations SET version = OLD.version + 1 WHERE id = NEW.id;
END;
-- ;;
-- ================================================================================================
-- events
-- An event's id and provider event id never change, and a tombstoned one is never used again;
-- nothing by an erased or closed author is written; the content of an event that is not live is
-- never written again; an erased event's author and time never change; the row is never deleted;
-- held content is not overwritten; a change of content bumps its conversations' versions.
-- SQLite: times are written as the library writes them (canonical times), and REPLACE (which
-- deletes the row it conflicts with without its DELETE triggers) cannot write over a held event.
-- Its key is set once (0020): at insert, or by the sealing of its plain body (or, without a body, for
-- its attachments' names), nothing else changed, on a live event no hold covers; a sealing bumps nothing.
-- ================================================================================================
CREATE TRIGGER pk_events_before_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an event id and provider_event_id never change') WHERE NEW.id <> OLD.id OR NEW.provider_event_id IS NOT OLD.provider_event_id;
END;
-- ;;
CREATE TRIGGER pk_events_never_deleted BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: events rows are never deleted (purge the event instead: its id and provider event id stay taken)');
END;
-- ;;
CREATE TRIGGER pk_events_before_insert BEFORE INSERT ON events
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the provider event is purged')
     WHERE NEW.provider_event_id IS NOT NULL
       AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'provider_event' AND id = NEW.provider_event_id)
            OR EXISTS (SELECT 1 FROM events e JOIN tombstones t ON t.kind = 'event' AND t.id = e.id
                        WHERE e.provider_event_id = NEW.provider_event_id));
    SELECT RAISE(ABORT, 'purgekeeper:id_reserved: the event id is reserved')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.id);
    -- A provider's backfill cannot bring an erased message back, nor a closed author write.
    SELECT RAISE(ABORT, 'purgekeeper:author_erased: content by this author is erased')
     WHERE EXISTS (SELECT 1 FROM author_erasures a
                    WHERE a.author = NEW.author AND (a.close_author OR a.window_end > NEW.occurred_at));
END;
-- ;;
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
-- ================================================================================================
-- placements
-- An event is placed only while it is live, in a conversation neither purged nor deleted, and
-- never where a retention fence or an in-force policy expires it (unless held); a placement never
-- changes; deleting one never leaves a live event without a live placement, nor removes a held
-- one; placing and removing bump the conversation's version.
-- SQLite: created_at is a canonical time.
-- ================================================================================================
CREATE TRIGGER pk_placements_before_update BEFORE UPDATE ON placements
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a placement never changes; delete and place again') WHERE 1;
END;
-- ;;
CREATE TRIGGER pk_placements_after_insert AFTER INSERT ON placements
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (NEW.conversation_id);
END;
-- ;;
CREATE TRIGGER pk_placements_after_delete AFTER DELETE ON placements
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (OLD.conversation_id);
END;
-- ;;
CREATE TRIGGER pk_placements_before_insert BEFORE INSERT ON placements
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = NEW.conversation_id)
        OR EXISTS (SELECT 1 FROM conversations WHERE id = NEW.conversation_id AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the channel is deleted')
     WHERE EXISTS (SELECT 1 FROM conversations WHERE id = NEW.conversation_id AND state = 'deleted');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.event_id)
        OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                    WHERE e.id = NEW.event_id)
        OR (EXISTS (SELECT 1 FROM placements WHERE event_id = NEW.event_id)
            AND NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = NEW.event_id)));
    -- Unless a hold covers it, never past the cutoff (now - max_age) of the conversation's own
    -- standing policy, else the global one: a backfill cannot bring expired content back.
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event occurred before the cutoff of the retention policy that governs this conversation; a backfill cannot bring expired content back')
     WHERE EXISTS (
        SELECT 1 FROM events e JOIN retention_policies rp
            ON rp.policy_id = (SELECT g.policy_id FROM retention_policies g
                                WHERE g.ended_by IS NULL AND (g.conversation_id = NEW.conversation_id OR g.conversation_id IS NULL)
                                ORDER BY g.conversation_id IS NULL LIMIT 1)
         WHERE e.id = NEW.event_id
           AND e.occurred_at < strftime('%Y-%m-%d %H:%M:%f000', 'now', '-' || rp.max_age_seconds || ' seconds')
           AND NOT EXISTS (SELECT 1 FROM legal_hold_subjects s JOIN legal_holds h ON h.hold_id = s.hold_id
                            WHERE h.released_by IS NULL
                              AND ((s.kind = 'conversation' AND s.subject_id = NEW.conversation_id)
                                   OR (s.kind = 'author' AND s.subject_id = e.author))));
END;
-- ;;
CREATE TRIGGER pk_placements_before_delete BEFORE DELETE ON placements
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
 AND NOT EXISTS (SELECT 1 FROM pk_live_placements
                  WHERE event_id = OLD.event_id AND conversation_id <> OLD.conversation_id)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event was placed in a purged conversation; only the purge''s cleanup removes that placement')
     WHERE EXISTS (SELECT 1 FROM conversations WHERE id = OLD.conversation_id AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: the event keeps its last live placement; place it elsewhere first, or purge it');
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
-- ================================================================================================
-- runs
-- A run starts only in a live conversation with a bot that is not deleted; its id, conversation
-- and bot never change and a terminal status is final; its output stays NULL once its conversation
-- is purged or an event it admitted is not live; held output is kept; changes bump the version.
-- Its key is set once (0020): with its sealed output at its finish, or by the sealing of a finished
-- run's plain output, nothing else changed (no hold, admitted events live); a sealing bumps nothing.
-- ================================================================================================
CREATE TRIGGER pk_runs_before_insert BEFORE INSERT ON runs
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = NEW.conversation_id)
        OR EXISTS (SELECT 1 FROM conversations WHERE id = NEW.conversation_id AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the channel is deleted')
     WHERE EXISTS (SELECT 1 FROM conversations WHERE id = NEW.conversation_id AND state = 'deleted');
    SELECT RAISE(ABORT, 'purgekeeper:bot_deleted: the bot is deleted')
     WHERE NEW.bot_id IS NOT NULL AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'bot' AND id = NEW.bot_id)
        OR EXISTS (SELECT 1 FROM bots WHERE id = NEW.bot_id AND state = 'deleted'));
END;
-- ;;
CREATE TRIGGER pk_runs_after_insert AFTER INSERT ON runs
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (NEW.conversation_id);
END;
-- ;;
CREATE TRIGGER pk_runs_before_update BEFORE UPDATE ON runs
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a run id, conversation and bot never change') WHERE NEW.id <> OLD.id OR NEW.conversation_id <> OLD.conversation_id OR NEW.bot_id <> OLD.bot_id;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: the run is already terminal') WHERE OLD.status IN ('succeeded', 'failed', 'cancelled', 'abandoned') AND NEW.status <> OLD.status;
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE NOT (NEW.output IS NULL AND (NEW.status = OLD.status OR NEW.status = 'abandoned'))
       AND EXISTS (SELECT 1 FROM conversations WHERE id = OLD.conversation_id AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the run admitted an event that is purged or no longer live; its output stays NULL')
     WHERE NEW.output IS NOT NULL
       AND EXISTS (SELECT 1 FROM admissions ad WHERE ad.run_id = NEW.id
                      AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = ad.event_id)
                           OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                                       WHERE e.id = ad.event_id)
                           OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = ad.event_id)));
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
-- ================================================================================================
-- admissions
-- An admission is written only for a live event, in a run of a live conversation; it never
-- changes but for its payload being NULLed; it is not deleted while its event's purge stands, nor
-- while held.
-- Its key is set once (0020): at insert, or by the sealing of its plain payload, nothing else
-- changed, of a live event in a conversation not purged, no hold covering it.
-- ================================================================================================
CREATE TRIGGER pk_admissions_after_insert AFTER INSERT ON admissions
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (SELECT conversation_id FROM runs WHERE id = NEW.run_id);
END;
-- ;;
CREATE TRIGGER pk_admissions_before_insert BEFORE INSERT ON admissions
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = (SELECT conversation_id FROM runs WHERE id = NEW.run_id))
        OR EXISTS (SELECT 1 FROM conversations WHERE id = (SELECT conversation_id FROM runs WHERE id = NEW.run_id) AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the channel is deleted')
     WHERE EXISTS (SELECT 1 FROM conversations WHERE id = (SELECT conversation_id FROM runs WHERE id = NEW.run_id) AND state = 'deleted');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.event_id)
        OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                    WHERE e.id = NEW.event_id)
        OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = NEW.event_id);
    SELECT RAISE(ABORT, 'purgekeeper:bot_deleted: the bot is deleted')
     WHERE (SELECT bot_id FROM runs WHERE id = NEW.run_id) IS NOT NULL AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'bot' AND id = (SELECT bot_id FROM runs WHERE id = NEW.run_id))
        OR EXISTS (SELECT 1 FROM bots WHERE id = (SELECT bot_id FROM runs WHERE id = NEW.run_id) AND state = 'deleted'));
END;
-- ;;
CREATE TRIGGER pk_admissions_before_delete BEFORE DELETE ON admissions
WHEN NOT EXISTS (SELECT 1 FROM runs r JOIN conversations c ON c.id = r.conversation_id
                  WHERE r.id = OLD.run_id AND c.state = 'purged')
 AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
      OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                  WHERE e.id = OLD.event_id)
      OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = OLD.event_id))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the admission stays: its event is purged or no longer live');
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
-- ================================================================================================
-- derivatives
-- A derivative is written only in a live conversation; its id and conversation never change; its
-- payload stays NULL while an event it comes from is not live; held payloads and rows are kept;
-- changes bump the version.
-- Its key is set once (0020): at insert, or by the sealing of its plain payload, nothing else changed,
-- in a conversation not purged, its events live, no hold covering it; a sealing bumps nothing.
-- ================================================================================================
CREATE TRIGGER pk_derivatives_before_insert BEFORE INSERT ON derivatives
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = NEW.conversation_id)
        OR EXISTS (SELECT 1 FROM conversations WHERE id = NEW.conversation_id AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the channel is deleted')
     WHERE EXISTS (SELECT 1 FROM conversations WHERE id = NEW.conversation_id AND state = 'deleted');
END;
-- ;;
CREATE TRIGGER pk_derivatives_before_update BEFORE UPDATE ON derivatives
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a derivative id and conversation never change') WHERE NEW.id <> OLD.id OR NEW.conversation_id <> OLD.conversation_id;
END;
-- ;;
CREATE TRIGGER pk_derivatives_after_insert AFTER INSERT ON derivatives
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (NEW.conversation_id);
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
-- ================================================================================================
-- derivative_sources
-- A derivative's source is a live event; a source never changes, and is not deleted while its
-- event's purge stands, nor while held.
-- ================================================================================================
CREATE TRIGGER pk_derivative_sources_before_update BEFORE UPDATE ON derivative_sources
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a derivative source never changes') WHERE 1;
END;
-- ;;
CREATE TRIGGER pk_derivative_sources_before_insert BEFORE INSERT ON derivative_sources
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = (SELECT conversation_id FROM derivatives WHERE id = NEW.derivative_id))
        OR EXISTS (SELECT 1 FROM conversations WHERE id = (SELECT conversation_id FROM derivatives WHERE id = NEW.derivative_id) AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the channel is deleted')
     WHERE EXISTS (SELECT 1 FROM conversations WHERE id = (SELECT conversation_id FROM derivatives WHERE id = NEW.derivative_id) AND state = 'deleted');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.event_id)
        OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                    WHERE e.id = NEW.event_id)
        OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = NEW.event_id);
END;
-- ;;
CREATE TRIGGER pk_derivative_sources_before_delete BEFORE DELETE ON derivative_sources
WHEN NOT EXISTS (SELECT 1 FROM derivatives d JOIN conversations c ON c.id = d.conversation_id
                  WHERE d.id = OLD.derivative_id AND c.state = 'purged')
 AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
      OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                  WHERE e.id = OLD.event_id)
      OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = OLD.event_id))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the derivative source stays: its event is purged or no longer live');
END;
-- ;;
CREATE TRIGGER pk_derivative_sources_held_delete BEFORE DELETE ON derivative_sources
WHEN EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
 AND EXISTS (SELECT 1 FROM pk_held_events WHERE event_id = OLD.event_id)
 AND EXISTS (SELECT 1 FROM derivatives d JOIN conversations c ON c.id = d.conversation_id
              WHERE d.id = OLD.derivative_id AND d.payload IS NOT NULL AND c.state <> 'purged')
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the event the derivative came from; the source stays until the hold is released');
END;
-- ;;
-- ================================================================================================
-- attachments
-- An attachment binds a live event to a present blob, and a blob that holds purged content is
-- bound to nothing new; only its name changes (the bodies step NULLs it); the row stays until the
-- purge's cleanup has deleted the bytes; a held attachment keeps its name and row.
-- Its key is its event's, set once (0020): at insert, or by the sealing of its plain name under the
-- event's key, nothing else changed, of a live event no hold covers.
-- ================================================================================================
CREATE TRIGGER pk_attachments_after_insert AFTER INSERT ON attachments
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (SELECT conversation_id FROM placements WHERE event_id = NEW.event_id);
END;
-- ;;
CREATE TRIGGER pk_attachments_before_insert BEFORE INSERT ON attachments
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.event_id)
        OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                    WHERE e.id = NEW.event_id)
        OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = NEW.event_id);
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the event is history of a deleted channel')
     WHERE EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                    WHERE p.event_id = NEW.event_id AND c.state = 'deleted');
    SELECT RAISE(ABORT, 'purgekeeper:blob_not_present: the blob is being deleted or is deleted')
     WHERE EXISTS (SELECT 1 FROM blobs WHERE id = NEW.blob_id AND state <> 'present');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the blob holds purged content; it is bound to nothing new')
     WHERE EXISTS (SELECT 1 FROM attachments WHERE blob_id = NEW.blob_id)
       AND NOT EXISTS (SELECT 1 FROM attachments b WHERE b.blob_id = NEW.blob_id
                          AND NOT EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = b.event_id)
                          AND NOT EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                                           WHERE e.id = b.event_id)
                          AND EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = b.event_id));
END;
-- ;;
CREATE TRIGGER pk_attachments_before_delete BEFORE DELETE ON attachments
WHEN EXISTS (SELECT 1 FROM blobs WHERE id = OLD.blob_id AND state <> 'deleted')
 AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
      OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                  WHERE e.id = OLD.event_id)
      OR NOT EXISTS (SELECT 1 FROM pk_live_placements WHERE event_id = OLD.event_id))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the attachment stays until the purge''s cleanup has deleted its bytes');
END;
-- ;;
CREATE TRIGGER pk_attachments_held_delete BEFORE DELETE ON attachments
WHEN EXISTS (SELECT 1 FROM legal_holds WHERE released_by IS NULL)  -- one probe while no hold is in force
 AND EXISTS (SELECT 1 FROM pk_held_events WHERE event_id = OLD.event_id)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:legal_hold: a legal hold covers the attachment''s event; the attachment stays until the hold is released');
END;
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
-- ;;
-- ================================================================================================
-- blobs
-- A new blob's path is a canonical one for its kind and id (one level of shards, or the two of
-- 0006 to 0020); afterwards only its state changes, forward (present, deleting, deleted), and a
-- deleted blob's path may become a canonical one.
-- ================================================================================================
CREATE TRIGGER pk_blobs_before_insert BEFORE INSERT ON blobs
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob id is 4 to 64 characters of A-Z a-z 0-9 _ -')
     WHERE length(NEW.id) NOT BETWEEN 4 AND 64 OR NEW.id GLOB '*[^0-9A-Za-z_-]*';
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob needs the lowercase hex SHA-256 of its bytes')
     WHERE length(NEW.sha256) <> 64 OR NEW.sha256 GLOB '*[^0-9a-f]*';
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob must live at its canonical path')
     WHERE NEW.path IS NULL OR NEW.path NOT IN (
        CASE NEW.kind
            WHEN 'cas' THEN substr(NEW.sha256, 1, 2) || '/' || NEW.sha256 || '-' || NEW.id
            ELSE substr(NEW.id, 1, 2) || '/' || NEW.id END,
        CASE NEW.kind
            WHEN 'cas' THEN substr(NEW.sha256, 1, 2) || '/' || substr(NEW.sha256, 3, 2) || '/' || NEW.sha256 || '-' || NEW.id
            ELSE substr(NEW.id, 1, 2) || '/' || substr(NEW.id, 3, 2) || '/' || NEW.id END);
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob is created present') WHERE NEW.state <> 'present';
END;
-- ;;
CREATE TRIGGER pk_blobs_before_update BEFORE UPDATE ON blobs
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob only changes state') WHERE NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.sha256 <> OLD.sha256 OR NEW.size <> OLD.size;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob path changes only to its canonical one, once its bytes are deleted')
     WHERE NEW.path <> OLD.path AND NOT (NEW.state = 'deleted' AND NEW.path IN (
        CASE NEW.kind
            WHEN 'cas' THEN substr(NEW.sha256, 1, 2) || '/' || NEW.sha256 || '-' || NEW.id
            ELSE substr(NEW.id, 1, 2) || '/' || NEW.id END,
        CASE NEW.kind
            WHEN 'cas' THEN substr(NEW.sha256, 1, 2) || '/' || substr(NEW.sha256, 3, 2) || '/' || NEW.sha256 || '-' || NEW.id
            ELSE substr(NEW.id, 1, 2) || '/' || substr(NEW.id, 3, 2) || '/' || NEW.id END));
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob state only moves forward') WHERE NEW.state <> OLD.state AND NOT ((OLD.state = 'present' AND NEW.state = 'deleting') OR (OLD.state = 'deleting' AND NEW.state = 'deleted'));
END;
-- ;;
-- ================================================================================================
-- bots
-- A bot is created active under an id no tombstone reserves; it is deleted only by its tombstone,
-- and a deleted bot never changes again.
-- ================================================================================================
CREATE TRIGGER pk_bots_before_insert BEFORE INSERT ON bots
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:id_reserved: the bot id is reserved')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'bot' AND id = NEW.id);
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a bot is created active') WHERE NEW.state <> 'active';
END;
-- ;;
CREATE TRIGGER pk_bots_before_update BEFORE UPDATE ON bots
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:bot_deleted: the bot is deleted') WHERE OLD.state = 'deleted';
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a bot id never changes') WHERE NEW.id <> OLD.id;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a bot is deleted only by its tombstone') WHERE NEW.state = 'deleted' AND NOT EXISTS (SELECT 1 FROM tombstones WHERE kind = 'bot' AND id = NEW.id);
END;
-- ;;
-- ================================================================================================
-- tombstones
-- Tombstones are permanent. An identity tombstone takes its id for ever (reserving it) and moves
-- the state of the conversation, channel or bot it names.
-- ================================================================================================
CREATE TRIGGER pk_tombstones_no_update BEFORE UPDATE ON tombstones
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: tombstones are never changed or removed');
END;
-- ;;
CREATE TRIGGER pk_tombstones_no_delete BEFORE DELETE ON tombstones
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: tombstones are never changed or removed');
END;
-- ;;
CREATE TRIGGER pk_tombstones_after_insert AFTER INSERT ON tombstones
WHEN NEW.kind IN ('conversation', 'channel', 'bot')
BEGIN
    -- The tombstone is the source of truth; the state columns and the reservation follow it.
    INSERT INTO identity_reservations (namespace, id)
    SELECT CASE WHEN NEW.kind = 'bot' THEN 'bot' ELSE 'conversation' END, NEW.id
     WHERE NOT EXISTS (SELECT 1 FROM identity_reservations
                        WHERE namespace = CASE WHEN NEW.kind = 'bot' THEN 'bot' ELSE 'conversation' END AND id = NEW.id);
    UPDATE conversations SET state = 'purged', version = version + 1
     WHERE NEW.kind = 'conversation' AND id = NEW.id AND state <> 'purged';
    UPDATE conversations SET state = 'deleted', version = version + 1
     WHERE NEW.kind = 'channel' AND id = NEW.id AND state = 'active';
    UPDATE bots SET state = 'deleted', deleted_at = strftime('%Y-%m-%d %H:%M:%f000', 'now')
     WHERE NEW.kind = 'bot' AND id = NEW.id AND state = 'active';
END;
-- ;;
-- ================================================================================================
-- identity_reservations
-- A reserved conversation or bot id stays reserved: the rows never change or go.
-- ================================================================================================
CREATE TRIGGER pk_identity_reservations_no_update BEFORE UPDATE ON identity_reservations
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: reservations are never changed or removed');
END;
-- ;;
CREATE TRIGGER pk_identity_reservations_no_delete BEFORE DELETE ON identity_reservations
WHEN EXISTS (SELECT 1 FROM tombstones WHERE id = OLD.id
              AND ((OLD.namespace = 'bot' AND kind = 'bot')
                   OR (OLD.namespace = 'conversation' AND kind IN ('conversation', 'channel'))))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: reservations are never changed or removed');
END;
-- ;;
-- ================================================================================================
-- cleanup_steps
-- A purge's cleanup steps are never deleted. What the done ones count is kept in metric_counters (0015).
-- ================================================================================================
CREATE TRIGGER pk_cleanup_steps_never_deleted BEFORE DELETE ON cleanup_steps
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: cleanup_steps rows are never deleted (a purge without its steps would read as complete)');
END;
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
-- ================================================================================================
-- purge_ledger
-- The purge ledger is append-only: a row is never changed, deleted or written over, each row
-- extends the chain at ledger_head, and the head moves to the last row appended.
-- SQLite: REPLACE would delete a row without its DELETE trigger; an INSERT that conflicts is refused.
-- ================================================================================================
CREATE TRIGGER pk_purge_ledger_no_update BEFORE UPDATE ON purge_ledger
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:ledger_append_only: the purge ledger is append-only');
END;
-- ;;
CREATE TRIGGER pk_purge_ledger_no_delete BEFORE DELETE ON purge_ledger
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:ledger_append_only: the purge ledger is append-only');
END;
-- ;;
CREATE TRIGGER pk_purge_ledger_chain BEFORE INSERT ON purge_ledger
BEGIN
    -- The chain is enforced here too: a row must extend the head, which then moves to it.
    SELECT RAISE(ABORT, 'purgekeeper:ledger_append_only: the row does not extend the ledger head')
     WHERE NOT EXISTS (SELECT 1 FROM ledger_head WHERE id = 1 AND seq + 1 = NEW.seq AND head_hash = NEW.prev_hash);
END;
-- ;;
CREATE TRIGGER pk_purge_ledger_moves_head AFTER INSERT ON purge_ledger
BEGIN
    UPDATE ledger_head SET seq = NEW.seq, head_hash = NEW.row_hash WHERE id = 1;
END;
-- ;;
CREATE TRIGGER pk_purge_ledger_no_replace BEFORE INSERT ON purge_ledger
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:ledger_append_only: a ledger row is never written over')
     WHERE EXISTS (SELECT 1 FROM purge_ledger WHERE purge_id = NEW.purge_id OR seq = NEW.seq);
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
-- ;;
-- ================================================================================================
-- author_erasures
-- An author erasure is permanent, and each one raises its author's erasure mark.
-- SQLite: window_end is a canonical time.
-- ================================================================================================
CREATE TRIGGER pk_author_erasures_no_update BEFORE UPDATE ON author_erasures
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: author erasures are never changed or removed');
END;
-- ;;
CREATE TRIGGER pk_author_erasures_no_delete BEFORE DELETE ON author_erasures
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: author erasures are never changed or removed');
END;
-- ;;
CREATE TRIGGER pk_author_erasures_mark AFTER INSERT ON author_erasures
BEGIN
    INSERT INTO author_erasure_marks (author, erasures) VALUES (NEW.author, 1)
        ON CONFLICT (author) DO UPDATE SET erasures = erasures + 1;
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
-- ================================================================================================
-- author_erasure_marks
-- An author's erasure mark only counts up and is never removed.
-- ================================================================================================
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
-- ================================================================================================
-- retention_policies
-- A retention policy is never deleted; its definition (scope, max age) and its end are written
-- only with the ledger row that records them; its window moves only forward and never past now.
-- SQLite: pending_cutoff and expired_through are canonical times.
-- ================================================================================================
CREATE TRIGGER pk_retention_policies_no_delete BEFORE DELETE ON retention_policies
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: a retention policy is never deleted; remove it with retention_end');
END;
-- ;;
CREATE TRIGGER pk_retention_policies_before_insert BEFORE INSERT ON retention_policies
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a new retention policy stands, with nothing run or planned')
     WHERE NEW.ended_by IS NOT NULL OR NEW.pending_cutoff IS NOT NULL OR NEW.expired_through IS NOT NULL;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s scope and max age are written only with the ledger row of that version (a retention row of this policy with this definition)')
     WHERE NOT EXISTS (SELECT 1 FROM purge_ledger l
                        WHERE l.purge_id = NEW.purge_id AND l.kind = 'retention'
                          AND json_extract(l.selectors, '$.policy_id') IS NEW.policy_id
                          AND json_extract(l.selectors, '$.conversation_id') IS NEW.conversation_id
                          AND json_extract(l.selectors, '$.max_age_seconds') IS NEW.max_age_seconds);
    -- A row already there (an upsert's conflict, or REPLACE, which deletes it without its
    -- DELETE triggers) is replaced only by a newer version.
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy is replaced only by a newer version')
     WHERE EXISTS (SELECT 1 FROM retention_policies o
                    WHERE o.policy_id = NEW.policy_id
                      AND COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = NEW.purge_id), 0)
                          <= max(COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = o.purge_id), 0),
                                 COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = o.ended_by), 0)));
END;
-- ;;
CREATE TRIGGER pk_retention_policies_before_update BEFORE UPDATE ON retention_policies
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s id never changes')
     WHERE NEW.policy_id IS NOT OLD.policy_id;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s scope and max age are written only with the ledger row of a newer version (a retention row of this policy with this definition)')
     WHERE (NEW.purge_id IS NOT OLD.purge_id OR NEW.conversation_id IS NOT OLD.conversation_id
            OR NEW.max_age_seconds IS NOT OLD.max_age_seconds)
       AND NOT EXISTS (SELECT 1 FROM purge_ledger l
                        WHERE l.purge_id = NEW.purge_id AND l.kind = 'retention'
                          AND json_extract(l.selectors, '$.policy_id') IS NEW.policy_id
                          AND json_extract(l.selectors, '$.conversation_id') IS NEW.conversation_id
                          AND json_extract(l.selectors, '$.max_age_seconds') IS NEW.max_age_seconds
                          AND l.seq > max(COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = OLD.purge_id), 0),
                                          COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = OLD.ended_by), 0)));
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy ended once')
     WHERE NEW.ended_by IS NOT OLD.ended_by AND NEW.ended_by IS NOT NULL AND OLD.ended_by IS NOT NULL;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy ends only with the ledger row that ends this version')
     WHERE NEW.ended_by IS NOT OLD.ended_by AND NEW.ended_by IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM purge_ledger l
                        WHERE l.purge_id = NEW.ended_by AND l.kind = 'retention_end'
                          AND json_extract(l.selectors, '$.policy_id') IS NEW.policy_id
                          AND json_extract(l.selectors, '$.ended') IS NEW.purge_id
                          AND l.seq > COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = NEW.purge_id), 0));
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an ended retention policy stands again only with a new version')
     WHERE OLD.ended_by IS NOT NULL AND NEW.ended_by IS NULL AND NEW.purge_id IS OLD.purge_id;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s planned cutoff is never later than now - max_age')
     WHERE NEW.pending_cutoff IS NOT OLD.pending_cutoff
       AND NEW.pending_cutoff > strftime('%Y-%m-%d %H:%M:%f999', 'now', '-' || NEW.max_age_seconds || ' seconds');
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s window never reaches past now - max_age')
     WHERE NEW.expired_through IS NOT NULL AND (OLD.expired_through IS NULL OR NEW.expired_through > OLD.expired_through)
       AND NEW.expired_through > strftime('%Y-%m-%d %H:%M:%f999', 'now', '-' || NEW.max_age_seconds || ' seconds');
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a retention policy''s window moves on only with a run of this version (last_purge_id) or over what holds nothing to expire')
     WHERE NEW.expired_through IS NOT NULL AND (OLD.expired_through IS NULL OR NEW.expired_through > OLD.expired_through)
       AND NOT EXISTS (
           SELECT 1 FROM purge_ledger l
            WHERE l.purge_id = NEW.last_purge_id AND l.kind = 'retention_run'
              AND json_extract(l.selectors, '$.policy_id') IS NEW.policy_id
              AND json_extract(l.selectors, '$.policy_purge_id') IS NEW.purge_id
              AND replace(replace(json_extract(l.selectors, '$.cutoff'), 'T', ' '), 'Z', '') IS NEW.expired_through
              AND l.seq > max(COALESCE((SELECT max(seq) FROM purge_ledger WHERE kind = 'hold_release'), 0),
                              COALESCE((SELECT max(seq) FROM purge_ledger WHERE kind = 'retention_end'), 0),
                              COALESCE((SELECT max(seq) FROM purge_ledger WHERE kind = 'retention'), 0))
              AND (json_extract(l.selectors, '$.window_start') IS NULL
                   OR OLD.expired_through >= replace(replace(json_extract(l.selectors, '$.window_start'), 'T', ' '), 'Z', '')))
       AND EXISTS (
           SELECT 1 FROM placements p JOIN events e ON e.id = p.event_id
                                      JOIN conversations c ON c.id = p.conversation_id
            WHERE e.occurred_at < NEW.expired_through
              AND (OLD.expired_through IS NULL OR e.occurred_at >= OLD.expired_through)
              AND c.state <> 'purged'
              AND (NEW.conversation_id IS NULL OR p.conversation_id = NEW.conversation_id)
              AND (NEW.conversation_id IS NOT NULL
                   OR NOT EXISTS (SELECT 1 FROM retention_policies o
                                   WHERE o.conversation_id = p.conversation_id AND o.ended_by IS NULL))
              AND NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.kind = 'event' AND t.id = e.id)
              AND NOT EXISTS (SELECT 1 FROM author_erasures a WHERE a.author = e.author AND a.window_end > e.occurred_at)
              AND NOT EXISTS (SELECT 1 FROM legal_hold_subjects s JOIN legal_holds h ON h.hold_id = s.hold_id
                               WHERE h.released_by IS NULL
                                 AND ((s.kind = 'conversation' AND s.subject_id = p.conversation_id)
                                      OR (s.kind = 'author' AND s.subject_id = e.author))));
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
-- ;;
-- ================================================================================================
-- retention_fences
-- A retention fence never changes, and is deleted only once nothing it expires is left.
-- SQLite: cutoff, window_start and placed_before are canonical times.
-- ================================================================================================
CREATE TRIGGER pk_retention_fences_no_update BEFORE UPDATE ON retention_fences
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: a retention fence never changes');
END;
-- ;;
CREATE TRIGGER pk_retention_fences_before_delete BEFORE DELETE ON retention_fences
WHEN (OLD.conversation_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM placements p JOIN events e ON e.id = p.event_id JOIN conversations c ON c.id = p.conversation_id
         WHERE p.conversation_id = OLD.conversation_id AND c.state <> 'purged' AND p.created_at < OLD.placed_before
           AND e.occurred_at < OLD.cutoff AND (OLD.window_start IS NULL OR e.occurred_at >= OLD.window_start)
           AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = OLD.purge_id
                            AND x.kind = 'conversation' AND x.subject_id = p.conversation_id)
           AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = OLD.purge_id
                            AND x.kind = 'author' AND x.subject_id = e.author)))
  OR (OLD.conversation_id IS NULL AND EXISTS (
        SELECT 1 FROM events e JOIN placements p ON p.event_id = e.id JOIN conversations c ON c.id = p.conversation_id
         WHERE e.occurred_at < OLD.cutoff AND (OLD.window_start IS NULL OR e.occurred_at >= OLD.window_start)
           AND c.state <> 'purged' AND p.created_at < OLD.placed_before
           AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = OLD.purge_id
                            AND x.kind = 'conversation' AND x.subject_id = p.conversation_id)
           AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = OLD.purge_id
                            AND x.kind = 'author' AND x.subject_id = e.author)))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the retention run still expires content; only its cleanup removes its fence');
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
-- ================================================================================================
-- retention_exemptions
-- The exemptions of a retention run are fixed while its fence stands.
-- ================================================================================================
CREATE TRIGGER pk_retention_exemptions_no_update BEFORE UPDATE ON retention_exemptions
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: a retention exemption never changes');
END;
-- ;;
CREATE TRIGGER pk_retention_exemptions_before_insert BEFORE INSERT ON retention_exemptions
WHEN EXISTS (SELECT 1 FROM retention_fences WHERE purge_id = NEW.purge_id)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: the exemptions of a retention run are fixed while its fence stands');
END;
-- ;;
CREATE TRIGGER pk_retention_exemptions_before_delete BEFORE DELETE ON retention_exemptions
WHEN EXISTS (SELECT 1 FROM retention_fences WHERE purge_id = OLD.purge_id)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: the exemptions of a retention run are fixed while its fence stands');
END;
-- ;;
-- ================================================================================================
-- legal_holds
-- A legal hold is written only with its ledger row, changes only by its release (once, with its
-- own ledger row), and is never deleted.
-- ================================================================================================
CREATE TRIGGER pk_legal_holds_no_delete BEFORE DELETE ON legal_holds
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: a legal hold is never deleted; release it');
END;
-- ;;
CREATE TRIGGER pk_legal_holds_before_insert BEFORE INSERT ON legal_holds
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a legal hold is written once')
     WHERE EXISTS (SELECT 1 FROM legal_holds WHERE hold_id = NEW.hold_id);
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a legal hold is written only with its own ledger row (a hold row of this id)')
     WHERE NEW.released_by IS NOT NULL
        OR NOT EXISTS (SELECT 1 FROM purge_ledger l
                        WHERE l.purge_id = NEW.purge_id AND l.kind = 'hold'
                          AND json_extract(l.selectors, '$.hold_id') IS NEW.hold_id);
END;
-- ;;
CREATE TRIGGER pk_legal_holds_before_update BEFORE UPDATE ON legal_holds
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: a legal hold changes only by its release, once')
     WHERE NEW.hold_id IS NOT OLD.hold_id OR NEW.purge_id IS NOT OLD.purge_id
        OR (OLD.released_by IS NOT NULL AND NEW.released_by IS NOT OLD.released_by);
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a legal hold is released only with the ledger row of its release (a hold_release row of this id)')
     WHERE NEW.released_by IS NOT OLD.released_by
       AND NOT EXISTS (SELECT 1 FROM purge_ledger l
                        WHERE l.purge_id = NEW.released_by AND l.kind = 'hold_release'
                          AND json_extract(l.selectors, '$.hold_id') IS NEW.hold_id
                          AND l.seq > COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = NEW.purge_id), 0));
END;
-- ;;
-- ================================================================================================
-- legal_hold_subjects
-- A hold covers only what its ledger row names, and what it covers never changes.
-- ================================================================================================
CREATE TRIGGER pk_legal_hold_subjects_no_update BEFORE UPDATE ON legal_hold_subjects
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: what a legal hold covers never changes');
END;
-- ;;
CREATE TRIGGER pk_legal_hold_subjects_no_delete BEFORE DELETE ON legal_hold_subjects
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: what a legal hold covers never changes');
END;
-- ;;
CREATE TRIGGER pk_legal_hold_subjects_before_insert BEFORE INSERT ON legal_hold_subjects
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a legal hold covers only what its own ledger row names')
     WHERE NOT EXISTS (
         SELECT 1 FROM legal_holds h JOIN purge_ledger l ON l.purge_id = h.purge_id AND l.kind = 'hold',
                json_each(l.selectors, CASE NEW.kind WHEN 'conversation' THEN '$.conversation_ids' ELSE '$.authors' END) j
          WHERE h.hold_id = NEW.hold_id AND j.value = NEW.subject_id);
END;
