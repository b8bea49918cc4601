-- The blob trigger's function runs only for a change it refuses: the WHEN clause, evaluated by
-- the executor without entering PL/pgSQL, holds exactly the function's conditions. Marking a
-- batch of blobs deleting, then deleted, no longer makes one PL/pgSQL call per blob.
DROP TRIGGER pk_blobs_before_update ON blobs;
-- ;;
CREATE TRIGGER pk_blobs_before_update BEFORE UPDATE ON blobs
FOR EACH ROW WHEN (
    NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.sha256 <> OLD.sha256
    OR NEW.size <> OLD.size OR NEW.path <> OLD.path
    OR (NEW.state <> OLD.state AND NOT (
        (OLD.state = 'present' AND NEW.state = 'deleting')
        OR (OLD.state = 'deleting' AND NEW.state = 'deleted')))
)
EXECUTE FUNCTION pk_blobs_before_update();
-- ;;
-- A provider event id is fenced by its own tombstone, or when the event that carries it is
-- fenced: the bodies step of a conversation purge fences events only (an event row is never
-- deleted, so its provider_event_id stays taken and names it).
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
    RETURN NEW;
END $$;
