-- purgekeeper fences, SQLite. Statements are separated by lines reading "-- ;;".
-- Every refusal raises 'purgekeeper:<code>: <detail>'; schema/errors.py maps the codes.
-- SQLite serialises writers (BEGIN IMMEDIATE), so a check inside the writing transaction
-- cannot be overtaken by a purge. The rules are the same as schema/sql/postgresql/.
-- The purge ledger's triggers are in purge_ledger_triggers.sql, which the migration runs
-- after this file (0008 and 0009 run it again).
-- ;;
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
CREATE TRIGGER pk_events_before_insert BEFORE INSERT ON events
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the provider event is purged')
     WHERE NEW.provider_event_id IS NOT NULL
       AND EXISTS (SELECT 1 FROM tombstones WHERE kind = 'provider_event' AND id = NEW.provider_event_id);
    SELECT RAISE(ABORT, 'purgekeeper:id_reserved: the event id is reserved')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.id);
END;
-- ;;
CREATE TRIGGER pk_events_before_content_update BEFORE UPDATE ON events
WHEN NOT (NEW.body IS NULL AND NEW.author = OLD.author AND NEW.occurred_at = OLD.occurred_at AND NEW.created_at = OLD.created_at)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = OLD.id)
        OR (EXISTS (SELECT 1 FROM placements WHERE event_id = OLD.id)
            AND NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                             WHERE p.event_id = OLD.id AND c.state <> 'purged')));
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the event is history of a deleted channel')
     WHERE EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                    WHERE p.event_id = OLD.id AND c.state = 'deleted');
END;
-- ;;
CREATE TRIGGER pk_events_before_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an event id and provider_event_id never change') WHERE NEW.id <> OLD.id OR NEW.provider_event_id IS NOT OLD.provider_event_id;
END;
-- ;;
CREATE TRIGGER pk_events_after_update AFTER UPDATE ON events
WHEN NEW.body IS NOT OLD.body OR NEW.author IS NOT OLD.author OR NEW.occurred_at IS NOT OLD.occurred_at
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (SELECT conversation_id FROM placements WHERE event_id = NEW.id);
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
        OR (EXISTS (SELECT 1 FROM placements WHERE event_id = NEW.event_id)
            AND NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                             WHERE p.event_id = NEW.event_id AND c.state <> 'purged')));
END;
-- ;;
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
CREATE TRIGGER pk_runs_before_update BEFORE UPDATE ON runs
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a run id, conversation and bot never change') WHERE NEW.id <> OLD.id OR NEW.conversation_id <> OLD.conversation_id OR NEW.bot_id <> OLD.bot_id;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: the run is already terminal') WHERE OLD.status IN ('succeeded', 'failed', 'cancelled', 'abandoned') AND NEW.status <> OLD.status;
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE NOT (NEW.output IS NULL AND (NEW.status = OLD.status OR NEW.status = 'abandoned'))
       AND EXISTS (SELECT 1 FROM conversations WHERE id = OLD.conversation_id AND state = 'purged');
END;
-- ;;
CREATE TRIGGER pk_runs_after_insert AFTER INSERT ON runs
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (NEW.conversation_id);
END;
-- ;;
CREATE TRIGGER pk_runs_after_update AFTER UPDATE ON runs
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (NEW.conversation_id);
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
     WHERE (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.event_id)
        OR (EXISTS (SELECT 1 FROM placements WHERE event_id = NEW.event_id)
            AND NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                             WHERE p.event_id = NEW.event_id AND c.state <> 'purged')));
    SELECT RAISE(ABORT, 'purgekeeper:bot_deleted: the bot is deleted')
     WHERE (SELECT bot_id FROM runs WHERE id = NEW.run_id) IS NOT NULL AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'bot' AND id = (SELECT bot_id FROM runs WHERE id = NEW.run_id))
        OR EXISTS (SELECT 1 FROM bots WHERE id = (SELECT bot_id FROM runs WHERE id = NEW.run_id) AND state = 'deleted'));
