-- Fences against writers that bypass the library (issue 11). Statements are separated by
-- lines reading "-- ;;". Every refusal raises 'purgekeeper:<code>: <detail>'.
--
-- - Live means what docs/design.md says: no fence AND a placement in a conversation that is not
--   purged. Only an event's very first placement may land on an event with no placement.
-- - A placement is deleted only if its event stays fenced or stays live elsewhere; an event
--   row, a cleanup step and the links that tie derived content to purged events
--   (admissions, derivative sources, attachments whose bytes remain) are never deleted out
--   from under a purge. No content table is truncated.
-- - A run's output and a derivative's payload are refused while any event they came from is
--   not live.
-- - The bytes of purged content (a blob bound only by events that are not live) are bound
--   to nothing new.
-- - A blob's path is the canonical one for its kind and id.
-- - An id that is reserved (tombstoned) is refused whatever the writer's snapshot.

-- Every check below probes an index per row: scalar subqueries with LIMIT 1, never EXISTS
-- over a transition table, which a cached (generic) plan turns into an anti-join that reads
-- every event tombstone or every placement, a cost that grows with the database.
CREATE FUNCTION pk_event_is_live(ev_id text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = ev_id LIMIT 1) IS NULL
       AND (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
             WHERE p.event_id = ev_id AND c.state <> 'purged' LIMIT 1) IS NOT NULL;
$$;
-- ;;
CREATE FUNCTION pk_first_unlive_event(ev_ids text[]) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    found text;
BEGIN
    -- The rows a purge locks FOR UPDATE (the events' conversations, then the events), shared
    -- here in the same order: a writer that began before a purge waits for it, then sees it.
    IF ev_ids IS NULL OR cardinality(ev_ids) = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM conversations
     WHERE id = ANY(ARRAY(SELECT DISTINCT conversation_id FROM placements WHERE event_id = ANY(ev_ids)))
     ORDER BY id FOR KEY SHARE;
    PERFORM 1 FROM events WHERE id = ANY(ev_ids) ORDER BY id FOR KEY SHARE;
    FOREACH found IN ARRAY (SELECT array_agg(e ORDER BY e) FROM unnest(ev_ids) AS e) LOOP
        IF NOT pk_event_is_live(found) THEN
            RETURN found;
        END IF;
    END LOOP;
    RETURN NULL;
END $$;
-- ;;
CREATE FUNCTION pk_lock_for_write(conv_id text, ev_id text, event_history boolean, first_placement boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    conv_state text;
BEGIN
    PERFORM 1 FROM conversations
     WHERE id = conv_id
        OR id IN (SELECT conversation_id FROM placements WHERE event_id = ev_id)
     ORDER BY id
       FOR NO KEY UPDATE;
    IF ev_id IS NOT NULL THEN
        PERFORM 1 FROM events WHERE id = ev_id FOR NO KEY UPDATE;
    END IF;
    IF conv_id IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = conv_id) THEN
            RAISE EXCEPTION 'purgekeeper:conversation_purged: conversation % is purged', conv_id;
        END IF;
        SELECT state INTO conv_state FROM conversations WHERE id = conv_id;
        IF conv_state = 'purged' THEN
            RAISE EXCEPTION 'purgekeeper:conversation_purged: conversation % is purged', conv_id;
        ELSIF conv_state = 'deleted' THEN
            RAISE EXCEPTION 'purgekeeper:conversation_deleted: channel % is deleted', conv_id;
        END IF;
    END IF;
    IF ev_id IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = ev_id) THEN
            RAISE EXCEPTION 'purgekeeper:content_purged: event % is purged', ev_id;
        END IF;
        -- An event's first placement lands on an event placed nowhere yet; everything else
        -- needs it live (a placement in a conversation that is not purged).
        IF NOT (first_placement AND NOT EXISTS (SELECT 1 FROM placements WHERE event_id = ev_id))
           AND NOT EXISTS (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                            WHERE p.event_id = ev_id AND c.state <> 'purged') THEN
            RAISE EXCEPTION 'purgekeeper:content_purged: event % is no longer live', ev_id;
        END IF;
        IF event_history AND EXISTS (
            SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
             WHERE p.event_id = ev_id AND c.state = 'deleted') THEN
            RAISE EXCEPTION 'purgekeeper:conversation_deleted: event % is history of a deleted channel', ev_id;
        END IF;
    END IF;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_lock_for_write(conv_id text, ev_id text, event_history boolean)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_lock_for_write(conv_id, ev_id, event_history, false);
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_placements_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a placement never changes; delete and place again';
    END IF;
    PERFORM pk_lock_for_write(NEW.conversation_id, NEW.event_id, false, true);
    RETURN NEW;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_placements_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    unfenced text[];
    orphan text;
    orphan_state text;
