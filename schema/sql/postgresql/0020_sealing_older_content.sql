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
-- names). Everything else that touches a key is refused (invalid_change).
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
-- The attachments already written under a sealed event (0019) take their event's key here,
-- with the trigger that refuses every other change of an attachment set aside for it.
-- ;;
ALTER TABLE attachments DISABLE TRIGGER pk_attachments_before_write;
-- ;;
UPDATE attachments a SET key_id = e.key_id
  FROM events e
 WHERE e.id = a.event_id AND e.key_id IS NOT NULL AND a.key_id IS NULL
   AND (a.name IS NULL OR substr(a.name, 1, 4) = 'pk1:');
-- ;;
ALTER TABLE attachments ENABLE TRIGGER pk_attachments_before_write;
-- ;;
CREATE FUNCTION pk_sealed_value(old_value text, new_value text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    -- A plain value replaced by a sealed one (storage.sealing's 'pk1:' form).
    SELECT COALESCE(old_value IS NOT NULL AND new_value <> old_value AND substr(new_value, 1, 4) = 'pk1:', false);
$$;
-- ;;
CREATE FUNCTION pk_refuse_key_change(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purgekeeper:invalid_change: %: a key (key_id) is set once, by sealing the plain content written before it (the content replaced by a pk1: value, nothing else changed), and never changes', what;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_events_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.provider_event_id IS DISTINCT FROM OLD.provider_event_id THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: an event id and provider_event_id never change';
    END IF;
    IF NEW.key_id IS DISTINCT FROM OLD.key_id THEN
        -- The sealing of an event written before 0019: its key, and its plain body sealed (or
        -- none, for an event without a body), nothing else; live, and no hold covers it.
        IF OLD.key_id IS NOT NULL OR NEW.key_id IS NULL
           OR NOT (pk_sealed_value(OLD.body, NEW.body) OR (OLD.body IS NULL AND NEW.body IS NULL))
           OR NEW.author <> OLD.author OR NEW.occurred_at <> OLD.occurred_at OR NEW.created_at <> OLD.created_at THEN
            PERFORM pk_refuse_key_change(format('event %s', OLD.id));
        END IF;
        PERFORM pk_lock_for_write(NULL, OLD.id, false);  -- a deleted channel's history may be sealed
        IF pk_holds_in_force() THEN  -- then a new statement: a snapshot after the lock
            IF pk_event_held(OLD.id) THEN
                PERFORM pk_refuse_held(format('event %s: it is sealed once the hold is released', OLD.id));
            END IF;
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.body IS NULL AND NEW.author = OLD.author AND NEW.occurred_at = OLD.occurred_at
       AND NEW.created_at = OLD.created_at THEN
        RETURN NEW;  -- the purge's own cleanup: content set to NULL
    END IF;
    IF NEW.author <> OLD.author OR NEW.occurred_at <> OLD.occurred_at THEN
        -- An erased event cannot leave its window, and no event moves into one (nor, by a
        -- change of author, to an author who is closed).
        PERFORM pk_author_lock_shared(OLD.author);
        PERFORM pk_author_lock_shared(NEW.author);
        IF pk_author_erased_at(OLD.author, OLD.occurred_at) THEN
            RAISE EXCEPTION 'purgekeeper:author_erased: event % is erased; its author and time never change', OLD.id;
        END IF;
        IF EXISTS (SELECT 1 FROM author_erasures
                    WHERE author = NEW.author
                      AND (window_end > NEW.occurred_at OR (close_author AND NEW.author <> OLD.author))) THEN
            RAISE EXCEPTION 'purgekeeper:author_erased: event % would move into an erasure of its author', OLD.id;
        END IF;
        -- A retention run's window and exemptions are decided by an event's time and author.
        IF (SELECT 1 FROM retention_policies WHERE ended_by IS NULL LIMIT 1) IS NOT NULL
           OR (SELECT 1 FROM retention_fences LIMIT 1) IS NOT NULL THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: event %: an event''s author and time never change while a retention policy stands or a retention run is under way', OLD.id;
        END IF;
    END IF;
    PERFORM pk_lock_for_write(NULL, OLD.id, true);
    RETURN NEW;
END $$;
-- ;;
DROP TRIGGER pk_events_before_update ON events;
-- ;;
CREATE TRIGGER pk_events_before_update BEFORE UPDATE ON events
FOR EACH ROW WHEN (NEW.id <> OLD.id OR NEW.provider_event_id IS DISTINCT FROM OLD.provider_event_id
                   OR NEW.body IS NOT NULL OR NEW.author <> OLD.author OR NEW.occurred_at <> OLD.occurred_at
                   OR NEW.created_at <> OLD.created_at OR NEW.key_id IS DISTINCT FROM OLD.key_id)
EXECUTE FUNCTION pk_events_before_update();
-- ;;
CREATE OR REPLACE FUNCTION pk_events_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Statement level: one version bump per conversation, however many rows changed. A
    -- sealing (a key set: pk_events_before_update lets nothing else change with it) changes
    -- nothing a reader gets, and bumps nothing.
    PERFORM pk_bump_versions(ARRAY(
        SELECT DISTINCT p.conversation_id
          FROM new_rows n
          JOIN old_rows o ON o.id = n.id
          JOIN placements p ON p.event_id = n.id
         WHERE (n.body, n.author, n.occurred_at) IS DISTINCT FROM (o.body, o.author, o.occurred_at)
           AND NOT (o.key_id IS NULL AND n.key_id IS NOT NULL)));
    RETURN NULL;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_runs_after_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.key_id IS NULL AND NEW.key_id IS NOT NULL AND NEW.status = OLD.status THEN
        RETURN NULL;  -- a sealing of the output (pk_runs_before_update): nothing a reader gets changes
    END IF;
    PERFORM pk_bump_versions(ARRAY[NEW.conversation_id]);
    RETURN NULL;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_runs_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    source text;
BEGIN
    IF NEW.id <> OLD.id OR NEW.conversation_id <> OLD.conversation_id OR NEW.bot_id <> OLD.bot_id THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a run id, conversation and bot never change';
    END IF;
    -- A run's key is set with its sealed output: when it finishes (its status moves), or when
    -- the output of a finished run written before 0019 is sealed, nothing else changed.
    IF NEW.key_id IS DISTINCT FROM OLD.key_id
       AND (OLD.key_id IS NOT NULL OR NEW.key_id IS NULL OR substr(NEW.output, 1, 4) IS DISTINCT FROM 'pk1:'
            OR (NEW.status = OLD.status
                AND NOT (pk_sealed_value(OLD.output, NEW.output)
                         AND OLD.status IN ('succeeded', 'failed', 'cancelled', 'abandoned')
                         AND NEW.finished_at IS NOT DISTINCT FROM OLD.finished_at
                         AND NEW.created_at = OLD.created_at))) THEN
        PERFORM pk_refuse_key_change(format('run %s', OLD.id));
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
CREATE OR REPLACE FUNCTION pk_admissions_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    run_conv text;
    run_bot text;
    fixed boolean;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        fixed := NEW.id = OLD.id AND NEW.event_id = OLD.event_id AND NEW.run_id = OLD.run_id;
        IF fixed AND NEW.payload IS NULL AND NEW.key_id IS NOT DISTINCT FROM OLD.key_id THEN
            RETURN NEW;  -- the purge's own cleanup
        END IF;
        IF fixed AND NEW.created_at = OLD.created_at AND OLD.key_id IS NULL AND NEW.key_id IS NOT NULL
           AND pk_sealed_value(OLD.payload, NEW.payload) THEN
            -- The sealing of a payload written before 0019: of a live event, in a run whose
            -- conversation is not purged.
            SELECT conversation_id INTO run_conv FROM runs WHERE id = NEW.run_id;
            PERFORM pk_lock_for_write(NULL, NEW.event_id, false);
            PERFORM 1 FROM conversations WHERE id = run_conv FOR NO KEY UPDATE;
            IF EXISTS (SELECT 1 FROM conversations WHERE id = run_conv AND state = 'purged') THEN
                RAISE EXCEPTION 'purgekeeper:conversation_purged: conversation % is purged', run_conv;
            END IF;
            RETURN NEW;
        END IF;
        IF NEW.key_id IS DISTINCT FROM OLD.key_id THEN
            PERFORM pk_refuse_key_change(format('the admission %s', OLD.id));
        END IF;
        RAISE EXCEPTION 'purgekeeper:invalid_change: an admission receipt never changes';
    END IF;
    SELECT conversation_id, bot_id INTO run_conv, run_bot FROM runs WHERE id = NEW.run_id;
    PERFORM pk_lock_for_write(run_conv, NEW.event_id, false);
    PERFORM pk_check_bot_active(run_bot);
    RETURN NEW;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_derivatives_after_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.key_id IS NULL AND NEW.key_id IS NOT NULL THEN
        RETURN NULL;  -- a sealing of the payload (pk_derivatives_before_write): nothing a reader gets changes
    END IF;
    PERFORM pk_bump_versions(ARRAY[NEW.conversation_id]);
    RETURN NULL;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_derivatives_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    source text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM pk_lock_for_write(NEW.conversation_id, NULL, false);
        RETURN NEW;
    END IF;
    IF NEW.id <> OLD.id OR NEW.conversation_id <> OLD.conversation_id THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a derivative id and conversation never change';
    END IF;
    IF NEW.key_id IS DISTINCT FROM OLD.key_id THEN
        -- The sealing of a payload written before 0019, nothing else changed, in a
        -- conversation that is not purged (a deleted channel's may be sealed).
        IF OLD.key_id IS NOT NULL OR NEW.key_id IS NULL OR NOT pk_sealed_value(OLD.payload, NEW.payload)
           OR NEW.kind <> OLD.kind OR NEW.created_at <> OLD.created_at THEN
            PERFORM pk_refuse_key_change(format('derivative %s', OLD.id));
        END IF;
        PERFORM 1 FROM conversations WHERE id = OLD.conversation_id FOR NO KEY UPDATE;
        IF EXISTS (SELECT 1 FROM conversations WHERE id = OLD.conversation_id AND state = 'purged') THEN
            RAISE EXCEPTION 'purgekeeper:conversation_purged: conversation % is purged', OLD.conversation_id;
        END IF;
    ELSIF NEW.payload IS NULL AND NEW.kind = OLD.kind THEN
        RETURN NEW;  -- the purge's own cleanup
    ELSE
        PERFORM pk_lock_for_write(NEW.conversation_id, NULL, false);
    END IF;
    IF NEW.payload IS NOT NULL THEN
        source := pk_first_unlive_event(ARRAY(SELECT event_id FROM derivative_sources WHERE derivative_id = NEW.id));
        IF source IS NOT NULL THEN
            RAISE EXCEPTION 'purgekeeper:content_purged: derivative % comes from event %, which is purged or no longer live; its payload stays NULL', NEW.id, source;
        END IF;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_attachments_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    blob_state text;
    fixed boolean;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        fixed := NEW.id = OLD.id AND NEW.event_id = OLD.event_id AND NEW.blob_id = OLD.blob_id
                 AND NEW.binding = OLD.binding AND NEW.position = OLD.position AND NEW.created_at = OLD.created_at;
        IF fixed AND NEW.name IS NULL AND NEW.key_id IS NOT DISTINCT FROM OLD.key_id THEN
            RETURN NEW;  -- the purge's own cleanup: an attachment's name is content
        END IF;
        IF fixed AND OLD.key_id IS NULL AND pk_sealed_value(OLD.name, NEW.name)
           AND NEW.key_id = (SELECT key_id FROM events WHERE id = OLD.event_id) THEN
            -- The sealing of a name written before 0019, under its event's key, of a live event.
            PERFORM pk_lock_for_write(NULL, OLD.event_id, false);
            RETURN NEW;
        END IF;
        IF NEW.key_id IS DISTINCT FROM OLD.key_id THEN
            PERFORM pk_refuse_key_change(format('attachment %s (its key is its event''s)', OLD.id));
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
