-- Statement-level content fences (0014, issue 27 item 2). Statements are separated by lines
-- reading "-- ;;". Every refusal raises 'purgekeeper:<code>: <detail>'.
--
-- A bodies batch NULLs a few hundred bodies and deletes as many placements in two
-- statements, and the row triggers of those statements cost more than the writes: every row
-- called pk_holds_in_force() (an advisory lock and a probe of legal_holds) twice, once for its
-- body and once for its placement. The same checks now run once per statement, over the
-- statement's transition tables:
-- 1. pk_events_held_content: an AFTER UPDATE statement trigger (a trigger with a column
--    list cannot have transition tables, so it fires on any UPDATE of events and looks for
--    the rows whose body changed). Only while a hold is in force does it read the rows.
-- 2. pk_placements_held_delete is gone: its check is the first thing pk_placements_after_delete
--    does, so a held placement is still refused with legal_hold before the last-placement
--    rule is asked (a row trigger BEFORE the delete used to come first). Evaluated after the
--    delete, "the event was live" is "no fence, and the deleted placement itself was live",
--    which the check asks of the placement already: nothing depends on what the statement
--    has deleted.
-- 3. pk_events_before_update skips the purge's own cleanup (a body set to NULL, nothing else
--    changed) in its WHEN clause, without a call of its function.
-- SQLite keeps its row triggers: it has no statement-level triggers.
-- ;;
DROP TRIGGER pk_events_held_content ON events;
-- ;;
CREATE OR REPLACE FUNCTION pk_events_held_content() RETURNS trigger LANGUAGE plpgsql AS $$
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
DROP TRIGGER pk_events_before_update ON events;
-- ;;
CREATE TRIGGER pk_events_before_update BEFORE UPDATE ON events
FOR EACH ROW WHEN (NEW.id <> OLD.id OR NEW.provider_event_id IS DISTINCT FROM OLD.provider_event_id
                   OR NEW.body IS NOT NULL OR NEW.author <> OLD.author OR NEW.occurred_at <> OLD.occurred_at
                   OR NEW.created_at <> OLD.created_at)
EXECUTE FUNCTION pk_events_before_update();
-- ;;
DROP TRIGGER pk_placements_held_delete ON placements;
-- ;;
DROP FUNCTION pk_placements_held_delete();
-- ;;
CREATE OR REPLACE FUNCTION pk_placements_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
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