BEGIN
    -- A fenced event stays fenced whatever is deleted (a purge's own cleanup deletes only
    -- those, or events live elsewhere). The others must keep a live placement: their
    -- deleters take turns (the event row, in id order), so two of them cannot each leave the
    -- other's placement as the one that keeps it live.
    unfenced := ARRAY(SELECT DISTINCT o.event_id FROM old_rows o
                       WHERE (SELECT 1 FROM tombstones t WHERE t.kind = 'event' AND t.id = o.event_id LIMIT 1) IS NULL);
    IF cardinality(unfenced) > 0 THEN
        PERFORM 1 FROM events WHERE id = ANY(unfenced) ORDER BY id FOR NO KEY UPDATE;
        SELECT o.event_id, (SELECT c.state FROM conversations c WHERE c.id = o.conversation_id)
          INTO orphan, orphan_state
          FROM old_rows o
         WHERE o.event_id = ANY(unfenced)
           AND (SELECT 1 FROM placements p JOIN conversations pc ON pc.id = p.conversation_id
                 WHERE p.event_id = o.event_id AND pc.state <> 'purged' LIMIT 1) IS NULL
         LIMIT 1;
    END IF;
    IF orphan IS NOT NULL AND orphan_state = 'purged' THEN
        RAISE EXCEPTION 'purgekeeper:content_purged: event % was placed in a purged conversation; only the purge''s cleanup removes that placement', orphan;
    ELSIF orphan IS NOT NULL THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: event % keeps its last live placement; place it elsewhere first, or purge it', orphan;
    END IF;
    PERFORM pk_bump_versions(ARRAY(SELECT DISTINCT conversation_id FROM old_rows));
    RETURN NULL;
