-- purgekeeper fences, PostgreSQL. Statements are separated by lines reading "-- ;;".
-- Every refusal raises 'purgekeeper:<code>: <detail>'; schema/errors.py maps the codes.
-- Writers lock what they depend on (FOR NO KEY UPDATE, conversations in id order, then the
-- event) and check after the lock, so a writer that began before a purge's acceptance and
-- commits after it sees the fence. Confirmation takes FOR UPDATE on the same rows.

CREATE FUNCTION pk_lock_for_write(conv_id text, ev_id text, event_history boolean)
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
        IF EXISTS (SELECT 1 FROM placements WHERE event_id = ev_id)
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
CREATE FUNCTION pk_check_bot_active(the_bot text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF the_bot IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM bots WHERE id = the_bot FOR SHARE;
    IF EXISTS (SELECT 1 FROM tombstones WHERE kind = 'bot' AND id = the_bot)
       OR EXISTS (SELECT 1 FROM bots WHERE id = the_bot AND state = 'deleted') THEN
        RAISE EXCEPTION 'purgekeeper:bot_deleted: bot % is deleted', the_bot;
    END IF;
END $$;
-- ;;
CREATE FUNCTION pk_bump_versions(conv_ids text[]) RETURNS void LANGUAGE sql AS $$
    -- In id order, like every other lock on conversations.
    WITH bumped AS (
        SELECT id FROM conversations WHERE id = ANY(conv_ids) AND state = 'active' ORDER BY id FOR NO KEY UPDATE
    )
    UPDATE conversations SET version = version + 1 FROM bumped WHERE conversations.id = bumped.id;
$$;
-- ;;
CREATE FUNCTION pk_identity_lock(the_id text) RETURNS void LANGUAGE sql AS $$
    -- serialises creating an id with tombstoning it, so neither can slip past the other
    SELECT pg_advisory_xact_lock(hashtextextended('purgekeeper-identity:' || the_id, 0));
$$;
-- ;;
CREATE FUNCTION pk_conversations_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_identity_lock(NEW.id);
    IF EXISTS (SELECT 1 FROM tombstones WHERE id = NEW.id AND kind IN ('conversation', 'channel')) THEN
        RAISE EXCEPTION 'purgekeeper:id_reserved: conversation id % is reserved', NEW.id;
    END IF;
    IF NEW.state <> 'active' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a conversation is created active';
    END IF;
    PERFORM pk_check_bot_active(NEW.bot_id);
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_conversations_before_insert BEFORE INSERT ON conversations
FOR EACH ROW EXECUTE FUNCTION pk_conversations_before_insert();
-- ;;
CREATE FUNCTION pk_conversations_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'purged' THEN
        RAISE EXCEPTION 'purgekeeper:conversation_purged: conversation % is purged', OLD.id;
    END IF;
    IF NEW.id <> OLD.id OR NEW.kind <> OLD.kind THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a conversation id and kind never change';
    END IF;
    IF OLD.state = 'deleted' AND NEW.state <> 'purged' THEN
        RAISE EXCEPTION 'purgekeeper:conversation_deleted: channel % is deleted', OLD.id;
    END IF;
    IF NEW.state = 'purged' AND OLD.state <> 'purged'
       AND NOT EXISTS (SELECT 1 FROM tombstones WHERE kind = 'conversation' AND id = NEW.id) THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a conversation is purged only by its tombstone';
    END IF;
    IF NEW.state = 'deleted' AND OLD.state <> 'deleted' THEN
        IF NEW.kind <> 'channel' THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: only a channel is deleted';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM tombstones WHERE kind = 'channel' AND id = NEW.id) THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: a channel is deleted only by its tombstone';
        END IF;
    END IF;
    IF NEW.state = 'active' AND OLD.state <> 'active' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a conversation never becomes active again';
    END IF;
    IF NEW.version < OLD.version THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a conversation version never falls';
    END IF;
    IF NEW.version = OLD.version THEN
        NEW.version := OLD.version + 1;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_conversations_before_update BEFORE UPDATE ON conversations
FOR EACH ROW EXECUTE FUNCTION pk_conversations_before_update();
-- ;;
CREATE FUNCTION pk_events_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.provider_event_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM tombstones WHERE kind = 'provider_event' AND id = NEW.provider_event_id) THEN
        RAISE EXCEPTION 'purgekeeper:content_purged: provider event % is purged', NEW.provider_event_id;
    END IF;
    IF EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.id) THEN
        RAISE EXCEPTION 'purgekeeper:id_reserved: event id % is reserved', NEW.id;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_events_before_insert BEFORE INSERT ON events
