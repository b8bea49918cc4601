-- Content fences (0012). Statements are separated by lines reading "-- ;;". Every refusal
-- raises 'purgekeeper:<code>: <detail>'.
--
-- 1. A hold preserves what it covers. While a hold is in force, a write that removes or
--    overwrites held content that is still live is refused (legal_hold), whoever writes it:
--    an event's body, its attachments' names and rows, its admissions' payloads and rows, the
--    outputs and rows of runs and the payloads and rows of derivatives (and their sources)
--    that come from it. Held: the event's author is held, or it is placed in a held
--    conversation; a run or a derivative also when its own conversation is held. Live, as
--    everywhere: an event by pk_event_is_live; a run's output or a derivative's payload while
--    its conversation is not purged and every event it came from is live; an admission's
--    payload while its run's conversation is not purged and its event is live. So the cleanup
--    of a purge accepted before a hold still removes what that purge fenced.
--    Each trigger's WHEN lets only a removal into PL/pgSQL; the function first takes the
--    holds-and-policies lock shared (1886089832 'pkrh', 0: a hold's acceptance holds it
--    exclusively until its commit, schema.holds.lock_policies), then probes for a hold in
--    force once, in a snapshot that has every hold committed before it.
-- 2. No snapshot writes as an erased author. Every author_erasures row marks its author
--    (author_erasure_marks: one row per author, whose count the erasure raises, by a trigger:
--    the acceptance, a restore's merge and a raw writer alike). Every check of an author's
--    erasures takes the author's lock shared (0008); in a transaction whose snapshot is its
--    own (REPEATABLE READ, SERIALIZABLE) it then probes the mark's primary key with INSERT
--    ... ON CONFLICT DO NOTHING: a mark written after that snapshot is a serialization
--    failure (the retry, in a fresh snapshot, sees the erasure), one it can see is read and
--    nothing is written. A READ COMMITTED check (the library's) takes its statement's
--    snapshot after the lock and probes nothing.
-- 3. Times: timestamptz stores an instant, so every comparison is of instants whatever the
--    text a writer sent ('2026-06-01T16:00+05:00' is 11:00Z). Nothing to add here; SQLite
--    compares text, and its 0012 refuses any other form than the library's.
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
CREATE FUNCTION pk_events_held_content() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF pk_holds_in_force() THEN  -- then a new statement: a snapshot after the lock
        IF pk_event_held(OLD.id) THEN
            PERFORM pk_refuse_held(format('event %s: its body', OLD.id));
        END IF;
    END IF;
    RETURN NEW;
END $$;
-- ;;
CREATE TRIGGER pk_events_held_content BEFORE UPDATE OF body ON events
FOR EACH ROW WHEN (OLD.body IS NOT NULL AND NEW.body IS DISTINCT FROM OLD.body)
EXECUTE FUNCTION pk_events_held_content();
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
-- Without its sources a held derivative would no longer name the held event it came from.
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
-- What makes content held does not change under the hold: a held live event's author, and
-- a live placement of a live event in a held conversation (moving the event out, then
-- removing its content, was two plain statements).
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
CREATE FUNCTION pk_placements_held_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF pk_holds_in_force() THEN  -- then a new statement: a snapshot after the lock
        IF pk_held(NULL, OLD.conversation_id) AND pk_event_is_live(OLD.event_id)
           AND (SELECT 1 FROM conversations c JOIN events e ON e.id = OLD.event_id
                 WHERE c.id = OLD.conversation_id AND c.state <> 'purged'
                   AND NOT pk_placement_expired(e.author, e.occurred_at, OLD.conversation_id, OLD.created_at)) IS NOT NULL THEN
            RAISE EXCEPTION 'purgekeeper:legal_hold: a legal hold covers conversation %; event % stays placed in it until the hold is released', OLD.conversation_id, OLD.event_id;
        END IF;
    END IF;
    RETURN OLD;
END $$;
-- ;;
CREATE TRIGGER pk_placements_held_delete BEFORE DELETE ON placements
FOR EACH ROW EXECUTE FUNCTION pk_placements_held_delete();
-- ;;
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
CREATE OR REPLACE FUNCTION pk_author_lock_shared(the_author text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1886085493, hashtext(the_author));
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        INSERT INTO author_erasure_marks (author) VALUES (the_author) ON CONFLICT DO NOTHING;
    END IF;
END $$;
-- ;;
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