END;
-- ;;
CREATE TRIGGER pk_admissions_before_update BEFORE UPDATE ON admissions
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an admission receipt never changes') WHERE NOT (NEW.payload IS NULL AND NEW.id = OLD.id AND NEW.event_id = OLD.event_id AND NEW.run_id = OLD.run_id);
END;
-- ;;
CREATE TRIGGER pk_admissions_after_insert AFTER INSERT ON admissions
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (SELECT conversation_id FROM runs WHERE id = NEW.run_id);
END;
-- ;;
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
CREATE TRIGGER pk_derivatives_before_content_update BEFORE UPDATE ON derivatives
WHEN NOT (NEW.payload IS NULL AND NEW.kind = OLD.kind)
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:conversation_purged: the conversation is purged')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = NEW.conversation_id)
        OR EXISTS (SELECT 1 FROM conversations WHERE id = NEW.conversation_id AND state = 'purged');
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the channel is deleted')
     WHERE EXISTS (SELECT 1 FROM conversations WHERE id = NEW.conversation_id AND state = 'deleted');
END;
-- ;;
CREATE TRIGGER pk_derivatives_after_insert AFTER INSERT ON derivatives
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (NEW.conversation_id);
END;
-- ;;
CREATE TRIGGER pk_derivatives_after_update AFTER UPDATE ON derivatives
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (NEW.conversation_id);
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
     WHERE (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.event_id)
        OR (EXISTS (SELECT 1 FROM placements WHERE event_id = NEW.event_id)
            AND NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                             WHERE p.event_id = NEW.event_id AND c.state <> 'purged')));
END;
-- ;;
CREATE TRIGGER pk_derivative_sources_before_update BEFORE UPDATE ON derivative_sources
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a derivative source never changes') WHERE 1;
END;
-- ;;
CREATE TRIGGER pk_attachments_before_insert BEFORE INSERT ON attachments
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the event is purged or no longer live')
     WHERE (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.event_id)
        OR (EXISTS (SELECT 1 FROM placements WHERE event_id = NEW.event_id)
            AND NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                             WHERE p.event_id = NEW.event_id AND c.state <> 'purged')));
    SELECT RAISE(ABORT, 'purgekeeper:conversation_deleted: the event is history of a deleted channel')
     WHERE EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                    WHERE p.event_id = NEW.event_id AND c.state = 'deleted');
    SELECT RAISE(ABORT, 'purgekeeper:blob_not_present: the blob is being deleted or is deleted')
     WHERE EXISTS (SELECT 1 FROM blobs WHERE id = NEW.blob_id AND state <> 'present');
END;
-- ;;
CREATE TRIGGER pk_attachments_before_update BEFORE UPDATE ON attachments
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: an attachment never changes') WHERE 1;
END;
-- ;;
CREATE TRIGGER pk_attachments_after_insert AFTER INSERT ON attachments
BEGIN
    UPDATE conversations SET version = version + 1
     WHERE state = 'active' AND id IN (SELECT conversation_id FROM placements WHERE event_id = NEW.event_id);
END;
-- ;;
CREATE TRIGGER pk_blobs_before_update BEFORE UPDATE ON blobs
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob only changes state') WHERE NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.sha256 <> OLD.sha256 OR NEW.size <> OLD.size OR NEW.path <> OLD.path;
    SELECT RAISE(ABORT, 'purgekeeper:invalid_change: a blob state only moves forward') WHERE NEW.state <> OLD.state AND NOT ((OLD.state = 'present' AND NEW.state = 'deleting') OR (OLD.state = 'deleting' AND NEW.state = 'deleted'));
END;
-- ;;
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
CREATE TRIGGER pk_tombstones_after_insert AFTER INSERT ON tombstones
BEGIN
    -- The tombstone is the source of truth; the state columns follow it.
    UPDATE conversations SET state = 'purged', version = version + 1
     WHERE NEW.kind = 'conversation' AND id = NEW.id AND state <> 'purged';
    UPDATE conversations SET state = 'deleted', version = version + 1
     WHERE NEW.kind = 'channel' AND id = NEW.id AND state = 'active';
    UPDATE bots SET state = 'deleted', deleted_at = strftime('%Y-%m-%d %H:%M:%f000', 'now')
     WHERE NEW.kind = 'bot' AND id = NEW.id AND state = 'active';
END;
-- ;;
CREATE TRIGGER pk_tombstones_no_update BEFORE UPDATE ON tombstones
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: tombstones are never changed or removed');
END;
-- ;;
CREATE TRIGGER pk_tombstones_no_delete BEFORE DELETE ON tombstones
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:tombstone_permanent: tombstones are never changed or removed');
END;
