-- Retention and legal holds (0009). Statements are separated by lines reading "-- ;;". Every
-- refusal raises 'purgekeeper:<code>: <detail>'.
--
-- - A retention run whose cleanup has not finished has a row in retention_fences. It expires
--   a placement (an event in a conversation) when the event occurred before its cutoff, the
--   placement was made before the run's acceptance (placed_before: a later placement is never
--   the run's, also after a merge writes the fence again), the conversation is its own (or, a
--   global run, any), and neither the conversation nor the event's author is among the run's
--   exemptions (holds, and for a global run the
--   conversations with a policy of their own). An expired placement keeps nothing live: an
--   event is live while it has no fence and a placement in a conversation that is not purged
--   AND that no run expires. pk_has_live_placement says so, for pk_event_is_live,
--   pk_lock_for_write and the placements delete check.
-- - An event is never placed, unless a hold covers it, in a conversation whose standing
--   policy's cutoff (now - max_age, on the clock of the check) it already passed: a
--   provider's backfill cannot bring expired content back. The check takes the retention
--   plans' lock shared (two int4 keys: 1886089840 'pkrp', 0), which a run's plan takes
--   exclusively before it looks for anything to expire: a writer that checked before a plan
--   has committed when the plan looks, so nothing placed is left behind its window.
-- - While a policy stands or a run's cleanup is under way, an event's author and time never
--   change (a run's window and exemptions are decided by them).
-- - A retention fence never changes, and is deleted only once nothing it expires is left; its
--   exemptions are written before it and removed after it, never changed. A legal hold is
--   never deleted and its release never undone; retention policies are never deleted, and
--   what a policy is (scope, max age, end) changes only with a new version. None of these
--   tables is truncated.
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
CREATE OR REPLACE FUNCTION pk_event_is_live(ev_id text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = ev_id LIMIT 1) IS NULL
       AND (SELECT 1 FROM events e JOIN author_erasures a ON a.author = e.author AND a.window_end > e.occurred_at
             WHERE e.id = ev_id LIMIT 1) IS NULL
       AND pk_has_live_placement(ev_id);
$$;
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
CREATE OR REPLACE FUNCTION pk_placements_before_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: a placement never changes; delete and place again';
    END IF;
    PERFORM pk_lock_for_write(NEW.conversation_id, NEW.event_id, false, true);
    PERFORM pk_refuse_expired_placement(NEW.event_id, NEW.conversation_id);
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
CREATE FUNCTION pk_legal_holds_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'purgekeeper:tombstone_permanent: a legal hold is never deleted; release it';
    END IF;
    IF NEW.hold_id <> OLD.hold_id OR NEW.purge_id <> OLD.purge_id
       OR (OLD.released_by IS NOT NULL AND NEW.released_by IS DISTINCT FROM OLD.released_by) THEN
        RAISE EXCEPTION 'purgekeeper:tombstone_permanent: legal hold % changes only by its release, once', OLD.hold_id;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_legal_holds_guard BEFORE UPDATE OR DELETE ON legal_holds
FOR EACH ROW EXECUTE FUNCTION pk_legal_holds_guard();
-- ;;
CREATE FUNCTION pk_legal_hold_subjects_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purgekeeper:tombstone_permanent: what a legal hold covers never changes';
END $$;
-- ;;
CREATE TRIGGER pk_legal_hold_subjects_guard BEFORE UPDATE OR DELETE ON legal_hold_subjects
FOR EACH ROW EXECUTE FUNCTION pk_legal_hold_subjects_guard();
-- ;;
CREATE FUNCTION pk_retention_policies_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'purgekeeper:tombstone_permanent: a retention policy is never deleted; remove it with retention_end';
    END IF;
    -- The scheduler's bookkeeping changes freely; what the policy is changes only with a new
    -- version (the purge id of its ledger row), and its window never reaches past now.
    IF NEW.policy_id <> OLD.policy_id
       OR (NEW.purge_id = OLD.purge_id
           AND (NEW.conversation_id IS DISTINCT FROM OLD.conversation_id
                OR NEW.max_age_seconds <> OLD.max_age_seconds
                OR (OLD.ended_by IS NOT NULL AND NEW.ended_by IS DISTINCT FROM OLD.ended_by))) THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: its scope, max age and end change only with a new version', OLD.policy_id;
    END IF;
    IF NEW.expired_through IS NOT NULL AND NEW.expired_through > clock_timestamp() THEN
        RAISE EXCEPTION 'purgekeeper:invalid_change: retention policy %: its window never reaches past now', OLD.policy_id;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_retention_policies_guard BEFORE UPDATE OR DELETE ON retention_policies
FOR EACH ROW EXECUTE FUNCTION pk_retention_policies_guard();
-- ;;
CREATE TRIGGER pk_retention_policies_no_truncate BEFORE TRUNCATE ON retention_policies
FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_retention_fences_no_truncate BEFORE TRUNCATE ON retention_fences
FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_retention_exemptions_no_truncate BEFORE TRUNCATE ON retention_exemptions
FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_legal_holds_no_truncate BEFORE TRUNCATE ON legal_holds
FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
-- ;;
CREATE TRIGGER pk_legal_hold_subjects_no_truncate BEFORE TRUNCATE ON legal_hold_subjects
FOR EACH STATEMENT EXECUTE FUNCTION pk_never_truncated();