FOR EACH ROW EXECUTE FUNCTION pk_events_before_insert();
-- ;;
CREATE FUNCTION pk_events_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.provider_event_id IS DISTINCT FROM OLD.provider_event_id THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: an event id and provider_event_id never change';
    END IF;
    IF NEW.body IS NULL AND NEW.author = OLD.author AND NEW.occurred_at = OLD.occurred_at
       AND NEW.created_at = OLD.created_at THEN
        RETURN NEW;  -- the purge's own cleanup: content set to NULL
    END IF;
    PERFORM pk_lock_for_write(NULL, OLD.id, true);
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_events_before_update BEFORE UPDATE ON events
FOR EACH ROW EXECUTE FUNCTION pk_events_before_update();
-- ;;
CREATE FUNCTION pk_events_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Statement level: one version bump per conversation, however many rows changed.
    PERFORM pk_bump_versions(ARRAY(
        SELECT DISTINCT p.conversation_id
          FROM new_rows n
          JOIN old_rows o ON o.id = n.id
          JOIN placements p ON p.event_id = n.id
         WHERE (n.body, n.author, n.occurred_at) IS DISTINCT FROM (o.body, o.author, o.occurred_at)));
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_events_after_update AFTER UPDATE ON events
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_events_after_update();
-- ;;
CREATE FUNCTION pk_placements_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a placement never changes; delete and place again';
    END IF;
    PERFORM pk_lock_for_write(NEW.conversation_id, NEW.event_id, false);
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_placements_before_write BEFORE INSERT OR UPDATE ON placements
FOR EACH ROW EXECUTE FUNCTION pk_placements_before_write();
-- ;;
CREATE FUNCTION pk_placements_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_bump_versions(ARRAY(SELECT DISTINCT conversation_id FROM new_rows));
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_placements_after_insert AFTER INSERT ON placements
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_placements_after_insert();
-- ;;
CREATE FUNCTION pk_placements_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_bump_versions(ARRAY(SELECT DISTINCT conversation_id FROM old_rows));
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_placements_after_delete AFTER DELETE ON placements
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_placements_after_delete();
-- ;;
CREATE FUNCTION pk_runs_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_lock_for_write(NEW.conversation_id, NULL, false);
    PERFORM pk_check_bot_active(NEW.bot_id);
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_runs_before_insert BEFORE INSERT ON runs
FOR EACH ROW EXECUTE FUNCTION pk_runs_before_insert();
-- ;;
CREATE FUNCTION pk_runs_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
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
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_runs_before_update BEFORE UPDATE ON runs
FOR EACH ROW EXECUTE FUNCTION pk_runs_before_update();
-- ;;
CREATE FUNCTION pk_runs_after_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_bump_versions(ARRAY[NEW.conversation_id]);
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_runs_after_write AFTER INSERT OR UPDATE ON runs
FOR EACH ROW EXECUTE FUNCTION pk_runs_after_write();
-- ;;
CREATE FUNCTION pk_admissions_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    run_conv text;
    run_bot text;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.payload IS NULL AND NEW.id = OLD.id AND NEW.event_id = OLD.event_id
           AND NEW.run_id = OLD.run_id THEN
            RETURN NEW;  -- the purge's own cleanup
        END IF;
        RAISE EXCEPTION 'purgekeeper:invalid_change: an admission receipt never changes';
    END IF;
    SELECT conversation_id, bot_id INTO run_conv, run_bot FROM runs WHERE id = NEW.run_id;
    PERFORM pk_lock_for_write(run_conv, NEW.event_id, false);
    PERFORM pk_check_bot_active(run_bot);
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_admissions_before_write BEFORE INSERT OR UPDATE ON admissions
FOR EACH ROW EXECUTE FUNCTION pk_admissions_before_write();
-- ;;
CREATE FUNCTION pk_admissions_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_bump_versions(ARRAY(SELECT conversation_id FROM runs WHERE id = NEW.run_id));
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_admissions_after_insert AFTER INSERT ON admissions
FOR EACH ROW EXECUTE FUNCTION pk_admissions_after_insert();
-- ;;
CREATE FUNCTION pk_derivatives_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
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
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_derivatives_before_write BEFORE INSERT OR UPDATE ON derivatives
FOR EACH ROW EXECUTE FUNCTION pk_derivatives_before_write();
-- ;;
CREATE FUNCTION pk_derivatives_after_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_bump_versions(ARRAY[NEW.conversation_id]);
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_derivatives_after_write AFTER INSERT OR UPDATE ON derivatives
FOR EACH ROW EXECUTE FUNCTION pk_derivatives_after_write();
-- ;;
CREATE FUNCTION pk_derivative_sources_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a derivative source never changes';
    END IF;
    PERFORM pk_lock_for_write(
        (SELECT conversation_id FROM derivatives WHERE id = NEW.derivative_id), NEW.event_id, false);
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_derivative_sources_before_write BEFORE INSERT OR UPDATE ON derivative_sources
FOR EACH ROW EXECUTE FUNCTION pk_derivative_sources_before_write();
-- ;;
CREATE FUNCTION pk_attachments_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    blob_state text;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: an attachment never changes';
    END IF;
    PERFORM pk_lock_for_write(NULL, NEW.event_id, true);
    -- FOR SHARE: the attachments step marks a blob deleting under FOR UPDATE, so a binding
    -- either lands before that step counts references, or sees the blob is no longer present.
    SELECT state INTO blob_state FROM blobs WHERE id = NEW.blob_id FOR SHARE;
    IF blob_state IS DISTINCT FROM 'present' AND blob_state IS NOT NULL THEN
        RAISE EXCEPTION 'purgekeeper:blob_not_present: blob % is %', NEW.blob_id, blob_state;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_attachments_before_write BEFORE INSERT OR UPDATE ON attachments
