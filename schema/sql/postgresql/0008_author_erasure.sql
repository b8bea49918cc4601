-- Author erasure (0008). Statements are separated by lines reading "-- ;;". Every refusal
-- raises 'purgekeeper:<code>: <detail>'.
--
-- - An event is erased while a row of author_erasures has its author and a window_end after
--   its occurred_at. An erased event is not live, exactly like an event with an event
--   tombstone: pk_event_is_live, pk_lock_for_write and pk_first_unlive_event say so.
-- - A new event by an author is refused (author_erased) while an erasure of the author
--   covers its time, or closes the author; an erased event keeps its author and time, and
--   no event moves into an erasure.
-- - Every check of an author's erasures first takes the author's advisory lock shared:
--   an erasure's acceptance holds it exclusively until its commit (schema.authors
--   .lock_author), so a writer that waited checks in a snapshot that has the erasure.
--   The key is (1886085493, hashtext(author)); 1886085493 is 'pkau', two int4 keys, a space
--   apart from the one-bigint keys of the migration and identity locks.
-- - An event's created_at is the time its row is written (clock_timestamp()), taken under
--   the author's lock: the mark of an author's newest ingest only grows.
-- - author_erasures rows are never changed, deleted or truncated.
--
-- Each check probes an index: events by primary key, author_erasures by its key's prefix.
CREATE FUNCTION pk_author_lock_shared(the_author text) RETURNS void LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock_shared(1886085493, hashtext(the_author));
$$;
-- ;;
CREATE FUNCTION pk_author_erased_at(the_author text, at timestamptz) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT (SELECT 1 FROM author_erasures WHERE author = the_author AND window_end > at LIMIT 1) IS NOT NULL;
$$;
-- ;;
CREATE FUNCTION pk_event_erased(ev_id text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    ev_author text;
    ev_at timestamptz;
BEGIN
    SELECT author, occurred_at INTO ev_author, ev_at FROM events WHERE id = ev_id;
    IF ev_author IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pk_author_lock_shared(ev_author);
    RETURN pk_author_erased_at(ev_author, ev_at);  -- a new statement: a snapshot after the lock
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_event_is_live(ev_id text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = ev_id LIMIT 1) IS NULL
       AND (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
             WHERE e.id = ev_id LIMIT 1) IS NULL
       AND (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
             WHERE p.event_id = ev_id AND c.state <> 'purged' LIMIT 1) IS NOT NULL;
$$;
-- ;;
CREATE OR REPLACE FUNCTION pk_first_unlive_event(ev_ids text[]) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    found text;
BEGIN
    -- The rows a purge locks FOR UPDATE (the events' conversations, then the events), shared
    -- here in the same order, then the authors' erasure locks: a writer that began before a
    -- purge or an erasure waits for it, then sees it.
    IF ev_ids IS NULL OR cardinality(ev_ids) = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM conversations
     WHERE id = ANY(ARRAY(SELECT DISTINCT conversation_id FROM placements WHERE event_id = ANY(ev_ids)))
     ORDER BY id FOR KEY SHARE;
    PERFORM 1 FROM events WHERE id = ANY(ev_ids) ORDER BY id FOR KEY SHARE;
    PERFORM pk_author_lock_shared(a.author)
       FROM (SELECT DISTINCT author FROM events WHERE id = ANY(ev_ids) ORDER BY author) AS a;
    FOREACH found IN ARRAY (SELECT array_agg(e ORDER BY e) FROM unnest(ev_ids) AS e) LOOP
        IF NOT pk_event_is_live(found) THEN
            RETURN found;
        END IF;
    END LOOP;
    RETURN NULL;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_lock_for_write(conv_id text, ev_id text, event_history boolean, first_placement boolean)
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
        IF pk_event_erased(ev_id) THEN
            RAISE EXCEPTION 'purgekeeper:content_purged: event % is erased with its author''s content', ev_id;
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
CREATE OR REPLACE FUNCTION pk_events_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.provider_event_id IS NOT NULL AND (
        EXISTS (SELECT 1 FROM tombstones WHERE kind = 'provider_event' AND id = NEW.provider_event_id)
        OR EXISTS (SELECT 1 FROM events e JOIN tombstones t ON t.kind = 'event' AND t.id = e.id
                    WHERE e.provider_event_id = NEW.provider_event_id)) THEN
        RAISE EXCEPTION 'purgekeeper:content_purged: provider event % is purged', NEW.provider_event_id;
    END IF;
    IF EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.id) THEN
        RAISE EXCEPTION 'purgekeeper:id_reserved: event id % is reserved', NEW.id;
    END IF;
    -- A provider's backfill cannot bring an erased message back, nor a closed author write.
    PERFORM pk_author_lock_shared(NEW.author);
    -- Set under the author's lock, when the row is written (not when its transaction began):
    -- an erasure's preview, holding that lock, sees every earlier ingest by the author, and
    -- every later one has a newer created_at (schema.authors.newest_ingest).
    NEW.created_at := clock_timestamp();
    IF EXISTS (SELECT 1 FROM author_erasures
                WHERE author = NEW.author AND (close_author OR window_end > NEW.occurred_at)) THEN
        RAISE EXCEPTION 'purgekeeper:author_erased: content by this author is erased (event %)', NEW.id;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE OR REPLACE FUNCTION pk_events_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.provider_event_id IS DISTINCT FROM OLD.provider_event_id THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: an event id and provider_event_id never change';
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
    END IF;
    PERFORM pk_lock_for_write(NULL, OLD.id, true);
    RETURN NEW;
END $$;
-- ;;
CREATE FUNCTION pk_author_erasures_permanent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purgekeeper:tombstone_permanent: author erasures are never changed or removed';
END $$;
-- ;;
CREATE TRIGGER pk_author_erasures_permanent BEFORE UPDATE OR DELETE ON author_erasures
FOR EACH ROW EXECUTE FUNCTION pk_author_erasures_permanent();
-- ;;
CREATE TRIGGER pk_author_erasures_no_truncate BEFORE TRUNCATE ON author_erasures
FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
