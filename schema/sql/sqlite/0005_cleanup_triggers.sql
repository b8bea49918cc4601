-- A provider event id is fenced by its own tombstone, or when the event that carries it is
-- fenced: the bodies step of a conversation purge fences events only (an event row is never
-- deleted, so its provider_event_id stays taken and names it).
DROP TRIGGER pk_events_before_insert;
-- ;;
CREATE TRIGGER pk_events_before_insert BEFORE INSERT ON events
BEGIN
    SELECT RAISE(ABORT, 'purgekeeper:content_purged: the provider event is purged')
     WHERE NEW.provider_event_id IS NOT NULL
       AND (EXISTS (SELECT 1 FROM tombstones WHERE kind = 'provider_event' AND id = NEW.provider_event_id)
            OR EXISTS (SELECT 1 FROM events e JOIN tombstones t ON t.kind = 'event' AND t.id = e.id
                        WHERE e.provider_event_id = NEW.provider_event_id));
    SELECT RAISE(ABORT, 'purgekeeper:id_reserved: the event id is reserved')
     WHERE EXISTS (SELECT 1 FROM tombstones WHERE kind = 'event' AND id = NEW.id);
END;