FOR EACH ROW EXECUTE FUNCTION pk_attachments_before_write();
-- ;;
CREATE FUNCTION pk_attachments_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_bump_versions(ARRAY(
        SELECT DISTINCT p.conversation_id FROM new_rows n JOIN placements p ON p.event_id = n.event_id));
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_attachments_after_insert AFTER INSERT ON attachments
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_attachments_after_insert();
-- ;;
CREATE FUNCTION pk_blobs_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.sha256 <> OLD.sha256
       OR NEW.size <> OLD.size OR NEW.path <> OLD.path THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a blob only changes state';
    END IF;
    IF NEW.state <> OLD.state AND NOT (
        (OLD.state = 'present' AND NEW.state = 'deleting')
        OR (OLD.state = 'deleting' AND NEW.state = 'deleted')) THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: blob % cannot go from % to %', OLD.id, OLD.state, NEW.state;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_blobs_before_update BEFORE UPDATE ON blobs
FOR EACH ROW EXECUTE FUNCTION pk_blobs_before_update();
-- ;;
CREATE FUNCTION pk_bots_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_identity_lock(NEW.id);
    IF EXISTS (SELECT 1 FROM tombstones WHERE kind = 'bot' AND id = NEW.id) THEN
        RAISE EXCEPTION 'purgekeeper:id_reserved: bot id % is reserved', NEW.id;
    END IF;
    IF NEW.state <> 'active' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a bot is created active';
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_bots_before_insert BEFORE INSERT ON bots
FOR EACH ROW EXECUTE FUNCTION pk_bots_before_insert();
-- ;;
CREATE FUNCTION pk_bots_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'deleted' THEN
        RAISE EXCEPTION 'purgekeeper:bot_deleted: bot % is deleted', OLD.id;
    END IF;
    IF NEW.id <> OLD.id THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a bot id never changes';
    END IF;
    IF NEW.state = 'deleted' AND NOT EXISTS (SELECT 1 FROM tombstones WHERE kind = 'bot' AND id = NEW.id) THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a bot is deleted only by its tombstone';
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_bots_before_update BEFORE UPDATE ON bots
FOR EACH ROW EXECUTE FUNCTION pk_bots_before_update();
-- ;;
CREATE FUNCTION pk_tombstones_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.kind IN ('conversation', 'channel', 'bot') THEN
        PERFORM pk_identity_lock(NEW.id);
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_tombstones_before_insert BEFORE INSERT ON tombstones
FOR EACH ROW EXECUTE FUNCTION pk_tombstones_before_insert();
-- ;;
CREATE FUNCTION pk_tombstones_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The tombstone is the source of truth; the state columns follow it.
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
CREATE TRIGGER pk_tombstones_after_insert AFTER INSERT ON tombstones
FOR EACH ROW EXECUTE FUNCTION pk_tombstones_after_insert();
-- ;;
CREATE FUNCTION pk_tombstones_permanent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purgekeeper:tombstone_permanent: tombstones are never changed or removed';
END $$;
-- ;;
CREATE TRIGGER pk_tombstones_permanent BEFORE UPDATE OR DELETE ON tombstones
FOR EACH ROW EXECUTE FUNCTION pk_tombstones_permanent();
-- ;;
CREATE TRIGGER pk_tombstones_no_truncate BEFORE TRUNCATE ON tombstones
FOR EACH STATEMENT EXECUTE FUNCTION pk_tombstones_permanent();
-- ;;
CREATE FUNCTION pk_ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purgekeeper:ledger_append_only: the purge ledger is append-only';
END $$;
-- ;;
CREATE TRIGGER pk_purge_ledger_append_only BEFORE UPDATE OR DELETE ON purge_ledger
FOR EACH ROW EXECUTE FUNCTION pk_ledger_append_only();
-- ;;
CREATE TRIGGER pk_purge_ledger_no_truncate BEFORE TRUNCATE ON purge_ledger
FOR EACH STATEMENT EXECUTE FUNCTION pk_ledger_append_only();
-- ;;
CREATE FUNCTION pk_purge_ledger_chain() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    head_seq bigint;
    head_hash text;
BEGIN
    -- The chain is enforced here too: a row must extend the head, which then moves to it.
    SELECT seq, ledger_head.head_hash INTO head_seq, head_hash FROM ledger_head WHERE id = 1 FOR UPDATE;
    IF NEW.seq <> head_seq + 1 OR NEW.prev_hash <> head_hash THEN
        RAISE EXCEPTION 'purgekeeper:ledger_append_only: row % does not extend the ledger head (seq %)', NEW.seq, head_seq;
    END IF;
    UPDATE ledger_head SET seq = NEW.seq, head_hash = NEW.row_hash WHERE id = 1;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_purge_ledger_chain BEFORE INSERT ON purge_ledger
FOR EACH ROW EXECUTE FUNCTION pk_purge_ledger_chain();