END $$;
-- ;;
CREATE FUNCTION pk_never_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purgekeeper:invalid_change: % rows are never deleted (%)', TG_TABLE_NAME, TG_ARGV[0];
END $$;
-- ;;
CREATE TRIGGER pk_events_never_deleted BEFORE DELETE ON events
FOR EACH ROW EXECUTE FUNCTION pk_never_deleted('purge the event instead: its id and provider event id stay taken');
-- ;;
CREATE TRIGGER pk_cleanup_steps_never_deleted BEFORE DELETE ON cleanup_steps
FOR EACH ROW EXECUTE FUNCTION pk_never_deleted('a purge without its steps would read as complete');
-- ;;
CREATE FUNCTION pk_never_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purgekeeper:invalid_change: % is never truncated', TG_TABLE_NAME;
END $$;
-- ;;
CREATE TRIGGER pk_bots_no_truncate BEFORE TRUNCATE ON bots FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_conversations_no_truncate BEFORE TRUNCATE ON conversations FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_events_no_truncate BEFORE TRUNCATE ON events FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_placements_no_truncate BEFORE TRUNCATE ON placements FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_runs_no_truncate BEFORE TRUNCATE ON runs FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_admissions_no_truncate BEFORE TRUNCATE ON admissions FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_derivatives_no_truncate BEFORE TRUNCATE ON derivatives FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_derivative_sources_no_truncate BEFORE TRUNCATE ON derivative_sources FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_blobs_no_truncate BEFORE TRUNCATE ON blobs FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_attachments_no_truncate BEFORE TRUNCATE ON attachments FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_cleanup_steps_no_truncate BEFORE TRUNCATE ON cleanup_steps FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_identity_reservations_no_truncate BEFORE TRUNCATE ON identity_reservations FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE OR REPLACE FUNCTION pk_runs_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    source text;
BEGIN
    IF NEW.id <> OLD.id OR NEW.conversation_id <> OLD.conversation_id OR NEW.bot_id <> OLD.bot_id THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a run id, conversation and bot never change';
    END IF;
    IF OLD.status IN ('succeeded', 'failed', 'cancelled', 'abandoned') AND NEW.status <> OLD.status THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: run % is already terminal', OLD.id;
    END IF;
    IF NEW.output IS NULL AND (NEW.status = OLD.status OR NEW.status = 'abandoned') THEN
        RETURN NEW;  -- the purge's own cleanup, or a restore abandoning a run
    END IF;
    PERFORM 1 FROM conversations WHERE id = OLD.conversation_id FOR NO KEY UPDATE;
    IF EXISTS (SELECT 1 FROM conversations WHERE id = OLD.conversation_id AND state = 'purged') THEN
        RAISE EXCEPTION 'purgekeeper:conversation_purged: conversation % is purged', OLD.conversation_id;
    END IF;
    IF NEW.output IS NOT NULL THEN
        source := pk_first_unlive_event(ARRAY(SELECT event_id FROM admissions WHERE run_id = NEW.id));
        IF source IS NOT NULL THEN
            RAISE EXCEPTION 'purgekeeper:content_purged: run % admitted event %, which is purged or no longer live; its output stays NULL', NEW.id, source;
        END IF;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_derivatives_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    source text;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.id <> OLD.id OR NEW.conversation_id <> OLD.conversation_id THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: a derivative id and conversation never change';
        END IF;
        IF NEW.payload IS NULL AND NEW.kind = OLD.kind THEN
            RETURN NEW;  -- the purge's own cleanup
        END IF;
    END IF;
    PERFORM pk_lock_for_write(NEW.conversation_id, NULL, false);
    IF TG_OP = 'UPDATE' AND NEW.payload IS NOT NULL THEN
        source := pk_first_unlive_event(ARRAY(SELECT event_id FROM derivative_sources WHERE derivative_id = NEW.id));
        IF source IS NOT NULL THEN
            RAISE EXCEPTION 'purgekeeper:content_purged: derivative % comes from event %, which is purged or no longer live; its payload stays NULL', NEW.id, source;
        END IF;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE FUNCTION pk_admissions_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    source text;
