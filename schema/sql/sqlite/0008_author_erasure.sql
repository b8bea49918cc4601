-- Author erasure (0008); the rules are those of schema/sql/postgresql/0008_author_erasure.sql.
-- SQLite serialises writers (BEGIN IMMEDIATE): no lock is needed, a writer's checks read the
-- latest state. An event X is erased while
--     EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author
--              AND a.window_end > e.occurred_at WHERE e.id = X)
-- (two index probes: the events key, then the prefix of author_erasures' key). Every
-- trigger below that decided an event is not live is created again with that condition.
-- The migration rebuilt purge_ledger (its kind CHECK takes 'author') before this file ran,
-- which dropped the ledger's triggers: it created them again from purge_ledger_triggers.sql,
-- as 0001 did, just before running this file.
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
DROP TRIGGER pk_events_before_insert;
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
DROP TRIGGER pk_events_before_content_update;
-- ;;
CREATE TRIGGER pk_events_before_content_update BEFORE UPDATE ON events
WHEN NOT (NEW.body IS NULL AND NEW.author = OLD.author AND NEW.occurred_at = OLD.occurred_at AND NEW.created_at = OLD.created_at)
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
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.id)
        OR EXISTS (SELECT 1 FROM author_erasures a WHERE a.author = OLD.author AND a.window_end > OLD.occurred_at)
        OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                        WHERE p.event_id = OLD.id AND c.state <> 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the event is history of a deleted channel')
     WHERE EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                    WHERE p.event_id = OLD.id AND c.state = 'deleted');
END;
-- ;;
DROP TRIGGER pk_placements_before_insert;
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
            AND NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                             WHERE p.event_id = NEW.event_id AND c.state <> 'purged')));
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
       AND EXISTS (SELECT 1 FROM admissions ad WHERE ad.run_id = NEW.id
                      AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = ad.event_id)
                           OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                                       WHERE e.id = ad.event_id)
                           OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                                           WHERE p.event_id = ad.event_id AND c.state <> 'purged')));
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
                           OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                                       WHERE e.id = s.event_id)
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
        OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                    WHERE e.id = NEW.event_id)
        OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                        WHERE p.event_id = NEW.event_id AND c.state <> 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:bot_deleted: the bot is deleted')
     WHERE (SELECT bot_id FROM runs WHERE id = NEW.run_id) IS NOT NULL AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'bot' AND id = (SELECT bot_id FROM runs WHERE id = NEW.run_id))
        OR EXISTS (SELECT 1 FROM bots WHERE id = (SELECT bot_id FROM runs WHERE id = NEW.run_id) AND state = 'deleted'));
END;
-- ;;
DROP TRIGGER pk_admissions_before_delete;
-- ;;
CREATE TRIGGER pk_admissions_before_delete BEFORE DELETE ON admissions
WHEN NOT EXISTS (SELECT 1 FROM runs r JOIN conversations c ON c.id = r.conversation_id
                  WHERE r.id = OLD.run_id AND c.state = 'purged')
 AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
      OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                  WHERE e.id = OLD.event_id)
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
        OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                    WHERE e.id = NEW.event_id)
        OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                        WHERE p.event_id = NEW.event_id AND c.state <> 'purged');
END;
-- ;;
DROP TRIGGER pk_derivative_sources_before_delete;
-- ;;
CREATE TRIGGER pk_derivative_sources_before_delete BEFORE DELETE ON derivative_sources
WHEN NOT EXISTS (SELECT 1 FROM derivatives d JOIN conversations c ON c.id = d.conversation_id
                  WHERE d.id = OLD.derivative_id AND c.state = 'purged')
 AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
      OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                  WHERE e.id = OLD.event_id)
      OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                      WHERE p.event_id = OLD.event_id AND c.state <> 'purged'))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the derivative source stays: its event is purged or no longer live');
END;
-- ;;
DROP TRIGGER pk_attachments_before_insert;
-- ;;
CREATE TRIGGER pk_attachments_before_insert BEFORE INSERT ON attachments
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.event_id)
        OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                    WHERE e.id = NEW.event_id)
        OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                        WHERE p.event_id = NEW.event_id AND c.state <> 'purged');
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
                          AND EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                                       WHERE p.event_id = b.event_id AND c.state <> 'purged'));
END;
-- ;;
DROP TRIGGER pk_attachments_before_delete;
-- ;;
CREATE TRIGGER pk_attachments_before_delete BEFORE DELETE ON attachments
WHEN EXISTS (SELECT 1 FROM blobs WHERE id = OLD.blob_id AND state <> 'deleted')
 AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.event_id)
      OR EXISTS (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
                  WHERE e.id = OLD.event_id)
      OR NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                      WHERE p.event_id = OLD.event_id AND c.state <> 'purged'))
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the attachment stays until the purge''s cleanup has deleted its bytes');
END;
