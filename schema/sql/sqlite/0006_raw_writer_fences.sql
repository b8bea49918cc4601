-- Fences against writers that bypass the library (issue 11); the rules are those of
-- schema/sql/postgresql/0006_raw_writer_fences.sql. SQLite serialises writers, so no row
-- locks and no reservation probe are needed: a writer's checks read the latest state.
-- The migration rebuilds ``attachments`` (its name becomes nullable) before this file runs,
-- which drops that table's triggers: they are all created here.
DROP TRIGGER IF EXISTS pk_events_before_content_update;
-- ;;
CREATE TRIGGER pk_events_before_content_update BEFORE UPDATE ON events
WHEN NOT (NEW.body IS NULL AND NEW.author = OLD.author AND NEW.occurred_at = OLD.occurred_at AND NEW.created_at = OLD.created_at)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.id)
        OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                        WHERE p.event_id = OLD.id AND c.state <> 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the event is history of a deleted channel')
     WHERE EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                    WHERE p.event_id = OLD.id AND c.state = 'deleted');
END;
-- ;;
CREATE TRIGGER pk_events_never_deleted BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: events rows are never deleted (purge the event instead: its id and provider event id stay taken)');
END;
-- ;;
CREATE TRIGGER pk_placements_before_delete BEFORE DELETE ON placements
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
 AND NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                  WHERE p.event_id = OLD.event_id AND p.conversation_id <> OLD.conversation_id AND c.state <> 'purged')
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event was placed in a purged conversation; only the purge''s cleanup removes that placement')
     WHERE EXISTS (SELECT 1 FROM conversations WHERE id = OLD.conversation_id AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: the event keeps its last live placement; place it elsewhere first, or purge it');
END;
-- ;;
DROP TRIGGER pk_runs_before_update;
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
       AND EXISTS (SELECT 1 FROM admissions a WHERE a.run_id = NEW.id
                      AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = a.event_id)
                           OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                                           WHERE p.event_id = a.event_id AND c.state <> 'purged')));
END;
-- ;;
DROP TRIGGER pk_derivatives_before_content_update;
-- ;;
CREATE TRIGGER pk_derivatives_before_content_update BEFORE UPDATE ON derivatives
WHEN NOT (NEW.payload IS NULL AND NEW.kind = OLD.kind)
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
                           OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                                           WHERE p.event_id = s.event_id AND c.state <> 'purged')));
END;
-- ;;
DROP TRIGGER pk_admissions_before_insert;
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
        OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                        WHERE p.event_id = NEW.event_id AND c.state <> 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:bot_deleted: the bot is deleted')
     WHERE (SELECT bot_id FROM runs WHERE id = NEW.run_id) IS NOT NULL AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'bot' AND id = (SELECT bot_id FROM runs WHERE id = NEW.run_id))
        OR EXISTS (SELECT 1 FROM bots WHERE id = (SELECT bot_id FROM runs WHERE id = NEW.run_id) AND state = 'deleted'));
END;
-- ;;
CREATE TRIGGER pk_admissions_before_delete BEFORE DELETE ON admissions
WHEN NOT EXISTS (SELECT 1 FROM runs r JOIN conversations c ON c.id = r.conversation_id
                  WHERE r.id = OLD.run_id AND c.state = 'purged')
 AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
      OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                      WHERE p.event_id = OLD.event_id AND c.state <> 'purged'))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the admission stays: its event is purged or no longer live');
END;
-- ;;
DROP TRIGGER pk_derivative_sources_before_insert;
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
        OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                        WHERE p.event_id = NEW.event_id AND c.state <> 'purged');
END;
-- ;;
CREATE TRIGGER pk_derivative_sources_before_delete BEFORE DELETE ON derivative_sources
WHEN NOT EXISTS (SELECT 1 FROM derivatives d JOIN conversations c ON c.id = d.conversation_id
                  WHERE d.id = OLD.derivative_id AND c.state = 'purged')
 AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
      OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                      WHERE p.event_id = OLD.event_id AND c.state <> 'purged'))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the derivative source stays: its event is purged or no longer live');