BEGIN
    -- Without its admission a run's output no longer points at the purged event it came
    -- from. Runs of a purged conversation go with their admissions (the purge's cleanup).
    source := pk_first_unlive_event(ARRAY(
        SELECT o.event_id FROM old_rows o
         WHERE (SELECT c.state FROM runs r JOIN conversations c ON c.id = r.conversation_id
                 WHERE r.id = o.run_id) <> 'purged'));
    IF source IS NOT NULL THEN
        RAISE EXCEPTION 'purgekeeper:content_purged: the admission of event % stays: the event is purged or no longer live', source;
    END IF;
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_admissions_after_delete AFTER DELETE ON admissions
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_admissions_after_delete();
-- ;;
CREATE FUNCTION pk_derivative_sources_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    source text;
BEGIN
    source := pk_first_unlive_event(ARRAY(
        SELECT o.event_id FROM old_rows o
         WHERE (SELECT c.state FROM derivatives d JOIN conversations c ON c.id = d.conversation_id
                 WHERE d.id = o.derivative_id) <> 'purged'));
    IF source IS NOT NULL THEN
        RAISE EXCEPTION 'purgekeeper:content_purged: the derivative source event % stays: the event is purged or no longer live', source;
    END IF;
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_derivative_sources_after_delete AFTER DELETE ON derivative_sources
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_derivative_sources_after_delete();
-- ;;
CREATE FUNCTION pk_attachments_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    source text;
BEGIN
    -- The attachments step finds a purged event's bytes through this binding.
    source := pk_first_unlive_event(ARRAY(
        SELECT o.event_id FROM old_rows o WHERE (SELECT b.state FROM blobs b WHERE b.id = o.blob_id) <> 'deleted'));
    IF source IS NOT NULL THEN
        RAISE EXCEPTION 'purgekeeper:content_purged: the attachment of event % stays until the purge''s cleanup has deleted its bytes', source;
    END IF;
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_attachments_after_delete AFTER DELETE ON attachments
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_attachments_after_delete();
-- ;;
CREATE OR REPLACE FUNCTION pk_attachments_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    blob_state text;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.name IS NULL AND NEW.id = OLD.id AND NEW.event_id = OLD.event_id AND NEW.blob_id = OLD.blob_id
           AND NEW.binding = OLD.binding AND NEW.position = OLD.position AND NEW.created_at = OLD.created_at THEN
            RETURN NEW;  -- the purge's own cleanup: an attachment's name is content
        END IF;
        RAISE EXCEPTION 'purgekeeper:invalid_change: an attachment never changes';
    END IF;
    PERFORM pk_lock_for_write(NULL, NEW.event_id, true);
    -- FOR SHARE: the attachments step marks a blob deleting under FOR UPDATE, so a binding
    -- either lands before that step counts references, or sees the blob is no longer present.
    SELECT state INTO blob_state FROM blobs WHERE id = NEW.blob_id FOR SHARE;
    IF blob_state IS DISTINCT FROM 'present' AND blob_state IS NOT NULL THEN
        RAISE EXCEPTION 'purgekeeper:blob_not_present: blob % is %', NEW.blob_id, blob_state;
    END IF;
    -- Bytes bound only by events that are not live are purged content, however present.
    IF (SELECT 1 FROM attachments WHERE blob_id = NEW.blob_id LIMIT 1) IS NOT NULL
       AND (SELECT 1 FROM attachments WHERE blob_id = NEW.blob_id AND pk_event_is_live(event_id) LIMIT 1) IS NULL THEN
        RAISE EXCEPTION 'purgekeeper:content_purged: blob % holds purged content; it is bound to nothing new', NEW.blob_id;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE FUNCTION pk_blob_canonical_path(kind text, sha256 text, id text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE kind
        WHEN 'cas' THEN substr(sha256, 1, 2) || '/' || substr(sha256, 3, 2) || '/' || sha256 || '-' || id
        ELSE substr(id, 1, 2) || '/' || substr(id, 3, 2) || '/' || id
    END;
$$;
-- ;;
CREATE FUNCTION pk_blobs_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id !~ '^[0-9A-Za-z_-]{4,64}$' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a blob id is 4 to 64 characters of A-Z a-z 0-9 _ -';
    END IF;
    IF NEW.sha256 !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: blob % needs the lowercase hex SHA-256 of its bytes', NEW.id;
    END IF;
    IF NEW.path IS DISTINCT FROM pk_blob_canonical_path(NEW.kind, NEW.sha256, NEW.id) THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: blob % must live at its canonical path %', NEW.id,
            pk_blob_canonical_path(NEW.kind, NEW.sha256, NEW.id);
    END IF;
    IF NEW.state <> 'present' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a blob is created present';
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_blobs_before_insert BEFORE INSERT ON blobs
FOR EACH ROW EXECUTE FUNCTION pk_blobs_before_insert();
-- ;;
CREATE OR REPLACE FUNCTION pk_blobs_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.sha256 <> OLD.sha256 OR NEW.size <> OLD.size THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a blob only changes state';
    END IF;
    IF NEW.path <> OLD.path
       AND NOT (NEW.state = 'deleted' AND NEW.path = pk_blob_canonical_path(NEW.kind, NEW.sha256, NEW.id)) THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a blob path changes only to its canonical one, once its bytes are deleted';
    END IF;
    IF NEW.state <> OLD.state AND NOT (
        (OLD.state = 'present' AND NEW.state = 'deleting')
        OR (OLD.state = 'deleting' AND NEW.state = 'deleted')) THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: blob % cannot go from % to %', OLD.id, OLD.state, NEW.state;
    END IF;
    RETURN NEW;
END $$;
-- ;;
DROP TRIGGER pk_blobs_before_update ON blobs;
-- ;;
-- As in 0005: the function runs only for a change it refuses (marking blobs stays a HOT
-- update that enters no PL/pgSQL).
CREATE TRIGGER pk_blobs_before_update BEFORE UPDATE ON blobs
FOR EACH ROW WHEN (
    NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.sha256 <> OLD.sha256 OR NEW.size <> OLD.size
    OR (NEW.path <> OLD.path
        AND NOT (NEW.state = 'deleted' AND NEW.path = pk_blob_canonical_path(NEW.kind, NEW.sha256, NEW.id)))
    OR (NEW.state <> OLD.state AND NOT (
        (OLD.state = 'present' AND NEW.state = 'deleting')
        OR (OLD.state = 'deleting' AND NEW.state = 'deleted')))
)
EXECUTE FUNCTION pk_blobs_before_update();
-- ;;
CREATE FUNCTION pk_probe_reservation(ns text, the_id text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    -- A writer whose snapshot predates a reservation cannot see its tombstone. A primary key
    -- sees every committed row whatever the snapshot: insert the id into the reservations'
    -- key (a unique violation there is IdReserved), then take the probe back.
    INSERT INTO identity_reservations (namespace, id) VALUES (ns, the_id);
    DELETE FROM identity_reservations r WHERE r.namespace = ns AND r.id = the_id;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_conversations_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_identity_lock(NEW.id);
    IF EXISTS (SELECT 1 FROM tombstones WHERE id = NEW.id AND kind IN ('conversation', 'channel')) THEN
        RAISE EXCEPTION 'purgekeeper:id_reserved: conversation id % is reserved', NEW.id;
    END IF;
    PERFORM pk_probe_reservation('conversation', NEW.id);
    IF NEW.state <> 'active' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a conversation is created active';
    END IF;
    PERFORM pk_check_bot_active(NEW.bot_id);
    RETURN NEW;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_bots_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_identity_lock(NEW.id);
    IF EXISTS (SELECT 1 FROM tombstones WHERE kind = 'bot' AND id = NEW.id) THEN
        RAISE EXCEPTION 'purgekeeper:id_reserved: bot id % is reserved', NEW.id;
    END IF;
    PERFORM pk_probe_reservation('bot', NEW.id);
    IF NEW.state <> 'active' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a bot is created active';
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_tombstones_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The tombstone is the source of truth; the state columns and the reservation follow it.
    INSERT INTO identity_reservations (namespace, id)
    VALUES (CASE WHEN NEW.kind = 'bot' THEN 'bot' ELSE 'conversation' END, NEW.id)
    ON CONFLICT DO NOTHING;
    IF NEW.kind = 'conversation' THEN
        UPDATE conversations SET state = 'purged', version = version + 1
         WHERE id = NEW.id AND state <> 'purged';
    ELSIF NEW.kind = 'channel' THEN
        UPDATE conversations SET state = 'deleted', version = version + 1
         WHERE id = NEW.id AND state = 'active';
    ELSIF NEW.kind = 'bot' THEN
        UPDATE bots SET state = 'deleted', deleted_at = CURRENT_TIMESTAMP
         WHERE id = NEW.id AND state = 'active';
    END IF;
    RETURN NULL;
END $$;
-- ;;
CREATE FUNCTION pk_identity_reservations_permanent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' OR EXISTS (
        SELECT 1 FROM tombstones WHERE id = OLD.id
           AND ((OLD.namespace = 'bot' AND kind = 'bot')
                OR (OLD.namespace = 'conversation' AND kind IN ('conversation', 'channel')))) THEN
        RAISE EXCEPTION 'purgekeeper:tombstone_permanent: reservations are never changed or removed';
    END IF;
    RETURN OLD;
END $$;
-- ;;
CREATE TRIGGER pk_identity_reservations_permanent BEFORE UPDATE OR DELETE ON identity_reservations
FOR EACH ROW EXECUTE FUNCTION pk_identity_reservations_permanent();
