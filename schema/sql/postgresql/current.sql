-- purgekeeper: every function and trigger the PostgreSQL migrations install, as they stand at
-- the newest revision (0020). Reviewed source, not a migration: the migrations (schema/sql/
-- postgresql/NNNN_*.sql) install it, this file says in one place what they have installed.
-- tests/integration/test_current_sql.py fails when the two disagree; schema/rules.py names
-- the rule each trigger enforces. Statements are separated by lines reading "-- ;;".
-- Every refusal raises 'purgekeeper:<code>: <detail>'; schema/errors.py maps the codes.
-- PostgreSQL fires a table's triggers for one event in the order of their names. No table a
-- trigger guards is truncated (pk_<table>_no_truncate, or the table's own guard function).
-- Helper functions first, then one group per table: its trigger functions and triggers.
-- ;;
-- ================================================================================================
-- helpers
-- Locks: a writer takes the locks of what it writes (conversation, event, identity, author), so a
-- check inside its transaction cannot be overtaken by a purge's acceptance.
-- ================================================================================================
CREATE FUNCTION pk_identity_lock(the_id text) RETURNS void LANGUAGE sql AS $$
    -- serialises creating an id with tombstoning it, so neither can slip past the other
    SELECT pg_advisory_xact_lock(hashtextextended('purgekeeper-identity:' || the_id, 0));
$$;
-- ;;
CREATE FUNCTION pk_author_lock_shared(the_author text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1886085493, hashtext(the_author));
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        INSERT INTO author_erasure_marks (author) VALUES (the_author) ON CONFLICT DO NOTHING;
    END IF;
END $$;
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
        IF pk_event_erased(ev_id) THEN
            RAISE EXCEPTION 'purgekeeper:content_purged: event % is erased with its author''s content', ev_id;
        END IF;
        -- An event's first placement lands on an event placed nowhere yet; everything else
        -- needs it live (a placement in a conversation that is not purged, that no retention
        -- run expires).
        IF NOT (first_placement AND NOT EXISTS (SELECT 1 FROM placements WHERE event_id = ev_id))
           AND NOT pk_has_live_placement(ev_id) THEN
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
CREATE FUNCTION pk_lock_for_write(conv_id text, ev_id text, event_history boolean)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_lock_for_write(conv_id, ev_id, event_history, false);
END $$;
-- ;;
-- ================================================================================================
-- helpers
-- Liveness: an event is live while it has no event tombstone, no author erasure covers it, and it
-- has a placement in a conversation that is not purged which no retention fence expires.
-- ================================================================================================
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
CREATE FUNCTION pk_placement_expired(ev_author text, ev_at timestamptz, conv_id text, placed_at timestamptz)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT (SELECT 1 FROM retention_fences f
             WHERE f.cutoff > ev_at AND f.placed_before > placed_at
               AND (f.conversation_id IS NULL OR f.conversation_id = conv_id)
               AND (SELECT 1 FROM retention_exemptions x
                     WHERE x.purge_id = f.purge_id AND x.kind = 'conversation' AND x.subject_id = conv_id LIMIT 1) IS NULL
               AND (SELECT 1 FROM retention_exemptions x
                     WHERE x.purge_id = f.purge_id AND x.kind = 'author' AND x.subject_id = ev_author LIMIT 1) IS NULL
             LIMIT 1) IS NOT NULL;
$$;
-- ;;
CREATE FUNCTION pk_has_live_placement(ev_id text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT (SELECT 1 FROM placements p JOIN conversations c ON c.id = p.conversation_id
                                       JOIN events e ON e.id = p.event_id
             WHERE p.event_id = ev_id AND c.state <> 'purged'
               AND NOT pk_placement_expired(e.author, e.occurred_at, p.conversation_id, p.created_at) LIMIT 1) IS NOT NULL;
$$;
-- ;;
CREATE FUNCTION pk_event_is_live(ev_id text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = ev_id LIMIT 1) IS NULL
       AND (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
             WHERE e.id = ev_id LIMIT 1) IS NULL
       AND pk_has_live_placement(ev_id);
$$;
-- ;;
CREATE FUNCTION pk_first_unlive_event(ev_ids text[]) RETURNS text LANGUAGE plpgsql AS $$
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
CREATE FUNCTION pk_held(ev_author text, conv_id text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT (SELECT 1 FROM legal_hold_subjects s JOIN legal_holds h ON h.hold_id = s.hold_id
             WHERE h.released_by IS NULL
               AND ((s.kind = 'conversation' AND s.subject_id = conv_id) OR (s.kind = 'author' AND s.subject_id = ev_author))
             LIMIT 1) IS NOT NULL;
$$;
-- ;;
CREATE FUNCTION pk_refuse_expired_placement(ev_id text, conv_id text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    ev_author text;
    ev_at timestamptz;
    governing record;
BEGIN
    IF (SELECT 1 FROM retention_policies WHERE ended_by IS NULL LIMIT 1) IS NULL THEN
        RETURN;  -- no policy stands: one probe
    END IF;
    PERFORM pg_advisory_xact_lock_shared(1886089840, 0);
    SELECT author, occurred_at INTO ev_author, ev_at FROM events WHERE id = ev_id;
    IF ev_author IS NULL THEN
        RETURN;
    END IF;
    IF pk_held(ev_author, conv_id) THEN
        RETURN;  -- retention keeps what a hold covers
    END IF;
    -- The conversation's own standing policy, else the global one.
    SELECT policy_id, max_age_seconds INTO governing FROM retention_policies
     WHERE ended_by IS NULL AND (conversation_id = conv_id OR conversation_id IS NULL)
     ORDER BY conversation_id NULLS LAST LIMIT 1;
    IF FOUND AND ev_at < clock_timestamp() - make_interval(secs => governing.max_age_seconds) THEN
        RAISE EXCEPTION 'purgekeeper:content_purged: event % occurred at %, before the cutoff of retention policy % (% seconds) for conversation %; a backfill cannot bring expired content back',
            ev_id, ev_at, governing.policy_id, governing.max_age_seconds, conv_id;
    END IF;
END $$;
-- ;;
-- ================================================================================================
-- helpers
-- Versions, bots and blobs: shared checks of the content triggers.
-- ================================================================================================
CREATE FUNCTION pk_bump_versions(conv_ids text[]) RETURNS void LANGUAGE sql AS $$
    -- In id order, like every other lock on conversations.
    WITH bumped AS (
        SELECT id FROM conversations WHERE id = ANY(conv_ids) AND state = 'active' ORDER BY id FOR NO KEY UPDATE
    )
    UPDATE conversations SET version = version + 1 FROM bumped WHERE conversations.id = bumped.id;
$$;
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
CREATE FUNCTION pk_blob_canonical_path(kind text, sha256 text, id text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE kind
        WHEN 'cas' THEN substr(sha256, 1, 2) || '/' || sha256 || '-' || id
        ELSE substr(id, 1, 2) || '/' || id
    END;
$$;
-- ;;
-- A blob's own path: the one-level path of new blobs, or the two-level one of 0006 to 0020.
CREATE FUNCTION pk_blob_path_is_canonical(kind text, sha256 text, id text, path text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT path IS NOT NULL AND path IN (
        pk_blob_canonical_path(kind, sha256, id),
        CASE kind
            WHEN 'cas' THEN substr(sha256, 1, 2) || '/' || substr(sha256, 3, 2) || '/' || sha256 || '-' || id
            ELSE substr(id, 1, 2) || '/' || substr(id, 3, 2) || '/' || id
        END);
$$;
-- ;;
-- ================================================================================================
-- helpers
-- Legal holds: what a hold in force covers is held, and a write that removes or overwrites it is refused.
-- ================================================================================================
CREATE FUNCTION pk_holds_in_force() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1886089832, 0);
    RETURN (SELECT 1 FROM legal_holds WHERE released_by IS NULL LIMIT 1) IS NOT NULL;  -- after the lock
END $$;
-- ;;
CREATE FUNCTION pk_event_held(ev_id text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT (SELECT 1 FROM events e
             WHERE e.id = ev_id
               AND (pk_held(e.author, NULL)
                    OR (SELECT 1 FROM placements p WHERE p.event_id = e.id AND pk_held(NULL, p.conversation_id) LIMIT 1)
                       IS NOT NULL)
             LIMIT 1) IS NOT NULL
       AND pk_event_is_live(ev_id);
$$;
-- ;;
CREATE FUNCTION pk_admission_held(ev_id text, the_run text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT (SELECT 1 FROM runs r JOIN conversations c ON c.id = r.conversation_id
             WHERE r.id = the_run AND c.state <> 'purged' LIMIT 1) IS NOT NULL
       AND pk_event_is_live(ev_id)
       AND (pk_held(NULL, (SELECT conversation_id FROM runs WHERE id = the_run)) OR pk_event_held(ev_id));
$$;
-- ;;
CREATE FUNCTION pk_run_held(the_run text, conv_id text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT (SELECT 1 FROM conversations WHERE id = conv_id AND state <> 'purged') IS NOT NULL
       AND (SELECT 1 FROM admissions a WHERE a.run_id = the_run AND NOT pk_event_is_live(a.event_id) LIMIT 1) IS NULL
       AND (pk_held(NULL, conv_id)
            OR (SELECT 1 FROM admissions a WHERE a.run_id = the_run AND pk_event_held(a.event_id) LIMIT 1) IS NOT NULL);
$$;
-- ;;
CREATE FUNCTION pk_derivative_held(der_id text, conv_id text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT (SELECT 1 FROM conversations WHERE id = conv_id AND state <> 'purged') IS NOT NULL
       AND (SELECT 1 FROM derivative_sources s WHERE s.derivative_id = der_id AND NOT pk_event_is_live(s.event_id)
             LIMIT 1) IS NULL
       AND (pk_held(NULL, conv_id)
            OR (SELECT 1 FROM derivative_sources s WHERE s.derivative_id = der_id AND pk_event_held(s.event_id)
                 LIMIT 1) IS NOT NULL);
$$;
-- ;;
CREATE FUNCTION pk_refuse_held(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purgekeeper:legal_hold: a legal hold covers %; it stays until the hold is released', what;
END $$;
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
-- ================================================================================================
-- helpers
-- Ledger-bound bookkeeping: retention and hold state is written only with the ledger row that records it.
-- ================================================================================================
CREATE FUNCTION pk_ledger_row(row_purge_id text, row_kind text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('seq', seq, 'selectors', selectors::jsonb)
      FROM purge_ledger WHERE purge_id = row_purge_id AND kind = row_kind;
$$;
-- ;;
CREATE FUNCTION pk_ledger_seq(row_purge_id text) RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT COALESCE((SELECT seq FROM purge_ledger WHERE purge_id = row_purge_id), 0);
$$;
-- ;;
CREATE FUNCTION pk_widened_seq() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT GREATEST(
        COALESCE((SELECT max(seq) FROM purge_ledger WHERE kind = 'hold_release'), 0),
        COALESCE((SELECT max(seq) FROM purge_ledger WHERE kind = 'retention_end'), 0),
        COALESCE((SELECT max(seq) FROM purge_ledger WHERE kind = 'retention'), 0));
$$;
-- ;;
CREATE FUNCTION pk_retention_window_clear(policy retention_policies, from_at timestamptz, to_at timestamptz)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (
        SELECT 1 FROM placements p JOIN events e ON e.id = p.event_id
                                   JOIN conversations c ON c.id = p.conversation_id
         WHERE e.occurred_at < to_at AND (from_at IS NULL OR e.occurred_at >= from_at)
           AND c.state <> 'purged'
           AND (policy.conversation_id IS NULL OR p.conversation_id = policy.conversation_id)
           AND (policy.conversation_id IS NOT NULL
                OR NOT EXISTS (SELECT 1 FROM retention_policies o
                                WHERE o.conversation_id = p.conversation_id AND o.ended_by IS NULL))
           AND NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.kind = 'event' AND t.id = e.id)
           AND NOT EXISTS (SELECT 1 FROM author_erasures a WHERE a.author = e.author AND a.window_end > e.occurred_at)
           AND NOT pk_held(e.author, p.conversation_id));
$$;
-- ;;
CREATE FUNCTION pk_require_policy_version(policy retention_policies, replaced_seq bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    version jsonb := pk_ledger_row(policy.purge_id, 'retention');
BEGIN
    IF version IS NULL
       OR version #>> '{selectors,policy_id}' IS DISTINCT FROM policy.policy_id
       OR version #>> '{selectors,conversation_id}' IS DISTINCT FROM policy.conversation_id
       OR (version #>> '{selectors,max_age_seconds}')::bigint IS DISTINCT FROM policy.max_age_seconds THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: its scope and max age are written only with the ledger row of that version (a retention row of this policy with this definition)', policy.policy_id;
    END IF;
    IF (version ->> 'seq')::bigint <= replaced_seq THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: a version replaces only an older state', policy.policy_id;
    END IF;
END $$;
-- ;;
CREATE FUNCTION pk_require_policy_end(policy retention_policies) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    ending jsonb := pk_ledger_row(policy.ended_by, 'retention_end');
BEGIN
    IF ending IS NULL
       OR ending #>> '{selectors,policy_id}' IS DISTINCT FROM policy.policy_id
       OR ending #>> '{selectors,ended}' IS DISTINCT FROM policy.purge_id
       OR (ending ->> 'seq')::bigint <= pk_ledger_seq(policy.purge_id) THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: it ends only with the ledger row that ends this version', policy.policy_id;
    END IF;
END $$;
-- ;;
CREATE FUNCTION pk_run_moves_window(policy retention_policies, old_through timestamptz) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    run jsonb := pk_ledger_row(policy.last_purge_id, 'retention_run');
    window_start timestamptz;
BEGIN
    IF run IS NULL
       OR run #>> '{selectors,policy_id}' IS DISTINCT FROM policy.policy_id
       OR run #>> '{selectors,policy_purge_id}' IS DISTINCT FROM policy.purge_id
       OR (run #>> '{selectors,cutoff}')::timestamptz IS DISTINCT FROM policy.expired_through
       OR (run ->> 'seq')::bigint <= pk_widened_seq() THEN
        RETURN false;
    END IF;
    window_start := (run #>> '{selectors,window_start}')::timestamptz;
    RETURN window_start IS NULL OR (old_through IS NOT NULL AND old_through >= window_start);
END $$;
-- ;;
CREATE FUNCTION pk_retention_fence_left(fence retention_fences) RETURNS boolean LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- A placement the fence expires, still there: driven by the conversation's placements
    -- (a conversation's run) or by the events of the window in time order (a global run).
    IF fence.conversation_id IS NOT NULL THEN
        RETURN EXISTS (
            SELECT 1 FROM placements p JOIN events e ON e.id = p.event_id JOIN conversations c ON c.id = p.conversation_id
             WHERE p.conversation_id = fence.conversation_id AND c.state <> 'purged' AND p.created_at < fence.placed_before
               AND e.occurred_at < fence.cutoff AND (fence.window_start IS NULL OR e.occurred_at >= fence.window_start)
               AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = fence.purge_id
                                AND x.kind = 'conversation' AND x.subject_id = p.conversation_id)
               AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = fence.purge_id
                                AND x.kind = 'author' AND x.subject_id = e.author));
    END IF;
    RETURN EXISTS (
        SELECT 1 FROM events e JOIN placements p ON p.event_id = e.id JOIN conversations c ON c.id = p.conversation_id
         WHERE e.occurred_at < fence.cutoff AND (fence.window_start IS NULL OR e.occurred_at >= fence.window_start)
           AND c.state <> 'purged' AND p.created_at < fence.placed_before
           AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = fence.purge_id
                            AND x.kind = 'conversation' AND x.subject_id = p.conversation_id)
           AND NOT EXISTS (SELECT 1 FROM retention_exemptions x WHERE x.purge_id = fence.purge_id
                            AND x.kind = 'author' AND x.subject_id = e.author));
END $$;
-- ;;
-- ================================================================================================
-- helpers
-- Shared trigger functions: rows that are never deleted, tables that are never truncated.
-- ================================================================================================
CREATE FUNCTION pk_never_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purgekeeper:invalid_change: % rows are never deleted (%)', TG_TABLE_NAME, TG_ARGV[0];
END $$;
-- ;;
CREATE FUNCTION pk_never_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purgekeeper:invalid_change: % is never truncated', TG_TABLE_NAME;
END $$;
-- ;;
-- ================================================================================================
-- conversations
-- A conversation is created active, under an id no tombstone has reserved, and a bot that
-- is not deleted. Its id and kind never change; its state only moves forward (a channel to deleted,
-- any conversation to purged), and only with its tombstone; its version never falls.
-- ================================================================================================
CREATE FUNCTION pk_conversations_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER pk_conversations_no_truncate BEFORE TRUNCATE ON conversations FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- events
-- An event's id and provider event id never change, and a tombstoned one is never used again;
-- nothing by an erased or closed author is written; the content of an event that is not live is
-- never written again; an erased event's author and time never change; the row is never deleted;
-- held content is not overwritten; a change of content bumps its conversations' versions.
-- Its key is set once (0020): at insert, or by the sealing of its plain body (or, without a body, for
-- its attachments' names), nothing else changed, on a live event no hold covers; a sealing bumps nothing.
-- ================================================================================================
CREATE FUNCTION pk_events_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER pk_events_after_update AFTER UPDATE ON events
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_events_after_update();
-- ;;
CREATE FUNCTION pk_events_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER pk_events_before_insert BEFORE INSERT ON events
FOR EACH ROW EXECUTE FUNCTION pk_events_before_insert();
-- ;;
CREATE FUNCTION pk_events_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
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
-- The purge's own cleanup (a body set to NULL, nothing else changed) skips the call.
CREATE TRIGGER pk_events_before_update BEFORE UPDATE ON events
FOR EACH ROW WHEN (NEW.id <> OLD.id OR NEW.provider_event_id IS DISTINCT FROM OLD.provider_event_id
                   OR NEW.body IS NOT NULL OR NEW.author <> OLD.author OR NEW.occurred_at <> OLD.occurred_at
                   OR NEW.created_at <> OLD.created_at OR NEW.key_id IS DISTINCT FROM OLD.key_id)
EXECUTE FUNCTION pk_events_before_update();
-- ;;
CREATE FUNCTION pk_events_held_author() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF pk_holds_in_force() THEN  -- then a new statement: a snapshot after the lock
        IF pk_event_held(OLD.id) THEN
            RAISE EXCEPTION 'purgekeeper:legal_hold: a legal hold covers event %; its author stays until the hold is released', OLD.id;
        END IF;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_events_held_author BEFORE UPDATE OF author ON events
FOR EACH ROW WHEN (NEW.author IS DISTINCT FROM OLD.author)
EXECUTE FUNCTION pk_events_held_author();
-- ;;
CREATE FUNCTION pk_events_held_content() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    held text;
BEGIN
    -- Statement level: one look at the holds however many rows changed.
    IF pk_holds_in_force() THEN  -- then a new statement: a snapshot after the lock
        SELECT o.id INTO held
          FROM old_rows o JOIN new_rows n ON n.id = o.id
         WHERE o.body IS NOT NULL AND n.body IS DISTINCT FROM o.body AND pk_event_held(o.id)
         ORDER BY o.id LIMIT 1;
        IF held IS NOT NULL THEN
            PERFORM pk_refuse_held(format('event %s: its body', held));
        END IF;
    END IF;
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_events_held_content AFTER UPDATE ON events
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_events_held_content();
-- ;;
CREATE TRIGGER pk_events_never_deleted BEFORE DELETE ON events
FOR EACH ROW EXECUTE FUNCTION pk_never_deleted('purge the event instead: its id and provider event id stay taken');
-- ;;
CREATE TRIGGER pk_events_no_truncate BEFORE TRUNCATE ON events FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- placements
-- An event is placed only while it is live, in a conversation neither purged nor deleted, and
-- never where a retention fence or an in-force policy expires it (unless held); a placement never
-- changes; deleting one never leaves a live event without a live placement, nor removes a held
-- one; placing and removing bump the conversation's version.
-- PostgreSQL: the delete checks (a hold first, then the last live placement) are a statement
-- trigger over the deleted rows (old_rows), since 0014.
-- ================================================================================================
CREATE FUNCTION pk_placements_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    unfenced text[];
    orphan text;
    orphan_state text;
    held record;
BEGIN
    -- First a hold: a deleted placement that was live (its conversation not purged, no
    -- retention fence expiring it) of an event that was live (no fence; that placement keeps
    -- it live) in a conversation a hold covers.
    IF pk_holds_in_force() THEN  -- then a new statement: a snapshot after the lock
        SELECT o.conversation_id, o.event_id INTO held
          FROM old_rows o
          JOIN conversations c ON c.id = o.conversation_id
          JOIN events e ON e.id = o.event_id
         WHERE c.state <> 'purged' AND pk_held(NULL, o.conversation_id)
           AND (SELECT 1 FROM tombstones t WHERE t.kind = 'event' AND t.id = o.event_id LIMIT 1) IS NULL
           AND NOT pk_author_erased_at(e.author, e.occurred_at)
           AND NOT pk_placement_expired(e.author, e.occurred_at, o.conversation_id, o.created_at)
         ORDER BY o.event_id, o.conversation_id LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'purgekeeper:legal_hold: a legal hold covers conversation %; event % stays placed in it until the hold is released', held.conversation_id, held.event_id;
        END IF;
    END IF;
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
         WHERE o.event_id = ANY(unfenced) AND NOT pk_has_live_placement(o.event_id)
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
CREATE TRIGGER pk_placements_after_delete AFTER DELETE ON placements
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_placements_after_delete();
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
CREATE FUNCTION pk_placements_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a placement never changes; delete and place again';
    END IF;
    PERFORM pk_lock_for_write(NEW.conversation_id, NEW.event_id, false, true);
    PERFORM pk_refuse_expired_placement(NEW.event_id, NEW.conversation_id);
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_placements_before_write BEFORE INSERT OR UPDATE ON placements
FOR EACH ROW EXECUTE FUNCTION pk_placements_before_write();
-- ;;
CREATE TRIGGER pk_placements_no_truncate BEFORE TRUNCATE ON placements FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- runs
-- A run starts only in a live conversation with a bot that is not deleted; its id, conversation
-- and bot never change and a terminal status is final; its output stays NULL once its conversation
-- is purged or an event it admitted is not live; held output is kept; changes bump the version.
-- Its key is set once (0020): with its sealed output at its finish, or by the sealing of a finished
-- run's plain output, nothing else changed (no hold, admitted events live); a sealing bumps nothing.
-- ================================================================================================
CREATE FUNCTION pk_runs_after_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.key_id IS NULL AND NEW.key_id IS NOT NULL AND NEW.status = OLD.status THEN
        RETURN NULL;  -- a sealing of the output (pk_runs_before_update): nothing a reader gets changes
    END IF;
    PERFORM pk_bump_versions(ARRAY[NEW.conversation_id]);
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_runs_after_write AFTER INSERT OR UPDATE ON runs
FOR EACH ROW EXECUTE FUNCTION pk_runs_after_write();
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
CREATE TRIGGER pk_runs_before_update BEFORE UPDATE ON runs
FOR EACH ROW EXECUTE FUNCTION pk_runs_before_update();
-- ;;
CREATE FUNCTION pk_runs_held_content() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF pk_holds_in_force() THEN  -- then a new statement: a snapshot after the lock
        IF pk_run_held(OLD.id, OLD.conversation_id) THEN
            PERFORM pk_refuse_held(format('run %s: its output', OLD.id));
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_runs_held_content BEFORE UPDATE OF output ON runs
FOR EACH ROW WHEN (OLD.output IS NOT NULL AND NEW.output IS DISTINCT FROM OLD.output)
EXECUTE FUNCTION pk_runs_held_content();
-- ;;
CREATE TRIGGER pk_runs_held_delete BEFORE DELETE ON runs
FOR EACH ROW WHEN (OLD.output IS NOT NULL)
EXECUTE FUNCTION pk_runs_held_content();
-- ;;
CREATE TRIGGER pk_runs_no_truncate BEFORE TRUNCATE ON runs FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- admissions
-- An admission is written only for a live event, in a run of a live conversation; it never
-- changes but for its payload being NULLed; it is not deleted while its event's purge stands, nor
-- while held.
-- Its key is set once (0020): at insert, or by the sealing of its plain payload, nothing else
-- changed, of a live event in a conversation not purged, no hold covering it.
-- ================================================================================================
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
CREATE FUNCTION pk_admissions_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_bump_versions(ARRAY(SELECT conversation_id FROM runs WHERE id = NEW.run_id));
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_admissions_after_insert AFTER INSERT ON admissions
FOR EACH ROW EXECUTE FUNCTION pk_admissions_after_insert();
-- ;;
CREATE FUNCTION pk_admissions_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER pk_admissions_before_write BEFORE INSERT OR UPDATE ON admissions
FOR EACH ROW EXECUTE FUNCTION pk_admissions_before_write();
-- ;;
CREATE FUNCTION pk_admissions_held_content() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF pk_holds_in_force() THEN  -- then a new statement: a snapshot after the lock
        IF pk_admission_held(OLD.event_id, OLD.run_id) THEN
            PERFORM pk_refuse_held(format('the admission of event %s to run %s', OLD.event_id, OLD.run_id));
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_admissions_held_content BEFORE UPDATE OF payload ON admissions
FOR EACH ROW WHEN (OLD.payload IS NOT NULL AND NEW.payload IS DISTINCT FROM OLD.payload)
EXECUTE FUNCTION pk_admissions_held_content();
-- ;;
CREATE TRIGGER pk_admissions_held_delete BEFORE DELETE ON admissions
FOR EACH ROW WHEN (OLD.payload IS NOT NULL)
EXECUTE FUNCTION pk_admissions_held_content();
-- ;;
CREATE TRIGGER pk_admissions_no_truncate BEFORE TRUNCATE ON admissions FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- derivatives
-- A derivative is written only in a live conversation; its id and conversation never change; its
-- payload stays NULL while an event it comes from is not live; held payloads and rows are kept;
-- changes bump the version.
-- Its key is set once (0020): at insert, or by the sealing of its plain payload, nothing else changed,
-- in a conversation not purged, its events live, no hold covering it; a sealing bumps nothing.
-- ================================================================================================
CREATE FUNCTION pk_derivatives_after_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.key_id IS NULL AND NEW.key_id IS NOT NULL THEN
        RETURN NULL;  -- a sealing of the payload (pk_derivatives_before_write): nothing a reader gets changes
    END IF;
    PERFORM pk_bump_versions(ARRAY[NEW.conversation_id]);
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_derivatives_after_write AFTER INSERT OR UPDATE ON derivatives
FOR EACH ROW EXECUTE FUNCTION pk_derivatives_after_write();
-- ;;
CREATE FUNCTION pk_derivatives_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER pk_derivatives_before_write BEFORE INSERT OR UPDATE ON derivatives
FOR EACH ROW EXECUTE FUNCTION pk_derivatives_before_write();
-- ;;
CREATE FUNCTION pk_derivatives_held_content() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF pk_holds_in_force() THEN  -- then a new statement: a snapshot after the lock
        IF pk_derivative_held(OLD.id, OLD.conversation_id) THEN
            PERFORM pk_refuse_held(format('derivative %s: its payload', OLD.id));
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_derivatives_held_content BEFORE UPDATE OF payload ON derivatives
FOR EACH ROW WHEN (OLD.payload IS NOT NULL AND NEW.payload IS DISTINCT FROM OLD.payload)
EXECUTE FUNCTION pk_derivatives_held_content();
-- ;;
CREATE TRIGGER pk_derivatives_held_delete BEFORE DELETE ON derivatives
FOR EACH ROW WHEN (OLD.payload IS NOT NULL)
EXECUTE FUNCTION pk_derivatives_held_content();
-- ;;
CREATE TRIGGER pk_derivatives_no_truncate BEFORE TRUNCATE ON derivatives FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- derivative_sources
-- A derivative's source is a live event; a source never changes, and is not deleted while its
-- event's purge stands, nor while held.
-- ================================================================================================
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
CREATE FUNCTION pk_derivative_sources_held_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF pk_holds_in_force() THEN  -- then a new statement: a snapshot after the lock
        IF pk_event_held(OLD.event_id)
           AND (SELECT 1 FROM derivatives d JOIN conversations c ON c.id = d.conversation_id
                 WHERE d.id = OLD.derivative_id AND d.payload IS NOT NULL AND c.state <> 'purged' LIMIT 1) IS NOT NULL THEN
            PERFORM pk_refuse_held(format('event %s, which derivative %s came from', OLD.event_id, OLD.derivative_id));
        END IF;
    END IF;
    RETURN OLD;
END $$;
-- ;;
CREATE TRIGGER pk_derivative_sources_held_delete BEFORE DELETE ON derivative_sources
FOR EACH ROW EXECUTE FUNCTION pk_derivative_sources_held_delete();
-- ;;
CREATE TRIGGER pk_derivative_sources_no_truncate BEFORE TRUNCATE ON derivative_sources FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- attachments
-- An attachment binds a live event to a present blob, and a blob that holds purged content is
-- bound to nothing new; only its name changes (the bodies step NULLs it); the row stays until the
-- purge's cleanup has deleted the bytes; a held attachment keeps its name and row.
-- Its key is its event's, set once (0020): at insert, or by the sealing of its plain name under the
-- event's key, nothing else changed, of a live event no hold covers.
-- ================================================================================================
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
CREATE FUNCTION pk_attachments_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
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

-- ;;
CREATE TRIGGER pk_attachments_before_write BEFORE INSERT OR UPDATE ON attachments
FOR EACH ROW EXECUTE FUNCTION pk_attachments_before_write();
-- ;;
CREATE FUNCTION pk_attachments_held_content() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF pk_holds_in_force() THEN  -- then a new statement: a snapshot after the lock
        IF pk_event_held(OLD.event_id) THEN
            PERFORM pk_refuse_held(format('event %s: its attachment %s', OLD.event_id, OLD.id));
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_attachments_held_content BEFORE UPDATE OF name ON attachments
FOR EACH ROW WHEN (OLD.name IS NOT NULL AND NEW.name IS DISTINCT FROM OLD.name)
EXECUTE FUNCTION pk_attachments_held_content();
-- ;;
CREATE TRIGGER pk_attachments_held_delete BEFORE DELETE ON attachments
FOR EACH ROW EXECUTE FUNCTION pk_attachments_held_content();
-- ;;
CREATE TRIGGER pk_attachments_no_truncate BEFORE TRUNCATE ON attachments FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- blobs
-- A new blob's path is a canonical one for its kind and id (one level of shards, or the two of
-- 0006 to 0020); afterwards only its state changes, forward (present, deleting, deleted), and a
-- deleted blob's path may become a canonical one.
-- ================================================================================================
CREATE FUNCTION pk_blobs_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id !~ '^[0-9A-Za-z_-]{4,64}$' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a blob id is 4 to 64 characters of A-Z a-z 0-9 _ -';
    END IF;
    IF NEW.sha256 !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: blob % needs the lowercase hex SHA-256 of its bytes', NEW.id;
    END IF;
    IF NOT pk_blob_path_is_canonical(NEW.kind, NEW.sha256, NEW.id, NEW.path) THEN
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
CREATE FUNCTION pk_blobs_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.sha256 <> OLD.sha256 OR NEW.size <> OLD.size THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a blob only changes state';
    END IF;
    IF NEW.path <> OLD.path
       AND NOT (NEW.state = 'deleted' AND pk_blob_path_is_canonical(NEW.kind, NEW.sha256, NEW.id, NEW.path)) THEN
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
CREATE TRIGGER pk_blobs_before_update BEFORE UPDATE ON blobs
FOR EACH ROW WHEN (
    NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.sha256 <> OLD.sha256 OR NEW.size <> OLD.size
    OR (NEW.path <> OLD.path
        AND NOT (NEW.state = 'deleted' AND pk_blob_path_is_canonical(NEW.kind, NEW.sha256, NEW.id, NEW.path)))
    OR (NEW.state <> OLD.state AND NOT (
        (OLD.state = 'present' AND NEW.state = 'deleting')
        OR (OLD.state = 'deleting' AND NEW.state = 'deleted')))
)
EXECUTE FUNCTION pk_blobs_before_update();
-- ;;
CREATE TRIGGER pk_blobs_no_truncate BEFORE TRUNCATE ON blobs FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- bots
-- A bot is created active under an id no tombstone reserves; it is deleted only by its tombstone,
-- and a deleted bot never changes again.
-- ================================================================================================
CREATE FUNCTION pk_bots_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER pk_bots_no_truncate BEFORE TRUNCATE ON bots FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- tombstones
-- Tombstones are permanent. An identity tombstone takes its id for ever (reserving it) and moves
-- the state of the conversation, channel or bot it names.
-- ================================================================================================
CREATE FUNCTION pk_tombstones_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER pk_tombstones_after_insert AFTER INSERT ON tombstones
FOR EACH ROW WHEN (NEW.kind IN ('conversation', 'channel', 'bot'))
EXECUTE FUNCTION pk_tombstones_after_insert();
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
FOR EACH ROW WHEN (NEW.kind IN ('conversation', 'channel', 'bot'))
EXECUTE FUNCTION pk_tombstones_before_insert();
-- ;;
CREATE FUNCTION pk_tombstones_permanent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purgekeeper:tombstone_permanent: tombstones are never changed or removed';
END $$;
-- ;;
CREATE TRIGGER pk_tombstones_no_truncate BEFORE TRUNCATE ON tombstones
FOR EACH STATEMENT EXECUTE FUNCTION pk_tombstones_permanent();
-- ;;
CREATE TRIGGER pk_tombstones_permanent BEFORE UPDATE OR DELETE ON tombstones
FOR EACH ROW EXECUTE FUNCTION pk_tombstones_permanent();
-- ;;
-- ================================================================================================
-- identity_reservations
-- A reserved conversation or bot id stays reserved: the rows never change or go.
-- ================================================================================================
CREATE TRIGGER pk_identity_reservations_no_truncate BEFORE TRUNCATE ON identity_reservations FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
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
-- ;;
-- ================================================================================================
-- cleanup_steps
-- A purge's cleanup steps are never deleted. What the done ones count is kept in metric_counters (0015).
-- ================================================================================================
CREATE TRIGGER pk_cleanup_steps_never_deleted BEFORE DELETE ON cleanup_steps
FOR EACH ROW EXECUTE FUNCTION pk_never_deleted('a purge without its steps would read as complete');
-- ;;
CREATE TRIGGER pk_cleanup_steps_no_truncate BEFORE TRUNCATE ON cleanup_steps FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- A step's totals count while it is done: added when it becomes done (or is written done), taken
-- back when it is done no more (a restore's re-arm), the difference when a done step changes.
-- Once per statement (a bulk write adds its rows up once), and only after the first step row of
-- each purge concerned is locked, as the step protocol locks it: step rows, then counters,
-- everywhere (schema.steps), and the counters in the order of their keys.
CREATE FUNCTION pk_count_done_steps(gone cleanup_steps[], came cleanup_steps[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(gone) + cardinality(came) = 0 THEN
        RETURN;
    END IF;
    PERFORM 1 FROM cleanup_steps
     WHERE id IN (SELECT min(s.id) FROM cleanup_steps s
                   WHERE s.purge_id IN (SELECT g.purge_id FROM unnest(gone) AS g
                                        UNION SELECT c.purge_id FROM unnest(came) AS c)
                   GROUP BY s.purge_id)
     ORDER BY id
       FOR UPDATE;
    WITH changes AS (
        SELECT -1 AS sign, g.* FROM unnest(gone) AS g
        UNION ALL
        SELECT 1, c.* FROM unnest(came) AS c
    ), amounts AS (
        SELECT 'done_steps' AS metric, ch.kind, b.bucket, ch.sign * b.amount AS amount
          FROM changes AS ch
         CROSS JOIN LATERAL (VALUES ('steps', 1::bigint), ('attempts', ch.attempts::bigint),
                                    ('removed', ch.removed), ('retained_shared', ch.retained_shared)) AS b (bucket, amount)
        UNION ALL
        SELECT 'retention_' || b.name, 'retention_run', '', ch.sign * b.amount
          FROM changes AS ch
          JOIN purge_ledger AS l ON l.purge_id = ch.purge_id AND l.kind = 'retention_run'
         CROSS JOIN LATERAL (VALUES ('expired', ch.removed), ('held', ch.held)) AS b (name, amount)
         WHERE ch.kind = 'bodies'
    )
    INSERT INTO metric_counters AS m (metric, kind, bucket, value)
    SELECT a.metric, a.kind, a.bucket, sum(a.amount) FROM amounts AS a
     GROUP BY a.metric, a.kind, a.bucket
     ORDER BY a.metric, a.kind, a.bucket
    ON CONFLICT (metric, kind, bucket) DO UPDATE SET value = m.value + excluded.value;
END $$;
-- ;;
CREATE FUNCTION pk_cleanup_steps_count_done_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pk_count_done_steps('{}', ARRAY(SELECT ROW(n.*)::cleanup_steps FROM new_rows AS n WHERE n.status = 'done'));
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_cleanup_steps_count_done_insert AFTER INSERT ON cleanup_steps
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_cleanup_steps_count_done_insert();
-- ;;
CREATE FUNCTION pk_cleanup_steps_count_done_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- the rows whose counted fields changed, with a side that is done
    PERFORM pk_count_done_steps(
        ARRAY(SELECT ROW(o.*)::cleanup_steps FROM old_rows AS o JOIN new_rows AS n ON n.id = o.id
               WHERE o.status = 'done'
                 AND (o.status, o.attempts, o.removed, o.retained_shared, o.held)
                     IS DISTINCT FROM (n.status, n.attempts, n.removed, n.retained_shared, n.held)),
        ARRAY(SELECT ROW(n.*)::cleanup_steps FROM old_rows AS o JOIN new_rows AS n ON n.id = o.id
               WHERE n.status = 'done'
                 AND (o.status, o.attempts, o.removed, o.retained_shared, o.held)
                     IS DISTINCT FROM (n.status, n.attempts, n.removed, n.retained_shared, n.held)));
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_cleanup_steps_count_done_update AFTER UPDATE ON cleanup_steps
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_cleanup_steps_count_done_update();
-- ;;
-- ================================================================================================
-- purge_ledger
-- The purge ledger is append-only: a row is never changed, deleted or written over, each row
-- extends the chain at ledger_head, and the head moves to the last row appended.
-- PostgreSQL: the chain trigger checks each row against the one before it, and a statement
-- trigger moves the head once per statement (0007).
-- ================================================================================================
CREATE FUNCTION pk_ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purgekeeper:ledger_append_only: the purge ledger is append-only';
END $$;
-- ;;
CREATE TRIGGER pk_purge_ledger_append_only BEFORE UPDATE OR DELETE ON purge_ledger
FOR EACH ROW EXECUTE FUNCTION pk_ledger_append_only();
-- ;;
CREATE FUNCTION pk_purge_ledger_chain() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    before_hash text;
BEGIN
    IF NEW.seq = 1 THEN
        before_hash := repeat('0', 64);
    ELSE
        SELECT row_hash INTO before_hash FROM purge_ledger WHERE seq = NEW.seq - 1;
    END IF;
    IF before_hash IS NULL OR NEW.prev_hash <> before_hash THEN
        RAISE EXCEPTION 'purgekeeper:ledger_append_only: row % does not extend the ledger', NEW.seq;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_purge_ledger_chain BEFORE INSERT ON purge_ledger
FOR EACH ROW EXECUTE FUNCTION pk_purge_ledger_chain();
-- ;;
CREATE FUNCTION pk_purge_ledger_move_head() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    first_seq bigint;
    last_seq bigint;
    rows_in bigint;
    last_hash text;
BEGIN
    SELECT min(seq), max(seq), count(*) INTO first_seq, last_seq, rows_in FROM new_rows;
    IF rows_in = 0 THEN
        RETURN NULL;
    END IF;
    SELECT row_hash INTO last_hash FROM new_rows WHERE seq = last_seq;
    UPDATE ledger_head SET seq = last_seq, head_hash = last_hash WHERE id = 1 AND seq = first_seq - 1;
    IF NOT FOUND OR last_seq - first_seq + 1 <> rows_in THEN
        RAISE EXCEPTION 'purgekeeper:ledger_append_only: rows % to % do not extend the ledger head', first_seq, last_seq;
    END IF;
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_purge_ledger_move_head AFTER INSERT ON purge_ledger
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_purge_ledger_move_head();
-- ;;
CREATE TRIGGER pk_purge_ledger_no_truncate BEFORE TRUNCATE ON purge_ledger
FOR EACH STATEMENT EXECUTE FUNCTION pk_ledger_append_only();
-- ;;
-- The retention runs accepted: their ledger rows, once per statement (a merge appends many).
CREATE FUNCTION pk_purge_ledger_count_runs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    runs bigint;
BEGIN
    SELECT count(*) INTO runs FROM new_rows WHERE kind = 'retention_run';
    IF runs > 0 THEN
        INSERT INTO metric_counters AS m (metric, kind, bucket, value)
        VALUES ('retention_runs', 'retention_run', '', runs)
        ON CONFLICT (metric, kind, bucket) DO UPDATE SET value = m.value + excluded.value;
    END IF;
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_purge_ledger_count_runs AFTER INSERT ON purge_ledger
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION pk_purge_ledger_count_runs();
-- ;;
-- ================================================================================================
-- author_erasures
-- An author erasure is permanent, and each one raises its author's erasure mark.
-- ================================================================================================
CREATE FUNCTION pk_author_erasures_mark() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO author_erasure_marks (author, erasures) VALUES (NEW.author, 1)
    ON CONFLICT (author) DO UPDATE SET erasures = author_erasure_marks.erasures + 1;
    RETURN NULL;
END $$;
-- ;;
CREATE TRIGGER pk_author_erasures_mark AFTER INSERT ON author_erasures
FOR EACH ROW EXECUTE FUNCTION pk_author_erasures_mark();
-- ;;
CREATE TRIGGER pk_author_erasures_no_truncate BEFORE TRUNCATE ON author_erasures
FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE FUNCTION pk_author_erasures_permanent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purgekeeper:tombstone_permanent: author erasures are never changed or removed';
END $$;
-- ;;
CREATE TRIGGER pk_author_erasures_permanent BEFORE UPDATE OR DELETE ON author_erasures
FOR EACH ROW EXECUTE FUNCTION pk_author_erasures_permanent();
-- ;;
-- ================================================================================================
-- author_erasure_marks
-- An author's erasure mark only counts up and is never removed.
-- ================================================================================================
CREATE FUNCTION pk_author_erasure_marks_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NEW.author <> OLD.author OR NEW.erasures <= OLD.erasures THEN
        RAISE EXCEPTION 'purgekeeper:tombstone_permanent: an author''s erasure mark only counts up, and is never removed';
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_author_erasure_marks_guard BEFORE UPDATE OR DELETE ON author_erasure_marks
FOR EACH ROW EXECUTE FUNCTION pk_author_erasure_marks_guard();
-- ;;
CREATE TRIGGER pk_author_erasure_marks_no_truncate BEFORE TRUNCATE ON author_erasure_marks
FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- retention_policies
-- A retention policy is never deleted; its definition (scope, max age) and its end are written
-- only with the ledger row that records them; its window moves only forward and never past now.
-- ================================================================================================
CREATE FUNCTION pk_retention_policies_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    latest timestamptz;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'purgekeeper:tombstone_permanent: a retention policy is never deleted; remove it with retention_end';
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.ended_by IS NOT NULL OR NEW.pending_cutoff IS NOT NULL OR NEW.expired_through IS NOT NULL THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: a new policy stands, with nothing run or planned', NEW.policy_id;
        END IF;
        -- a row already there (an upsert's conflict) is replaced only by a newer version
        PERFORM pk_require_policy_version(NEW, COALESCE(
            (SELECT GREATEST(pk_ledger_seq(purge_id), pk_ledger_seq(ended_by)) FROM retention_policies
              WHERE policy_id = NEW.policy_id), 0));
        RETURN NEW;
    END IF;
    IF NEW.policy_id <> OLD.policy_id THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: its id never changes', OLD.policy_id;
    END IF;
    IF NEW.purge_id <> OLD.purge_id OR NEW.conversation_id IS DISTINCT FROM OLD.conversation_id
       OR NEW.max_age_seconds <> OLD.max_age_seconds THEN
        PERFORM pk_require_policy_version(NEW, GREATEST(pk_ledger_seq(OLD.purge_id), pk_ledger_seq(OLD.ended_by)));
    END IF;
    IF NEW.ended_by IS DISTINCT FROM OLD.ended_by THEN
        IF NEW.ended_by IS NOT NULL AND OLD.ended_by IS NOT NULL THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: it ended once', OLD.policy_id;
        ELSIF NEW.ended_by IS NOT NULL THEN
            PERFORM pk_require_policy_end(NEW);
        ELSIF NEW.purge_id = OLD.purge_id THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: an ended policy stands again only with a new version', OLD.policy_id;
        END IF;
    END IF;
    latest := clock_timestamp() - make_interval(secs => NEW.max_age_seconds);
    IF NEW.pending_cutoff IS DISTINCT FROM OLD.pending_cutoff AND NEW.pending_cutoff > latest THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: a planned cutoff is never later than now - max_age', OLD.policy_id;
    END IF;
    IF NEW.expired_through IS NOT NULL AND (OLD.expired_through IS NULL OR NEW.expired_through > OLD.expired_through) THEN
        IF NEW.expired_through > latest THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: its window never reaches past now - max_age', OLD.policy_id;
        END IF;
        IF NOT pk_run_moves_window(NEW, OLD.expired_through)
           AND NOT pk_retention_window_clear(NEW, OLD.expired_through, NEW.expired_through) THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: its window moves on only with a run of this version (last_purge_id) or over what holds nothing to expire', OLD.policy_id;
        END IF;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_retention_policies_guard BEFORE INSERT OR UPDATE OR DELETE ON retention_policies
FOR EACH ROW EXECUTE FUNCTION pk_retention_policies_guard();
-- ;;
CREATE TRIGGER pk_retention_policies_no_truncate BEFORE TRUNCATE ON retention_policies
FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- retention_fences
-- A retention fence never changes, and is deleted only once nothing it expires is left.
-- ================================================================================================
CREATE FUNCTION pk_retention_fences_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'purgekeeper:tombstone_permanent: a retention fence never changes';
    END IF;
    IF pk_retention_fence_left(OLD) THEN
        RAISE EXCEPTION 'purgekeeper:content_purged: retention run % still expires content; only its cleanup removes its fence', OLD.purge_id;
    END IF;
    RETURN OLD;
END $$;
-- ;;
CREATE TRIGGER pk_retention_fences_guard BEFORE UPDATE OR DELETE ON retention_fences
FOR EACH ROW EXECUTE FUNCTION pk_retention_fences_guard();
-- ;;
CREATE TRIGGER pk_retention_fences_no_truncate BEFORE TRUNCATE ON retention_fences
FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- retention_exemptions
-- The exemptions of a retention run are fixed while its fence stands.
-- ================================================================================================
CREATE FUNCTION pk_retention_exemptions_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'purgekeeper:tombstone_permanent: a retention exemption never changes';
    END IF;
    IF EXISTS (SELECT 1 FROM retention_fences
                WHERE purge_id = CASE WHEN TG_OP = 'INSERT' THEN NEW.purge_id ELSE OLD.purge_id END) THEN
        RAISE EXCEPTION 'purgekeeper:tombstone_permanent: the exemptions of retention run % are fixed while its fence stands', 
            CASE WHEN TG_OP = 'INSERT' THEN NEW.purge_id ELSE OLD.purge_id END;
    END IF;
    RETURN CASE WHEN TG_OP = 'INSERT' THEN NEW ELSE OLD END;
END $$;
-- ;;
CREATE TRIGGER pk_retention_exemptions_guard BEFORE INSERT OR UPDATE OR DELETE ON retention_exemptions
FOR EACH ROW EXECUTE FUNCTION pk_retention_exemptions_guard();
-- ;;
CREATE TRIGGER pk_retention_exemptions_no_truncate BEFORE TRUNCATE ON retention_exemptions
FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- legal_holds
-- A legal hold is written only with its ledger row, changes only by its release (once, with its
-- own ledger row), and is never deleted.
-- ================================================================================================
CREATE FUNCTION pk_legal_holds_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    placed jsonb;
    released jsonb;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'purgekeeper:tombstone_permanent: a legal hold is never deleted; release it';
    END IF;
    IF TG_OP = 'UPDATE' AND (NEW.hold_id <> OLD.hold_id OR NEW.purge_id <> OLD.purge_id
       OR (OLD.released_by IS NOT NULL AND NEW.released_by IS DISTINCT FROM OLD.released_by)) THEN
        RAISE EXCEPTION 'purgekeeper:tombstone_permanent: legal hold % changes only by its release, once', OLD.hold_id;
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF EXISTS (SELECT 1 FROM legal_holds WHERE hold_id = NEW.hold_id) THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: legal hold % is written once', NEW.hold_id;
        END IF;
        placed := pk_ledger_row(NEW.purge_id, 'hold');
        IF placed IS NULL OR placed #>> '{selectors,hold_id}' IS DISTINCT FROM NEW.hold_id OR NEW.released_by IS NOT NULL THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: legal hold % is written only with its own ledger row (a hold row of this id)', NEW.hold_id;
        END IF;
    ELSIF NEW.released_by IS DISTINCT FROM OLD.released_by THEN
        released := pk_ledger_row(NEW.released_by, 'hold_release');
        IF released IS NULL OR released #>> '{selectors,hold_id}' IS DISTINCT FROM NEW.hold_id
           OR (released ->> 'seq')::bigint <= pk_ledger_seq(NEW.purge_id) THEN
            RAISE EXCEPTION 'purgekeeper:invalid_change: legal hold % is released only with the ledger row of its release (a hold_release row of this id)', NEW.hold_id;
        END IF;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_legal_holds_guard BEFORE INSERT OR UPDATE OR DELETE ON legal_holds
FOR EACH ROW EXECUTE FUNCTION pk_legal_holds_guard();
-- ;;
CREATE TRIGGER pk_legal_holds_no_truncate BEFORE TRUNCATE ON legal_holds
FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
-- ================================================================================================
-- legal_hold_subjects
-- A hold covers only what its ledger row names, and what it covers never changes.
-- ================================================================================================
CREATE FUNCTION pk_legal_hold_subjects_bound() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    placed jsonb := pk_ledger_row((SELECT purge_id FROM legal_holds WHERE hold_id = NEW.hold_id), 'hold');
    listed text := CASE NEW.kind WHEN 'conversation' THEN 'conversation_ids' ELSE 'authors' END;
BEGIN
    IF placed IS NULL OR NOT COALESCE(placed -> 'selectors' -> listed ? NEW.subject_id, false) THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: legal hold % covers only what its own ledger row names', NEW.hold_id;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_legal_hold_subjects_bound BEFORE INSERT ON legal_hold_subjects
FOR EACH ROW EXECUTE FUNCTION pk_legal_hold_subjects_bound();
-- ;;
CREATE FUNCTION pk_legal_hold_subjects_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purgekeeper:tombstone_permanent: what a legal hold covers never changes';
END $$;
-- ;;
CREATE TRIGGER pk_legal_hold_subjects_guard BEFORE UPDATE OR DELETE ON legal_hold_subjects
FOR EACH ROW EXECUTE FUNCTION pk_legal_hold_subjects_guard();
-- ;;
CREATE TRIGGER pk_legal_hold_subjects_no_truncate BEFORE TRUNCATE ON legal_hold_subjects
FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