END;
-- ;;
DROP TRIGGER IF EXISTS pk_attachments_before_insert;
-- ;;
CREATE TRIGGER pk_attachments_before_insert BEFORE INSERT ON attachments
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.event_id)
        OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                        WHERE p.event_id = NEW.event_id AND c.state <> 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the event is history of a deleted channel')
     WHERE EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                    WHERE p.event_id = NEW.event_id AND c.state = 'deleted');
    SELECT RAISE(ABORT, 'purgekeeper:blob_not_present: the blob is being deleted or is deleted')
     WHERE EXISTS (SELECT 1 FROM blobs WHERE id = NEW.blob_id AND state <> 'present');
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the blob holds purged content; it is bound to nothing new')
     WHERE EXISTS (SELECT 1 FROM attachments WHERE blob_id = NEW.blob_id)
       AND NOT EXISTS (SELECT 1 FROM attachments a WHERE a.blob_id = NEW.blob_id
                          AND NOT EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = a.event_id)
                          AND EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                                       WHERE p.event_id = a.event_id AND c.state <> 'purged'));
END;
-- ;;
DROP TRIGGER IF EXISTS pk_attachments_before_update;
-- ;;
CREATE TRIGGER pk_attachments_before_update BEFORE UPDATE ON attachments
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an attachment never changes')
     WHERE NOT (NEW.name IS NULL AND NEW.id = OLD.id AND NEW.event_id = OLD.event_id AND NEW.blob_id = OLD.blob_id
                AND NEW.binding = OLD.binding AND NEW.position = OLD.position AND NEW.created_at = OLD.created_at);
END;
-- ;;
DROP TRIGGER IF EXISTS pk_attachments_after_insert;
-- ;;
CREATE TRIGGER pk_attachments_after_insert AFTER INSERT ON attachments
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (SELECT conversation_id FROM placements WHERE event_id = NEW.event_id);
END;
-- ;;
CREATE TRIGGER pk_attachments_before_delete BEFORE DELETE ON attachments
WHEN EXISTS (SELECT 1 FROM blobs WHERE id = OLD.blob_id AND state <> 'deleted')
 AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
      OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                      WHERE p.event_id = OLD.event_id AND c.state <> 'purged'))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the attachment stays until the purge''s cleanup has deleted its bytes');
END;
-- ;;
CREATE TRIGGER pk_cleanup_steps_never_deleted BEFORE DELETE ON cleanup_steps
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: cleanup_steps rows are never deleted (a purge without its steps would read as complete)');
END;
-- ;;
CREATE TRIGGER pk_blobs_before_insert BEFORE INSERT ON blobs
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob id is 4 to 64 characters of A-Z a-z 0-9 _ -')
     WHERE length(NEW.id) NOT BETWEEN 4 AND 64 OR NEW.id GLOB '*[^0-9A-Za-z_-]*';
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob needs the lowercase hex SHA-256 of its bytes')
     WHERE length(NEW.sha256) <> 64 OR NEW.sha256 GLOB '*[^0-9a-f]*';
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob must live at its canonical path')
     WHERE NEW.path IS NOT (CASE NEW.kind
        WHEN 'cas' THEN substr(NEW.sha256, 1, 2) || '/' || substr(NEW.sha256, 3, 2) || '/' || NEW.sha256 || '-' || NEW.id
        ELSE substr(NEW.id, 1, 2) || '/' || substr(NEW.id, 3, 2) || '/' || NEW.id END);
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob is created present') WHERE NEW.state <> 'present';
END;
-- ;;
DROP TRIGGER pk_blobs_before_update;
-- ;;
CREATE TRIGGER pk_blobs_before_update BEFORE UPDATE ON blobs
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob only changes state') WHERE NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.sha256 <> OLD.sha256 OR NEW.size <> OLD.size;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob path changes only to its canonical one, once its bytes are deleted')
     WHERE NEW.path <> OLD.path AND NOT (NEW.state = 'deleted' AND NEW.path = (CASE NEW.kind
        WHEN 'cas' THEN substr(NEW.sha256, 1, 2) || '/' || substr(NEW.sha256, 3, 2) || '/' || NEW.sha256 || '-' || NEW.id
        ELSE substr(NEW.id, 1, 2) || '/' || substr(NEW.id, 3, 2) || '/' || NEW.id END));
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob state only moves forward') WHERE NEW.state <> OLD.state AND NOT ((OLD.state = 'present' AND NEW.state = 'deleting') OR (OLD.state = 'deleting' AND NEW.state = 'deleted'));
END;
-- ;;
DROP TRIGGER pk_tombstones_after_insert;
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
